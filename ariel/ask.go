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
	// trace is set only for a traced ask (see WithTrace). It is a pointer
	// so that an untraced ask, the common case, does not carry its fields.
	// (A traced tell carries its trace in its envelope's xinfo.)
	trace *msgTrace
	// link is an in-turn ask's call chain: the asker, waiting within the
	// chain of the message its turn handled (see reentrancy.go).
	link callChain
	// turn says where a queued ask stands with its turn (askQueued,
	// askStarted, askWithdrawn): the recipient's dequeue and its caller's
	// withdrawal race for it, and exactly one of them wins.
	turn atomic.Uint32
}

// The states of pending.turn.
const (
	askQueued    uint32 = iota // not dequeued yet (or not queued on this node)
	askStarted                 // its turn started: it runs to completion
	askWithdrawn               // its caller gave up first: its turn never runs
)

// start claims the ask's turn at dequeue. It reports false when the
// caller withdrew the ask first. An ask put back in its mailbox after its
// turn started (an abandoned turn's mail) starts again.
func (p *pending) start() bool {
	return p.turn.CompareAndSwap(askQueued, askStarted) || p.turn.Load() == askStarted
}

// withdraw marks the ask withdrawn unless its turn started; it reports
// whether it did.
func (p *pending) withdraw() bool {
	return p.turn.CompareAndSwap(askQueued, askWithdrawn)
}

// AskCanceller is implemented by a Router that can withdraw an ask it
// forwarded (Outbound.AskID) from the node it went to. The scheduler calls
// CancelAsk when the ask's caller stopped waiting: before its deadline
// (its context was cancelled, or the scheduler closed) or at it; the ask
// has been completed locally already. It must not block.
type AskCanceller interface {
	CancelAsk(id uint64)
}

// QueuedAsk is an ask admitted by DeliverAsk, which its caller on another
// node may withdraw before its turn starts.
type QueuedAsk struct{ p *pending }

// Withdraw drops the ask if its turn has not started: its reply function
// is then never called and its turn never runs (counted in
// Stats.Cancelled when its mailbox reaches it). It reports whether it
// dropped it; false means the turn started, or the ask was answered
// already (its deadline, a refusal). Safe from any goroutine, idempotent.
func (q QueuedAsk) Withdraw() bool {
	p := q.p
	if p == nil || !p.withdraw() {
		return false
	}
	if !p.finish() {
		return false // answered meanwhile (its deadline, the mailbox closing)
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	return true
}

// msgTrace is a traced message's opaque trace and when the message entered
// the recipient's mailbox.
type msgTrace struct {
	trace  any
	queued time.Time
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
			// Not counted in Stats.Expired: that counts asks dropped at
			// dequeue (their turn never ran), where this ask, if local,
			// is counted once it is reached; a forwarded one is counted
			// by its owner.
			p.deliver(nil, actor.ErrDeadlineExceeded, nil)
			p.s.cancelForwarded(p)
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
	p.settle(v, err, ex)
	return true
}

// settle delivers the answer of an ask its caller has just finished.
func (p *pending) settle(v any, err error, ex *executor) {
	if p.timer != nil {
		p.timer.Stop()
	}
	p.deliver(v, err, ex)
}

func (p *pending) deliver(v any, err error, ex *executor) {
	switch {
	case p.ch != nil:
		p.ch <- result{v, unmarked(err)}
	case p.cell != nil:
		if p.cell.pushSys(envelope{kind: kReply, gen: p.gen, msg: &replyMsg{v: v, err: unmarked(err), then: p.then, chain: p.link.parent}}) {
			p.s.wake(p.cell, ex)
		}
	case p.fn != nil:
		p.fn(v, err)
	}
}

// marked is an error that means something to the reply function of an
// ask from another node only, and that this node's askers get without
// the mark: wire.NotRun's (the ask was refused unrun, so the caller's
// node gets a refusal it may send again). An asker on this node that
// passed the marked error on as its own reply would turn an ask that ran
// into such a refusal.
type marked interface{ Unmarked() error }

// unmarked is err as this node's askers get it.
func unmarked(err error) error {
	if m, ok := err.(marked); ok {
		return m.Unmarked()
	}
	return err
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

// AskEnded reports whether the ask forwarded with AskID id (see
// Router.Forward), which this scheduler issued, no longer waits for its
// outcome: it was answered, reached its deadline or its caller gave up.
// It is false for an id this scheduler never issued. A Router checks it
// just before the ask leaves (see wire.MailConfig.Ended). Safe from any
// goroutine.
func (s *Scheduler) AskEnded(id uint64) bool {
	if id == 0 || id > s.nextAsk.Load() {
		return false
	}
	return !s.AskPending(id)
}

// AskPending reports whether the ask forwarded with AskID id (see
// Router.Forward) still waits for its outcome: a Router that holds an ask
// to send it again checks that its caller has not been answered (by the
// deadline) or given up meanwhile. Safe from any goroutine.
func (s *Scheduler) AskPending(id uint64) bool {
	v, ok := s.asks.Load(id)
	return ok && !v.(*pending).done.Load()
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

// DeliverTraced is DeliverChain for an ask (or, with reply nil, a tell)
// that carries a trace from the sending node (see WithTrace): its turn's
// timestamps go to Config.Tracer. A nil trace, or no tracer, traces
// nothing.
func (s *Scheduler) DeliverTraced(to, from actor.Ref, msg any, deadline time.Time, chainRefs []actor.Ref, trace any, reply func(any, error)) error {
	_, err := s.DeliverAsk(to, from, msg, deadline, chainRefs, trace, reply)
	return err
}

// DeliverAsk is DeliverTraced that also returns, for an admitted ask
// (reply not nil), the handle its caller's node withdraws it by (see
// QueuedAsk.Withdraw and CancelAsk in the federation protocol). The
// ask's deadline is clamped to its kind's maximum (SetAskTimeouts).
func (s *Scheduler) DeliverAsk(to, from actor.Ref, msg any, deadline time.Time, chainRefs []actor.Ref, trace any, reply func(any, error)) (QueuedAsk, error) {
	if !s.traces() {
		trace = nil
	}
	if s.closing.Load() {
		return QueuedAsk{}, ErrClosed
	}
	chain, err := chainOf(chainRefs)
	if err != nil {
		return QueuedAsk{}, err
	}
	if reply != nil {
		deadline = s.AskDeadline(to, s.clock.Now(), deadline)
	}
	for {
		c, err := s.local.Resolve(to)
		if err != nil {
			s.g.undelivered.Add(1)
			return QueuedAsk{}, err
		}
		if c == nil {
			return QueuedAsk{}, actor.ErrProcessUnavailable
		}
		if err := c.reserve(); err != nil {
			s.countRefusal(err)
			return QueuedAsk{}, err
		}
		if p, retry, err := s.deliverTo(c, from, msg, deadline, chain, trace, reply, true); !retry {
			if err != nil {
				return QueuedAsk{}, err
			}
			return QueuedAsk{p}, nil
		}
	}
}

// deliverTo is one attempt of Deliver on the cell c, whose slot is
// reserved. retry reports that c was removed meanwhile (look up again).
// p is the admitted ask (nil for a tell). peer marks mail from another
// node.
func (s *Scheduler) deliverTo(c *Cell, from actor.Ref, msg any, deadline time.Time, chain *callChain, trace any, reply func(any, error), peer bool) (p *pending, retry bool, err error) {
	e := envelope{msg: msg, chain: chain}
	switch {
	case reply == nil && trace != nil:
		e.x = &xinfo{from: from, trace: &msgTrace{trace: trace, queued: s.clock.Now()}, peer: peer}
	case !from.IsZero():
		e.x = &xinfo{from: from, peer: peer}
	case peer && reply == nil:
		e.x = peerTell
	}
	if reply != nil {
		p = &pending{s: s, fn: reply}
		if trace != nil {
			p.trace = &msgTrace{trace: trace, queued: s.clock.Now()}
		}
		d := deadline.Sub(s.clock.Now())
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
					return nil, false, nil // its deadline answered it already
				}
				e.ask.timer.Stop()
			}
			return nil, true, nil
		}
		if e.ask != nil {
			e.ask.complete(nil, actor.ErrActorTerminated, nil)
		}
		return nil, false, actor.ErrActorTerminated
	}
	s.wake(c, nil)
	return p, false, nil
}

// DeliverRouted delivers m, mail this node's Router took (Forward, or a
// Resender's batch) and has routed to an actor of this node since: m.To
// must resolve to a cell here. An ask (AskID) is the ask registered
// under that id, queued itself, so that its caller is answered as if it
// had never left the scheduler; a tell comes from m.From. Such mail is
// this node's own, not another node's: a Reject of its recipient offers
// it to the Resender again. The error is the admission outcome; an ask
// not admitted is left to the Router (CompleteAsk), and one answered
// meanwhile (its deadline) is admitted as nothing.
func (s *Scheduler) DeliverRouted(m Outbound) error {
	if s.closing.Load() {
		return ErrClosed
	}
	var p *pending
	if m.AskID != 0 {
		v, ok := s.asks.Load(m.AskID)
		if !ok {
			return nil // answered meanwhile: nothing left to deliver
		}
		p = v.(*pending)
	}
	chain, err := chainOf(m.Chain)
	if err != nil {
		return err
	}
	for {
		c, err := s.local.Resolve(m.To)
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
		e := envelope{msg: m.Msg, chain: chain, ask: p}
		if !m.From.IsZero() {
			e.x = &xinfo{from: m.From}
		}
		if p != nil {
			e.deadline = m.Deadline.UnixNano()
		} else if tracingBuilt && m.Trace != nil && s.traces() {
			if e.x == nil {
				e.x = &xinfo{}
			}
			e.x.trace = &msgTrace{trace: m.Trace, queued: s.clock.Now()}
		}
		if s.latency != nil {
			e.enq = s.clock.Now().UnixNano()
		}
		if c.pushOne(e) {
			s.wake(c, nil)
			return nil
		}
		c.unreserve(1)
		if !c.gone() {
			return actor.ErrActorTerminated
		}
		s.forget(c) // removed while we looked it up: the identity gets a fresh cell
	}
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
			if p.finish() {
				// Counted before the asker learns of it, so an asker
				// that reads the count after its ErrNoReply sees it.
				p.s.g.noReply.Add(1)
				p.settle(nil, actor.ErrNoReply, nil)
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
