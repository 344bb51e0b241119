package ariel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"

	"github.com/tempest-actors/tempest/actor"
)

// Outcome is how a turn ended, from the scheduler's side.
type Outcome uint8

const (
	// Suspended: the turn returned; the actor waits for its next message.
	Suspended Outcome = iota
	// Completed: the actor stopped cleanly; it and its state retire together.
	Completed
	// BudgetExhausted: the turn ran past the turn budget — a fault, never a
	// scheduling event.
	BudgetExhausted
	// Panicked: the handler panicked; the panic was recovered at the
	// invocation.
	Panicked
)

func (o Outcome) String() string {
	switch o {
	case Suspended:
		return "Suspended"
	case Completed:
		return "Completed"
	case BudgetExhausted:
		return "BudgetExhausted"
	case Panicked:
		return "Panicked"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// ErrBudgetExhausted is the error of a BudgetExhausted fault.
var ErrBudgetExhausted = errors.New("tempest: turn budget exhausted")

// Fault describes a turn that failed.
type Fault struct {
	Ref         actor.Ref // the actor, pinned to the failing incarnation
	Incarnation uint64
	Outcome     Outcome // Panicked or BudgetExhausted
	Err         error   // ErrBudgetExhausted, or the panic value as an error
	Panic       any     // the recovered value for Panicked
	Stack       []byte  // the panicking goroutine's stack for Panicked
}

// FaultHook receives faults. Fault is called on the failing worker right
// after a panic (the actor's run-token is still held, so no turn of it runs
// until Fault returns), and on the watchdog goroutine for BudgetExhausted
// (the stuck turn is still running). To act, call Restart, Retire (Stop) or
// Passivate: they are queued in the actor's system lane and run before any
// further user mail, never concurrently with a turn. Doing nothing resumes
// the actor with its next message.
type FaultHook interface {
	Fault(f Fault)
}

// LogFaults is the default FaultHook: it logs each fault at error level and
// counts it. The actor resumes.
type LogFaults struct {
	Logger *slog.Logger
	Count  atomic.Uint64
}

var _ FaultHook = (*LogFaults)(nil)

// Fault logs f.
func (l *LogFaults) Fault(f Fault) {
	l.Count.Add(1)
	if l.Logger != nil {
		l.Logger.LogAttrs(context.Background(), slog.LevelError, "actor turn failed",
			slog.String("actor", f.Ref.String()), slog.String("outcome", f.Outcome.String()),
			slog.Any("error", f.Err))
	}
}

// Activator is rung when mail arrives for a cell that has no actor
// attached: once per transition from "inactive" to "has mail", not per
// message. It runs on the sender's goroutine and must not block; it
// typically starts hydration and later calls Scheduler.Attach.
type Activator interface {
	Ring(ref actor.Ref)
}

// FactoryActivator is the default Activator: it attaches a new actor from
// the factory registered for the kind (Register), at once.
type FactoryActivator struct{ S *Scheduler }

var _ Activator = FactoryActivator{}

// Ring attaches factory(key) to a virtual actor's cell.
func (f FactoryActivator) Ring(ref actor.Ref) {
	if !ref.IsVirtual() {
		return
	}
	info, ok := f.S.kind(ref.Kind())
	if !ok {
		return
	}
	if err := f.S.Attach(ref, info.factory(ref.Key())); err != nil && !errors.Is(err, ErrActive) {
		f.S.log.LogAttrs(context.Background(), slog.LevelDebug, "activation failed",
			slog.String("actor", ref.String()), slog.Any("error", err))
	}
}

// The methods below are for the supervisor only (Prospero and the node's
// wiring). Actor code never calls them.

// EnsureCell creates the cell (mailbox, system lane, run-token) of the
// virtual actor ref without an actor value, so mail can be admitted before
// the actor exists ("the mailbox precedes the actor"). incarnation sets the
// cell's incarnation when it is created (0 means 1); mailbox bounds it (0:
// the kind's or the default bound). It is a no-op for an existing cell.
func (s *Scheduler) EnsureCell(ref actor.Ref, incarnation uint64, mailbox int) error {
	if !ref.IsVirtual() {
		return errors.New("ariel: EnsureCell needs a virtual reference")
	}
	if mailbox == 0 {
		if info, ok := s.kind(ref.Kind()); ok {
			mailbox = info.mailbox
		}
	}
	c := s.newCell(ref, mailbox)
	if incarnation != 0 {
		c.inc.Store(incarnation)
	}
	s.virtual.LoadOrStore(vkey{ref.Kind(), ref.Key()}, c)
	return nil
}

func (s *Scheduler) cellOf(ref actor.Ref) (*Cell, error) {
	if ref.IsVirtual() {
		v, ok := s.virtual.Load(vkey{ref.Kind(), ref.Key()})
		if !ok {
			return nil, actor.ErrActorTerminated
		}
		return v.(*Cell), nil
	}
	if ref.Node() != s.cfg.Node {
		return nil, actor.ErrProcessUnavailable
	}
	if c := s.ids.get(ref.ID()); c != nil {
		return c, nil
	}
	return nil, actor.ErrActorTerminated
}

// State reports what ref resolves to on this node: Valid (an actor is
// attached), Dormant (a cell without an actor), ActorTerminated (no such
// identity or a stale incarnation), Unknown for other nodes.
func (s *Scheduler) State(ref actor.Ref) actor.ReferenceState {
	c, err := s.cellOf(ref)
	switch {
	case errors.Is(err, actor.ErrProcessUnavailable):
		return actor.Unknown
	case err != nil:
		if ref.IsVirtual() {
			if _, ok := s.kind(ref.Kind()); ok {
				return actor.Dormant
			}
		}
		return actor.ActorTerminated
	}
	if inc := ref.Incarnation(); inc != 0 && inc != c.inc.Load() {
		return actor.ActorTerminated
	}
	switch c.state.Load() {
	case stStopped:
		return actor.ActorTerminated
	case stDetached, stPending:
		return actor.Dormant
	}
	return actor.Valid
}

// Attach gives the cell of ref (created if needed) the actor value a and
// releases it for dispatch: a receives actor.Started, then the mail that
// waited, in order. It fails with ErrActive when an actor is attached.
func (s *Scheduler) Attach(ref actor.Ref, a actor.Actor) error {
	if a == nil {
		return errors.New("ariel: Attach of a nil actor")
	}
	if s.closing.Load() {
		return ErrClosed
	}
	c, err := s.cellOf(ref)
	if err != nil && ref.IsVirtual() {
		if err := s.EnsureCell(ref, ref.Incarnation(), 0); err != nil {
			return err
		}
		c, err = s.cellOf(ref)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	st := c.state.Load()
	if st != stDetached && st != stPending {
		c.mu.Unlock()
		if st == stStopped {
			return actor.ErrActorTerminated
		}
		return ErrActive
	}
	c.act = a
	c.sys = append([]envelope{{kind: kStart}}, c.sys...)
	c.pend.Add(1)
	c.state.Store(stReady)
	c.mu.Unlock()
	s.activeInc()
	s.enqueue(c, nil)
	return nil
}

// Passivate puts the actor of ref to rest: it receives actor.Passivating as
// a final system turn, then final (if not nil) is called inside that same
// turn with the actor value (to write its state at rest), and the cell
// becomes inactive. Mail that arrives afterwards rings the Activator again.
func (s *Scheduler) Passivate(ref actor.Ref, final func(actor.Actor)) error {
	c, err := s.cellOf(ref)
	if err != nil {
		return err
	}
	if !c.pushSys(envelope{kind: kPassivate, msg: final}) {
		return actor.ErrActorTerminated
	}
	s.wake(c, nil)
	return nil
}

// Restart replaces the actor value of ref with a (between turns, never
// during one) and re-mints the identity: the incarnation grows by one, so
// references pinned to the old incarnation read ActorTerminated. a
// receives actor.Started; queued mail is kept.
func (s *Scheduler) Restart(ref actor.Ref, a actor.Actor) error {
	if a == nil {
		return errors.New("ariel: Restart with a nil actor")
	}
	c, err := s.cellOf(ref)
	if err != nil {
		return err
	}
	if !c.pushSys(envelope{kind: kRestart, msg: a}) {
		return actor.ErrActorTerminated
	}
	s.wake(c, nil)
	return nil
}

// Retire stops the actor of ref and releases its cell (see Stop).
func (s *Scheduler) Retire(ref actor.Ref) error {
	c, err := s.cellOf(ref)
	if err != nil {
		return err
	}
	if !c.pushSys(envelope{kind: kStop}) {
		return actor.ErrActorTerminated
	}
	s.wake(c, nil)
	return nil
}

// Exec runs fn with the actor value of ref as a system turn of that actor
// (no other turn of it runs meanwhile). The actor value may be nil for an
// inactive cell; Exec then runs fn when the cell is next activated.
func (s *Scheduler) Exec(ref actor.Ref, fn func(a actor.Actor)) error {
	c, err := s.cellOf(ref)
	if err != nil {
		return err
	}
	if !c.pushSys(envelope{kind: kFunc, msg: fn}) {
		return actor.ErrActorTerminated
	}
	s.wake(c, nil)
	return nil
}

// stack returns the current goroutine's stack.
func stack() []byte { return debug.Stack() }
