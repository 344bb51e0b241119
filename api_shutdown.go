package tempest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Shutdown is Close for a process that is about to exit, with one
// difference: when no other member of the cluster is alive to take this
// node's shards, it skips the handoff (which could only wait until its
// deadline) and stops as Close does otherwise: every active actor is
// passivated and its state written at rest on this node, then the
// components stop. A standalone node simply closes.
//
// Peers this node cannot see (a partition) are not waited for either:
// they treat the node as failed and take its shards over after the
// failure timeout, as after a crash.
//
// A node whose state store was found damaged while it ran (StoreDamaged)
// cannot ship what it owns, and every handoff it began would be refused
// until its deadline: it skips the handoff too and stops as a crash
// would, so its shards fail over to their replicas once it is marked down
// and the fence delay has passed, rather than after a drain that cannot
// succeed. Its error then wraps ErrHandoffIncomplete and the store's
// damage.
func (n *Node) Shutdown(ctx context.Context) error {
	if err := n.usable(ctx); err != nil {
		return err
	}
	if n.eng == nil || lifecycle(n.phase.Load()) != stateStarted {
		return n.Close(ctx)
	}
	if damage := n.StoreDamage(); damage != nil {
		n.log.LogAttrs(ctx, slog.LevelWarn, "state store damaged: closing without a handoff, the shards fail over to their replicas")
		return errors.Join(fmt.Errorf("%w: the state store is damaged: %w", ErrHandoffIncomplete, damage), n.close(ctx, false))
	}
	if n.hasLivePeer() {
		return n.Close(ctx)
	}
	n.log.LogAttrs(ctx, slog.LevelInfo, "no live peer to hand shards to: closing without a handoff")
	return n.close(ctx, false)
}

// hasLivePeer reports whether another member is alive in this node's view.
func (n *Node) hasLivePeer() bool {
	for _, m := range n.Members() {
		if m.Name != n.cfg.Name && !m.Status.Gone() {
			return true
		}
	}
	return false
}
