package tempest

import (
	"errors"
	"fmt"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
)

// locateAt is locate with the shard's epoch from the same table read: the
// router stamps outbound mail with it, and the receiving side compares a
// stamp with it (remoteDelivery.Fence). A shard in a planned handoff is
// refused with its target as the hint.
func (c *cluster) locateAt(ref actor.Ref) (string, uint64, bool, error) {
	loc, err := c.pl.Locate(ref.Kind(), ref.Key())
	if err != nil {
		if errors.Is(err, placement.ErrNoEligibleNode) {
			return "", 0, false, fmt.Errorf("%w: %w", actor.ErrNoEligibleNode, err)
		}
		return "", 0, false, c.unavailable(err)
	}
	if loc.Moving {
		err := fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff)
		h := &remoteHint{err: err, shard: loc.Shard.String()}
		if s, ok := c.pl.Owner(loc.Shard); ok {
			h.owner = s.MovingTo
		}
		return "", loc.Epoch, false, h
	}
	if loc.Owner != c.name {
		if loc.OwnerDown {
			return "", loc.Epoch, false, ownerDown(loc.Owner)
		}
		return loc.Owner, loc.Epoch, false, nil
	}
	if err := c.pl.Check(loc.Shard, 0, c.n.cfg.Clock.Now()); err != nil {
		var no *placement.NotOwnerError
		if errors.As(err, &no) && no.OwnerHint != "" && no.OwnerHint != c.name {
			return no.OwnerHint, no.Epoch, false, nil
		}
		return "", loc.Epoch, false, c.unavailable(err)
	}
	return c.name, loc.Epoch, true, nil
}

// fenceActivation is the doorbell's fence: an identity of a kind of this
// node may be activated only while this node owns its shard and may
// serve it (remote.fence).
func (c *cluster) fenceActivation(ref actor.Ref) error {
	if c.pl == nil || c.n.kind(ref.Kind()) == nil {
		return nil // not started yet, or a kind of the node's own (reminders)
	}
	return c.rem.fence(ref)
}

// ownerDown is the routing error for a shard whose owner the table marks
// down: mail sent there would only wait for its deadline, and the shard
// fails over within a fence delay (program code waits for that, see
// waitable).
func ownerDown(owner string) error {
	return fmt.Errorf("%w: %w: %s", actor.ErrProcessUnavailable, placement.ErrOwnerDown, owner)
}
