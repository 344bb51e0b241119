package placement

import (
	"fmt"
	"github.com/tempest-actors/tempest/clock"
	"time"
)

// Clock is the time source of the placement core and shell, the
// project's one (package clock). Tests inject a fake; production uses
// SystemClock.
type Clock = clock.Clock

// SystemClock reads the wall clock (with its monotonic reading).
type SystemClock = clock.Real

// Lease says whether a node's ownership is fresh: it heard from a
// leader (as a follower) or confirmed its leadership with a quorum (as
// leader) less than Duration ago, measured on its own clock.
type Lease struct {
	Duration time.Duration
}

// Fresh reports whether a lease renewed at anchor is still fresh at now.
// A zero anchor (never renewed) is never fresh.
func (l Lease) Fresh(anchor, now time.Time) bool {
	return !anchor.IsZero() && now.Sub(anchor) < l.Duration
}

// FenceDelay is how long, on the leader's clock, the leader waits after
// a node can no longer renew its lease before giving that node's shards
// to someone else: the lease stretched by the worst clock-rate drift,
// plus a margin that covers a message still in flight when the node was
// cut off. See the package documentation for the argument.
func FenceDelay(lease time.Duration, drift float64, margin time.Duration) time.Duration {
	return time.Duration(float64(lease)*(1+drift)) + margin
}

// CheckOwnership is the fence: it decides whether node self may serve
// shard ref for mail stamped with epoch (0 = unstamped, e.g. a local
// sender that looked the owner up in this same table), given whether its
// lease is fresh. It returns nil only if all of these hold:
//
//   - the table assigns the shard to self and no handoff is in progress
//     (else *NotOwnerError with the owner hint, or ErrHandoff);
//   - epoch is 0 or the shard's current epoch (an older epoch is a
//     *NotOwnerError; a newer one means this table is behind: ErrBehind);
//   - self is not marked down (ErrNodeDown);
//   - the lease is fresh (ErrLeaseExpired).
func CheckOwnership(t *Table, self string, ref ShardRef, epoch uint64, leaseFresh bool) error {
	if t.ShardCount == 0 {
		return ErrUninitialized
	}
	s, ok := t.Shard(ref)
	if !ok {
		return fmt.Errorf("%w: no %s", ErrNoEligibleNode, ref)
	}
	if epoch > s.Epoch {
		return fmt.Errorf("%w: %s at epoch %d, caller has %d", ErrBehind, ref, s.Epoch, epoch)
	}
	if s.Owner != self || (epoch != 0 && epoch < s.Epoch) {
		return &NotOwnerError{Shard: ref, Epoch: s.Epoch, OwnerHint: s.Owner}
	}
	if n, ok := t.Nodes[self]; !ok || n.Status == StatusDown {
		return ErrNodeDown
	}
	if s.MovingTo != "" {
		return fmt.Errorf("%w: %s to %s", ErrHandoff, ref, s.MovingTo)
	}
	if !leaseFresh {
		return ErrLeaseExpired
	}
	return nil
}
