//go:build !tempest_notrace

package tempest_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
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

// byTrace returns the spans of trace.
func (c *collector) byTrace(trace string) []gotSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []gotSpan
	for _, s := range c.spans {
		if s.trace == trace {
			out = append(out, s)
		}
	}
	return out
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

// tracedCluster starts two nodes that export every span over OTLP/HTTP
// to an in-test collector; flush makes both export what they hold. Each
// node samples as the SDK's default does: a root span always, a child as
// its parent was. The nodes host the hop kinds, the demo kinds (the
// counter is durable) and the relay kind, whose last hop sends on done.
func tracedCluster(t *testing.T, done chan<- string) (*tempesttest.Cluster, *collector, func(context.Context)) {
	t.Helper()
	col := &collector{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	tps := map[string]*sdktrace.TracerProvider{}
	register := func(n *tempest.Node) error {
		if err := registerHops(n); err != nil {
			return err
		}
		if err := demo.Register(n, demo.Options{}); err != nil {
			return err
		}
		return n.Register("relay", func(key string) actor.Actor { return &relayer{key: key, done: done} },
			tempest.KindOptions{Messages: []tempest.Message{hopCodec[relay](911)}})
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: register,
		Configure: func(name string, cfg *tempest.Config) {
			exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
			if err != nil {
				t.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			mu.Lock()
			tps[name] = tp
			mu.Unlock()
			cfg.TracerProvider = tp
		}})
	flush := func(ctx context.Context) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range tps {
			if err := tp.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c, col, flush
}

// one returns the only span name of trace, after checking its node and
// parent span id.
func (c *collector) one(t *testing.T, trace, name, node, parent string) gotSpan {
	t.Helper()
	got := c.byName(trace, name)
	if len(got) != 1 {
		t.Fatalf("%d spans %s in trace %s, want 1 (all: %+v)", len(got), name, trace, c.spans)
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

// A cross-node ask, exported over OTLP/HTTP by both nodes, is one trace:
// tempest.ask and tempest.send on the caller, tempest.serve on the owner
// as the send's child, and the owner's admission, queued, drain and turn
// as children of serve, in time order. A local ask hangs its queued,
// drain and turn spans under its tempest.ask.
func TestTracingCrossNodeAsk(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, col, flush := tracedCluster(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	remoteKey, localKey := keyOn(t, c, "hopR", "n2"), keyOn(t, c, "hopR", "n1")
	for _, key := range []string{remoteKey, localKey} {
		if _, err := n1.Ask(ctx, actor.Virtual("hopR", key), hopR("")); err != nil {
			t.Fatal(err)
		}
	}
	flush(ctx)

	one := func(trace, name, node, parent string) gotSpan {
		t.Helper()
		return col.one(t, trace, name, node, parent)
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

// An ask an actor makes in a traced turn joins the trace: n1 asks A on
// n2, whose turn asks B on n1. The trace crosses n1 → n2 → n1 with the
// second send a child of A's turn, and each actor's first ask, which
// activated it, has a tempest.hydrate span under its tempest.queued.
func TestTracingInTurnAsksAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, col, flush := tracedCluster(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	a, b := keyOn(t, c, "hopR", "n2"), keyOn(t, c, "hopR", "n1")
	if _, err := c.Node("n1").Ask(ctx, actor.Virtual("hopR", a), hopR("hopR/"+b)); err != nil {
		t.Fatal(err)
	}
	flush(ctx)
	col.mu.Lock()
	var tr string
	for _, s := range col.spans {
		if s.name == "tempest.ask" {
			tr = s.trace
		}
	}
	col.mu.Unlock()
	if tr == "" {
		t.Fatal("no tempest.ask exported")
	}
	under := func(name, node, parent string) []gotSpan {
		var out []gotSpan
		for _, s := range col.byName(tr, name) {
			if s.node == node && s.pid == parent {
				out = append(out, s)
			}
		}
		return out
	}
	ask := col.one(t, tr, "tempest.ask", "n1", "")
	sends := col.byName(tr, "tempest.send")
	if len(sends) != 2 {
		t.Fatalf("%d tempest.send spans, want 2 (n1 → n2, then n2 → n1): %+v", len(sends), col.spans)
	}
	send1 := under("tempest.send", "n1", ask.id)
	if len(send1) != 1 {
		t.Fatalf("no send from n1 under the ask: %+v", sends)
	}
	serveA := under("tempest.serve", "n2", send1[0].id)
	if len(serveA) != 1 {
		t.Fatalf("no serve on n2 under n1's send: %+v", col.byName(tr, "tempest.serve"))
	}
	turnA := under("tempest.turn", "n2", serveA[0].id)
	if len(turnA) != 1 {
		t.Fatalf("no turn on n2 under its serve")
	}
	send2 := under("tempest.send", "n2", turnA[0].id)
	if len(send2) != 1 {
		t.Fatalf("A's ask of B is not a send under A's turn: %+v", sends)
	}
	serveB := under("tempest.serve", "n1", send2[0].id)
	if len(serveB) != 1 {
		t.Fatalf("no serve on n1 under n2's send: %+v", col.byName(tr, "tempest.serve"))
	}
	turnB := under("tempest.turn", "n1", serveB[0].id)
	if len(turnB) != 1 {
		t.Fatal("no turn on n1 under its serve")
	}
	if send2[0].start < turnA[0].start || send2[0].start > turnA[0].end {
		t.Errorf("A's send [%d,%d] outside A's turn [%d,%d]", send2[0].start, send2[0].end, turnA[0].start, turnA[0].end)
	}
	for _, sv := range []gotSpan{serveA[0], serveB[0]} {
		q := under("tempest.queued", sv.node, sv.id)
		if len(q) != 1 {
			t.Fatalf("no queued span under %s's serve", sv.node)
		}
		h := under("tempest.hydrate", sv.node, q[0].id)
		if len(h) != 1 {
			t.Fatalf("the activating ask on %s has %d hydrate spans under its queued span, want 1", sv.node, len(h))
		}
		if h[0].end > q[0].end {
			t.Errorf("hydrate on %s ends after queued", sv.node)
		}
	}
}

// relay is a message of the relay kind: the keys of the relay actors it
// is to be told to next, "key,key,...", then "done" for the last one to
// report its key. An ask of relay("") is answered at once.
type relay string

type relayer struct {
	key  string
	done chan<- string
}

func (r *relayer) Receive(ctx actor.Context, msg any) {
	m, ok := msg.(relay)
	if !ok {
		return
	}
	ctx.Reply(relay(r.key)) // a tell has no one to answer: a no-op
	switch m {
	case "":
	case "done":
		r.done <- r.key
	default:
		next, rest, _ := strings.Cut(string(m), ",")
		_ = ctx.Tell(actor.Virtual("relay", next), relay(rest))
	}
}

// A cross-node tell, exported over OTLP/HTTP by both nodes, is one trace,
// as an ask is: n1 tells A on n2, whose turn tells B on n1. tempest.tell
// and tempest.send on n1 (under the caller's span); on n2 tempest.serve under that send with
// admission, queued, drain and turn under it in time order; A's tell of B
// a tempest.send under A's turn, and B's serve, admission, queued, drain
// and turn on n1 below it. A tell whose caller's span is not sampled
// exports nothing, and still arrives; a local tell hangs its queued,
// drain and turn under its tempest.tell.
func TestTracingCrossNodeTell(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	done := make(chan string, 4)
	c, col, flush := tracedCluster(t, done)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	a, b := keyOn(t, c, "relay", "n2"), keyOn(t, c, "relay", "n1")
	wait := func(want string) {
		t.Helper()
		select {
		case got := <-done:
			if got != want {
				t.Fatalf("done from %s, want %s", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("the relay to %s did not arrive", want)
		}
		// Each actor's earlier turn (and so its spans) has ended once it
		// answers an ask behind it.
		for _, k := range []string{a, b} {
			if _, err := n1.Ask(ctx, actor.Virtual("relay", k), relay("")); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Not sampled: the caller's span says so, and every node follows it.
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 1}, SpanID: trace.SpanID{0, 0xf0, 0x67, 1}, Remote: true})
	if err := n1.TellContext(trace.ContextWithRemoteSpanContext(ctx, unsampled), actor.Virtual("relay", a), relay(b+",done")); err != nil {
		t.Fatal(err)
	}
	wait(b)
	// Sampled: the caller's span (as the gateway hands on an HTTP
	// client's traceparent) is the parent.
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 2}, SpanID: trace.SpanID{0, 0xf0, 0x67, 2}, TraceFlags: trace.FlagsSampled, Remote: true})
	if err := n1.TellContext(trace.ContextWithRemoteSpanContext(ctx, caller), actor.Virtual("relay", a), relay(b+",done")); err != nil {
		t.Fatal(err)
	}
	wait(b)
	if err := n1.Tell(actor.Virtual("relay", b), relay("done")); err != nil {
		t.Fatal(err)
	}
	wait(b)
	flush(ctx)

	if n := len(col.byTrace(unsampled.TraceID().String())); n != 0 {
		t.Fatalf("an unsampled tell exported %d spans", n)
	}
	var remoteTell, localTell gotSpan
	col.mu.Lock()
	var roots []gotSpan
	for _, s := range col.spans {
		if s.name == "tempest.tell" {
			roots = append(roots, s)
		}
	}
	col.mu.Unlock()
	if len(roots) != 2 {
		t.Fatalf("%d tempest.tell spans, want 2: %+v", len(roots), col.spans)
	}
	for _, r := range roots {
		if len(col.byName(r.trace, "tempest.send")) > 0 {
			remoteTell = r
		} else {
			localTell = r
		}
	}
	if remoteTell.trace != caller.TraceID().String() || localTell.trace == "" {
		t.Fatalf("want one cross-node tell in the caller's trace %s and one local tell: %+v", caller.TraceID(), roots)
	}

	tr := remoteTell.trace
	under := func(name, node, parent string) gotSpan {
		t.Helper()
		var out []gotSpan
		for _, s := range col.byName(tr, name) {
			if s.node == node && s.pid == parent {
				out = append(out, s)
			}
		}
		if len(out) != 1 {
			t.Fatalf("%d spans %s on %s under %s, want 1 (trace: %+v)", len(out), name, node, parent, col.byTrace(tr))
		}
		if out[0].end < out[0].start {
			t.Fatalf("%s on %s ends before it starts", name, node)
		}
		return out[0]
	}
	tell := col.one(t, tr, "tempest.tell", "n1", caller.SpanID().String())
	send1 := under("tempest.send", "n1", tell.id)
	// The owner's part, on both hops: serve under the send, admission,
	// queued, drain and turn under serve, one after the other.
	owner := func(node string, send gotSpan) gotSpan {
		t.Helper()
		serve := under("tempest.serve", node, send.id)
		adm := under("tempest.admission", node, serve.id)
		q := under("tempest.queued", node, serve.id)
		dr := under("tempest.drain", node, serve.id)
		turn := under("tempest.turn", node, serve.id)
		for _, p := range [][2]gotSpan{{adm, q}, {q, dr}, {dr, turn}} {
			if p[0].end > p[1].start {
				t.Fatalf("on %s, %s ends after %s starts", node, p[0].name, p[1].name)
			}
		}
		if serve.start != adm.start || serve.end != turn.end {
			t.Fatalf("serve on %s [%d,%d] does not span admission..turn [%d,%d]", node, serve.start, serve.end, adm.start, turn.end)
		}
		if serve.start < send.start {
			t.Fatalf("serve on %s starts before its send", node)
		}
		return turn
	}
	turnA := owner("n2", send1)
	send2 := under("tempest.send", "n2", turnA.id)
	if send2.start < turnA.start || send2.start > turnA.end {
		t.Errorf("A's send [%d,%d] outside A's turn [%d,%d]", send2.start, send2.end, turnA.start, turnA.end)
	}
	owner("n1", send2)
	if n := len(col.byTrace(tr)); n != 13 {
		t.Errorf("the cross-node tell's trace has %d spans, want 13: %+v", n, col.byTrace(tr))
	}

	tr = localTell.trace
	tell = col.one(t, tr, "tempest.tell", "n1", "")
	for _, name := range []string{"tempest.queued", "tempest.drain", "tempest.turn"} {
		col.one(t, tr, name, "n1", tell.id)
	}
	if n := len(col.byName(tr, "tempest.serve")); n != 0 {
		t.Fatalf("a local tell has %d serve spans", n)
	}
}

// An ask of a durable kind (the demo counter writes its state every turn
// and answers once it is written and replicated) has a tempest.commit on
// the owner under tempest.serve: it starts in the turn (the hook holds
// the turn's outputs) and ends when they are released, before the
// caller's tempest.ask ends with the reply.
func TestTracingCommitOfDurableKind(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, col, flush := tracedCluster(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := keyOn(t, c, demo.Counter, "n2")
	if _, err := c.Node("n1").Ask(ctx, actor.Virtual(demo.Counter, key), demo.Add{N: 1}); err != nil {
		t.Fatal(err)
	}
	flush(ctx)
	var tr string
	col.mu.Lock()
	for _, s := range col.spans {
		if s.name == "tempest.ask" {
			tr = s.trace
		}
	}
	col.mu.Unlock()
	ask := col.one(t, tr, "tempest.ask", "n1", "")
	send := col.one(t, tr, "tempest.send", "n1", ask.id)
	serve := col.one(t, tr, "tempest.serve", "n2", send.id)
	turn := col.one(t, tr, "tempest.turn", "n2", serve.id)
	commit := col.one(t, tr, "tempest.commit", "n2", serve.id)
	if commit.start < turn.start || commit.start > turn.end {
		t.Errorf("commit starts at %d, outside its turn [%d,%d]", commit.start, turn.start, turn.end)
	}
	if commit.end > ask.end {
		t.Errorf("commit ends at %d, after the caller had the reply (%d)", commit.end, ask.end)
	}
	// A kind that holds nothing has no commit span.
	if _, err := c.Node("n1").Ask(ctx, actor.Virtual("hopR", keyOn(t, c, "hopR", "n2")), hopR("")); err != nil {
		t.Fatal(err)
	}
	flush(ctx)
	col.mu.Lock()
	n := 0
	for _, s := range col.spans {
		if s.name == "tempest.commit" {
			n++
		}
	}
	col.mu.Unlock()
	if n != 1 {
		t.Errorf("%d commit spans, want only the counter's", n)
	}
}
