package placement

import (
	"slices"
	"time"
)

// Rendezvous returns the node with the highest rendezvous weight for
// shard index of group among candidates ("" if there are none). Adding
// a node moves only the shards it now wins; removing one moves only the
// shards it held: the minimal movement of highest-random-weight hashing.
// Ties (astronomically unlikely) go to the smaller name.
func Rendezvous(group string, index int, candidates []string) string {
	salt := nodeHash(group)
	best, bestW := "", uint64(0)
	for _, c := range candidates {
		w := rendezvousWeight(nodeHash(c), salt, index)
		if best == "" || w > bestW || (w == bestW && c < best) {
			best, bestW = c, w
		}
	}
	return best
}

// PlannerConfig tunes the leader's planner.
type PlannerConfig struct {
	// FenceDelay is how long after a node is seen down (or after a handoff
	// began without confirmation) the planner waits before another node
	// may own its shards. Use FenceDelay(lease, drift, margin).
	FenceDelay time.Duration
	// MaxMoving caps planned handoffs in flight, cluster-wide, so a new
	// node receives its shards gradually.
	MaxMoving int
}

// Planner is the leader's deterministic decision core: given the applied
// table and the leader's clock, it returns the commands that move the
// table toward its target. It keeps leader-local timing (when a node was
// first seen down, when a move began), never replicated: a new leader
// starts its timers afresh, which only ever delays, never hastens, a
// reassignment. Not safe for concurrent use.
type Planner struct {
	cfg       PlannerConfig
	downSince map[string]time.Time
	moveSince map[ShardRef]time.Time
	confirmed map[ShardRef]Move
	refused   map[ShardRef]Move      // handoffs the old owner could not carry out
	refusedAt map[ShardRef]time.Time // when a shard's last handoff was refused
}

// NewPlanner returns a planner with empty timers.
func NewPlanner(cfg PlannerConfig) *Planner {
	if cfg.MaxMoving <= 0 {
		cfg.MaxMoving = 1
	}
	return &Planner{
		cfg:       cfg,
		downSince: map[string]time.Time{},
		moveSince: map[ShardRef]time.Time{},
		confirmed: map[ShardRef]Move{},
		refused:   map[ShardRef]Move{},
		refusedAt: map[ShardRef]time.Time{},
	}
}

// Confirm records that the handoff m (as begun) finished: the old owner
// stopped admitting and shipped its state. The next Step completes it
// without waiting for the fence delay.
func (p *Planner) Confirm(m Move) { p.confirmed[m.Shard] = m }

// Refuse records that the handoff m (as begun) cannot finish now: its old
// owner is alive and answered that it could not ship the shard's state.
// The next Step aborts the move (the old owner keeps the shard and serves
// it again) instead of completing it after the fence delay with state
// missing, and the shard is not moved again for a fence delay.
func (p *Planner) Refuse(m Move) { p.refused[m.Shard] = m }

// DownSince reports when the planner first saw node down.
func (p *Planner) DownSince(node string) (time.Time, bool) {
	t, ok := p.downSince[node]
	return t, ok
}

// Step observes t at now and returns the commands to propose, in order:
// aborts, completions, direct assignments, then new handoffs. Each
// command carries preconditions, so proposing a stale plan is harmless.
func (p *Planner) Step(t *Table, now time.Time) []Command {
	for name, n := range t.Nodes {
		if n.Status == StatusDown {
			if _, ok := p.downSince[name]; !ok {
				p.downSince[name] = now
			}
		} else {
			delete(p.downSince, name)
		}
	}
	for name := range p.downSince {
		if _, ok := t.Nodes[name]; !ok {
			delete(p.downSince, name)
		}
	}
	if t.ShardCount == 0 {
		return nil
	}

	var aborts, completes, assigns, begins []Move
	moving := 0
	type candidate struct {
		m        Move
		draining bool
	}
	var planned []candidate
	live := map[ShardRef]bool{}

	for _, gn := range t.GroupNames() {
		g := t.Groups[gn]
		eligible := t.Eligible(g.Requires)
		for i, s := range g.Shards {
			ref := ShardRef{Group: gn, Index: i}
			owner := t.Nodes[s.Owner]
			if s.MovingTo != "" {
				live[ref] = true
				m := Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: s.MovingTo}
				target := t.Nodes[s.MovingTo]
				switch {
				case owner == nil || owner.Status == StatusDown || target == nil || target.Status != StatusUp ||
					!target.Manifest.Satisfies(g.Requires):
					aborts = append(aborts, m)
				default:
					since, ok := p.moveSince[ref]
					if !ok {
						since = now
						p.moveSince[ref] = now
					}
					if r, ok := p.refused[ref]; ok && r == m {
						aborts = append(aborts, m)
						p.refusedAt[ref] = now
					} else if c, ok := p.confirmed[ref]; (ok && c == m) || !now.Before(since.Add(p.cfg.FenceDelay)) {
						completes = append(completes, m)
					} else {
						moving++
					}
				}
				continue
			}
			target := Rendezvous(gn, i, eligible)
			switch {
			case target == "" || target == s.Owner:
			case s.Owner == "" || owner == nil:
				assigns = append(assigns, Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: target})
			case owner.Status == StatusDown:
				since, ok := p.downSince[s.Owner]
				if ok && !now.Before(since.Add(p.cfg.FenceDelay)) {
					assigns = append(assigns, Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: target})
				}
			default:
				if at, ok := p.refusedAt[ref]; ok && now.Before(at.Add(p.cfg.FenceDelay)) {
					continue // its last handoff was refused: let the old owner recover first
				}
				planned = append(planned, candidate{
					m:        Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: target},
					draining: owner.Status == StatusDraining,
				})
			}
		}
	}
	for ref := range p.moveSince {
		if !live[ref] {
			delete(p.moveSince, ref)
		}
	}
	for ref := range p.confirmed {
		if !live[ref] {
			delete(p.confirmed, ref)
		}
	}
	for ref := range p.refused {
		if !live[ref] {
			delete(p.refused, ref)
		}
	}
	for ref, at := range p.refusedAt {
		if !now.Before(at.Add(p.cfg.FenceDelay)) {
			delete(p.refusedAt, ref)
		}
	}
	// Draining nodes go first: someone is waiting for them to leave.
	slices.SortStableFunc(planned, func(a, b candidate) int {
		switch {
		case a.draining == b.draining:
			return 0
		case a.draining:
			return -1
		}
		return 1
	})
	for _, c := range planned {
		if moving >= p.cfg.MaxMoving {
			break
		}
		begins = append(begins, c.m)
		moving++
	}

	var out []Command
	for _, x := range []struct {
		op    Op
		moves []Move
	}{{OpAbort, aborts}, {OpComplete, completes}, {OpAssign, assigns}, {OpBegin, begins}} {
		if len(x.moves) > 0 {
			out = append(out, Command{Op: x.op, Moves: x.moves})
		}
	}
	return out
}
