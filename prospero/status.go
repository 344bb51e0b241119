package prospero

import "github.com/tempest-actors/tempest/actor"

// Status answers what a reference currently designates.
type Status struct {
	// State is Valid (active under the referenced incarnation), Dormant
	// (current, state at rest or never activated), ActorTerminated (the
	// referenced incarnation was re-minted or retired) or Unknown (kind
	// not registered, or an incarnation never minted). A single node's
	// supervisor never answers ProcessUnavailable.
	State actor.ReferenceState
	// Incarnation is the identity's current incarnation; an identity
	// never activated reports 1, the incarnation it will get.
	Incarnation uint64
	// Active reports whether the identity is in memory, in any phase: an
	// activation attached, or one queued for or in hydration (also a
	// re-admission after a passivation that found mail waiting),
	// restarting, backing off after a fault, being passivated, retired or rejected.
	// Only Active false means that nothing in memory can still change the
	// state at rest (a handoff waits for it before reading the store).
	Active bool
}

// statusOf computes the status of a reference pinned to incarnation
// pinned (0: a plain kind/key reference, which always designates the
// current incarnation) for an identity whose current incarnation is
// current.
func statusOf(pinned, current uint64, active, running bool) Status {
	st := Status{Incarnation: current, Active: active}
	switch {
	case pinned != 0 && pinned < current:
		st.State = actor.ActorTerminated
	case pinned != 0 && pinned > current:
		st.State = actor.Unknown
	case running:
		st.State = actor.Valid
	default:
		st.State = actor.Dormant
	}
	return st
}
