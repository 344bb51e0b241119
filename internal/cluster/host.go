package cluster

import (
	"context"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/internal/tracing"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/replica"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// Host is the node an engine serves: what the engine asks of its
// supervisor, scheduler and reminders while it runs. Every method is safe
// for concurrent use.
type Host interface {
	// Running returns the node's running parts, or why there are none
	// (not started yet, closing).
	Running() (Parts, error)
	// Hosts reports whether this node registers kind.
	Hosts(kind string) bool
	// StatusHere is tempest.Node.Status answered by this node's
	// supervisor, for an identity it owns.
	StatusHere(ctx context.Context, ref actor.Ref) (Status, error)
	// PassivateHere passivates what this node holds in memory of ref,
	// returning once it is at rest.
	PassivateHere(ctx context.Context, ref actor.Ref) error
	// ListReminders and CancelReminder answer a peer for an actor this
	// node owns, as the node's own reminder engine would.
	ListReminders(ctx context.Context, ref actor.Ref) ([]reminders.Info, error)
	CancelReminder(ctx context.Context, ref actor.Ref, name string) error
}

// Parts are the node's components that run while it is started.
type Parts struct {
	Sched *ariel.Scheduler
	Sup   *prospero.Supervisor
	Hold  *reminders.Holder // the node's reminder shards, kept equal to those it serves
}

// Deps are the node's components the engine is started with; they exist
// before it starts and outlive it.
type Deps struct {
	Registry     *wire.Registry // the kinds' message types and error codes
	Sched        *ariel.Scheduler
	Sup          *prospero.Supervisor
	Tracer       *tracing.Tracer // nil: not tracing
	Manifest     manifest.Manifest
	KindNames    []string             // the kinds this node registers
	Kinds        []placement.KindSpec // and what it publishes of them to placement
	Store        *prospero.BoltStore
	Replicas     *replica.Store // Store, replicated
	StoreExisted bool           // Store was there before this start (a restart)
}

// Status is what a reference designates (tempest.Status, which documents
// the fields).
type Status struct {
	Kind        string
	Key         string
	State       actor.ReferenceState
	Node        string
	Incarnation uint64
	Active      bool
}
