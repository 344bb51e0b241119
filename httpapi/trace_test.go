package httpapi

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// spanNode records the span context an ask or a tell reached the node
// with.
type spanNode struct {
	*fakeNode
	got trace.SpanContext
}

func (n *spanNode) AskJSON(ctx context.Context, kind, key string, js []byte) ([]byte, error) {
	n.got = trace.SpanContextFromContext(ctx)
	return n.fakeNode.AskJSON(ctx, kind, key, js)
}

func (n *spanNode) TellJSON(ctx context.Context, kind, key string, js []byte) error {
	n.got = trace.SpanContextFromContext(ctx)
	return n.fakeNode.TellJSON(ctx, kind, key, js)
}

// An ask or a tell through the gateway carries the caller's W3C trace
// context to the node; a malformed traceparent is ignored, not an error.
func TestHTTPAskTraceparent(t *testing.T) {
	const (
		tid = "4bf92f3577b34da6a3ce929d0e0e4736"
		sid = "00f067aa0ba902b7"
	)
	cases := []struct {
		hdr   map[string]string
		valid bool
	}{
		{map[string]string{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": "k=v"}, true},
		{map[string]string{"traceparent": "00-nothex-" + sid + "-01"}, false},
		{nil, false},
	}
	for _, c := range cases {
		for _, op := range []struct {
			path string
			code int
		}{{"/v1/actors/k/ok/ask", 200}, {"/v1/actors/k/ok/tell", 202}} {
			n := &spanNode{fakeNode: &fakeNode{ready: true}}
			met := NewMetrics("test")
			met.SetKinds([]string{"k"})
			h := (&Server{node: n, met: met}).Handler()
			if code, _, body := do(t, h, "POST", op.path, `{"n":1}`, c.hdr); code != op.code {
				t.Fatalf("%s %v: %d %s", op.path, c.hdr, code, body)
			}
			if n.got.IsValid() != c.valid {
				t.Fatalf("%s %v: span context valid %v, want %v", op.path, c.hdr, n.got.IsValid(), c.valid)
			}
			if !c.valid {
				continue
			}
			if n.got.TraceID().String() != tid || n.got.SpanID().String() != sid || !n.got.IsSampled() || !n.got.IsRemote() ||
				n.got.TraceState().String() != "k=v" {
				t.Fatalf("%s: span context %+v, want trace %s span %s sampled, state k=v", op.path, n.got, tid, sid)
			}
		}
	}
}
