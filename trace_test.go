package tempest_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/tempesttest"
)

// gotSpan is a span as an OTLP collector received it.
type gotSpan struct {
	name, node     string
	trace, id, pid string
	start, end     uint64
}

// collector is an OTLP/HTTP trace receiver: it decodes what exporters post
// to /v1/traces.
type collector struct {
	mu    sync.Mutex
	spans []gotSpan
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g := gotSpan{name: s.Name, trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId),
					pid: hex.EncodeToString(s.ParentSpanId), start: s.StartTimeUnixNano, end: s.EndTimeUnixNano}
				for _, a := range s.Attributes {
					if a.Key == "tempest.node" {
						g.node = a.Value.GetStringValue()
					}
				}
				c.spans = append(c.spans, g)
			}
		}
	}
	c.mu.Unlock()
	b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func (c *collector) byName(trace, name string) []gotSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []gotSpan
	for _, s := range c.spans {
		if s.trace == trace && s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// A cross-node ask, exported over OTLP/HTTP by both nodes, is one trace:
// tempest.ask and tempest.send on the caller, tempest.serve on the owner
// as the send's child, and the owner's admission, queued, drain and turn
// as children of serve, in time order. A local ask hangs its queued,
// drain and turn spans under its tempest.ask.
func TestTracingCrossNodeAsk(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	col := &collector{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	tps := map[string]*sdktrace.TracerProvider{}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: registerHops,
		Configure: func(name string, cfg *tempest.Config) {
			exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
			if err != nil {
				t.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			mu.Lock()
			tps[name] = tp
			mu.Unlock()
			cfg.TracerProvider = tp
		}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	remoteKey, localKey := keyOn(t, c, "hopR", "n2"), keyOn(t, c, "hopR", "n1")
	for _, key := range []string{remoteKey, localKey} {
		if _, err := n1.Ask(ctx, actor.Virtual("hopR", key), hopR("")); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	for _, tp := range tps {
		if err := tp.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Unlock()

	one := func(trace, name, node, parent string) gotSpan {
		t.Helper()
		got := col.byName(trace, name)
		if len(got) != 1 {
			t.Fatalf("%d spans %s in trace %s, want 1 (all: %+v)", len(got), name, trace, col.spans)
		}
		s := got[0]
		if s.node != node || s.pid != parent {
			t.Fatalf("%s: node %q parent %q, want node %q parent %q", name, s.node, s.pid, node, parent)
		}
		if s.end < s.start {
			t.Fatalf("%s ends before it starts", name)
		}
		return s
	}
	var remoteAsk, localAsk gotSpan
	col.mu.Lock()
	var roots []gotSpan
	for _, s := range col.spans {
		if s.name == "tempest.ask" {
			roots = append(roots, s)
		}
	}
	col.mu.Unlock()
	if len(roots) != 2 {
		t.Fatalf("%d tempest.ask spans, want 2: %+v", len(roots), col.spans)
	}
	for _, r := range roots {
		if len(col.byName(r.trace, "tempest.send")) > 0 {
			remoteAsk = r
		} else {
			localAsk = r
		}
	}
	if remoteAsk.trace == "" || localAsk.trace == "" || remoteAsk.trace == localAsk.trace {
		t.Fatalf("want one remote and one local trace: %+v", roots)
	}

	tr := remoteAsk.trace
	ask := one(tr, "tempest.ask", "n1", "")
	send := one(tr, "tempest.send", "n1", ask.id)
	serve := one(tr, "tempest.serve", "n2", send.id)
	adm := one(tr, "tempest.admission", "n2", serve.id)
	q := one(tr, "tempest.queued", "n2", serve.id)
	dr := one(tr, "tempest.drain", "n2", serve.id)
	turn := one(tr, "tempest.turn", "n2", serve.id)
	for _, p := range [][2]gotSpan{{adm, q}, {q, dr}, {dr, turn}} {
		if p[0].end > p[1].start {
			t.Fatalf("%s ends after %s starts", p[0].name, p[1].name)
		}
	}
	if serve.start != adm.start || serve.end != turn.end {
		t.Fatalf("serve [%d,%d] does not span admission..turn [%d,%d]", serve.start, serve.end, adm.start, turn.end)
	}

	tr = localAsk.trace
	ask = one(tr, "tempest.ask", "n1", "")
	for _, name := range []string{"tempest.queued", "tempest.drain", "tempest.turn"} {
		one(tr, name, "n1", ask.id)
	}
	if n := len(col.byName(tr, "tempest.serve")); n != 0 {
		t.Fatalf("a local ask has %d serve spans", n)
	}
}
