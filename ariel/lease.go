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
// to clockStride messages of one actor) and before each message a flush
// hands a worker directly (seize.go). Once per batch, not per message:
// a clock read costs about as much as a plain tell's turn, and a worker
// that thaws in the middle of a batch finishes at most that batch.
//
// Mail found due after the lease ran out is not run: it goes back to the
// head of the mailbox, whatever passivation is queued for the actor goes
// ahead of it (Config.Lapsed is called to ask for one, or to renew the
// lease), and the cell is queued again. Once passivated, the mail rings
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

// SetLease sets when the scheduler's lease runs out, on its clock; the
// zero time means it has run out already. Until the first call, the
// lease never runs out. Safe for concurrent use.
func (s *Scheduler) SetLease(until time.Time) {
	switch {
	case until.IsZero():
		s.leaseEnd.Store(math.MinInt64)
	case !s.mono.IsZero():
		s.leaseEnd.Store(int64(until.Sub(s.mono))) // monotonic, as elapsed
	default:
		s.leaseEnd.Store(until.UnixNano())
	}
}

// leaseCurrent reports whether the lease has not run out.
func (s *Scheduler) leaseCurrent() bool { return s.elapsed() < s.leaseEnd.Load() }

// lapsed handles user mail of c found due after the lease ran out: es
// (taken, not run) goes back to the head of the mailbox, a queued
// passivation no longer waits behind the mail that waited for the
// activation, Config.Lapsed is asked to renew the lease or passivate,
// and the cycle ends with the cell queued again.
func (ex *executor) lapsed(c *Cell, es []envelope, processed int) {
	s := ex.s
	c.mu.Lock()
	c.prependLocked(es)
	c.owed = 0
	c.mu.Unlock()
	c.count.Add(int32(len(es)))
	clear(es)
	s.g.lapsed.Add(1)
	s.cfg.Lapsed(c.ref)
	ex.requeue(c, processed)
}
