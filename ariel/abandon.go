package ariel

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/tempest-actors/tempest/actor"
)

// errAbandoned answers the ask whose turn was abandoned past its budget,
// and the mail of a spawned actor stopped because of it. It is
// actor.ErrActorTerminated (the incarnation that was handling the ask is
// gone), so it reads the same on every node: the wire carries the
// sentinel, not this text.
var errAbandoned = fmt.Errorf("%w: turn abandoned past its budget", actor.ErrActorTerminated)

// The turn gate is one atomic word per executor, shared between its
// worker and the watchdog. The worker stores gseq|gateOut before it calls
// into code the scheduler does not control (a handler, a continuation, a
// supervisor callback, an after-turn hook) and swaps it to the next
// sequence number when that code returns. The watchdog abandons a worker
// by setting gateAbandoned with a compare-and-swap from the exact value
// it watched for the budget: whoever moves the word first wins, so a turn
// either returns (and everything it did stands) or is abandoned (and
// nothing it does afterwards reaches anyone). Context operations that
// touch the cell (Spawn, SetReceiveTimeout) hold gateBusy, which keeps
// the watchdog's swap from succeeding until they are done.
const (
	gateOut       uint64 = 1 // inside a call-out
	gateAbandoned uint64 = 2 // the watchdog took the turn away
	gateBusy      uint64 = 4 // a context operation is writing cell state
	gateStep      uint64 = 8
)

// out marks the start of a call-out. Everything the watchdog needs to
// recover the turn (the cell, ex.env, ex.pos, ex.batchN, the held
// groups) is written before it, and so visible to a watchdog that swaps
// the gate afterwards.
func (ex *executor) out() {
	if ex.w != nil {
		ex.gbase = ex.gseq
		ex.gate.Store(ex.gseq | gateOut)
	}
}

// hop ends a call-out and starts the next one with one compare-and-swap:
// runTells uses it between two plain tells of a batch when the first
// turn buffered nothing, so no scheduler code (no flush) runs between
// the two call-outs. Why the watchdog stays sound:
//
//   - The gate moves to a new value (the next sequence number, still
//     gateOut), so the watchdog restarts its budget for the new turn: a
//     run of short turns is never mistaken for one long turn.
//   - It is a compare-and-swap from the exact value of the ending turn,
//     like back: if the watchdog took that turn first, hop fails, the
//     next turn never starts and the goroutine ends (abandoned).
//   - The watchdog finds the envelope of a hopped turn without reading
//     anything the worker writes after the hop: ex.pos and ex.env are
//     those of the first turn of the run (written before out), and the
//     number of hops since is the distance from ex.gbase (written before
//     out too) to the gate value the watchdog swapped; the hopped turn's
//     envelope is ex.batch[ex.pos+hops], which take wrote before the run.
//     The worker updates ex.env (for Sender and Reply) only after a hop
//     succeeded, and the watchdog reads ex.env only for a run with no
//     hop (see turnAt).
//   - Between the end of one turn and the hop the worker only reads its
//     own buffers (to see that nothing was sent): if the watchdog takes
//     the ending turn in that window, nothing it did is undone and
//     nothing of the next turn ran, exactly as when it wins against back.
func (ex *executor) hop() {
	if !ex.gate.CompareAndSwap(ex.gseq|gateOut, (ex.gseq+gateStep)|gateOut) {
		ex.abandoned()
	}
	ex.gseq += gateStep
}

// turnAt returns the envelope and its index in the batch of the turn
// whose call-out the watchdog took at gate value g (see hop). Called by
// the watchdog after its compare-and-swap on g succeeded.
func (ex *executor) turnAt(g uint64) (*envelope, int) {
	hops := int((g&^(gateStep-1) - ex.gbase) / gateStep)
	if hops == 0 {
		return ex.env, ex.pos
	}
	pos := ex.pos + hops
	return &ex.batch[pos], pos
}

// back marks the end of a call-out. A worker whose turn was abandoned
// meanwhile never returns from it: it discards what the turn buffered
// and its goroutine ends.
func (ex *executor) back() {
	if ex.w == nil {
		return
	}
	if !ex.gate.CompareAndSwap(ex.gseq|gateOut, ex.gseq+gateStep) {
		ex.abandoned()
	}
	ex.gseq += gateStep
}

// fenced reports whether the watchdog abandoned the current turn. The
// context operations of a turn call it and discard their effect when it
// is set.
func (ex *executor) fenced() bool { return ex.gate.Load()&gateAbandoned != 0 }

// lockEffect holds gateBusy for a context operation that writes the
// state of the turn's cell. It reports false, taking nothing, when the
// turn was abandoned.
func (ex *executor) lockEffect() bool {
	for {
		v := ex.gate.Load()
		switch {
		case v&gateAbandoned != 0:
			return false
		case v&gateOut == 0 || v&gateBusy != 0:
			return true // not inside a call-out (no watchdog race), or held already
		case ex.gate.CompareAndSwap(v, v|gateBusy):
			return true
		}
	}
}

// unlockEffect releases lockEffect.
func (ex *executor) unlockEffect() {
	for {
		v := ex.gate.Load()
		if v&gateBusy == 0 || ex.gate.CompareAndSwap(v, v&^gateBusy) {
			return
		}
	}
}

// discard counts one effect of an abandoned turn that was dropped.
func (ex *executor) discard() { ex.s.g.fenced.Add(1) }

// abandoned runs on the goroutine of an abandoned turn when its call-out
// finally returns: the sends it buffered are dropped (their reserved
// mailbox slots returned, their asks silenced) and counted, and the
// goroutine ends without touching the cell, which the watchdog handed on.
func (ex *executor) abandoned() {
	s := ex.s
	for i := range ex.groups {
		if g := &ex.groups[i]; g.cred > 0 {
			g.c.unreserve(int(g.cred))
		}
	}
	ex.resetGroups()
	for i := range ex.outTo {
		ex.outTo[i].unreserve(1)
		if p := ex.outEnv[i].ask; p != nil && p.finish() {
			p.timer.Stop()
		}
		ex.discard()
	}
	clear(ex.outTo)
	clear(ex.outEnv)
	ex.outTo, ex.outEnv, ex.outG = ex.outTo[:0], ex.outEnv[:0], ex.outG[:0]
	for i := range ex.outFwd {
		if p := ex.outFwd[i].p; p != nil && p.finish() {
			p.timer.Stop()
		}
		ex.discard()
	}
	clear(ex.outFwd)
	ex.outFwd = ex.outFwd[:0]
	for range ex.replies {
		ex.discard() // answers held for the after-turn hook
	}
	ex.clearReplies()
	clear(ex.staged) // effects of the turn are not settled
	ex.staged = ex.staged[:0]
	if b := ex.heldB; b != nil {
		// The hook held the outputs before the turn was abandoned: they
		// wait for the hook's releases alone, not for a settle that will
		// not end.
		ex.heldB = nil
		b.release(nil)
	}
	s.stuckDone(ex.w)
	runtime.Goexit()
}

// stuckDone accounts for an abandoned goroutine that ended; the pool,
// if it runs below its size because the replacement cap was reached,
// gets a worker back.
func (s *Scheduler) stuckDone(w *worker) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.stuck.Add(-1)
	if s.closing.Load() {
		return
	}
	if ws := *s.workers.Load(); len(ws) < s.cfg.Workers {
		s.startWorkerLocked(w.id)
		if len(*s.workers.Load()) == s.cfg.Workers {
			s.log.LogAttrs(context.Background(), slog.LevelInfo, "scheduler pool back to its size",
				slog.Int("workers", s.cfg.Workers), slog.Int("stuck", int(s.stuck.Load())))
		}
	}
}

// startWorkerLocked adds a worker to the pool. Called with lifeMu held.
func (s *Scheduler) startWorkerLocked(id int) {
	nw := s.newWorker(id)
	old := *s.workers.Load()
	ws := make([]*worker, 0, len(old)+1)
	ws = append(append(ws, old...), nw)
	s.workers.Store(&ws)
	s.nworkers.Add(1)
	s.wg.Add(1)
	go nw.run()
}

// abandon takes the turn of w away when the watchdog saw the gate at g
// (inside one call-out) for longer than the cell's budget. It reports
// false when the turn moved on meanwhile or a context operation holds
// the gate (the watchdog looks again at its next tick).
//
// On success the stuck goroutine is fenced (whatever it does from now on
// is discarded), the pool gets a replacement worker unless the cap is
// reached, the ask of the turn fails with actor.ErrActorTerminated, the
// mail the turn had taken but not run goes back to the head of the
// mailbox, the actor value is detached (a spawned actor is stopped), the
// cell's generation moves on (replies, timers and notices addressed to
// the old value are dropped when they arrive), and the fault is reported
// with Abandoned set.
func (s *Scheduler) abandon(w *worker, g uint64) bool {
	ex := &w.ex
	s.lifeMu.Lock()
	if s.closing.Load() || !ex.gate.CompareAndSwap(g, g|gateAbandoned) {
		s.lifeMu.Unlock()
		return false
	}
	old := *s.workers.Load()
	ws := make([]*worker, 0, len(old))
	for _, v := range old {
		if v != w {
			ws = append(ws, v)
		}
	}
	s.workers.Store(&ws)
	s.nworkers.Add(-1)
	stuck := int(s.stuck.Add(1))
	replaced := len(ws)+1+stuck-s.cfg.Workers <= s.cfg.MaxReplacements
	if replaced {
		s.startWorkerLocked(w.id)
	}
	live := len(*s.workers.Load())
	s.wg.Done() // Close does not wait for a goroutine that may never return
	s.lifeMu.Unlock()
	s.g.exhausted.Add(1)
	if !replaced {
		s.g.unreplaced.Add(1)
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "scheduler degraded: stuck worker not replaced",
			slog.Int("workers", live), slog.Int("configured", s.cfg.Workers), slog.Int("stuck", stuck),
			slog.Int("max_replacements", s.cfg.MaxReplacements))
	}

	// What the stuck worker had queued goes to the shared queue.
	if n := w.next.Swap(nil); n != nil {
		s.inj.push(n)
	}
	var tmp [localQSize]*Cell
	for {
		k := w.q.grab(tmp[:])
		if k == 0 {
			break
		}
		s.inj.pushMany(tmp[:k])
	}
	// Cells whose run-token the worker took at a flush and never ran:
	// their mail goes back to the head of their mailboxes.
	s.releaseHeld(w)
	s.notify()

	c := w.cur.Load()
	e, pos := ex.turnAt(g)
	if pos >= 0 && pos+1 < ex.batchN {
		c.unget(ex.batch[pos+1 : ex.batchN])
	}
	if c.reent != actor.Reentrant {
		c.undefer() // the abandoned activation's waits end with it
	}
	inc := c.inc.Load()
	c.gen.Add(1)
	if e != nil && e.ask != nil {
		e.ask.complete(nil, errAbandoned, nil)
	}
	kind := kUser
	if e != nil {
		kind = e.kind
	}
	switch {
	case kind == kStop:
		err, released := stopOf(e)
		s.terminate(c, nil, err, released)
	case !c.ref.IsVirtual():
		s.terminate(c, nil, errAbandoned, nil)
	case kind == kPassivate:
		s.restCell(c) // the passivation ends without its final callbacks
	default:
		s.detach(c)
	}
	if c.ref.IsVirtual() {
		// A retirement queued behind the abandoned turn (RetireThen
		// while it ran) has no value left to stop: the cell goes now,
		// or its release would wait for an attach that never comes.
		s.retireDetached(c, nil, false)
	}
	s.faults.Fault(Fault{Ref: c.ref.WithIncarnation(inc), Incarnation: inc, Outcome: BudgetExhausted,
		Err: ErrBudgetExhausted, Abandoned: true})
	switch c.state.Load() {
	case stDetached:
		// Nobody attached a new value while the fault was handled:
		// waiting mail rings the Activator.
		c.mu.Lock()
		mail := c.hasMailLocked()
		c.mu.Unlock()
		if mail {
			s.wake(c, nil)
		}
	case stPending:
		// Mail rang while the report was on its way, and the
		// Activator, still counting the value attached, may have let
		// the ring pass: ring again now that the fault is known (a
		// ring for an activation under way is a no-op).
		if s.traces() {
			c.rungAt.Store(s.clock.Now().UnixNano())
		}
		s.activator.Ring(c.Ref())
	}
	return true
}

// detach takes the actor value of c, whose run-token the caller holds,
// out of the cell without a final turn: the cell keeps its mail and its
// incarnation and waits for the supervisor to attach a value again.
//
// What the supervisor queued for that value ends with it: a passivation
// (its final callbacks do not run; the fault report tells the supervisor)
// is dropped, for it would otherwise put to rest the next activation the
// supervisor makes. A restart or a replacement (Restart, Replace) queued
// behind the turn carries the value the supervisor has already made
// current: that value takes the cell now, and the cell is not detached;
// a passivation queued after it is for that value and stays. (The
// supervisor queues one restart at a time; of several, the last wins.)
func (s *Scheduler) detach(c *Cell) {
	c.endTimers() // the abandoned activation's timers end with it
	c.mu.Lock()
	c.act = nil
	c.owed = 0
	c.purgeNoticesLocked()
	last := -1 // the last restart queued
	for i, e := range c.sys {
		if e.kind == kRestart {
			last = i
		}
	}
	var r *restartMsg
	if last >= 0 {
		r = c.sys[last].msg.(*restartMsg)
	}
	kept, passq := c.sys[:0], false
	for i, e := range c.sys {
		if e.kind == kRestart || e.kind == kPassivate && (last < 0 || i < last) {
			c.pend.Add(-1)
			continue
		}
		passq = passq || e.kind == kPassivate
		kept = append(kept, e)
	}
	clear(c.sys[len(kept):])
	c.sys = kept
	if !passq {
		c.passq = nil
	}
	if r != nil {
		r.install(c)
		c.owed = c.n
		c.sys = append([]envelope{{kind: kStart}}, c.sys...)
		c.pend.Add(1)
		c.state.Store(stReady)
		c.mu.Unlock()
		s.enqueue(c, nil)
		return
	}
	c.state.Store(stDetached)
	c.mu.Unlock()
	s.activeDec()
}

// genOf is the stamp for envelopes addressed to c on behalf of the
// current turn (see envelope.gen): the turn's generation when c is the
// turn's own cell, none otherwise. ex may be nil.
func (ex *executor) genOf(c *Cell) uint32 {
	if ex != nil && ex.cell == c {
		return ex.gen
	}
	return 0
}
