package prospero

import (
	"fmt"
	"time"
)

// EventType names a lifecycle decision.
type EventType uint8

const (
	// EventActivated: an identity without state at rest got its first
	// (or a fresh) activation.
	EventActivated EventType = iota + 1
	// EventHydrated: an identity was activated from its state at rest.
	EventHydrated
	// EventHydrationQueued: an activation waits for the hydration budget.
	EventHydrationQueued
	// EventPassivating: Prospero chose to passivate an active identity
	// (Reason says why: idle, pressure or shutdown).
	EventPassivating
	// EventPassivated: the identity is dormant; its memory is released.
	EventPassivated
	// EventPersisted: state was written at rest outside passivation
	// (turn policy).
	EventPersisted
	// EventFault: a turn panicked or exhausted its budget.
	EventFault
	// EventRestarting: a fault will be remedied by Restart (or Hydrate)
	// after Delay.
	EventRestarting
	// EventRestarted: the identity runs again under a new incarnation.
	EventRestarted
	// EventRehydrated: the identity runs again from its state at rest
	// under the same incarnation (remedy Hydrate).
	EventRehydrated
	// EventEscalated: restart intensity was exceeded; the remedy became
	// Retire.
	EventEscalated
	// EventRetired: the actor and its state were released as a unit:
	// the tombstone is written and the host released the retired actor's
	// mailbox, so a message sent afterwards starts the next incarnation.
	EventRetired
	// EventStoreError: state at rest could not be read or written.
	EventStoreError
	// EventTurnAbandoned: a turn ran past its kind's budget and was taken
	// away from its goroutine, which may never return; the remedy (the
	// Fault event that follows) applies at once.
	EventTurnAbandoned
	// EventRejected: the identity could not be activated (its load kept
	// failing past the kind's restart intensity, or the supervisor is
	// closing) and the host has refused its waiting mail: nothing of it
	// is attached on this node any more, a faulted value the remedy had
	// left attached included. Emitted once the host did it.
	EventRejected
)

var eventNames = [...]string{"", "Activated", "Hydrated", "HydrationQueued", "Passivating",
	"Passivated", "Persisted", "Fault", "Restarting", "Restarted", "Rehydrated", "Escalated",
	"Retired", "StoreError", "TurnAbandoned", "Rejected"}

func (t EventType) String() string {
	if int(t) < len(eventNames) && t != 0 {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", t)
}

// Reasons for passivation.
const (
	ReasonIdle      = "idle"
	ReasonPressure  = "pressure" // over the node's max-active limit
	ReasonShutdown  = "shutdown"
	ReasonRequested = "requested" // Supervisor.Passivate: an operator, a handoff, a lapsed lease
)

// Event is one lifecycle decision. Fields that do not apply to a type
// are zero.
type Event struct {
	Type        EventType
	At          time.Time
	ID          Identity
	Incarnation uint64
	// Cause of a Fault.
	Cause FaultCause
	// Remedy chosen (Fault, Restarting, Escalated).
	Remedy Remedy
	// Delay before a restart (Restarting).
	Delay time.Duration
	// Reason of a passivation.
	Reason string
	// Err of a Fault or StoreError.
	Err error
	// Hydration is how long the activation took, from the doorbell (or
	// the end of a fault's back-off) to the actor attached, on the
	// supervisor's clock; hydration-budget queueing and the store read
	// included (Activated, Hydrated, Rehydrated, Restarted).
	Hydration time.Duration
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s#%d", e.Type, e.ID, e.Incarnation)
	switch e.Type {
	case EventFault:
		s += fmt.Sprintf(" cause=%s remedy=%s", e.Cause, e.Remedy)
	case EventTurnAbandoned:
		s += " cause=" + e.Cause.String()
	case EventRestarting:
		s += fmt.Sprintf(" remedy=%s delay=%s", e.Remedy, e.Delay)
	case EventPassivating:
		s += " reason=" + e.Reason
	case EventActivated, EventHydrated, EventRehydrated, EventRestarted:
		s += fmt.Sprintf(" in=%s", e.Hydration)
	}
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	return s
}

// EventSink receives lifecycle events. Emit is called synchronously in
// decision order, possibly with the supervisor's lock held: it must be
// fast, must not block and must not call back into the supervisor.
type EventSink interface {
	Emit(Event)
}

// EventFunc adapts a function to EventSink.
type EventFunc func(Event)

// Emit implements EventSink.
func (f EventFunc) Emit(e Event) { f(e) }

type discardSink struct{}

func (discardSink) Emit(Event) {}
