package cluster

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
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
// looks again. Errors match actor sentinels. The decision is routeIn's;
// this is its shell.
func (c *Engine) locateAt(ref actor.Ref) (string, uint64, bool, error) {
	if !c.placed.Load() {
		// Mail arrives as soon as the transport listens, which is before
		// placement runs: this node holds no lease yet.
		return "", 0, false, fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrLeaseExpired)
	}
	// The lease first, then the table, as placement.Node.Check: a lease
	// fresh now means this node's sync barrier after any lapse has been
	// applied, so the read below sees every change committed before it.
	// Looked at the other way round, a lapse could end between the two
	// and vouch for a table read before the barrier.
	fresh := c.pl.LeaseFresh(c.cfg.Clock.Now())
	var r routing
	c.pl.FSM().Read(func(t *placement.Table) { r = routeIn(t, ref, c.name, fresh) })
	if r.stalled {
		r.err = c.unavailable(r.err)
	}
	return r.owner, r.epoch, r.local, r.err
}

// routing is one routing decision (routeIn).
type routing struct {
	owner string // where the mail goes; "" when refused
	epoch uint64 // the shard's epoch (0 when the table places no owner)
	local bool   // the owner is this node
	err   error  // the refusal, matching actor sentinels
	// stalled: err is the table's own cause (no owner can be placed
	// yet, this node down or its lease lapsed), still to be worded by
	// whether a placement leader is known (Engine.unavailable).
	stalled bool
}

// routeIn decides where mail for ref goes by table t as self reads it,
// given whether self's lease was fresh before the read. It has no lock,
// clock or I/O of its own.
func routeIn(t *placement.Table, ref actor.Ref, self string, fresh bool) routing {
	loc, err := t.Locate(ref.Kind(), ref.Key())
	switch {
	case errors.Is(err, placement.ErrNoEligibleNode):
		return routing{err: fmt.Errorf("%w: %w", actor.ErrNoEligibleNode, err)}
	case err != nil:
		return routing{err: err, stalled: true}
	case loc.Moving:
		var movingTo string
		if s, ok := t.Shard(loc.Shard); ok {
			movingTo = s.MovingTo
		}
		err := fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff)
		return routing{epoch: loc.Epoch, err: &route.Hint{Err: err, Owner: movingTo, Shard: loc.Shard.String()}}
	case loc.Owner != self && loc.OwnerDown:
		return routing{epoch: loc.Epoch, err: ownerDown(loc.Owner)}
	case loc.Owner != self:
		return routing{owner: loc.Owner, epoch: loc.Epoch}
	}
	// The rest of placement.CheckOwnership for this node's own shard at
	// the table's epoch, on the same read: the shard is self's and not
	// moving, so only this node's status and its lease remain.
	if n, ok := t.Nodes[self]; !ok || n.Status == placement.StatusDown {
		return routing{epoch: loc.Epoch, err: placement.ErrNodeDown, stalled: true}
	}
	if !fresh {
		return routing{epoch: loc.Epoch, err: placement.ErrLeaseExpired, stalled: true}
	}
	return routing{owner: self, epoch: loc.Epoch, local: true}
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

// Lapsed is the scheduler's Lapsed hook (ariel.Config.Lapsed): a worker
// found the mail of ref's actor due after the lease the fence loop gave
// the scheduler ran out (a process that was frozen thaws in the middle
// of a backlog, or the lease lapsed between two ticks). It gives the
// scheduler the lease as it stands now and, when this node may no
// longer serve ref, passivates it, as the fence loop's next tick would;
// the mail held back then meets the activation fence.
func (c *Engine) Lapsed(ref actor.Ref) {
	if !c.placed.Load() {
		return // no lease given yet (the fence loop gives the first)
	}
	fresh := c.giveLease()
	var r routing
	c.pl.FSM().Read(func(t *placement.Table) { r = routeIn(t, ref, c.name, fresh) })
	if _, err := c.h.Running(); err == nil && !r.local {
		c.run.Sup.Passivate(ref)
	}
}

// giveLease reads this node's lease now and gives the scheduler how long
// it lasts (nothing: it has run out), and reports whether it is fresh.
func (c *Engine) giveLease() bool {
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	mark := c.run.Sched.Mark() // first: a stall after it only shortens the lease
	now := c.cfg.Clock.Now()
	until := c.pl.LeaseUntil(now)
	var d time.Duration
	if !until.IsZero() {
		d = until.Sub(now)
	}
	c.run.Sched.SetLease(mark, d)
	return !until.IsZero()
}

// ownerDown is the routing error for a shard whose owner the table marks
// down: mail sent there would only wait for its deadline, and the shard
// fails over within a fence delay (program code waits for that, see
// route.Waitable).
func ownerDown(owner string) error {
	return fmt.Errorf("%w: %w: %s", actor.ErrProcessUnavailable, placement.ErrOwnerDown, owner)
}

// fencing is what one tick of the fence loop does (fenceStep).
type fencing struct {
	// passivate: active identities this node may no longer serve.
	passivate []prospero.Identity
	// movingOut: those of them whose shard is moving away from this
	// node, by shard, to be named to the new owner (HydrateRequest).
	movingOut map[placement.ShardRef][]prospero.Identity
	// newlyDown: peers the table marks down that were not at the last
	// tick; their links are dropped.
	newlyDown []string
}

// fenceStep decides one tick of the fence loop from table t as self
// reads it, given whether self's lease was fresh before the read, the
// identities active here, and down, the peers down at the last tick
// (updated). An identity is passivated when routeIn would not deliver
// its mail here. It has no lock, clock or I/O of its own.
func fenceStep(t *placement.Table, self string, fresh bool, active []prospero.Identity, down map[string]bool) fencing {
	f := fencing{newlyDown: newlyDownIn(t, self, down)}
	for _, id := range active {
		if routeIn(t, id.Ref(), self, fresh).local {
			continue
		}
		f.passivate = append(f.passivate, id)
		if loc, err := t.Locate(id.Kind, id.Key); err == nil && loc.Moving && loc.Owner == self {
			if f.movingOut == nil {
				f.movingOut = map[placement.ShardRef][]prospero.Identity{}
			}
			f.movingOut[loc.Shard] = append(f.movingOut[loc.Shard], id)
		}
	}
	return f
}

// newlyDownIn returns the peers of self that table t marks down and that
// down (the peers down at the previous call) does not hold, and updates
// down to the peers t marks down.
func newlyDownIn(t *placement.Table, self string, down map[string]bool) []string {
	var newly []string
	for name := range down {
		if n, ok := t.Nodes[name]; !ok || n.Status != placement.StatusDown {
			delete(down, name)
		}
	}
	for name, n := range t.Nodes {
		if n.Status == placement.StatusDown && name != self && !down[name] {
			down[name] = true
			newly = append(newly, name)
		}
	}
	slices.Sort(newly)
	return newly
}
