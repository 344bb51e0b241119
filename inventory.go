package tempest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
)

// ErrNoDormantInventory is returned by Actors asked for dormant
// identities on a standalone node: dormant identities are listed from
// the shard index, which only a clustered node keeps.
var ErrNoDormantInventory = errors.New("tempest: dormant identities are listed only on clustered nodes (from the shard index)")

// ActorEntry is one identity in a node's inventory.
type ActorEntry struct {
	Key string
	// Active is true for an identity with an activation attached on this
	// node, false for a dormant one whose state at rest this node's store
	// holds.
	Active bool
}

// Actors lists kind's identities on this node, sorted by key: those
// with an activation attached here, and with dormant also the dormant
// ones of the shards it owns: those of the shard index that handoff
// uses (so an identity activated in an earlier process lifetime is
// listed too) and every one whose record this node's store holds,
// whatever wrote it (records that arrived as a follower's, before this
// node took the shard over, are in no index of its own; finding them
// reads every key of the store once). It is a snapshot: activations come
// and go while it is taken. Errors: ErrInvalidKey, actor.ErrUnknownKind,
// ErrNoDormantInventory, ErrNotStarted, ErrClosed, a store error, ctx's.
func (n *Node) Actors(ctx context.Context, kind string, dormant bool) ([]ActorEntry, error) {
	if err := actor.CheckVirtual(kind, "-"); err != nil {
		return nil, err // a kind no actor can have, refused like in every other call
	}
	r, err := n.running()
	if err != nil {
		return nil, err
	}
	if n.kind(kind) == nil {
		return nil, fmt.Errorf("%w: %q", actor.ErrUnknownKind, kind)
	}
	if dormant && n.eng == nil {
		return nil, ErrNoDormantInventory
	}
	active := r.sup.ActiveKeys(kind)
	out := make([]ActorEntry, 0, len(active))
	seen := make(map[string]bool, len(active))
	for _, k := range active {
		out = append(out, ActorEntry{Key: k, Active: true})
		seen[k] = true
	}
	if dormant {
		t := n.Table()
		if t == nil {
			return nil, ErrNotStarted
		}
		group, hosted := t.Kinds[kind]
		owned := map[placement.ShardRef]bool{}
		for _, shard := range t.Owned(n.cfg.Name) {
			if !hosted || shard.Group != group {
				continue
			}
			owned[shard] = true
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			ids, _, err := n.eng.ReadIndex(ctx, shard)
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				if id.Kind == kind && !seen[id.Key] {
					seen[id.Key] = true
					out = append(out, ActorEntry{Key: id.Key})
				}
			}
		}
		// Records of owned shards that arrived as a replica's (this node
		// took the shard over in a failover, or by promotion) are in no
		// index of this node: the store says what it holds.
		err := n.store.ScanIDs(ctx, func(id prospero.Identity) bool {
			if id.Kind != kind || seen[id.Key] {
				return false
			}
			ref, err := t.RefOf(id.Kind, id.Key)
			return err == nil && owned[ref]
		}, func(id prospero.Identity) error {
			seen[id.Key] = true
			out = append(out, ActorEntry{Key: id.Key})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b ActorEntry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
