package tempest

import (
	"context"
	"errors"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/cluster"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero/federation"
)

// ShipStateAs sends peer, from n, a handoff of dst's shard to the epoch
// epoch carrying the state at rest n holds for src as dst's: tests replay
// a late or forged transfer with it. It returns peer's answer.
func ShipStateAs(ctx context.Context, n *Node, peer string, src, dst actor.Ref, epoch uint64) error {
	return n.eng.ShipStateAs(ctx, peer, src, dst, epoch)
}

// PlantIndexEntry adds kind/key (which need not be a valid identity) to
// the shard index n keeps for near's shard, as a record written by an
// older version or damaged at rest would.
func PlantIndexEntry(ctx context.Context, n *Node, near actor.Ref, kind, key string) error {
	return n.eng.PlantIndexEntry(ctx, near, kind, key)
}

// RequestMove asks from, on behalf of n as the leader would, to hand m's
// shard off within budget. answered is from's answer (nil: shipped);
// err is a failure to get one before ctx ended.
func RequestMove(ctx context.Context, n *Node, from string, m placement.Move, budget time.Duration) (answered, err error) {
	err = n.eng.Federation().Call(ctx, from, &federation.MoveRequest{Group: m.Shard.Group, Shard: uint32(m.Shard.Index),
		Epoch: m.Epoch, From: m.From, To: m.To, BudgetNs: uint64(budget)})
	var ans *federation.Error
	if err == nil || errors.As(err, &ans) {
		return err, nil
	}
	return nil, err
}

// StatusAt asks peer, from n, for the status of ref as routed at the
// shard epoch epoch, and returns peer's answer.
func StatusAt(ctx context.Context, n *Node, peer string, ref actor.Ref, epoch uint64) error {
	_, err := n.eng.Federation().Status(ctx, peer, &federation.StatusRequest{Epoch: epoch,
		Actor: federation.Actor{Kind: ref.Kind(), Key: ref.Key()}})
	return err
}

// SetWarmHandoff turns n's HydrateRequests on planned moves on or off
// (on by default): benchmarks compare the first ask after a move cold.
func SetWarmHandoff(n *Node, on bool) { n.eng.SetWarmHandoff(on) }

// SetHydrateBacklog makes n count k activations already scheduled by
// warm handoffs, as a node busy warming would.
func SetHydrateBacklog(n *Node, k int) {
	n.eng.SetHydrateBacklog(k)
}

// HydrateBacklogLimit is the backlog beyond which n answers BUSY.
func HydrateBacklogLimit(n *Node) int { return n.eng.HydrateBacklog() }

// RequestHydrate sends peer, from n, a HydrateRequest for refs (all in
// one shard) at the shard epoch epoch; with retry it honours BUSY's
// retry-after within ctx. It returns peer's answer.
func RequestHydrate(ctx context.Context, n *Node, peer string, refs []actor.Ref, epoch uint64, retry bool) (int, error) {
	loc, err := n.eng.Placement().Locate(refs[0].Kind(), refs[0].Key())
	if err != nil {
		return 0, err
	}
	req := &federation.HydrateRequest{Group: loc.Shard.Group, Shard: uint32(loc.Shard.Index), Epoch: epoch, BudgetNs: uint64(time.Second)}
	for _, r := range refs {
		req.Actors = append(req.Actors, federation.Actor{Kind: r.Kind(), Key: r.Key()})
	}
	if retry {
		return n.eng.Federation().CallRetrying(ctx, peer, req)
	}
	return 0, n.eng.Federation().Call(ctx, peer, req)
}

// SyncReminderPasses runs k passes of n's reminder loop, sharing one
// memory of failing shards as the loop does.
func SyncReminderPasses(n *Node, k int) {
	for range k {
		n.eng.SyncReminders()
	}
}

// ReminderShardKey names s as the reminder engine does.
func ReminderShardKey(s placement.ShardRef) string { return cluster.ShardKey(s) }
