package ariel

import (
	"errors"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// actTimer is one timer armed by an activation (Context.After, Every).
//
// Timers belong to the activation: passivation, restart and termination
// end them (endTimers), and a tick that was already queued is dropped
// when its turn comes (or purged with the activation), so a timer never
// rings the doorbell of an identity at rest. A periodic timer keeps at
// most one tick queued: a period that elapses while the previous tick
// still waits is skipped.
//
// Lock order: t.mu before the cell's mu (fire pushes into the system
// lane while holding t.mu; endTimers takes the set under the cell's mu
// and only then locks each timer).
type actTimer struct {
	c      *Cell
	msg    any
	period time.Duration // 0: one-shot
	keep   bool          // ticks count as activity (actor.KeepAlive)

	mu     sync.Mutex
	t      Timer
	next   time.Time // due time of the pending tick
	queued bool      // a tick waits in the cell's system lane
	done   bool      // cancelled, delivered (one-shot), or the activation ended
}

// arm starts a timer of the running activation of c. period 0 makes it
// one-shot.
func (ex *executor) arm(d, period time.Duration, msg any, opts []actor.TimerOption) actor.Cancel {
	var o actor.TimerOptions
	for _, opt := range opts {
		opt(&o)
	}
	s, c := ex.s, ex.cell
	t := &actTimer{c: c, msg: msg, period: period, keep: o.KeepAlive}
	x := c.extension()
	c.mu.Lock()
	if x.timers == nil {
		x.timers = make(map[*actTimer]struct{})
	}
	x.timers[t] = struct{}{}
	c.mu.Unlock()
	t.mu.Lock()
	t.next = s.clock.Now().Add(d)
	t.t = s.clock.AfterFunc(d, t.fire)
	t.mu.Unlock()
	return t.cancel
}

// fire runs on the clock's goroutine when the timer is due: it queues a
// tick unless one is queued already, and re-arms a periodic timer for
// its next period (skipping periods that already passed).
func (t *actTimer) fire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	s := t.c.s
	if t.period > 0 {
		now := s.clock.Now()
		t.next = t.next.Add(t.period)
		if !t.next.After(now) {
			missed := now.Sub(t.next)/t.period + 1
			t.next = t.next.Add(missed * t.period)
			s.g.timerSkipped.Add(uint64(missed))
		}
		t.t = s.clock.AfterFunc(t.next.Sub(now), t.fire)
		if t.queued {
			s.g.timerSkipped.Add(1)
			return
		}
	}
	if t.keep && t.c.ref.IsVirtual() {
		// A keep-alive tick is resolved like mail to the actor, which is
		// where the supervisor's router records activity.
		_, _ = s.route().Resolve(t.c.ref)
	}
	if t.c.pushSys(envelope{kind: kTimer, msg: t, from: t.c}) {
		t.queued = true
		s.wake(t.c, nil)
	}
}

// take claims the queued tick for delivery in the current turn; it
// reports false when the timer was cancelled or its activation ended
// after the tick was queued.
func (t *actTimer) take() bool {
	t.mu.Lock()
	t.queued = false
	if t.done {
		t.mu.Unlock()
		return false
	}
	oneShot := t.period == 0
	if oneShot {
		t.done = true
	}
	t.mu.Unlock()
	if oneShot {
		t.c.dropTimer(t)
	}
	return true
}

// cancel is the actor.Cancel of the timer: it reports whether the timer
// was still live (not cancelled, not delivered, activation not ended).
// After it returns true no tick of the timer is delivered.
func (t *actTimer) cancel() bool {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return false
	}
	t.done = true
	t.t.Stop()
	t.mu.Unlock()
	t.c.dropTimer(t)
	return true
}

func (c *Cell) dropTimer(t *actTimer) {
	c.mu.Lock()
	if c.ext != nil {
		delete(c.ext.timers, t)
	}
	c.mu.Unlock()
}

// endTimers ends every timer of the current activation of c (and its
// receive timeout): called by the run-token holder when the activation
// passivates, restarts or terminates.
func (c *Cell) endTimers() {
	x := c.ext
	if x == nil {
		return
	}
	if x.recvTimer != nil {
		x.recvTimer.Stop()
		x.recvTimer = nil
	}
	x.recvTimeout = 0
	c.mu.Lock()
	ts := x.timers
	x.timers = nil
	c.mu.Unlock()
	for t := range ts {
		t.mu.Lock()
		t.done = true
		t.t.Stop()
		t.mu.Unlock()
	}
}

// purgeNoticesLocked removes the queued timer ticks and receive-timeout
// notices of an activation that ended, so they do not ring the doorbell
// of the identity at rest. Called with mu held.
func (c *Cell) purgeNoticesLocked() { c.takeSysLocked(kTimer, kTimeout) }

// takeNoticesLocked removes the notices queued in the system lane and
// returns them. Called with mu held.
func (c *Cell) takeNoticesLocked() []envelope { return c.takeSysLocked(kNotice, kNotice) }

// takeSysLocked removes the envelopes of kind a or b from the system lane,
// keeping the order of the rest, and returns them. Called with mu held.
func (c *Cell) takeSysLocked(a, b uint8) []envelope {
	var out []envelope
	kept := c.sys[:0]
	for _, e := range c.sys {
		if e.kind == a || e.kind == b {
			c.pend.Add(-1)
			out = append(out, e)
			continue
		}
		kept = append(kept, e)
	}
	clear(c.sys[len(kept):])
	c.sys = kept
	if len(c.sys) == 0 {
		c.sys = nil
	}
	return out
}

func (ex *executor) After(d time.Duration, msg any, opts ...actor.TimerOption) actor.Cancel {
	return ex.armFenced(d, 0, msg, opts)
}

func (ex *executor) Every(d time.Duration, msg any, opts ...actor.TimerOption) actor.Cancel {
	if d <= 0 {
		return func() bool { return false }
	}
	return ex.armFenced(d, d, msg, opts)
}

// armFenced is arm for a turn the watchdog may abandon: a timer set by
// an abandoned turn is discarded (and counted), never armed.
func (ex *executor) armFenced(d, period time.Duration, msg any, opts []actor.TimerOption) actor.Cancel {
	if !ex.lockEffect() {
		ex.discard()
		return func() bool { return false }
	}
	defer ex.unlockEffect()
	return ex.arm(d, period, msg, opts)
}

// notice is the payload of a kNotice envelope.
type notice struct {
	msg    any
	accept func() bool
	failed func(error)
	done   func(error) // NotifyDone's: the turn's outcome
}

// noticeDone is the effect a notice's turn stages on an actor whose
// outputs are held: it tells the notice's sender the turn's outcome once
// its outputs are finished.
type noticeDone struct{ done func(error) }

func (d noticeDone) Settle(h Hold) {
	// A wait of its own, released at once, makes the turn's held batch
	// if nothing held it yet, so that Released reports the outcome of
	// every wait, those of the effects settled after this one included
	// (the batch ends only after settle's own wait). Without one (the
	// turn was abandoned past its budget), Released reports ErrNotHeld:
	// the turn's effects were dropped.
	release := h.Wait()
	h.Released(d.done)
	release(nil)
}

// fail tells the notice's sender that it was dropped unseen: its
// activation was refused or failed, or the identity stopped.
func (n *notice) fail(err error) {
	if n.failed != nil {
		n.failed(err)
	}
}

// Notify delivers msg to the virtual actor ref on this node as a notice
// for its identity: it is queued in the system lane (never refused by a
// full mailbox, so the caller bounds what it sends) and, unlike a timer
// tick, it survives the end of an activation: a dormant identity is
// activated to receive it (the doorbell rings as for mail). accept, when
// not nil, runs on the actor's turn thread right before the handler
// would see msg, and the notice is dropped unless it returns true: the
// sender's last word on whether msg is still wanted (durable reminders
// use it so that no tick runs after its reminder was cancelled). failed,
// when not nil, is called once, from any goroutine, with the cause if the
// notice is dropped before accept was asked: the identity's activation
// was refused (Reject) or it stopped. The sender then decides when to
// send again; nothing else does. The turn does not count as activity for
// idle passivation. The sender is the zero Ref. Errors:
// actor.ErrUnknownKind, ErrClosed, and the reference's validation
// errors.
func (s *Scheduler) Notify(ref actor.Ref, msg any, accept func() bool, failed func(error)) error {
	return s.NotifyDone(ref, msg, accept, nil, failed)
}

// NotifyDone is Notify that also reports, to done when not nil, the
// outcome of the turn that received msg: nil once the turn's outputs
// left (for a kind whose outputs are held, once they were released: its
// state, say, committed), or the error they failed with (the turn's
// effects were not kept, so msg may be wanted again). A turn that
// panicked or was abandoned reports nothing: its effects are dropped.
func (s *Scheduler) NotifyDone(ref actor.Ref, msg any, accept func() bool, done, failed func(error)) error {
	if !ref.IsVirtual() {
		return errors.New("ariel: Notify needs a virtual reference")
	}
	if s.closing.Load() {
		return ErrClosed
	}
	n := &notice{msg: msg, accept: accept, failed: failed, done: done}
	for {
		c, err := s.resolveLocal(ref.Unpinned())
		if err != nil {
			return err
		}
		if c.pushSys(envelope{kind: kNotice, msg: n}) {
			s.wake(c, nil)
			return nil
		}
		if !c.gone() {
			return actor.ErrActorTerminated
		}
		s.forget(c)
	}
}
