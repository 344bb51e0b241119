package cluster

import (
	"errors"
	"fmt"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero/federation/route"
)

// locateAt is the routing decision for ref from one read of the applied
// table: the owner, the placement epoch of ref's shard (the router
// stamps outbound mail with it, and the receiving side compares a stamp
// with it, wire.EpochFence in package route), whether the owner is this node, and for
// a shard this node owns, the fence (lease, node status, handoff). A
// shard in a planned handoff is refused with its target as the hint and
// the shard's name (a *route.Hint). One send makes one such lookup per
// node it passes: the caller's routing (Resolve hands it to Forward) and
// the owner's admission; the owner's activation fence, which runs later,
// looks again. Errors match actor sentinels.
func (c *Engine) locateAt(ref actor.Ref) (string, uint64, bool, error) {
	if !c.placed.Load() {
		// Mail arrives as soon as the transport listens, which is before
		// placement runs: this node holds no lease yet.
		return "", 0, false, fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrLeaseExpired)
	}
	var loc placement.Location
	var err error
	var movingTo string
	selfUp := false
	// The lease first, then the table, as placement.Node.Check: a lease
	// fresh now means this node's sync barrier after any lapse has been
	// applied, so the read below sees every change committed before it.
	// Looked at the other way round, a lapse could end between the two
	// and vouch for a table read before the barrier.
	fresh := c.pl.LeaseFresh(c.cfg.Clock.Now())
	c.pl.FSM().Read(func(t *placement.Table) {
		loc, err = t.Locate(ref.Kind(), ref.Key())
		if err != nil {
			return
		}
		if loc.Moving {
			if s, ok := t.Shard(loc.Shard); ok {
				movingTo = s.MovingTo
			}
			return
		}
		if loc.Owner == c.name {
			n, ok := t.Nodes[c.name]
			selfUp = ok && n.Status != placement.StatusDown
		}
	})
	if err != nil {
		if errors.Is(err, placement.ErrNoEligibleNode) {
			return "", 0, false, fmt.Errorf("%w: %w", actor.ErrNoEligibleNode, err)
		}
		return "", 0, false, c.unavailable(err)
	}
	if loc.Moving {
		err := fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff)
		return "", loc.Epoch, false, &route.Hint{Err: err, Owner: movingTo, Shard: loc.Shard.String()}
	}
	if loc.Owner != c.name {
		if loc.OwnerDown {
			return "", loc.Epoch, false, ownerDown(loc.Owner)
		}
		return loc.Owner, loc.Epoch, false, nil
	}
	// The rest of placement.CheckOwnership for this node's own shard at
	// the table's epoch, on the same read: the shard is self's and not
	// moving, so only this node's status and its lease (taken before the
	// read) remain.
	switch {
	case !selfUp:
		return "", loc.Epoch, false, c.unavailable(placement.ErrNodeDown)
	case !fresh:
		return "", loc.Epoch, false, c.unavailable(placement.ErrLeaseExpired)
	}
	return c.name, loc.Epoch, true, nil
}

// FenceActivation is the doorbell's fence: an identity of a kind of this
// node may be activated only while this node owns its shard and may
// serve it (route.Router.FenceActivation).
func (c *Engine) FenceActivation(ref actor.Ref) error {
	if !c.placed.Load() || !c.h.Hosts(ref.Kind()) {
		return nil // not started yet, or a kind of the node's own (reminders)
	}
	return c.rem.FenceActivation(ref)
}

// ownerDown is the routing error for a shard whose owner the table marks
// down: mail sent there would only wait for its deadline, and the shard
// fails over within a fence delay (program code waits for that, see
// route.Waitable).
func ownerDown(owner string) error {
	return fmt.Errorf("%w: %w: %s", actor.ErrProcessUnavailable, placement.ErrOwnerDown, owner)
}
