package tempest

import (
	"context"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/cluster"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// router is where a node's calls go beyond its own scheduler and
// supervisor: the cluster engine (*cluster.Engine), or local for a
// standalone node, which owns every identity and has no peers. The node
// asks its router and does not ask which one it has.
type router interface {
	// Resend and Reask are given a tell or an ask of this node's
	// scheduler that was refused with err, and run it again while
	// placement may still route it elsewhere (the retry policy of every
	// sender, docs/federation.md); they return its outcome.
	Resend(ctx context.Context, err error, send func() error) error
	Reask(ctx context.Context, err error, ask func() (any, error)) (any, error)
	// Status and Passivate act on the owner of ref.
	Status(ctx context.Context, ref actor.Ref) (cluster.Status, error)
	Passivate(ctx context.Context, ref actor.Ref) error
	// HostsKind reports whether another live member registers kind.
	HostsKind(kind string) bool
	// Track follows activations (the supervisor's events).
	Track(e prospero.Event)
	// EpochOf is the epoch of id's shard (0 if unknown).
	EpochOf(id prospero.Identity) uint64
	Readiness() error
	// Leave hands the node's shards off; UnshippedErr names what could
	// not be; StopNetwork stops the cluster side (graceful: after Leave).
	Leave(ctx context.Context) error
	UnshippedErr() error
	StopNetwork(ctx context.Context, graceful bool) error

	Members() []membership.Member
	Proven(m membership.Member) bool
	Locate(ref actor.Ref) (string, uint64, error)
	Placement() *placement.Node // nil: no placement (yet)
	Counters() cluster.Counters
	Stats() *cluster.Stats
	FollowedShards() map[string]int
	PolicyViews() []placement.PolicyView
	PolicyDisagreements() []placement.PolicyView
	// Dormant lists kind's dormant keys in the shards this node owns
	// that seen does not hold (adding them to it).
	Dormant(ctx context.Context, kind string, seen map[string]bool) ([]string, error)

	// The reminders' shards (see cluster.Engine).
	ReminderShard(id prospero.Identity) (string, bool)
	ServesReminder(ref actor.Ref) error
	ServedHere(ref actor.Ref) (uint64, bool)
	RecordsInDoubt() bool
	Context() context.Context
	ListReminders(ctx context.Context, ref actor.Ref, here func() ([]reminders.Info, error)) (string, []reminders.Info, error)
	CancelReminder(ctx context.Context, ref actor.Ref, name string, here func() error) error
}

var (
	_ router = (*cluster.Engine)(nil)
	_ router = local{}
)

// local is the router of a standalone node: every identity is its own,
// at epoch 0, and nothing is sent anywhere or waited for.
type local struct{ n *Node }

func (local) Resend(_ context.Context, err error, _ func() error) error { return err }
func (local) Reask(_ context.Context, err error, _ func() (any, error)) (any, error) {
	return nil, err
}

func (l local) Status(ctx context.Context, ref actor.Ref) (cluster.Status, error) {
	st, err := l.n.statusHere(ctx, ref)
	return cluster.Status(st), err
}

func (l local) Passivate(ctx context.Context, ref actor.Ref) error {
	return l.n.passivateHere(ctx, ref)
}

func (local) HostsKind(string) bool                       { return false }
func (local) Track(prospero.Event)                        {}
func (local) EpochOf(prospero.Identity) uint64            { return 0 }
func (local) Readiness() error                            { return nil }
func (local) Leave(context.Context) error                 { return nil }
func (local) UnshippedErr() error                         { return nil }
func (local) StopNetwork(context.Context, bool) error     { return nil }
func (local) Members() []membership.Member                { return nil }
func (l local) Proven(m membership.Member) bool           { return m.Name == l.n.cfg.Name }
func (l local) Locate(actor.Ref) (string, uint64, error)  { return l.n.cfg.Name, 0, nil }
func (local) Placement() *placement.Node                  { return nil }
func (local) Counters() cluster.Counters                  { return cluster.Counters{} }
func (local) Stats() *cluster.Stats                       { return nil }
func (local) FollowedShards() map[string]int              { return nil }
func (local) PolicyViews() []placement.PolicyView         { return nil }
func (local) PolicyDisagreements() []placement.PolicyView { return nil }
func (local) Dormant(context.Context, string, map[string]bool) ([]string, error) {
	return nil, ErrNoDormantInventory
}
func (local) ReminderShard(prospero.Identity) (string, bool) { return localShard, true }
func (local) ServesReminder(actor.Ref) error                 { return nil }
func (local) ServedHere(actor.Ref) (uint64, bool)            { return 0, false }
func (local) RecordsInDoubt() bool                           { return false }
func (local) Context() context.Context                       { return context.Background() }

func (l local) ListReminders(_ context.Context, _ actor.Ref, here func() ([]reminders.Info, error)) (string, []reminders.Info, error) {
	infos, err := here()
	return l.n.cfg.Name, infos, err
}

func (local) CancelReminder(_ context.Context, _ actor.Ref, _ string, here func() error) error {
	return here()
}
