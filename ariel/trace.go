package ariel

import (
	"context"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// TurnTracer is told the scheduler's timestamps of each traced message
// that runs: an ask whose context carried a trace (WithTrace), a tell sent
// with one (TellTraced), one that arrived from another node with one
// (DeliverTraced), or an ask or tell an actor made in a traced turn. The
// scheduler does not know what a trace is; it carries the value and hands
// it back here. With Config.Tracer nil nothing is
// recorded and no clock is read for it.
//
// Both methods run on the worker, around the handler: they must be fast
// and safe for concurrent use. A message that never reached its handler
// (expired in the mailbox, its actor stopped) is not reported.
type TurnTracer interface {
	// BeginTurn is called right before the handler of the traced message
	// runs, with t.Finished zero. What it returns is the trace of the
	// turn itself: the asks and tells the actor makes in this turn carry
	// it (to Outbound.Trace, or back to BeginTurn when the recipient runs
	// here), so they join the same trace as children of the turn. Nil
	// traces nothing further, and EndTurn is not called.
	BeginTurn(trace any, t TurnTimes) (turn any)
	// EndTurn is called when the handler returned, with what BeginTurn
	// returned.
	EndTurn(turn any, finished time.Time)
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
	// Activating and Activated bound the activation the message waited
	// for in the mailbox (a subset of Queued→PickedUp may overlap it):
	// from the Activator's ring to the actor's attachment, the state read
	// from the store included when a supervisor hydrates it. Zero when
	// the actor was active already.
	Activating, Activated time.Time
}

// CommitTracer is an optional extension of TurnTracer, found by type
// assertion: it is also told when the after-turn hook of a traced turn
// holds the turn's outputs (Hold.Wait: for a durable kind, until the
// state the turn changed is written and replicated) and when they are
// released. Both run on whatever goroutine holds and releases; they must
// be fast and safe for concurrent use.
type CommitTracer interface {
	// BeginCommit is called when the hook of the traced turn (what
	// BeginTurn returned for it) holds its outputs. What it returns is
	// handed to EndCommit.
	BeginCommit(turn any, at time.Time) (commit any)
	// EndCommit is called once, when the outputs are released; err is
	// the release's error (nil: delivered).
	EndCommit(commit any, at time.Time, err error)
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

// traces reports whether the scheduler has a tracer; constant false in a
// build without tracing (tracingBuilt), so every hook behind it is
// compiled out.
func (s *Scheduler) traces() bool { return tracingBuilt && s.tracer != nil }

// traceOf is the trace ctx carries, if this scheduler traces at all.
func (s *Scheduler) traceOf(ctx context.Context) any {
	if !s.traces() {
		return nil
	}
	return ctx.Value(traceKey{})
}

// tracedInvoke is invoke for a traced message (tr is its trace): the
// handler's timestamps go to the tracer, and the asks and tells the
// handler makes carry the turn's trace.
func (ex *executor) tracedInvoke(c *Cell, e *envelope, tr *msgTrace) {
	s := ex.s
	entered := s.clock.Now()
	picked := ex.taken
	if picked.IsZero() || picked.After(entered) {
		picked = entered
	}
	tt := TurnTimes{To: c.Ref(), Queued: tr.queued, PickedUp: picked, Entered: entered}
	if at := c.attachedAt.Load(); at != 0 && at >= tr.queued.UnixNano() {
		// Attached after this message was queued: it waited for that
		// activation, which began at the last ring before it.
		if r := c.rungAt.Load(); r != 0 && r <= at {
			tt.Activating, tt.Activated = time.Unix(0, r), time.Unix(0, at)
		}
	}
	turn := s.tracer.BeginTurn(tr.trace, tt)
	ex.turnTrace = turn
	ex.invoke(c, e, e.msg)
	ex.turnTrace = nil
	if turn != nil {
		s.tracer.EndTurn(turn, s.clock.Now())
	}
}
