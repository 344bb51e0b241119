package ariel

import (
	"context"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// TurnTracer is told the scheduler's timestamps of each traced ask that
// ran: an ask whose context carried a trace (WithTrace) or that arrived
// from another node with one (DeliverTraced). The scheduler does not know
// what a trace is; it carries the value and hands it back here. With
// Config.Tracer nil nothing is recorded and no clock is read for it.
//
// TraceTurn runs on the worker right after the handler returned: it must
// be fast and safe for concurrent use. An ask that never reached its
// handler (expired in the mailbox, its actor stopped) is not reported.
type TurnTracer interface {
	TraceTurn(trace any, t TurnTimes)
}

// TurnTimes are the reference scheduler's timestamps of one message, so a
// slow ask names its mechanism: Queued→PickedUp is the time in the
// mailbox (including an activation or hydration it waited for),
// PickedUp→Entered the time behind earlier messages of the batch the
// worker took (draining), Entered→Finished the handler.
type TurnTimes struct {
	To       actor.Ref
	Queued   time.Time // admitted to the mailbox
	PickedUp time.Time // taken from the mailbox by a worker
	Entered  time.Time // handler entered
	Finished time.Time // handler returned
}

type traceKey struct{}

// WithTrace returns ctx carrying trace, an opaque value that an ask made
// with it (Scheduler.Ask) takes along: to Outbound.Trace when the actor
// lives elsewhere, to Config.Tracer when it runs here. A nil trace
// carries nothing.
func WithTrace(ctx context.Context, trace any) context.Context {
	if trace == nil {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, trace)
}

// traceOf is the trace ctx carries, if this scheduler traces at all.
func (s *Scheduler) traceOf(ctx context.Context) any {
	if s.tracer == nil {
		return nil
	}
	return ctx.Value(traceKey{})
}

// tracedInvoke is invoke for a traced ask: the handler's timestamps go to
// the tracer.
func (ex *executor) tracedInvoke(c *Cell, e *envelope, p *pending) {
	s := ex.s
	tr, q := p.trace, p.queued
	entered := s.clock.Now()
	ex.invoke(c, e, e.msg)
	finished := s.clock.Now()
	picked := ex.taken
	if picked.IsZero() || picked.After(entered) {
		picked = entered
	}
	s.tracer.TraceTurn(tr, TurnTimes{To: c.Ref(), Queued: q, PickedUp: picked, Entered: entered, Finished: finished})
}
