package ariel

import (
	"errors"
	"math"
	"time"
)

// Leased kinds.
//
// A clustered node may serve the identities it owns only while its
// placement lease is current. Mail admitted while it was may still be
// waiting in a mailbox when the lease runs out: most visibly when the
// process was frozen (SIGSTOP, a paused container or VM) and thaws with
// its workers in the middle of a backlog, long after the other nodes took
// its shards over. The node's own check of the lease runs on a goroutine
// of its own and only periodically, so without a check on the turn path
// that mail would run, and answer, on an activation another node already
// replaced.
//
// So the virtual actors of a kind made leased with SetLeased run user
// mail only while the lease given with SetLease is current, read on the
// scheduler's clock before each batch a worker takes from a mailbox (up
// to clockStride messages of one actor) and before every clockStride-th
// message of such actors a flush hands the worker directly (seize.go).
// Not per message: a clock read costs about as much as a plain tell's
// turn (BenchmarkLeasedFanIn, BenchmarkLeasedPingPong). A worker that
// thaws goes on with at most the rest of its batch and then
// clockStride-1 messages handed over directly before it reads the
// lease.
//
// Mail found due after the lease ran out is not run: take leaves it in
// the mailbox (mail set aside for a waiting NonReentrant actor too), a
// batch handed over directly goes back to the mailbox's head, and
// Config.Lapsed is called to renew the lease or ask for a passivation,
// which then goes ahead of the mail. With neither, the actor parks, its
// mail kept, until SetLease renews the lease or mail arrives (no worker
// spins on it). Once passivated, the mail rings
// the Activator as any mail for an actor at rest does, which refuses or
// activates it again as the node now may. A turn already running when
// the lease runs out is not stopped, nor the rest of its batch; system
// mail (lifecycle, replies to the actor's own asks, timer ticks,
// notices) is not held back.

// SetLeased makes the user mail of kind's virtual actors run only while
// the scheduler's lease is current (see SetLease). It needs
// Config.Lapsed. Like SetAfterTurn, only cells made afterwards carry it:
// call it right after Register.
func (s *Scheduler) SetLeased(kind string) error {
	if s.cfg.Lapsed == nil {
		return errors.New("ariel: SetLeased needs Config.Lapsed")
	}
	return s.setKind(kind, func(k *kindInfo) { k.leased = true })
}

// A LeaseMark is a reading of the scheduler's clock (Mark) that a lease
// given with SetLease counts from.
type LeaseMark struct{ at int64 }

// Mark reads the scheduler's clock for SetLease. Take it before reading
// the clock that the lease's length is measured on.
func (s *Scheduler) Mark() LeaseMark { return LeaseMark{s.elapsed()} }

// SetLease sets the scheduler's lease to run out d after mark; d <= 0
// means it has run out already. A caller that stalls between Mark and
// its own reading of its clock (a process frozen there) gets a shorter
// lease, never a longer one. Until the first call, the lease never runs
// out. A lease given that is still current wakes the actors whose mail
// was held back (Config.Lapsed). Safe for concurrent use.
func (s *Scheduler) SetLease(mark LeaseMark, d time.Duration) {
	if d <= 0 {
		s.leaseEnd.Store(math.MinInt64)
		return
	}
	end := mark.at + int64(d)
	if end < mark.at {
		end = math.MaxInt64 // overflowed: as good as never
	}
	s.leaseEnd.Store(end)
	if s.leaseCurrent() {
		s.unparkLapsed()
	}
}

// leaseDue reports whether a message of a leased actor handed to ex
// directly (runOne) is to read the lease: one in clockStride of them, as
// a drain cycle reads it once per batch of up to clockStride.
func (ex *executor) leaseDue() bool {
	if ex.unleased++; ex.unleased < clockStride {
		return false
	}
	ex.unleased = 0
	return true
}

// leaseCurrent reports whether the lease has not run out.
func (s *Scheduler) leaseCurrent() bool { return s.elapsed() < s.leaseEnd.Load() }

// takeLapsed is what take returns, taking nothing, for an actor whose
// kind is leased when the lease has run out.
const takeLapsed = -1

// lapsed ends a cycle of c, the run-token holder's, whose user mail was
// found due after the lease ran out (none of it taken, or all of it put
// back). Config.Lapsed is asked to renew the lease or passivate the
// actor. Renewed, the cell is queued again. Otherwise a passivation in
// the system lane goes ahead of the mail that waited for the activation
// and the cell is queued again to run it; with nothing there the cell
// parks (idle, its mail kept) until the lease is renewed or system mail
// (a passivation) or more user mail arrives.
func (ex *executor) lapsed(c *Cell, processed int) {
	s := ex.s
	ex.unleased = clockStride - 1 // the next message handed over reads the lease too
	s.g.lapsed.Add(1)
	s.cfg.Lapsed(c.ref)
	if s.leaseCurrent() {
		ex.requeue(c, processed)
		return
	}
	c.mu.Lock()
	if len(c.sys) > 0 {
		c.owed = 0
		c.mu.Unlock()
		ex.requeue(c, processed)
		return
	}
	// Idle under the lock: a push to the system lane after it wakes the
	// cell (wakeAttached), one before it was seen above.
	c.state.Store(stIdle)
	c.mu.Unlock()
	// Parked before the activity token goes: WaitIdle, which does not
	// wait for parked mail, must not return before SetLease can see it.
	s.parkLapsed(c)
	ex.msgs += uint64(processed)
	s.activeDec()
}

// parkLapsed keeps c, idle with user mail held back past the lease, to
// be woken when the lease is renewed (SetLease).
func (s *Scheduler) parkLapsed(c *Cell) {
	s.lapsedMu.Lock()
	if !c.parked {
		c.parked = true
		s.lapsedCells = append(s.lapsedCells, c)
	}
	s.lapsedMu.Unlock()
	if s.leaseCurrent() {
		s.unparkLapsed() // renewed meanwhile, its SetLease before the line above
	}
}

// unparkLapsed wakes the cells parkLapsed kept, in the order they parked.
func (s *Scheduler) unparkLapsed() {
	s.lapsedMu.Lock()
	parked := s.lapsedCells
	s.lapsedCells = nil
	for _, c := range parked {
		c.parked = false
	}
	s.lapsedMu.Unlock()
	for _, c := range parked {
		s.wakeAttached(c)
	}
}
