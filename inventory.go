package tempest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tempest-actors/tempest/actor"
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
	if err := actor.CheckKind(kind); err != nil {
		return nil, err // a kind no actor can have, refused like in every other call
	}
	if err := n.usable(ctx); err != nil {
		return nil, err
	}
	r, err := n.running()
	if err != nil {
		return nil, err
	}
	if n.kind(kind) == nil {
		return nil, fmt.Errorf("%w: %q", actor.ErrUnknownKind, kind)
	}
	active := r.sup.ActiveKeys(kind)
	out := make([]ActorEntry, 0, len(active))
	seen := make(map[string]bool, len(active))
	for _, k := range active {
		out = append(out, ActorEntry{Key: k, Active: true})
		seen[k] = true
	}
	if dormant {
		keys, err := n.rt().Dormant(ctx, kind, seen)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			out = append(out, ActorEntry{Key: k})
		}
	}
	slices.SortFunc(out, func(a, b ActorEntry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
