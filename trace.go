package tempest

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/wire"
)

// Span names. An ask traced end to end is, on the caller,
//
//	tempest.ask                  Node.Ask (or the HTTP gateway's ask), retries included
//	  tempest.send               encoding and queueing on the owner's link (remote owner)
//
// and on the owner, as a child of tempest.send (or of tempest.ask when the
// owner is the caller's node, without tempest.serve and tempest.admission):
//
//	tempest.serve                the ask on the owner, from arrival to the handler's end
//	  tempest.admission          placement fence, ownership and mailbox admission
//	  tempest.queued             in the mailbox, activation or hydration included
//	  tempest.drain              behind earlier messages of the batch the worker took
//	  tempest.turn               the handler
const (
	spanAsk       = "tempest.ask"
	spanSend      = "tempest.send"
	spanServe     = "tempest.serve"
	spanAdmission = "tempest.admission"
	spanQueued    = "tempest.queued"
	spanDrain     = "tempest.drain"
	spanTurn      = "tempest.turn"

	attrNode = attribute.Key("tempest.node")
	attrKind = attribute.Key("tempest.actor.kind")
	attrKey  = attribute.Key("tempest.actor.key")
	attrPeer = attribute.Key("tempest.peer")
)

// tracing is a node's tracer; a node without Config.TracerProvider has
// none (nil), and no path below is taken.
type tracing struct {
	node string
	tr   trace.Tracer
	prop propagation.TraceContext
}

func newTracing(node string, tp trace.TracerProvider) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{node: node, tr: tp.Tracer("github.com/tempest-actors/tempest")}
}

func refAttrs(node string, ref actor.Ref) trace.SpanStartEventOption {
	return trace.WithAttributes(attrNode.String(node), attrKind.String(ref.Kind()), attrKey.String(ref.Key()))
}

func endSpan(s trace.Span, err error, opts ...trace.SpanEndOption) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End(opts...)
}

// ask runs do as the span tempest.ask, a child of the span in ctx (the
// HTTP gateway's incoming traceparent, or the program's own span). A
// sampled ask carries its span context to the scheduler (ariel.WithTrace),
// which hands it to the router for a remote owner or reports the turn's
// timestamps for a local one.
func (t *tracing) ask(ctx context.Context, ref actor.Ref, do func(context.Context) (any, error)) (any, error) {
	ctx, span := t.tr.Start(ctx, spanAsk, trace.WithSpanKind(trace.SpanKindInternal), refAttrs(t.node, ref))
	if sc := span.SpanContext(); sc.IsSampled() {
		ctx = ariel.WithTrace(ctx, sc)
	}
	v, err := do(ctx)
	endSpan(span, err)
	return v, err
}

// send runs the transport send of a traced ask as tempest.send, a child of
// the caller's tempest.ask, and carries the send span's context to the
// owner in the envelope.
func (t *tracing) send(parent trace.SpanContext, to actor.Ref, peer string, do func(*wire.TraceContext) error) error {
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	ctx, span := t.tr.Start(ctx, spanSend, trace.WithSpanKind(trace.SpanKindClient), refAttrs(t.node, to),
		trace.WithAttributes(attrPeer.String(peer)))
	var tc wire.TraceContext
	t.prop.Inject(ctx, traceCarrier{&tc})
	err := do(&tc)
	endSpan(span, err)
	return err
}

// ownerTrace is the trace an ask from another node carries through the
// scheduler: the sender's span and when the ask arrived.
type ownerTrace struct {
	parent  trace.SpanContext
	arrived time.Time
}

// remoteParent is the span context tc names, or an invalid one.
func (t *tracing) remoteParent(tc *wire.TraceContext) trace.SpanContext {
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), traceCarrier{tc}))
}

// refused records an ask the owner did not admit: tempest.serve and
// tempest.admission, both ending now with the refusal.
func (t *tracing) refused(ot *ownerTrace, to actor.Ref, err error) {
	now := time.Now()
	serve := t.start(trace.ContextWithRemoteSpanContext(context.Background(), ot.parent), spanServe, trace.SpanKindServer, ot.arrived, to)
	ctx := trace.ContextWithSpan(context.Background(), serve)
	adm := t.start(ctx, spanAdmission, trace.SpanKindInternal, ot.arrived, to)
	endSpan(adm, err, trace.WithTimestamp(now))
	endSpan(serve, err, trace.WithTimestamp(now))
}

func (t *tracing) start(ctx context.Context, name string, kind trace.SpanKind, at time.Time, to actor.Ref) trace.Span {
	_, s := t.tr.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(at), refAttrs(t.node, to))
	return s
}

func (t *tracing) span(ctx context.Context, name string, from, to time.Time, ref actor.Ref) {
	t.start(ctx, name, trace.SpanKindInternal, from, ref).End(trace.WithTimestamp(to))
}

// TraceTurn implements ariel.TurnTracer: the scheduler's timestamps of a
// traced ask become spans after the fact.
func (t *tracing) TraceTurn(tr any, tt ariel.TurnTimes) {
	var ctx context.Context
	var serve trace.Span
	switch v := tr.(type) {
	case *ownerTrace:
		serve = t.start(trace.ContextWithRemoteSpanContext(context.Background(), v.parent), spanServe, trace.SpanKindServer, v.arrived, tt.To)
		ctx = trace.ContextWithSpan(context.Background(), serve)
		t.span(ctx, spanAdmission, v.arrived, tt.Queued, tt.To)
	case trace.SpanContext: // a local ask: the caller's tempest.ask
		ctx = trace.ContextWithSpanContext(context.Background(), v)
	default:
		return
	}
	t.span(ctx, spanQueued, tt.Queued, tt.PickedUp, tt.To)
	t.span(ctx, spanDrain, tt.PickedUp, tt.Entered, tt.To)
	t.span(ctx, spanTurn, tt.Entered, tt.Finished, tt.To)
	if serve != nil {
		serve.End(trace.WithTimestamp(tt.Finished))
	}
}

var _ ariel.TurnTracer = (*tracing)(nil)

// traceCarrier adapts a wire.TraceContext to the W3C propagator.
type traceCarrier struct{ tc *wire.TraceContext }

func (c traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.tc.Parent
	case "tracestate":
		return c.tc.State
	}
	return ""
}

func (c traceCarrier) Set(key, v string) {
	switch key {
	case "traceparent":
		c.tc.Parent = v
	case "tracestate":
		c.tc.State = v
	}
}

func (c traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }
