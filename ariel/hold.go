package ariel

import (
	"slices"
	"sync"

	"github.com/tempest-actors/tempest/actor"
)

// Holding a turn's outputs (reply after commit).
//
// The actors of a kind with an after-turn hook keep what a turn sends —
// its reply, its tells and asks, to local and to remote actors — in the
// executor until the turn has ended and the hook has run. The hook may
// then keep those outputs back (Hold.Wait) until something outside the
// scheduler, typically a durable write of the state the turn changed,
// is finished. The worker does not wait: it goes on with the next turn
// (of the same actor or another one), and the outputs are released later
// by whoever calls release, in turn order per actor. A turn whose outputs
// are not held while earlier ones of its actor still are queues its own
// behind them, so nobody sees the effect of a later turn before that of
// an earlier one, and per-sender FIFO holds for held and unheld turns
// alike. Kinds without a hook pay nothing: their outputs leave as before.

// Hold is the handle an AfterTurn hook gets on the turn it runs after.
// It is only valid during the hook call.
type Hold struct{ ex *executor }

// Abandoned reports whether the watchdog abandoned the turn past its
// budget while the hook ran: its outputs are dropped, and nothing it
// computed for them (a state to write) should take effect.
func (h Hold) Abandoned() bool { return h.ex != nil && h.ex.fenced() }

// Wait keeps the turn's outputs back until release is called, and
// returns release. release(nil) delivers them (in turn order: after the
// outputs of every earlier held turn of the same actor); release(err)
// fails them instead: an ask the turn answered gets err, an ask it sent
// gets err, a tell it sent comes back to the actor as Undelivered with
// err. release may be called from any goroutine, once; further calls do
// nothing. It must not be called with locks held that the recipients'
// delivery could need (it may wake actors and ring the activator).
// Calling Wait again during the same hook returns the same release.
func (h Hold) Wait() (release func(err error)) {
	ex := h.ex
	if ex == nil || ex.cell == nil {
		return func(error) {}
	}
	if ex.heldB != nil {
		return ex.heldB.release
	}
	if !ex.lockEffect() {
		// The hook ran past the budget and its turn was abandoned: its
		// outputs are dropped when it returns.
		return func(error) {}
	}
	defer ex.unlockEffect()
	c := ex.cell
	if c.held == nil {
		c.held = &holdQueue{}
	}
	b := ex.takeOutputs(c)
	b.held = true
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
	return b.release
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

// settle ends a turn of an actor whose kind has an after-turn hook: the
// hook runs (for a turn that may have changed state), then the outputs
// leave now, or wait behind earlier held ones, or stay held by the hook.
func (ex *executor) settle(c *Cell) {
	normal := ex.normal
	ex.normal = false
	if normal && !ex.faulted && c.act != nil {
		ref, inc, a := c.Ref(), c.inc.Load(), c.act
		ex.out()
		c.after(ref, inc, a, !ex.tick, Hold{ex})
		ex.back()
	}
	if b := ex.heldB; b != nil {
		ex.heldB = nil
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

// release marks b finished (err: failed) and delivers every finished
// batch at the head of its queue. The outputs of turns queued behind a
// failed one without being held themselves fail with the same error: they
// may show the state whose commit failed.
func (b *heldBatch) release(err error) {
	q := b.q
	q.mu.Lock()
	if b.done {
		q.mu.Unlock()
		return
	}
	b.done, b.cerr = true, err
	q.mu.Unlock()
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
	for _, r := range b.replies {
		r.p.complete(nil, err, nil)
	}
}

// forwardNow hands a held-capable turn's remote send to the router; a
// refusal is reported like one of send.
func (s *Scheduler) forwardNow(from *Cell, f *fwd, ex *executor) {
	if err := s.forward(from, f.to, f.msg, f.p, f.deadline, f.chain, f.trace); err != nil {
		s.sendFailed(from, f.to, f.msg, f.p, err, ex)
	}
}
