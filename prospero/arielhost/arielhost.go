// Package arielhost binds a prospero.Supervisor to the local scheduler,
// package ariel: ariel's doorbell and fault hook feed the supervisor, and
// the supervisor's commands (attach, restart, passivate, retire) become
// ariel's supervisor-only operations.
//
// Wiring order (the node does this):
//
//	sup, _ := prospero.NewSupervisor(cfg)
//	sup.Register("counter", newCounter, opts)          // every kind first
//	sched, _ := ariel.New(ariel.Config{Activator: arielhost.Activator(sup), Faults: arielhost.Faults(sup)})
//	_ = arielhost.Start(sup, sched)
//	...
//	sup.Close(ctx)   // passivates everything (writing state at rest)
//	sched.Close(ctx)
//
// The reverse order is safe too: after the scheduler's Close, a
// passivation runs its final turn at once instead of waiting for a worker.
//
// The binding uses ariel's supervisor seams: activations attach at the
// incarnation restored from the state at rest (AttachAt, RestartAt); the
// Hydrate remedy replaces the faulted value in place (Replace, so
// prospero.Replacer); rejected activations answer their waiting mail at
// once (Reject, so prospero.Rejecter), and a doorbell the supervisor
// refuses while closing does too; kinds with a turn-driven persistence
// policy get ariel's after-turn hook wired to Supervisor.AfterTurn.
package arielhost

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire"
)

// arielHost adapts an *ariel.Scheduler to Host.
type arielHost struct {
	s     *ariel.Scheduler
	fence func(actor.Ref) error // FencedActivator's; nil: none
}

var (
	_ prospero.Host     = arielHost{}
	_ prospero.Replacer = arielHost{}
	_ prospero.Rejecter = arielHost{}
	_ prospero.Fencer   = arielHost{}
)

// New returns the prospero.Host view of sched.
func New(sched *ariel.Scheduler) prospero.Host { return arielHost{s: sched} }

// Fence implements prospero.Fencer with FencedActivator's fence, asked
// again just before an activation attaches.
func (h arielHost) Fence(ref actor.Ref) error {
	if h.fence == nil {
		return nil
	}
	return h.fence(ref)
}

// Attach implements Host: the cell runs a under ref's pinned incarnation
// (the one Prospero restored from the state at rest), whatever ariel had.
func (h arielHost) Attach(ref actor.Ref, a actor.Actor) error {
	if inc := ref.Incarnation(); inc != 0 {
		return h.s.AttachAt(ref.Unpinned(), inc, a)
	}
	return h.s.Attach(ref, a)
}

// Restart implements Host: the new value runs under ref's pinned
// incarnation (the one Prospero minted and wrote at rest).
func (h arielHost) Restart(ref actor.Ref, a actor.Actor) error {
	if inc := ref.Incarnation(); inc != 0 {
		return h.s.RestartAt(ref.Unpinned(), inc, a)
	}
	return h.s.Restart(ref.Unpinned(), a)
}

// Replace implements prospero.Replacer (the Hydrate remedy).
func (h arielHost) Replace(ref actor.Ref, a actor.Actor) error { return h.s.Replace(ref, a) }

// Reject implements prospero.Rejecter: during shutdown asks get a
// not-run NOT_SERVING refusal matching actor.ErrProcessUnavailable (the
// node is going away; one from another node is sent again), otherwise
// actor.ErrActorTerminated; both carry the cause.
func (h arielHost) Reject(ref actor.Ref, cause error) error {
	return h.s.Reject(ref.Unpinned(), rejectError(cause))
}

func rejectError(cause error) error {
	var fenced *prospero.FencedError
	switch {
	case errors.As(cause, &fenced):
		return fenced.Err // as the doorbell's fence would have refused it
	case cause == nil:
		return actor.ErrActorTerminated
	case errors.Is(cause, prospero.ErrClosed):
		// The node is closing (its drain ran out of time, say): none of
		// this mail ran. An ask from another node goes back to its
		// caller's node as the refusal admission would give it now
		// (NOT_SERVING, matching actor.ErrProcessUnavailable), which that
		// node sends again, to the node the shard moves to, within the
		// ask's deadline; an asker of this node gets the refusal itself
		// (ariel strips the mark).
		return wire.NotRun(wire.NotServing(fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, cause)))
	case errors.Is(cause, actor.ErrActorTerminated), errors.Is(cause, actor.ErrProcessUnavailable):
		return cause
	case errors.Is(cause, prospero.ErrNotCommitted):
		// The state at rest could not be committed again (a replica or
		// the owner's lease, for a moment): the actor is not gone; the
		// caller sees the commit failure (HTTP 503), not a termination.
		return fmt.Errorf("activation failed: %w", cause)
	}
	return fmt.Errorf("%w: activation failed: %w", actor.ErrActorTerminated, cause)
}

// Detach implements prospero.Detacher: the faulted value leaves the cell
// at its next system turn, ahead of the mail behind the failed turn,
// without a Passivating turn. A cell with no value attached (its turn
// was abandoned) is out of service already.
func (h arielHost) Detach(ref actor.Ref, final func(actor.Actor)) error {
	err := h.s.Detach(ref.Unpinned(), final)
	if errors.Is(err, ariel.ErrNotAttached) {
		return fmt.Errorf("%w: %w", prospero.ErrOutOfService, err)
	}
	return err
}

// Passivate implements Host. A cell with no value attached is one whose
// turn ariel's watchdog has just abandoned (the supervisor passivates only
// values it attached): its report follows.
func (h arielHost) Passivate(ref actor.Ref, final func(actor.Actor)) error {
	err := h.s.Passivate(ref.Unpinned(), final)
	if errors.Is(err, ariel.ErrNotAttached) {
		return fmt.Errorf("%w: %w", prospero.ErrOutOfService, err)
	}
	return err
}

// Retire implements Host: released is called once ariel's cell is
// stopped and out of the scheduler's memory (Scheduler.RetireThen).
func (h arielHost) Retire(ref actor.Ref, released func()) error {
	return h.s.RetireThen(ref.Unpinned(), released)
}

// Activator returns the doorbell to install as ariel.Config.Activator.
func Activator(s *prospero.Supervisor) ariel.Activator { return &arielRing{s: s} }

// FencedActivator is Activator with a fence: before the supervisor
// activates an identity, fence(ref) must return nil; otherwise the mail
// waiting for it is rejected with fence's error (Scheduler.Reject, which
// first hands this node's own senders' part of it to a router that sends
// it again, ariel.Resender) and nothing is hydrated.
// A cluster node fences activations of identities whose shard it may
// not serve (moved away, being handed off), so that mail admitted just
// before a move cannot bring an activation back after the handoff read
// the state it ships. fence is called on the doorbell's goroutine, and
// again just before the loaded value attaches (Start makes the host a
// prospero.Fencer with it, called under the supervisor's lock: the
// shard may have begun to move while the state loaded); it must not
// block.
func FencedActivator(s *prospero.Supervisor, fence func(actor.Ref) error) ariel.Activator {
	return &arielRing{s: s, fence: fence}
}

type arielRing struct {
	s     *prospero.Supervisor
	fence func(actor.Ref) error           // nil: none
	sched atomic.Pointer[ariel.Scheduler] // set by Start
}

// Ring forwards ariel's doorbell. An unknown kind never gets here
// (ariel's router refuses it with ErrUnknownKind, since Start registers
// exactly the supervisor's kinds). A doorbell the supervisor refuses
// (it is closing) fails the waiting mail at once.
func (r *arielRing) Ring(ref actor.Ref) {
	if !ref.IsVirtual() {
		return
	}
	if r.fence != nil {
		if err := r.fence(ref); err != nil {
			if sched := r.sched.Load(); sched != nil {
				_ = sched.Reject(ref.Unpinned(), err)
			}
			return
		}
	}
	if err := r.s.Ring(ref); err != nil {
		if sched := r.sched.Load(); sched != nil {
			_ = sched.Reject(ref.Unpinned(), rejectError(err))
		}
	}
}

// Faults returns the fault hook to install as ariel.Config.Faults.
func Faults(s *prospero.Supervisor) ariel.FaultHook { return arielFaults{s} }

type arielFaults struct{ s *prospero.Supervisor }

// Fault forwards a failed turn of a virtual actor to the supervisor.
// It runs on the failing worker or on ariel's watchdog, outside the
// pool's turn loop: the decision never waits for a free worker.
func (f arielFaults) Fault(x ariel.Fault) {
	if !x.Ref.IsVirtual() {
		return
	}
	switch {
	case x.Abandoned:
		f.s.TurnAbandoned(x.Ref, x.Incarnation, x.Err)
	case x.Outcome == ariel.BudgetExhausted:
		f.s.Fault(x.Ref, x.Incarnation, prospero.FaultBudgetExhausted, x.Err)
	default:
		f.s.Fault(x.Ref, x.Incarnation, prospero.FaultPanic, x.Err)
	}
}

// touchRouter records activity of virtual actors on every routed
// message, then defers to the wrapped router.
type touchRouter struct {
	next ariel.Router
	s    *prospero.Supervisor
}

func (r touchRouter) Resolve(to actor.Ref) (*ariel.Cell, error) {
	if to.IsVirtual() {
		r.s.Touch(to)
	}
	return r.next.Resolve(to)
}

func (r touchRouter) Forward(m ariel.Outbound) error { return r.next.Forward(m) }

// Start registers the supervisor's kinds with sched (so its router
// admits their mail into bounded mailboxes of the kind's depth and
// refuses unknown kinds with ErrUnknownKind), wraps sched's router to
// record activity, and starts the supervisor with sched as its host.
// sched must have been built with Activator(s) and Faults(s). Kinds
// registered with s afterwards are not known to sched.
func Start(s *prospero.Supervisor, sched *ariel.Scheduler) error {
	if s == nil || sched == nil {
		return errors.New("arielhost: nil supervisor or scheduler")
	}
	for _, name := range s.Registry().Names() {
		k, _ := s.Registry().Lookup(name)
		f, _ := s.Factory(name)
		if err := sched.Register(name, f, k.Options.MailboxDepth); err != nil {
			return err
		}
		if err := sched.SetReentrancy(name, k.Options.Reentrancy); err != nil {
			return err
		}
		if err := sched.SetTurnBudget(name, k.Options.TurnBudget); err != nil {
			return err
		}
		if err := sched.SetAskTimeouts(name, k.Options.AskTimeout, k.Options.MaxAskTimeout); err != nil {
			return err
		}
	}
	for _, name := range s.Registry().Names() {
		k, _ := s.Registry().Lookup(name)
		switch k.Options.Persistence.Mode {
		case prospero.PersistEveryTurn, prospero.PersistPeriodic:
			// Only kinds whose policy is driven by turns pay for the hook.
			after := func(ref actor.Ref, inc uint64, a actor.Actor, activity bool, h ariel.Hold) {
				s.AfterTurn(ref, inc, a, activity, h)
			}
			if err := sched.SetAfterTurn(name, after); err != nil {
				return err
			}
		}
	}
	h := arielHost{s: sched}
	if r, ok := sched.Config().Activator.(*arielRing); ok && r.s == s {
		r.sched.Store(sched)
		h.fence = r.fence // asked at the doorbell, and again at the attach
	}
	sched.SetRouter(touchRouter{next: sched.LocalRouter(), s: s})
	return s.Start(h)
}
