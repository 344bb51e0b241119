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
//	sup.Close(ctx)   // passivates everything; needs the scheduler running
//	sched.Close(ctx)
package arielhost

import (
	"errors"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
)

// arielHost adapts an *ariel.Scheduler to Host.
type arielHost struct{ s *ariel.Scheduler }

var _ prospero.Host = arielHost{}

// New returns the prospero.Host view of sched.
func New(sched *ariel.Scheduler) prospero.Host { return arielHost{sched} }

// Attach implements Host. A cell ariel creates here takes the pinned
// incarnation; a cell that already exists keeps the incarnation ariel
// gave it (see the package documentation's note on incarnations).
func (h arielHost) Attach(ref actor.Ref, a actor.Actor) error { return h.s.Attach(ref, a) }

// Restart implements Host; ariel re-mints by adding one.
func (h arielHost) Restart(ref actor.Ref, a actor.Actor) error { return h.s.Restart(ref.Unpinned(), a) }

// Passivate implements Host.
func (h arielHost) Passivate(ref actor.Ref, final func(actor.Actor)) error {
	return h.s.Passivate(ref.Unpinned(), final)
}

// Retire implements Host.
func (h arielHost) Retire(ref actor.Ref) error { return h.s.Retire(ref.Unpinned()) }

// Activator returns the doorbell to install as ariel.Config.Activator.
func Activator(s *prospero.Supervisor) ariel.Activator { return arielRing{s} }

type arielRing struct{ s *prospero.Supervisor }

// Ring forwards ariel's doorbell. An unknown kind never gets here
// (ariel's router refuses it with ErrUnknownKind, since StartOnAriel
// registers exactly the supervisor's kinds).
func (r arielRing) Ring(ref actor.Ref) {
	if ref.IsVirtual() {
		_ = r.s.Ring(ref)
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
	cause := prospero.FaultPanic
	if x.Outcome == ariel.BudgetExhausted {
		cause = prospero.FaultBudgetExhausted
	}
	f.s.Fault(x.Ref, x.Incarnation, cause, x.Err)
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
	}
	sched.SetRouter(touchRouter{next: sched.LocalRouter(), s: s})
	return s.Start(New(sched))
}
