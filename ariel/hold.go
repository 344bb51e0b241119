package ariel

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tempest-actors/tempest/actor"
)

// Holding a turn's outputs (reply after commit).
//
// The actors of a kind with an after-turn hook (or SetHoldOutputs) keep
// what a turn sends — its reply, its tells and asks, to local and to
// remote actors — in the executor until the turn has ended and the hook
// and the turn's staged effects have run. These may then keep those
// outputs back (Hold.Wait) until something outside the scheduler,
// typically a durable write of the state the turn changed, is finished.
// The worker does not wait: it goes on with the next turn (of the same
// actor or another one), and the outputs are released later by whoever
// calls release, in turn order per actor. A turn whose outputs are not
// held while earlier ones of its actor still are queues its own behind
// them, so nobody sees the effect of a later turn before that of an
// earlier one, and per-sender FIFO holds for held and unheld turns
// alike. Kinds without a hook or SetHoldOutputs pay nothing: their
// outputs leave as before.

// Hold is the handle an AfterTurn hook gets on the turn it runs after.
// It is only valid during the hook call.
type Hold struct{ ex *executor }

// Abandoned reports whether the watchdog abandoned the turn past its
// budget while the hook ran: its outputs are dropped, and nothing it
// computed for them (a state to write) should take effect.
func (h Hold) Abandoned() bool { return h.ex != nil && h.ex.fenced() }

// Wait keeps the turn's outputs back until release is called, and
// returns release. release(nil) lets them go (in turn order: after the
// outputs of every earlier held turn of the same actor); release(err)
// fails them instead: an ask the turn answered gets err, an ask it sent
// gets err, a tell it sent comes back to the actor as Undelivered with
// err. release may be called from any goroutine, once; further calls do
// nothing. It must not be called with locks held that the recipients'
// delivery could need (it may wake actors and ring the activator).
//
// Wait may be called more than once for the same turn (by the hook and
// by effects the turn staged, each for a write of its own): each call
// returns a release of its own, and the outputs are held until every
// one was called, failing with the first error given. Once a Wait held
// them, a Wait made after the turn was abandoned past its budget still
// holds them too; before that, it holds nothing (an abandoned turn's
// outputs that nothing held are dropped).
func (h Hold) Wait() (release func(err error)) {
	ex := h.ex
	if ex == nil || ex.cell == nil {
		return func(error) {}
	}
	b := ex.heldB
	if !ex.lockEffect() {
		if b == nil {
			// The turn ran past the budget and was abandoned before
			// anything held its outputs: they are dropped when it
			// returns.
			return func(error) {}
		}
		// Abandoned after an earlier Wait held the outputs: they stay
		// held, and wait for this release too. Only the turn's own
		// goroutine touches heldB, and the batch cannot finish before
		// settle's own wait is released, when this goroutine returns.
		return b.addWait()
	}
	defer ex.unlockEffect()
	if b == nil {
		c := ex.cell
		if c.held == nil {
			c.held = &holdQueue{}
		}
		b = ex.takeOutputs(c)
		b.held = true
		// One wait for the end of the hook and the effects (settle), so
		// that a release given before another Wait of the same turn
		// does not let the outputs go.
		b.waits = 1
		if tracingBuilt && ex.turnTrace != nil {
			if ct, ok := ex.s.tracer.(CommitTracer); ok {
				b.commit, b.ct = ct.BeginCommit(ex.turnTrace, ex.s.clock.Now()), ct
			}
		}
		ex.heldB = b
		q := c.held
		q.mu.Lock()
		q.q = append(q.q, b)
		q.mu.Unlock()
	}
	return b.addWait()
}

// addWait adds one release to those b waits for, and returns it.
func (b *heldBatch) addWait() func(err error) {
	b.q.mu.Lock()
	b.waits++
	b.q.mu.Unlock()
	var once atomic.Bool
	return func(err error) {
		if once.CompareAndSwap(false, true) {
			b.release(err)
		}
	}
}

// Released has fn called once the turn's outputs are finished: every
// release Wait gave was called. fn gets the error the outputs fail with
// (nil: they are delivered), before they are delivered, on the goroutine
// of the last release. Call it after Wait, during the same hook or
// Settle. When no Wait of the turn held its outputs (none ran, or each
// found the turn abandoned past its budget already), fn is called at
// once with ErrNotHeld. Once a Wait held them, a turn abandoned later
// keeps them held: fn is called when they are finished, as for any turn.
func (h Hold) Released(fn func(err error)) {
	ex := h.ex
	if ex == nil || ex.heldB == nil {
		fn(ErrNotHeld)
		return
	}
	b := ex.heldB
	b.q.mu.Lock()
	if !b.done {
		b.onDone = append(b.onDone, fn)
		b.q.mu.Unlock()
		return
	}
	err := b.cerr
	b.q.mu.Unlock()
	fn(err)
}

// Effect is work a turn stages (Stage) to be carried out when the turn
// has ended: a write the turn's outputs must wait for, say.
type Effect interface {
	// Settle runs on the actor's turn thread once the turn ended
	// normally, after the kind's after-turn hook and before the turn's
	// outputs leave; h.Wait holds them. It must not block: the worker
	// waits for it. A turn that panicked, or was abandoned past its
	// budget before its effects settle (in its body or its hook),
	// settles nothing: its staged effects are dropped. One abandoned
	// while they settle is not undone: what a Wait held before stays
	// held until its release, and until the releases of the Waits of the
	// effects still settling, which then deliver or fail the outputs,
	// and the functions given to Released run.
	Settle(h Hold)
}

// ErrNotHeld: Stage was called in a turn whose outputs cannot be held
// (its kind has neither an after-turn hook nor SetHoldOutputs), or
// outside a turn of this scheduler.
var ErrNotHeld = errors.New("ariel: the turn's outputs cannot be held")

// Stage attaches eff to the turn ctx is the context of, to be settled
// when the turn ends (Effect.Settle). It returns ErrNotHeld when the
// turn's outputs cannot be held, and actor.ErrActorTerminated when the
// turn was abandoned past its budget. Only the turn's own goroutine may
// call it.
func Stage(ctx actor.Context, eff Effect) error {
	if err := CanStage(ctx); err != nil {
		return err
	}
	ex := ctx.(*executor)
	if !ex.lockEffect() {
		ex.discard()
		return errAbandoned
	}
	defer ex.unlockEffect()
	ex.staged = append(ex.staged, eff)
	return nil
}

// CanStage returns ErrNotHeld when Stage would, the turn ctx is the
// context of being unable to hold its outputs, and nil otherwise. It
// stages nothing: a caller checks it before work it would do for
// nothing if it could not stage. Only the turn's own goroutine may call
// it.
func CanStage(ctx actor.Context) error {
	if ex, ok := ctx.(*executor); !ok || ex.cell == nil || !ex.cell.holds {
		return ErrNotHeld
	}
	return nil
}

// Staged returns the effects the turn ctx is the context of has staged
// so far, oldest first (nil outside a turn of this scheduler). The slice
// is the scheduler's: do not keep or change it.
func Staged(ctx actor.Context) []Effect {
	if ex, ok := ctx.(*executor); ok && ex.cell != nil {
		return ex.staged
	}
	return nil
}

// holdQueue is one actor's held outputs in turn order. The turn thread
// appends; releases pop the done prefix. It lives as long as a batch
// refers to it, independently of the cell's life in the map.
type holdQueue struct {
	mu        sync.Mutex
	q         []*heldBatch
	releasing bool // a goroutine is delivering the done prefix
}

// fwd is a send of a held-capable turn to an actor on another node,
// forwarded when the turn's outputs are released.
type fwd struct {
	to       actor.Ref
	msg      any
	p        *pending
	deadline int64
	chain    *callChain
	trace    any // a traced tell's (an ask's is in p)
}

// heldBatch is the outputs of one turn.
type heldBatch struct {
	s       *Scheduler
	q       *holdQueue
	from    *Cell
	to      []*Cell
	env     []envelope
	fwd     []fwd
	replies []heldReply // the turn's answers to asks

	held bool // the hook held it (Hold.Wait), rather than queued it behind others
	// waits counts the releases still to come (Hold.Wait, and one for the
	// end of settle); guarded by q.mu.
	waits int
	// onDone is called when the batch is finished (Hold.Released);
	// guarded by q.mu.
	onDone []func(error)
	// commit is the CommitTracer's record of a traced turn's hold, told
	// to ct at the release; nil when untraced.
	commit any
	ct     CommitTracer
	done   bool  // guarded by q.mu
	cerr   error // guarded by q.mu: the error the batch fails with
}

// takeOutputs moves the current turn's outputs into a new batch.
func (ex *executor) takeOutputs(c *Cell) *heldBatch {
	b := &heldBatch{s: ex.s, q: c.held, from: c}
	if len(ex.outTo) > 0 {
		b.to, b.env = slices.Clone(ex.outTo), slices.Clone(ex.outEnv)
		clear(ex.outTo)
		clear(ex.outEnv)
		ex.outTo, ex.outEnv, ex.outG = ex.outTo[:0], ex.outEnv[:0], ex.outG[:0]
	}
	if len(ex.outFwd) > 0 {
		b.fwd = slices.Clone(ex.outFwd)
		clear(ex.outFwd)
		ex.outFwd = ex.outFwd[:0]
	}
	if len(ex.replies) > 0 {
		b.replies = slices.Clone(ex.replies)
		ex.clearReplies()
	}
	return b
}

// heldReply is an answer to an ask, kept with its turn's outputs.
type heldReply struct {
	p   *pending
	v   any
	err error
}

func (ex *executor) clearReplies() {
	clear(ex.replies)
	ex.replies = ex.replies[:0]
}

func (ex *executor) hasOutputs() bool {
	return len(ex.outTo) > 0 || len(ex.outFwd) > 0 || len(ex.replies) > 0
}

// settle ends a turn of an actor whose outputs are held until it ends:
// the hook runs (for a turn that may have changed state), then the
// effects the turn staged, then the outputs leave now, or wait behind
// earlier held ones, or stay held by the hook or an effect.
func (ex *executor) settle(c *Cell) {
	normal := ex.normal
	ex.normal = false
	if normal && !ex.faulted && c.act != nil {
		ref, inc, a := c.Ref(), c.inc.Load(), c.act
		ex.out()
		c.after(ref, inc, a, !ex.tick, Hold{ex})
		ex.back()
	}
	if len(ex.staged) > 0 {
		if !ex.faulted && c.act != nil {
			ex.out()
			for _, e := range ex.staged {
				e.Settle(Hold{ex})
			}
			ex.back()
		}
		clear(ex.staged)
		ex.staged = ex.staged[:0]
	}
	if b := ex.heldB; b != nil {
		ex.heldB = nil
		b.release(nil) // settle's own wait
		return
	}
	if !ex.hasOutputs() {
		return
	}
	if q := c.held; q != nil {
		q.mu.Lock()
		if len(q.q) > 0 {
			b := ex.takeOutputs(c)
			b.done = true
			q.q = append(q.q, b)
			q.mu.Unlock()
			q.drain()
			return
		}
		q.mu.Unlock()
	}
	// Nothing is held before this turn: its outputs leave now, as they
	// would without a hook. The queue can only grow on this thread, so
	// it stays empty meanwhile.
	if len(ex.outTo) > 0 {
		ex.flush()
	}
	for i := range ex.outFwd {
		f := &ex.outFwd[i]
		ex.s.forwardNow(c, f, ex)
	}
	clear(ex.outFwd)
	ex.outFwd = ex.outFwd[:0]
	for _, r := range ex.replies {
		r.p.complete(r.v, r.err, ex)
	}
	ex.clearReplies()
}

// release ends one of b's waits (err: failed); once none is left b is
// finished, failed with the first error given, and every finished batch
// at the head of its queue is delivered. The outputs of turns queued
// behind a failed one without being held themselves fail with the same
// error: they may show the state whose commit failed.
func (b *heldBatch) release(err error) {
	q := b.q
	q.mu.Lock()
	if b.done {
		q.mu.Unlock()
		return
	}
	if err != nil && b.cerr == nil {
		b.cerr = err
	}
	if b.waits--; b.waits > 0 {
		q.mu.Unlock()
		return
	}
	b.done = true
	err = b.cerr
	onDone := b.onDone
	b.onDone = nil
	q.mu.Unlock()
	for _, fn := range onDone {
		fn(err)
	}
	if tracingBuilt && b.commit != nil {
		b.ct.EndCommit(b.commit, b.s.clock.Now(), err)
	}
	q.drain()
}

// drain delivers the finished prefix of q. One goroutine delivers at a
// time; a release that finds another delivering leaves its batch to it.
func (q *holdQueue) drain() {
	q.mu.Lock()
	if q.releasing {
		q.mu.Unlock()
		return
	}
	q.releasing = true
	var failed error
	for len(q.q) > 0 && q.q[0].done {
		b := q.q[0]
		q.q[0] = nil
		q.q = q.q[1:]
		err := b.cerr
		switch {
		case b.held:
			failed = err
		case failed != nil:
			// This turn saw the state of a held turn whose release
			// failed: what it sent must not leave either.
			err = failed
		}
		q.mu.Unlock()
		b.deliver(err)
		q.mu.Lock()
	}
	if len(q.q) == 0 {
		q.q = nil
	}
	q.releasing = false
	q.mu.Unlock()
}

// deliver sends the batch's outputs (err nil) or fails them with err.
func (b *heldBatch) deliver(err error) {
	s := b.s
	if err == nil {
		if len(b.to) > 0 {
			s.flushOut(nil, b.to, b.env)
		}
		for i := range b.fwd {
			s.forwardNow(b.from, &b.fwd[i], nil)
		}
		for _, r := range b.replies {
			r.p.complete(r.v, r.err, nil)
		}
		return
	}
	for i, c := range b.to {
		c.unreserve(1)
		e := &b.env[i]
		if e.ask != nil {
			e.ask.complete(nil, err, nil)
			continue
		}
		s.g.undelivered.Add(1)
		s.undeliverable(b.from, c.Ref(), e.msg, err, nil, 0)
	}
	for i := range b.fwd {
		f := &b.fwd[i]
		if f.p != nil {
			f.p.complete(nil, err, nil)
			continue
		}
		s.g.undelivered.Add(1)
		s.undeliverable(b.from, f.to, f.msg, err, nil, 0)
	}
	// The turn's askers get the error in the form an asker on another
	// node would (VetError), as an actor's own reply error is: the same
	// answer wherever the asker lives.
	rerr := err
	if s.vetErr != nil && b.from != nil && b.from.ref.IsVirtual() {
		rerr = s.vetErr(b.from.ref, err)
	}
	for _, r := range b.replies {
		r.p.complete(nil, rerr, nil)
	}
}

// forwardNow hands a held-capable turn's remote send to the router; a
// refusal is reported like one of send.
func (s *Scheduler) forwardNow(from *Cell, f *fwd, ex *executor) {
	if err := s.forward(from, f.to, f.msg, f.p, f.deadline, f.chain, f.trace, Route{}); err != nil { // routed when it goes
		s.sendFailed(from, f.to, f.msg, f.p, err, ex)
	}
}
