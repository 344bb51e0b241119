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

// Host is the node an engine serves: whether it runs, and what the
// engine asks of it about identities and reminders it owns (the
// supervisor and scheduler themselves are among the Deps). Every method
// is safe for concurrent use.
type Host interface {
	// Running returns the node's reminder holder (the reminder shards it
	// keeps, equal to those it serves) while the node runs, or why it
	// does not (not started yet, closing).
	Running() (*reminders.Holder, error)
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
