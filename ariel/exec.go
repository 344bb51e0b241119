package ariel

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// clockStride is the size of the batch a drain cycle takes from a mailbox
// under one lock. The fairness clock starts when a cycle first takes a full
// batch (a backlog) and is read again every clockEvery messages; a cycle that
// never sees a backlog — a request/reply hop — never reads the clock.
const (
	clockStride = 8
	clockEvery  = 32
)

// executor runs turns: one per pool worker, one for the simulated runner. It
// is also the actor.Context of the turn it runs, so a turn allocates no
// context. Only its goroutine touches it.
type executor struct {
	s      *Scheduler
	w      *worker // nil in simulated mode
	cnt    *counters
	budget int

	batch  [clockStride]envelope
	outTo  []*Cell
	outEnv []envelope
	outFwd []fwd // remote sends of a turn of a kind with an after-turn hook

	// A turn of a kind with an after-turn hook keeps its reply here until
	// the turn ends (see hold.go).
	replies []heldReply
	heldB   *heldBatch // the batch the hook held the current turn's outputs in
	// staged is the effects the current turn staged (Stage), settled
	// when it ends normally.
	staged []Effect
	// normal: the current turn may change state (the after-turn hook
	// runs for it).
	normal bool
	tick   bool // the current turn is a timer tick that does not keep the actor alive

	// the current turn
	cell    *Cell
	env     *envelope
	replied bool
	later   *replier // the turn's Replier (ReplyLater), nil if none
	faulted bool     // the current turn panicked
	// cut: a turn of the cycle's cell panicked. The rest of the batch
	// taken with it goes back to the mailbox, so that a remedy the
	// FaultHook queued in the system lane runs before any further mail.
	cut    bool
	turns  uint64 // turns not yet added to cnt
	msgs   uint64 // messages not yet added to cnt
	seized uint64 // seizes not yet added to cnt
	cycles uint64
	taken  time.Time // when the batch was taken; set only with a tracer
	// turnTrace is the trace of the traced turn running (TurnTracer.
	// BeginTurn), which the turn's asks carry; nil otherwise.
	turnTrace any

	// The current turn's sends grouped by recipient (see group.go):
	// outG[i] is the group of outTo[i]; lastG is the group of the last
	// send plus one (0: none).
	outG        []int32
	groups      []sendGroup
	table       groupTable
	lastG       int32
	interleaved bool
	gpos        []int32
	sortTo      []*Cell
	sortEnv     []envelope
	// The spawned actor of this node the current turn resolved last
	// (see resolvedBefore); sameC is nil when none.
	sameC     *Cell
	sameScope string
	sameID    uint64
	sameInc   uint64

	// The turn gate (see abandon.go) and what the watchdog reads to
	// recover an abandoned turn: the generation of the cycle's cell, the
	// index in batch of the envelope being handled (-1: not from the
	// batch) and the number of envelopes the last take put there.
	gate   atomic.Uint64
	gseq   uint64
	gbase  uint64 // gseq at the last out (see hop)
	gen    uint32
	pos    int
	batchN int
	// depth is the seize depth of the cycle's cell (see seize.go).
	depth int32
	// unleased counts the messages of leased actors handed to this
	// executor directly (runOne) since it last read the lease.
	unleased int
}

var _ actor.Context = (*executor)(nil)

// drain runs one drain cycle of c, whose run-token the caller holds
// (stRunning). The first pre envelopes of the batch were put there by the
// caller (mail held for a seized cell) and run before anything is taken.
// It ends when the mailbox is empty (the token is released in take), when
// the fairness budget is spent (the cell is re-queued at the back of the
// shared queue), or when the cell stopped or was passivated.
func (ex *executor) drain(c *Cell, pre int) {
	ex.gen = c.gen.Load() + 1 // stamps are never zero
	ex.drainCycle(c, pre)
	ex.cnt.cycles.Add(1)
	if ex.cycles++; ex.cycles%32 == 0 {
		ex.publish()
	}
}

// publish adds the locally counted turns and messages to the shared
// counters; executors call it every few cycles and before they idle.
func (ex *executor) publish() {
	if ex.turns != 0 {
		ex.cnt.turns.Add(ex.turns)
		ex.turns = 0
	}
	if ex.msgs != 0 {
		ex.cnt.messages.Add(ex.msgs)
		ex.msgs = 0
	}
	if ex.seized != 0 {
		ex.cnt.seized.Add(ex.seized)
		ex.seized = 0
	}
}

func (ex *executor) drainCycle(c *Cell, pre int) {
	s := ex.s
	processed, sinceClock := 0, 0
	var t0 int64
	for {
		want := len(ex.batch)
		if rem := ex.budget - processed; rem < want {
			want = rem
		}
		if want <= 0 {
			ex.yield(c, processed)
			return
		}
		waited := c.waiting > 0 // take sets aside what may not run now
		k := pre
		if k > 0 {
			pre = 0
			if c.leased && !s.leaseCurrent() {
				// A group handed over directly (seize.go): older than
				// anything in the mailbox, so it goes back to its head.
				c.unget(ex.batch[:k])
				clear(ex.batch[:k])
				k = takeLapsed
			}
		} else {
			k = c.take(ex.batch[:want])
		}
		if k == takeLapsed {
			ex.lapsed(c, processed)
			return
		}
		if c.leased && k > 0 && ex.batch[0].kind == kUser {
			ex.unleased = 0 // take read the lease
		}
		ex.batchN = k
		if s.traces() && k > 0 {
			ex.taken = s.clock.Now()
		}
		if k == 0 {
			if !c.release() {
				continue
			}
			ex.msgs += uint64(processed)
			s.activeDec()
			return
		}
		if t0 == 0 && k == len(ex.batch) && s.cfg.FairnessTime > 0 {
			t0 = s.elapsed() // a backlog: this cycle may run long
		}
		// Plain tells run in a tight loop when nothing needs per-message
		// bookkeeping (no latency observer, no receive timeout).
		fast := s.latency == nil && c.act != nil && !c.holds && (c.ext == nil || c.ext.recvTimeout <= 0) && c.reent == actor.Reentrant
		traced := s.traces() // a traced tell is not plain
		ex.cut = false
		for i := 0; i < k; i++ {
			if ex.cut {
				// A turn panicked: what the batch holds after it goes
				// back, behind any remedy the FaultHook queued.
				c.unget(ex.batch[i:k])
				clear(ex.batch[i:k])
				k = i
				break
			}
			e := &ex.batch[i]
			if fast && e.kind == kUser && e.ask == nil && e.gen == 0 && (!traced || e.tellTrace() == nil) {
				i = ex.runTells(c, ex.batch[:k], i) - 1
				continue
			}
			ex.pos = i
			if !ex.turn(c, e) {
				// The cell stopped or went to rest; it has left the run
				// state already. Anything taken after is not for this actor.
				for j := i + 1; j < k; j++ {
					s.drop(&ex.batch[j], actor.ErrActorTerminated)
				}
				clear(ex.batch[:k])
				ex.msgs += uint64(processed + k)
				return
			}
			if !waited && c.waiting > 0 && i+1 < k {
				// The turn made the actor wait for a reply: the rest of
				// the batch goes back to take, which sets aside what may
				// not run meanwhile. (Nothing is set aside yet, so the
				// head of the mailbox is the right place. A batch taken
				// while waiting holds only what may run.)
				c.unget(ex.batch[i+1 : k])
				clear(ex.batch[i+1 : k])
				k = i + 1
				break
			}
		}
		// The batch is not cleared: its slots are overwritten by the next
		// take, and keeping at most len(batch) messages reachable per worker
		// until then is cheaper than clearing every message twice.
		processed += k
		if processed >= ex.budget {
			ex.yield(c, processed)
			return
		}
		if w := ex.w; w != nil && w.heldAt < len(w.held) && c.pend.Load() > 0 {
			// The cycle's turns seized recipients: their mail runs
			// next, and this cell, which has more, waits behind it in
			// the LIFO slot.
			ex.msgs += uint64(processed)
			c.state.Store(stReady)
			w.pushNext(c)
			return
		}
		if t0 == 0 {
			continue
		}
		if sinceClock += k; sinceClock >= clockEvery {
			sinceClock = 0
			if s.elapsed()-t0 >= int64(s.cfg.FairnessTime) {
				ex.yield(c, processed)
				return
			}
		}
	}
}

// yield ends a cycle on the fairness budget: the cell stays Ready and goes
// to the back of the shared queue, so another ready actor runs first.
func (ex *executor) yield(c *Cell, processed int) {
	ex.cnt.yields.Add(1)
	ex.requeue(c, processed)
}

// requeue ends a cycle with the cell Ready at the back of the shared
// queue.
func (ex *executor) requeue(c *Cell, processed int) {
	ex.msgs += uint64(processed)
	c.state.Store(stReady)
	s := ex.s
	if s.sim != nil {
		s.sim.push(c)
		return
	}
	s.inj.push(c)
	s.notify()
}

// turn handles one envelope. It returns false when the cell left the
// running state (stopped or passivated).
func (ex *executor) turn(c *Cell, e *envelope) bool {
	s := ex.s
	if e.gen != 0 && e.gen != ex.gen {
		// A reply, timer or notice meant for an actor value that was
		// abandoned: it belongs to no live turn.
		s.g.fenced.Add(1)
		return true
	}
	switch e.kind {
	case kUser:
		if e.ask != nil && e.deadline != 0 && s.clock.Now().UnixNano() > e.deadline {
			s.g.expired.Add(1)
			e.ask.complete(nil, actor.ErrDeadlineExceeded, ex)
			return true
		}
		if e.ask != nil && !e.ask.start() {
			// Its caller gave up before the turn started (a cancelled
			// context, CancelAsk from the asking node, that node gone).
			s.g.cancelled.Add(1)
			return true
		}
		if s.latency != nil && e.enq != 0 {
			s.latency.ObserveQueued(time.Duration(s.clock.Now().UnixNano() - e.enq))
		}
		ex.normal = c.after != nil
		if p := e.ask; tracingBuilt && p != nil && p.trace != nil {
			ex.tracedInvoke(c, e, p.trace)
		} else if tr := e.tellTrace(); tracingBuilt && tr != nil {
			ex.tracedInvoke(c, e, tr)
		} else {
			ex.invoke(c, e, e.msg)
		}
		ex.normal = false
	case kStart:
		ex.invoke(c, e, actor.Started{})
	case kUndelivered, kTimeout:
		if e.kind == kTimeout && !ex.timeoutDue(c) {
			return true
		}
		ex.normal = c.after != nil
		ex.invoke(c, e, e.msg)
		ex.normal = false
	case kTimer:
		t := e.msg.(*actTimer)
		if !t.take() {
			return true // cancelled, or queued for an activation that ended
		}
		ex.normal, ex.tick = c.after != nil, !t.keep
		ex.invoke(c, e, t.msg)
		ex.normal, ex.tick = false, false
	case kNotice:
		n := e.msg.(*notice)
		if c.act == nil {
			n.fail(actor.ErrActorTerminated)
			return true
		}
		if n.accept != nil && !n.accept() {
			return true // superseded since it was queued
		}
		// A notice is not activity either: the identity's own schedule.
		ex.normal, ex.tick = c.after != nil, true
		held := n.done != nil && c.holds
		if held {
			ex.staged = append(ex.staged, noticeDone{n.done}) // settled with the turn's own effects
		}
		ex.invoke(c, e, n.msg)
		ex.normal, ex.tick = false, false
		if n.done != nil && !held {
			n.done(nil) // nothing holds a turn's outputs here: they left with it
		}
	case kReply:
		r := e.msg.(*replyMsg)
		reent := c.reent != actor.Reentrant
		if reent {
			c.waitDone()
		}
		ex.normal = c.after != nil
		ex.invokeContinuation(c, e, r)
		ex.normal = false
		if reent && c.waiting == 0 {
			c.undefer() // the wait is over: set-aside mail runs next
		}
	case kRestart:
		r := e.msg.(*restartMsg)
		if c.reent != actor.Reentrant {
			c.undefer() // the old activation's waits end with it
		}
		c.endTimers() // the old activation's timers end with it
		r.install(c)
		ex.invoke(c, e, actor.Started{})
	case kFunc:
		ex.enter(c, e)
		fn := e.msg.(func(actor.Actor))
		a := c.act
		ex.protect(c, func() { fn(a) })
		ex.leave()
	case kStop:
		ex.invoke(c, e, actor.Stopping{})
		err, released := stopOf(e)
		s.terminate(c, ex, err, released)
		return false
	case kPassivate:
		if c.reent != actor.Reentrant {
			c.undefer() // set-aside mail waits for the next activation
		}
		var finals []func(actor.Actor)
		quiet := false
		switch m := e.msg.(type) {
		case func(actor.Actor):
			if m != nil {
				finals = append(finals, m)
			}
		case *passReq:
			// Taken from the lane under the lock, so no Passivate
			// joins it any more.
			finals, quiet = m.finals, m.quiet
		}
		if !quiet {
			ex.invoke(c, e, actor.Passivating{})
		}
		a := c.act
		for _, fn := range finals {
			ex.enter(c, e)
			ex.protect(c, func() { fn(a) })
			ex.leave()
		}
		if quiet {
			// Detach: the cell keeps its mail for the value the
			// supervisor is making (a restart it queued meanwhile, from
			// the final above, say, takes the cell now).
			ex.s.detach(c)
			return false
		}
		ex.rest(c)
		return false
	}
	return true
}

// restartMsg is the payload of a kRestart: the new actor value and the
// incarnation it runs under (0: the old one plus one; keep: unchanged).
type restartMsg struct {
	a    actor.Actor
	inc  uint64
	keep bool
}

// install makes r's value c's actor, under the incarnation r asks for:
// the same (keep), inc, or the next one.
func (r *restartMsg) install(c *Cell) {
	c.act = r.a
	switch {
	case r.keep:
	case r.inc != 0:
		c.inc.Store(r.inc)
	default:
		c.inc.Add(1)
	}
}

// runTells runs the plain tells (user messages that are not asks) of
// batch from index i on, one turn each, under a single recover frame; it
// returns the index of the first envelope it did not run. A panic ends that
// turn like in invoke, and runTells returns after it (the cycle puts the
// rest of the batch back: see executor.cut).
func (ex *executor) runTells(c *Cell, batch []envelope, i int) (next int) {
	next = i
	defer func() {
		if r := recover(); r != nil {
			ex.back()
			ex.panicked(c, r)
			ex.leave()
			next++
		}
	}()
	a := c.act
	traced := ex.s.traces()
	pool := ex.w != nil
	for next < len(batch) {
		e := &batch[next]
		if !plainTell(e, traced) {
			return next
		}
		ex.cell, ex.env, ex.replied, ex.later, ex.pos = c, e, false, nil, next
		ex.turns++
		ex.out()
		for {
			a.Receive(ex, e.msg)
			next++
			// A turn that buffered no send needs no leave: the next
			// plain tell starts with one swap of the gate (see hop).
			if !pool || len(ex.outTo) != 0 || len(ex.groups) != 0 || next == len(batch) || !plainTell(&batch[next], traced) {
				break
			}
			ex.hop()
			e = &batch[next]
			ex.env, ex.replied, ex.later = e, false, nil
			ex.turns++
		}
		ex.back()
		ex.leave()
	}
	return next
}

// plainTell reports whether e is a tell runTells may run: user mail, not
// an ask, not stamped for an actor value, not traced.
func plainTell(e *envelope, traced bool) bool {
	return e.kind == kUser && e.ask == nil && e.gen == 0 && (!traced || e.tellTrace() == nil)
}

// invoke runs the actor's handler for msg as one turn.
func (ex *executor) invoke(c *Cell, e *envelope, msg any) {
	if c.act == nil {
		// A system message for a cell at rest (e.g. an Undelivered report
		// after passivation): nobody to tell.
		ex.s.drop(e, actor.ErrActorTerminated)
		return
	}
	ex.enter(c, e)
	if x := c.ext; x != nil && x.recvTimeout > 0 {
		x.last = ex.s.clock.Now().UnixNano()
	}
	if ex.s.latency != nil {
		start := ex.s.clock.Now()
		ex.call(c, msg)
		ex.s.latency.ObserveHandler(ex.s.clock.Now().Sub(start))
	} else {
		ex.call(c, msg)
	}
	if p := e.ask; p != nil && !ex.replied && ex.later == nil && !ex.faulted && !ex.fenced() {
		// The turn neither answered its ask nor took it over
		// (ReplyLater): nothing can answer it any more, so its caller
		// hears so now rather than at its deadline. Counted first (an
		// asker that reads the count after its ErrNoReply sees it),
		// unless the ask ended already (its deadline passed).
		if !p.done.Load() {
			ex.s.g.noReply.Add(1)
		}
		ex.answer(nil, actor.ErrNoReply)
	}
	ex.leave()
}

func (ex *executor) call(c *Cell, msg any) {
	defer func() {
		if r := recover(); r != nil {
			ex.back()
			ex.panicked(c, r)
		}
	}()
	a := c.act
	ex.out()
	a.Receive(ex, msg)
	ex.back()
}

func (ex *executor) invokeContinuation(c *Cell, e *envelope, r *replyMsg) {
	if c.act == nil || r.then == nil {
		return
	}
	ex.enter(c, e)
	ex.protect(c, func() { r.then(ex, r.v, r.err) })
	ex.leave()
}

// protect runs f, code the scheduler does not control, as a call-out
// with panics recovered.
func (ex *executor) protect(c *Cell, f func()) {
	defer func() {
		if r := recover(); r != nil {
			ex.back()
			ex.panicked(c, r)
		}
	}()
	ex.out()
	f()
	ex.back()
}

func (ex *executor) panicked(c *Cell, r any) {
	s := ex.s
	ex.faulted = true
	s.g.panics.Add(1)
	var err error
	if e, ok := r.(error); ok {
		err = fmt.Errorf("%w: %w", actor.ErrPanicked, e)
	} else {
		err = fmt.Errorf("%w: %v", actor.ErrPanicked, r)
	}
	// An ask the failed turn did not answer gets the panic as its error, so
	// its caller does not wait for the deadline.
	ex.answer(nil, err)
	// The remedy the hook may queue runs before any more user mail: not
	// behind mail that waited for this activation (owed), nor behind the
	// rest of the batch (cut).
	c.mu.Lock()
	c.owed = 0
	c.mu.Unlock()
	ex.cut = true
	inc := c.inc.Load()
	s.faults.Fault(Fault{Ref: c.ref.WithIncarnation(inc), Incarnation: inc, Outcome: Panicked,
		Err: err, Panic: r, Stack: stack()})
}

func (ex *executor) enter(c *Cell, e *envelope) {
	ex.cell, ex.env, ex.replied, ex.faulted, ex.later = c, e, false, false, nil
	ex.turns++
}

// leave ends a turn: unused reserved capacity is returned, and the sends
// the turn buffered are delivered, grouped by recipient (for a kind with
// an after-turn hook: after the hook, and possibly later, see settle).
func (ex *executor) leave() {
	ex.closeGroups()
	if c := ex.cell; c != nil && c.holds {
		ex.settle(c)
	} else if len(ex.outTo) > 0 {
		ex.flush()
	}
	ex.cell, ex.env, ex.later = nil, nil, nil
}

// flush delivers the turn's buffered sends, which closeGroups left
// grouped by recipient: each group is pushed under one lock and costs at
// most one wake; order per recipient is send order. Capacity was reserved
// at Tell time.
func (ex *executor) flush() {
	s := ex.s
	n := len(ex.outTo)
	s.flushOut(ex, ex.outTo, ex.outEnv)
	clear(ex.outTo[:n])
	clear(ex.outEnv[:n])
	ex.outTo, ex.outEnv, ex.outG = ex.outTo[:0], ex.outEnv[:0], ex.outG[:0]
	if ex.w != nil && ex.w.mustNotify {
		ex.w.mustNotify = false
		s.notify()
	}
}

// flushOut delivers sends whose capacity was reserved: to[i] receives
// env[i]. ex is the executor of the turn that sent them, or nil when they
// are released later, off the turn (held outputs).
func (s *Scheduler) flushOut(ex *executor, to []*Cell, env []envelope) {
	n := len(to)
	seized := 0
	for i := 0; i < n; {
		c := to[i]
		j := i + 1
		for j < n && to[j] == c {
			j++
		}
		if ex != nil && ex.trySeize(c, env[i:j]) {
			seized++
			i = j
			continue
		}
		if c.pushUser(env[i:j]) {
			s.wake(c, ex)
		} else if c.gone() {
			c.unreserve(j - i)
			s.redeliver(c, env[i:j], ex)
		} else {
			c.unreserve(j - i)
			for k := i; k < j; k++ {
				s.drop(&env[k], actor.ErrActorTerminated)
			}
		}
		i = j
	}
	if seized > 0 {
		s.active.Add(int64(seized)) // the seized cells are running
	}
}

// redeliver delivers es, whose recipient cell was removed (passivated,
// mailbox empty) after the turn resolved it, to the identity's fresh cell.
// Capacity is reserved again there; what does not fit is refused.
func (s *Scheduler) redeliver(gone *Cell, es []envelope, ex *executor) {
	for len(es) > 0 {
		s.forget(gone)
		c, err := s.resolveLocal(gone.ref)
		if err != nil || c == nil {
			if err == nil {
				err = actor.ErrProcessUnavailable
			}
			for k := range es {
				s.drop(&es[k], err)
			}
			return
		}
		got := int(c.reserveUpTo(int32(len(es))))
		if got > 0 {
			if !c.pushUser(es[:got]) {
				c.unreserve(got)
				if c.gone() {
					gone = c
					continue
				}
				for k := range es {
					s.drop(&es[k], actor.ErrActorTerminated)
				}
				return
			}
			s.wake(c, ex)
		}
		for k := got; k < len(es); k++ {
			s.g.refused.Add(1)
			s.drop(&es[k], s.refusal)
		}
		return
	}
}

// drop reports an envelope that will not be handled: an ask is answered
// with err, a tell from an actor comes back to it as actor.Undelivered.
func (s *Scheduler) drop(e *envelope, err error) {
	switch {
	case e.ask != nil:
		e.ask.complete(nil, err, nil)
	case e.kind == kUser:
		s.g.undelivered.Add(1)
		if e.from != nil {
			s.undeliverable(e.from, actor.Ref{}, e.msg, err, nil, 0)
		}
	case e.kind == kNotice:
		e.msg.(*notice).fail(err)
	}
}

// undeliverable reports a failed tell of the actor sender. gen, when not
// zero, is the generation of the sender's value that made the send: the
// notice is dropped if that value was abandoned meanwhile.
func (s *Scheduler) undeliverable(sender *Cell, to actor.Ref, msg any, err error, ex *executor, gen uint32) {
	if sender.pushSysLive(envelope{kind: kUndelivered, gen: gen, msg: actor.Undelivered{To: to, Message: msg, Err: err}}) {
		s.wake(sender, ex)
	}
}

// terminate finishes a stopped cell: no more mail is admitted, queued mail
// is answered with err (nil: ErrActorTerminated), children are stopped,
// the identity is released; then released (if not nil) is called, and so
// are the release callbacks of the retirements queued behind.
func (s *Scheduler) terminate(c *Cell, ex *executor, err error, released func()) {
	if err == nil {
		err = actor.ErrActorTerminated
	}
	c.mu.Lock()
	c.stop()
	var kids []*Cell
	if c.ext != nil {
		kids = slices.Clone(c.ext.children)
	}
	c.mu.Unlock()
	dropped := c.drainAll()
	for i := range dropped {
		s.drop(&dropped[i], err)
	}
	c.endTimers()
	if x := c.ext; x != nil {
		if p := x.parent; p != nil {
			p.mu.Lock()
			if p.ext != nil {
				p.ext.children = slices.DeleteFunc(p.ext.children, func(k *Cell) bool { return k == c })
			}
			p.mu.Unlock()
		}
	}
	for _, k := range kids {
		if k.pushSys(envelope{kind: kStop}) {
			s.wake(k, ex)
		}
	}
	if c.ref.IsVirtual() {
		s.forget(c)
	} else {
		s.ids.put(c.ref.ID(), nil)
	}
	c.act = nil
	s.activeDec()
	releaseAll(dropped, released)
}

// rest detaches the actor after a passivation turn. Mail already queued, or
// arriving later, rings the Activator.
func (s *Scheduler) restCell(c *Cell) {
	c.endTimers()
	removable := s.removable(c)
	c.mu.Lock()
	c.act = nil
	c.owed = 0
	c.purgeNoticesLocked()
	ring := c.hasMailLocked()
	switch {
	case ring:
		c.state.Store(stPending)
	case removable:
		// Dormant identities cost nothing: the empty cell leaves the
		// map. It is marked gone under its lock first, so a sender that
		// found it refuses to push into it and looks the identity up
		// again (getting a fresh cell).
		c.state.Store(stGone)
	default:
		c.state.Store(stDetached)
	}
	c.mu.Unlock()
	s.activeDec()
	if ring {
		if s.traces() {
			c.rungAt.Store(s.clock.Now().UnixNano())
		}
		s.activator.Ring(c.Ref())
	} else if removable {
		s.forget(c)
	}
}

// removeDormantCells switches the removal of passivated empty cells on.
// The messages a hammer of sends racing passivation seemed to lose were
// starved behind piled-up passivations, not pushed into removed cells;
// with passivations joined, removal holds under that hammer.
const removeDormantCells = true

// removable reports whether the cell of a passivated actor may leave the
// map once its mailbox is empty: a virtual actor of a registered kind (so
// the next mail makes a new cell) with no spawned children.
func (s *Scheduler) removable(c *Cell) bool {
	if !removeDormantCells || !c.ref.IsVirtual() {
		return false
	}
	if x := c.ext; x != nil && x.parent != nil {
		return false
	}
	if x := c.ext; x != nil {
		c.mu.Lock()
		kids := len(x.children)
		c.mu.Unlock()
		if kids > 0 {
			return false
		}
	}
	_, ok := s.kind(c.ref.Kind())
	return ok
}

func (ex *executor) rest(c *Cell) { ex.s.restCell(c) }

// --- actor.Context ---

func (ex *executor) Self() actor.Ref { return ex.cell.Ref() }

func (ex *executor) Sender() actor.Ref {
	switch e := ex.env; {
	case e == nil:
		return actor.Ref{}
	case e.from != nil:
		return e.from.Ref()
	case e.x != nil:
		return e.x.from
	}
	return actor.Ref{}
}

func (ex *executor) Now() time.Time { return ex.s.clock.Now() }

func (ex *executor) Tell(to actor.Ref, msg any) error {
	// A burst's next send to the recipient of the previous one, which
	// the turn resolved already (resolvedBefore) and whose group still
	// holds reserved mailbox slots: what send would do, without its
	// detours (vetting and routing concern only virtual and remote
	// references; latency and tracing stamps take the long way).
	if ex.sameC != nil && ex.lastG > 0 {
		g := ex.lastG - 1
		grp := &ex.groups[g]
		if grp.cred > 0 && grp.c == ex.sameC && ex.s.latency == nil && (!tracingBuilt || ex.turnTrace == nil) &&
			ex.resolvedBefore(&to) != nil && !ex.fenced() {
			grp.cred--
			grp.n++
			ex.outTo = append(ex.outTo, grp.c)
			ex.outG = append(ex.outG, g)
			e := ex.nextOut()
			e.msg, e.from, e.chain = msg, ex.cell, ex.turnChain()
			return nil
		}
	}
	return ex.send(to, msg, nil, 0)
}

// nextOut appends a slot to the turn's buffered envelopes and returns it,
// zero. The slots past the buffer's length are kept zero (flush, regroup,
// takeOutputs and abandoned clear what they drop), so a slot is reused
// without clearing it again. It is filled in place: building the envelope
// on the stack and copying it stalls on store forwarding.
func (ex *executor) nextOut() *envelope {
	n := len(ex.outEnv)
	if n < cap(ex.outEnv) {
		ex.outEnv = ex.outEnv[:n+1]
	} else {
		ex.outEnv = append(ex.outEnv, envelope{})
	}
	return &ex.outEnv[n]
}

// send buffers one message of the current turn. Admission happens now.
func (ex *executor) send(to actor.Ref, msg any, p *pending, deadline int64) error {
	s := ex.s
	if ex.fenced() {
		ex.discard()
		if p != nil && p.finish() {
			p.timer.Stop()
		}
		return errAbandoned
	}
	self := ex.cell
	var c *Cell
	var rt Route
	var err error
	if s.vet != nil && to.IsVirtual() {
		msg, err = s.vet(to, msg)
	}
	if err == nil {
		if c = ex.resolvedBefore(&to); c == nil {
			c, rt, err = s.resolve(to)
			if c != nil && ex.lastG > 0 && ex.groups[ex.lastG-1].c == c {
				ex.remember(&to, c) // a burst: the second send in a row to c
			}
		}
	}
	if err == nil && c == nil {
		chain := ex.turnChain()
		if p != nil {
			chain = &p.link
		}
		var tr any
		if tracingBuilt && p == nil {
			tr = ex.turnTrace // a tell of a traced turn joins its trace
		}
		if self.holds {
			// Forwarded when the turn's outputs are released, and
			// routed then (rt would be stale).
			ex.outFwd = append(ex.outFwd, fwd{to: to, msg: msg, p: p, deadline: deadline, chain: chain, trace: tr})
			return nil
		}
		err = s.forward(self, to, msg, p, deadline, chain, tr, rt)
		if err == nil {
			return nil
		}
	}
	var g int32
	if err == nil && c != nil {
		g, err = ex.admit(c)
	}
	if err != nil {
		s.sendFailed(self, to, msg, p, err, ex)
		return err
	}
	ex.outTo = append(ex.outTo, c)
	ex.outG = append(ex.outG, g)
	e := ex.nextOut()
	e.msg, e.from, e.ask, e.deadline = msg, self, p, deadline
	if p != nil {
		e.chain = &p.link
		if tracingBuilt && p.trace != nil {
			p.trace.queued = s.clock.Now()
		}
	} else {
		e.chain = ex.turnChain()
		if tracingBuilt && ex.turnTrace != nil { // a tell of a traced turn joins its trace
			e.x = &xinfo{trace: &msgTrace{trace: ex.turnTrace, queued: s.clock.Now()}}
		}
	}
	if s.latency != nil {
		e.enq = s.clock.Now().UnixNano()
	}
	return nil
}

// resolvedBefore returns the cell of to when the current turn already
// resolved to, a spawned actor of this node, to it, and nil otherwise.
// A burst of sends to one actor then resolves it once: a spawned actor's
// id is never reused, so the cell is the one resolve would return as
// long as the actor has not stopped and a pinned reference still matches
// its incarnation (both looked at here, on words senders only read; a
// cell that fails either is resolved again, which refuses the send as
// before). Virtual actors are always resolved: routing may move them,
// and routers observe their traffic.
func (ex *executor) resolvedBefore(to *actor.Ref) *Cell {
	c := ex.sameC
	if c == nil {
		return nil
	}
	scope, key, id, inc := to.Parts()
	if id != ex.sameID || inc != ex.sameInc || key != "" || scope != ex.sameScope {
		return nil
	}
	if c.stopped.Load() || (inc != 0 && c.inc.Load() != inc) {
		return nil
	}
	return c
}

// remember keeps c, the local cell resolve returned for to, for the rest
// of the turn when to is a spawned actor's reference. send calls it for
// the second send in a row to c, so that a turn sending once to each of
// many recipients (a fan-out, a request/reply hop) does not pay for it.
func (ex *executor) remember(to *actor.Ref, c *Cell) {
	if c == nil {
		return
	}
	scope, key, id, inc := to.Parts()
	if id == 0 || key != "" {
		return
	}
	ex.sameC, ex.sameScope, ex.sameID, ex.sameInc = c, scope, id, inc
}

func (ex *executor) Ask(to actor.Ref, msg any, then actor.Continuation, opts ...actor.AskOption) {
	s := ex.s
	var o actor.AskOptions
	for _, opt := range opts {
		opt(&o)
	}
	now := s.clock.Now()
	deadline := o.Deadline
	if deadline.IsZero() && o.Timeout > 0 {
		deadline = now.Add(o.Timeout)
	}
	deadline = s.AskDeadline(to, now, deadline)
	c := ex.cell
	p := &pending{s: s, cell: c, then: then, gen: ex.gen}
	if tracingBuilt && ex.turnTrace != nil {
		p.trace = &msgTrace{trace: ex.turnTrace}
	}
	parent := ex.turnChain()
	p.link = callChain{ref: c.Ref(), parent: parent, depth: 1}
	if parent != nil {
		p.link.depth = parent.depth + 1
	}
	if c.reent != actor.Reentrant {
		if !ex.lockEffect() { // the turn was abandoned: the ask is dropped
			ex.discard()
			return
		}
		c.waiting++ // until the continuation runs
		ex.unlockEffect()
	}
	p.arm(deadline.Sub(now))
	if p.link.depth > actor.MaxCallChain {
		p.complete(nil, fmt.Errorf("%w: %d asks deep (max %d)", actor.ErrCallChainTooLong, p.link.depth, actor.MaxCallChain), ex)
		return
	}
	_ = ex.send(to, msg, p, deadline.UnixNano())
}

func (ex *executor) Reply(msg any) { ex.answer(msg, nil) }

func (ex *executor) ReplyError(err error) { ex.answer(nil, err) }

// sendFailed reports a send that was refused: an ask fails with err, a
// tell comes back to its sending actor as Undelivered.
func (s *Scheduler) sendFailed(self *Cell, to actor.Ref, msg any, p *pending, err error, ex *executor) {
	if p != nil {
		p.complete(nil, err, ex)
		return
	}
	s.countRefusal(err)
	s.undeliverable(self, to, msg, err, ex, ex.genOf(self))
}

func (ex *executor) answer(v any, err error) {
	if ex.env == nil || ex.replied {
		return
	}
	if ex.env.ask == nil {
		if ex.env.kind == kReply {
			ex.s.g.strayReplies.Add(1) // a continuation has no ask to answer
		}
		return
	}
	if ex.fenced() {
		ex.discard() // the ask failed when the turn was abandoned
		return
	}
	ex.replied = true
	if ex.later != nil {
		_ = ex.later.answer(ex, v, err)
		return
	}
	ex.reply(ex.env.ask, v, err)
}

// reply answers p as an output of the current turn: at once, or, for a
// kind with an after-turn hook, when the turn's outputs are released
// (after the hook, see settle). An actor's reply error never carries a
// delivery's mark (see marked): it ran.
func (ex *executor) reply(p *pending, v any, err error) {
	if err != nil {
		err = unmarked(err)
	}
	if s := ex.s; s.vetReply != nil && v != nil && ex.cell != nil && ex.cell.ref.IsVirtual() {
		if v, err = s.vetReply(ex.cell.ref, v); err != nil {
			v = nil
		}
	}
	if s := ex.s; s.vetErr != nil && err != nil && ex.cell != nil && ex.cell.ref.IsVirtual() {
		err = s.vetErr(ex.cell.ref, err)
	}
	if ex.cell != nil && ex.cell.holds {
		ex.replies = append(ex.replies, heldReply{p: p, v: v, err: err})
		return
	}
	p.complete(v, err, ex)
}

func (ex *executor) ReplyLater() actor.Replier {
	if ex.later == nil {
		var p *pending
		if ex.env != nil {
			p = ex.env.ask
		}
		ex.later = newReplier(p)
	}
	return ex.later
}

func (ex *executor) Spawn(a actor.Actor, opts ...actor.SpawnOption) (actor.Ref, error) {
	if !ex.lockEffect() {
		ex.discard()
		return actor.Ref{}, errAbandoned
	}
	defer ex.unlockEffect()
	return ex.s.spawn(ex.cell, a, opts, ex)
}

func (ex *executor) Stop(ref actor.Ref) {
	s := ex.s
	if ex.fenced() {
		ex.discard()
		return
	}
	c, err := s.local.Resolve(ref)
	if err != nil || c == nil {
		return
	}
	if c.pushSys(envelope{kind: kStop}) {
		s.wake(c, ex)
	}
}

func (ex *executor) SetReceiveTimeout(d time.Duration) {
	if !ex.lockEffect() {
		ex.discard()
		return
	}
	defer ex.unlockEffect()
	c := ex.cell
	x := c.extension()
	if x.recvTimer != nil {
		x.recvTimer.Stop()
		x.recvTimer = nil
	}
	x.recvTimeout = d
	if d <= 0 {
		return
	}
	x.last = ex.s.clock.Now().UnixNano()
	ex.armTimeout(c, d)
}

func (ex *executor) armTimeout(c *Cell, d time.Duration) {
	s := ex.s
	gen := ex.gen
	c.ext.recvTimer = s.clock.AfterFunc(d, func() {
		if c.pushSys(envelope{kind: kTimeout, gen: gen, msg: actor.ReceiveTimeout{}}) {
			s.wake(c, nil)
		}
	})
}

// timeoutDue decides whether a receive-timeout tick is due: no message
// arrived for the timeout. It re-arms the timer either way.
func (ex *executor) timeoutDue(c *Cell) bool {
	x := c.ext
	if x == nil || x.recvTimeout <= 0 {
		return false
	}
	idle := time.Duration(ex.s.clock.Now().UnixNano() - x.last)
	if idle < x.recvTimeout {
		ex.armTimeout(c, x.recvTimeout-idle)
		return false
	}
	ex.armTimeout(c, x.recvTimeout)
	return true
}
