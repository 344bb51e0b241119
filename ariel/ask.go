package ariel

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// pending is one outstanding ask. Exactly one completion wins: the reply,
// the deadline timer, a routing failure, or a remote answer by id.
type pending struct {
	s     *Scheduler
	id    atomic.Uint64 // non-zero once registered for completion by id
	done  atomic.Bool
	timer Timer

	ch   chan result        // program-code ask
	cell *Cell              // in-turn ask: the asker
	then actor.Continuation // its continuation
	gen  uint32             // the asker's generation (see Cell.gen)
	fn   func(any, error)   // ask that arrived from another node
	// trace is the ask's opaque trace (see WithTrace), nil when untraced;
	// queued is when it entered the mailbox, set only when traced.
	trace  any
	queued time.Time
	// link is an in-turn ask's call chain: the asker, waiting within the
	// chain of the message its turn handled (see reentrancy.go).
	link callChain
}

type result struct {
	v   any
	err error
}

// replyMsg carries an outcome to an asking actor's system lane.
type replyMsg struct {
	v     any
	err   error
	then  actor.Continuation
	chain *callChain // the chain of the turn that asked
}

// arm starts the deadline timer. Call before the ask can be answered.
func (p *pending) arm(d time.Duration) {
	p.timer = p.s.clock.AfterFunc(d, func() {
		if p.finish() {
			p.s.g.expired.Add(1)
			p.deliver(nil, actor.ErrDeadlineExceeded, nil)
		}
	})
}

// finish claims the completion; only the first caller gets true.
func (p *pending) finish() bool {
	if !p.done.CompareAndSwap(false, true) {
		return false
	}
	if id := p.id.Load(); id != 0 {
		p.s.asks.Delete(id)
	}
	return true
}

// complete answers the ask unless it was answered already. ex, when not nil,
// is the executor of the replying turn (keeps the asker's wake local).
func (p *pending) complete(v any, err error, ex *executor) bool {
	if !p.finish() {
		return false
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.deliver(v, err, ex)
	return true
}

func (p *pending) deliver(v any, err error, ex *executor) {
	switch {
	case p.ch != nil:
		p.ch <- result{v, err}
	case p.cell != nil:
		if p.cell.pushSys(envelope{kind: kReply, gen: p.gen, msg: &replyMsg{v: v, err: err, then: p.then, chain: p.link.parent}}) {
			p.s.wake(p.cell, ex)
		}
	case p.fn != nil:
		p.fn(v, err)
	}
}

func (s *Scheduler) registerAsk(p *pending) uint64 {
	id := s.nextAsk.Add(1)
	p.id.Store(id)
	s.asks.Store(id, p)
	if p.done.Load() {
		// Completed (by its deadline) meanwhile: finish may have missed the id.
		s.asks.Delete(id)
	}
	return id
}

// CompleteAsk completes the ask forwarded with AskID id (see Router.Forward)
// with a reply or an error. It reports false when the ask is unknown or was
// already completed (for example by its deadline). Safe from any goroutine.
func (s *Scheduler) CompleteAsk(id uint64, reply any, err error) bool {
	v, ok := s.asks.Load(id)
	if !ok {
		return false
	}
	return v.(*pending).complete(reply, err, nil)
}

// Deliver hands a message that arrived from another node to a local actor.
// from is the remote sender (zero if none). For an ask, reply is called
// exactly once with the answer or an error, at the latest at deadline;
// for a tell, reply is nil. The error is the admission outcome.
func (s *Scheduler) Deliver(to, from actor.Ref, msg any, deadline time.Time, reply func(any, error)) error {
	return s.DeliverChain(to, from, msg, deadline, nil, reply)
}

// DeliverChain is Deliver for a message that carries a call chain (see
// Outbound.Chain). A chain longer than actor.MaxCallChain is refused with
// actor.ErrCallChainTooLong.
func (s *Scheduler) DeliverChain(to, from actor.Ref, msg any, deadline time.Time, chainRefs []actor.Ref, reply func(any, error)) error {
	return s.DeliverTraced(to, from, msg, deadline, chainRefs, nil, reply)
}

// DeliverTraced is DeliverChain for an ask that carries a trace from the
// sending node (see WithTrace): its turn's timestamps go to
// Config.Tracer. A nil trace, or no tracer, traces nothing.
func (s *Scheduler) DeliverTraced(to, from actor.Ref, msg any, deadline time.Time, chainRefs []actor.Ref, trace any, reply func(any, error)) error {
	if s.tracer == nil {
		trace = nil
	}
	if s.closing.Load() {
		return ErrClosed
	}
	chain, err := chainOf(chainRefs)
	if err != nil {
		return err
	}
	for {
		c, err := s.local.Resolve(to)
		if err != nil {
			s.g.undelivered.Add(1)
			return err
		}
		if c == nil {
			return actor.ErrProcessUnavailable
		}
		if err := c.reserve(); err != nil {
			s.countRefusal(err)
			return err
		}
		if retry, err := s.deliverTo(c, from, msg, deadline, chain, trace, reply); !retry {
			return err
		}
	}
}

// deliverTo is one attempt of Deliver on the cell c, whose slot is
// reserved. retry reports that c was removed meanwhile (look up again).
func (s *Scheduler) deliverTo(c *Cell, from actor.Ref, msg any, deadline time.Time, chain *callChain, trace any, reply func(any, error)) (retry bool, err error) {
	e := envelope{msg: msg, chain: chain}
	if !from.IsZero() {
		f := from
		e.xfrom = &f
	}
	if reply != nil {
		p := &pending{s: s, fn: reply}
		if trace != nil {
			p.trace, p.queued = trace, s.clock.Now()
		}
		d := deadline.Sub(s.clock.Now())
		if deadline.IsZero() {
			d = actor.DefaultAskTimeout
			deadline = s.clock.Now().Add(d)
		}
		p.arm(d)
		e.ask, e.deadline = p, deadline.UnixNano()
	}
	if s.latency != nil {
		e.enq = s.clock.Now().UnixNano()
	}
	if !c.pushOne(e) {
		c.unreserve(1)
		if c.gone() {
			s.forget(c)
			if e.ask != nil {
				if !e.ask.finish() {
					return false, nil // its deadline answered it already
				}
				e.ask.timer.Stop()
			}
			return true, nil
		}
		if e.ask != nil {
			e.ask.complete(nil, actor.ErrActorTerminated, nil)
		}
		return false, actor.ErrActorTerminated
	}
	s.wake(c, nil)
	return false, nil
}

// replier is the Replier of one ask (Context.ReplyLater). The pending ask
// it answers does not point back to it, so a replier nobody holds any
// more is collected, and its cleanup fails the ask with ErrNoReply.
type replier struct {
	p        *pending // nil: the message was a tell
	answered atomic.Bool
}

var _ actor.Replier = (*replier)(nil)

func newReplier(p *pending) *replier {
	r := &replier{p: p}
	if p != nil {
		runtime.AddCleanup(r, func(p *pending) {
			if p.complete(nil, actor.ErrNoReply, nil) {
				p.s.g.noReply.Add(1)
			}
		}, p)
	}
	return r
}

func (r *replier) Reply(ctx actor.Context, msg any) error { return r.answer(ctx, msg, nil) }

func (r *replier) ReplyError(ctx actor.Context, err error) error { return r.answer(ctx, nil, err) }

// answer answers the ask as an output of the turn ctx belongs to.
func (r *replier) answer(ctx actor.Context, v any, err error) error {
	if r.p == nil {
		return actor.ErrNotAsk
	}
	ex, ok := ctx.(*executor)
	if !ok || ex.cell == nil {
		return errNotInTurn
	}
	if r.p.done.Load() || !r.answered.CompareAndSwap(false, true) {
		return actor.ErrAlreadyAnswered
	}
	ex.reply(r.p, v, err)
	return nil
}

// errNotInTurn: a Replier was used without the Context of a running turn.
var errNotInTurn = errors.New("ariel: Replier used outside a turn (pass the Context of the current turn)")

// onTurnGoroutine reports whether the calling goroutine is one that runs
// turns: a pool worker (replacements included) or the simulated runner. A
// blocking ask there would hold that goroutine, and so a worker, until the
// reply. It walks the caller's stack to its bottom frame (the goroutine's
// start function): a few hundred nanoseconds, paid only by blocking asks.
func onTurnGoroutine() bool {
	var buf [64]uintptr
	pcs := buf[:]
	for {
		n := runtime.Callers(2, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs)) // a deep stack: rare
	}
	// The last frames are the start function and runtime.goexit.
	for i := len(pcs) - 1; i >= 0 && i >= len(pcs)-3; i-- {
		f := runtime.FuncForPC(pcs[i] - 1)
		if f == nil {
			continue
		}
		if e := f.Entry(); e == turnEntries[0].Load() || e == turnEntries[1].Load() {
			return true
		}
	}
	return false
}

// turnEntries are the entry PCs of the functions that turn goroutines
// start in ((*worker).run and (*simRunner).run), recorded by each when it
// starts (see markTurnGoroutine).
var turnEntries [2]atomic.Uintptr

// markTurnGoroutine records the entry PC of its caller, the start function
// of a turn goroutine, in slot i of turnEntries.
func markTurnGoroutine(i int) {
	if turnEntries[i].Load() != 0 {
		return
	}
	var pc [1]uintptr
	if runtime.Callers(2, pc[:]) == 1 {
		if f := runtime.FuncForPC(pc[0] - 1); f != nil {
			turnEntries[i].Store(f.Entry())
		}
	}
}
