package cluster

import (
	"slices"
	"time"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
)

// The old owner's side of a handoff decides from its applied table and
// what it holds; these functions are those decisions, with no lock,
// goroutine, clock or store of their own (the time and every input are
// arguments), so table tests cover them. transfer and shipShard are the
// shell: they read the table and the stores, passivate, ship and wait.

// shipStep is what the old owner's applied table says of a move it is
// asked to ship.
type shipStep int

const (
	// shipWait: the table is behind the leader's; the move is not applied
	// here yet, so mail for the shard may still be admitted.
	shipWait shipStep = iota
	// shipGo: the table shows the shard this node's at the move's epoch,
	// moving to the move's target; no more mail is admitted for it.
	shipGo
	// shipRefuse: the table has gone past the move (a newer epoch, another
	// owner or target); shipping would hand off what is no longer ours.
	shipRefuse
)

// shipReadiness is the step for m given self's applied entry s of the
// shard (ok false: the table has no such shard yet).
func shipReadiness(s placement.Shard, ok bool, m placement.Move, self string) shipStep {
	switch {
	case !ok:
		return shipWait
	case s.Epoch == m.Epoch && s.Owner == self && s.MovingTo == m.To:
		return shipGo
	case s.Epoch > m.Epoch,
		s.Epoch == m.Epoch && (s.Owner != self || (s.MovingTo != "" && s.MovingTo != m.To)):
		return shipRefuse
	}
	return shipWait
}

// moveStands reports whether the applied entry s still shows m in
// progress, the condition for trying a failed transfer again: the new
// owner accepts a transfer only while its own table shows the move.
func moveStands(s placement.Shard, ok bool, m placement.Move) bool {
	return ok && s.Owner == m.From && s.MovingTo == m.To && s.Epoch == m.Epoch
}

// retryUntil is when the leader stops trying a transfer again: with a
// quarter of its budget left, so that the outcome reaches the planner
// while the old owner's own budget lasts. Zero (never) with no deadline.
func retryUntil(now, deadline time.Time) time.Time {
	if deadline.IsZero() {
		return time.Time{}
	}
	return deadline.Add(-deadline.Sub(now) / 4)
}

// shipSet is what the handoff of a shard moves. sources are where this
// node knows identities from (its shard index, the records it holds as
// the shard's replica, the supervisor's memory, the active ones);
// active are those to hydrate on the new owner (each in sources too).
// It returns, in key order and without duplicates: ids, the shard's
// valid identities to passivate and ship; hydrate, the shard's active
// identities; and invalid, the shard's identities whose key is not valid
// (at rest from before keys were checked), which can be neither
// passivated nor shipped and are isolated.
func shipSet(sources [][]prospero.Identity, active []prospero.Identity, inShard func(prospero.Identity) bool) (ids, hydrate []prospero.Identity, invalid map[prospero.Identity]error) {
	seen := map[prospero.Identity]bool{}
	for _, l := range sources {
		for _, id := range l {
			if seen[id] || !inShard(id) {
				continue
			}
			seen[id] = true
			if err := id.Validate(); err != nil {
				if invalid == nil {
					invalid = map[prospero.Identity]error{}
				}
				invalid[id] = err
				continue
			}
			ids = append(ids, id)
		}
	}
	hydrated := map[prospero.Identity]bool{}
	for _, id := range active {
		if !hydrated[id] && inShard(id) {
			hydrated[id] = true
			hydrate = append(hydrate, id)
		}
	}
	byKey := func(a, b prospero.Identity) int { return cmpString(a.String(), b.String()) }
	slices.SortFunc(ids, byKey)
	slices.SortFunc(hydrate, byKey)
	return ids, hydrate, invalid
}

// promotes reports whether a move can be a promotion, shipping nothing:
// the target is in the shard's in-sync set in self's applied entry s, so
// it holds every record self committed, the final writes of the
// activations just passivated included (had it missed one, it would have
// left the set before that write committed). Not without replication,
// not while a write of the shard landed here without committing (the
// activation reloaded it and the follower may lack it), and not while
// the target is suspected of having lost records it could not yet be
// taken out of the sets for.
func promotes(s placement.Shard, ok bool, m placement.Move, self string, replicated, uncommitted, suspect bool) bool {
	return shipReadiness(s, ok, m, self) == shipGo && s.InSync(m.To) && replicated && !uncommitted && !suspect
}
