package tracing

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
//	    tempest.hydrate          the activation it waited for: state read, actor attached
//	  tempest.drain              behind earlier messages of the batch the worker took
//	  tempest.turn               the handler
//	  tempest.commit             for a kind whose turns hold their outputs
//	                             (a durable kind): from the hold to the
//	                             release, the state's write and replication
//
// An ask the handler makes (Context.Ask) is a child of its tempest.turn:
// a tempest.send when the asked actor lives on another node (and that
// node's tempest.serve below it), or tempest.queued, tempest.drain and
// tempest.turn when it lives on this one.
//
// A tell is traced the same way, with tempest.tell (Node.Tell,
// Node.TellContext or the HTTP gateway's tell) in place of tempest.ask: it
// ends once the tell is queued, so the owner's spans (tempest.serve and
// below) usually end after it. Its tempest.send and tempest.tell are of
// kind producer, its tempest.serve of kind consumer. A tell the handler
// makes (Context.Tell) in a traced turn is a child of that turn, like an
// ask.
const (
	spanAsk       = "tempest.ask"
	spanTell      = "tempest.tell"
	spanSend      = "tempest.send"
	spanServe     = "tempest.serve"
	spanAdmission = "tempest.admission"
	spanQueued    = "tempest.queued"
	spanHydrate   = "tempest.hydrate"
	spanDrain     = "tempest.drain"
	spanTurn      = "tempest.turn"
	spanCommit    = "tempest.commit"

	attrNode = attribute.Key("tempest.node")
	attrKind = attribute.Key("tempest.actor.kind")
	attrKey  = attribute.Key("tempest.actor.key")
	attrPeer = attribute.Key("tempest.peer")
)

// Tracer is a node's tracer; a node without a TracerProvider has none
// (nil), and no path below is taken.
type Tracer struct {
	node string
	tr   trace.Tracer
	prop propagation.TraceContext
	// producer is the start option of a tempest.tell, made once: an
	// unsampled tell builds nothing of its own.
	producer []trace.SpanStartOption
}

// New returns node's tracer, or nil without tp or in a build without
// tracing (Built).
func New(node string, tp trace.TracerProvider) *Tracer {
	if tp == nil || !Built {
		return nil
	}
	return &Tracer{node: node, tr: tp.Tracer("github.com/tempest-actors/tempest"),
		producer: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}}
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

// Ask runs do as the span tempest.ask, a child of the span in ctx (the
// HTTP gateway's incoming traceparent, or the program's own span). A
// sampled ask carries its span context to the scheduler (ariel.WithTrace),
// which hands it to the router for a remote owner or reports the turn's
// timestamps for a local one.
func (t *Tracer) Ask(ctx context.Context, ref actor.Ref, do func(context.Context) (any, error)) (any, error) {
	// The attributes are set once the span is known to record: an
	// unsampled ask does not build them (samplers see name and kind).
	ctx, span := t.tr.Start(ctx, spanAsk, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(attrNode.String(t.node), attrKind.String(ref.Kind()), attrKey.String(ref.Key()))
	}
	if sc := span.SpanContext(); sc.IsSampled() {
		ctx = ariel.WithTrace(ctx, sc)
	}
	v, err := do(ctx)
	endSpan(span, err)
	return v, err
}

// Tell runs do, a tell, as the span tempest.tell, a child of the span in
// ctx (the HTTP gateway's incoming traceparent, or the program's own
// span). A sampled tell hands its span context to do (for
// ariel.Scheduler.TellTraced); an unsampled one hands nil and carries
// nothing further, and its span builds no attributes.
func (t *Tracer) Tell(ctx context.Context, ref actor.Ref, do func(trace any) error) error {
	_, span := t.tr.Start(ctx, spanTell, t.producer...)
	var tr any
	if span.IsRecording() {
		span.SetAttributes(attrNode.String(t.node), attrKind.String(ref.Kind()), attrKey.String(ref.Key()))
	}
	if sc := span.SpanContext(); sc.IsSampled() {
		tr = sc
	}
	err := do(tr)
	endSpan(span, err)
	return err
}

// Send runs the transport send of a traced ask (tell: of a traced tell)
// as tempest.send, a child of the caller's tempest.ask (tempest.tell) or
// of the turn that sent it, and carries the send span's context to the
// owner in the envelope.
func (t *Tracer) Send(parent trace.SpanContext, tell bool, to actor.Ref, peer string, do func(*wire.TraceContext) error) error {
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	kind := trace.SpanKindClient
	if tell {
		kind = trace.SpanKindProducer
	}
	ctx, span := t.tr.Start(ctx, spanSend, trace.WithSpanKind(kind), refAttrs(t.node, to),
		trace.WithAttributes(attrPeer.String(peer)))
	var tc wire.TraceContext
	t.prop.Inject(ctx, traceCarrier{&tc})
	err := do(&tc)
	endSpan(span, err)
	return err
}

// Owner is the trace an ask or a tell from another node carries
// through the scheduler: the sender's span and when the message arrived.
type Owner struct {
	parent  trace.SpanContext
	arrived time.Time
	tell    bool
}

// NewOwner returns the trace of mail from another node whose sender's
// span is parent (RemoteParent), arrived now (tell: a tell).
func NewOwner(parent trace.SpanContext, tell bool) *Owner {
	return &Owner{parent: parent, arrived: time.Now(), tell: tell}
}

// serveKind is the kind of the owner's tempest.serve: server for an ask,
// consumer for a tell.
func (ot *Owner) serveKind() trace.SpanKind {
	if ot.tell {
		return trace.SpanKindConsumer
	}
	return trace.SpanKindServer
}

// RemoteParent is the span context tc names, or an invalid one.
func (t *Tracer) RemoteParent(tc *wire.TraceContext) trace.SpanContext {
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), traceCarrier{tc}))
}

// Refused records an ask or tell the owner did not admit: tempest.serve and
// tempest.admission, both ending now with the refusal.
func (t *Tracer) Refused(ot *Owner, to actor.Ref, err error) {
	now := time.Now()
	serve := t.start(trace.ContextWithRemoteSpanContext(context.Background(), ot.parent), spanServe, ot.serveKind(), ot.arrived, to)
	ctx := trace.ContextWithSpan(context.Background(), serve)
	adm := t.start(ctx, spanAdmission, trace.SpanKindInternal, ot.arrived, to)
	endSpan(adm, err, trace.WithTimestamp(now))
	endSpan(serve, err, trace.WithTimestamp(now))
}

func (t *Tracer) start(ctx context.Context, name string, kind trace.SpanKind, at time.Time, to actor.Ref) trace.Span {
	_, s := t.tr.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(at), refAttrs(t.node, to))
	return s
}

func (t *Tracer) span(ctx context.Context, name string, from, to time.Time, ref actor.Ref) {
	t.start(ctx, name, trace.SpanKindInternal, from, ref).End(trace.WithTimestamp(to))
}

// liveTurn is the trace of a traced turn while it runs: its tempest.turn
// span (and, for an ask from another node, the tempest.serve span around
// it), ended when the handler returns. Asks the actor makes in the turn
// carry it, so they are children of the turn.
type liveTurn struct {
	serve, turn trace.Span
	sc          trace.SpanContext // turn's
	parent      context.Context   // of the turn's span (and of its commit)
	to          actor.Ref
}

// ParentOf is the span context a traced message's trace names: the
// caller's tempest.ask or tempest.tell, or the turn that sent it.
func ParentOf(tr any) (trace.SpanContext, bool) {
	switch v := tr.(type) {
	case trace.SpanContext:
		return v, true
	case *liveTurn:
		return v.sc, true
	}
	return trace.SpanContext{}, false
}

// BeginTurn implements ariel.TurnTracer: the scheduler's timestamps of a
// traced ask or tell become spans after the fact, and the turn's span starts now.
func (t *Tracer) BeginTurn(tr any, tt ariel.TurnTimes) any {
	var ctx context.Context
	var serve trace.Span
	if v, ok := tr.(*Owner); ok {
		serve = t.start(trace.ContextWithRemoteSpanContext(context.Background(), v.parent), spanServe, v.serveKind(), v.arrived, tt.To)
		ctx = trace.ContextWithSpan(context.Background(), serve)
		t.span(ctx, spanAdmission, v.arrived, tt.Queued, tt.To)
	} else if sc, ok := ParentOf(tr); ok { // an ask or tell made on this node
		ctx = trace.ContextWithSpanContext(context.Background(), sc)
	} else {
		return nil
	}
	queued := t.start(ctx, spanQueued, trace.SpanKindInternal, tt.Queued, tt.To)
	if !tt.Activated.IsZero() {
		t.span(trace.ContextWithSpan(ctx, queued), spanHydrate, tt.Activating, tt.Activated, tt.To)
	}
	queued.End(trace.WithTimestamp(tt.PickedUp))
	t.span(ctx, spanDrain, tt.PickedUp, tt.Entered, tt.To)
	turn := t.start(ctx, spanTurn, trace.SpanKindInternal, tt.Entered, tt.To)
	return &liveTurn{serve: serve, turn: turn, sc: turn.SpanContext(), parent: ctx, to: tt.To}
}

// EndTurn implements ariel.TurnTracer.
func (t *Tracer) EndTurn(turn any, finished time.Time) {
	lt, ok := turn.(*liveTurn)
	if !ok {
		return
	}
	lt.turn.End(trace.WithTimestamp(finished))
	if lt.serve != nil {
		lt.serve.End(trace.WithTimestamp(finished))
	}
}

// BeginCommit implements ariel.CommitTracer: tempest.commit, a sibling
// of the turn's span, from the hook's hold of its outputs.
func (t *Tracer) BeginCommit(turn any, at time.Time) any {
	lt, ok := turn.(*liveTurn)
	if !ok {
		return nil
	}
	return t.start(lt.parent, spanCommit, trace.SpanKindInternal, at, lt.to)
}

// EndCommit implements ariel.CommitTracer: the outputs were released
// (err: failed, the state not committed).
func (t *Tracer) EndCommit(commit any, at time.Time, err error) {
	if s, ok := commit.(trace.Span); ok {
		endSpan(s, err, trace.WithTimestamp(at))
	}
}

var (
	_ ariel.TurnTracer   = (*Tracer)(nil)
	_ ariel.CommitTracer = (*Tracer)(nil)
)

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
