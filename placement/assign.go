package placement

import (
	"slices"
	"strings"
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

// Ranked returns candidates ordered by rendezvous weight for shard index
// of group, best first: Ranked(...)[0] == Rendezvous(...). A shard's
// replica set is a prefix of this order, so adding a node changes only
// the sets it now ranks into.
func Ranked(group string, index int, candidates []string) []string {
	salt := nodeHash(group)
	type wc struct {
		w uint64
		c string
	}
	ws := make([]wc, len(candidates))
	for i, c := range candidates {
		ws[i] = wc{rendezvousWeight(nodeHash(c), salt, index), c}
	}
	slices.SortFunc(ws, func(a, b wc) int {
		switch {
		case a.w > b.w:
			return -1
		case a.w < b.w:
			return 1
		}
		return strings.Compare(a.c, b.c)
	})
	out := make([]string, len(ws))
	for i, x := range ws {
		out[i] = x.c
	}
	return out
}

// PlannerConfig tunes the leader's planner.
type PlannerConfig struct {
	// FenceDelay is how long after a node is seen down (or, without
	// ConfirmMoves, after a handoff began) the planner waits before another
	// node may own its shards. Use FenceDelay(lease, drift, margin).
	FenceDelay time.Duration
	// ConfirmMoves: a planned move completes only once its handoff is
	// confirmed (Confirm). One that is refused or fails (Refuse), or that
	// no outcome reaches for staleMoveFences fence delays (the transfer
	// that would report it ended with the leader that ran it), is
	// aborted: the old owner, alive, keeps the shard and the state it
	// holds. Without it, a move nobody confirms completes after the fence
	// delay, which is safe for single activation but leaves behind the
	// state the old owner did not ship.
	ConfirmMoves bool
	// MaxMoving caps planned handoffs in flight, cluster-wide, so a new
	// node receives its shards gradually.
	MaxMoving int
}

// failedMove is what the planner remembers of a shard's aborted handoffs
// (refused, failed, or unreported) to one target: how many in a row, and
// until when the shard is not moved there again (zero once that passed).
type failedMove struct {
	fails int
	until time.Time
}

// maxRetryFences caps the back-off after repeated aborted handoffs of a
// shard to one target: the next attempt waits one fence delay after the
// first abort, then two, then four, and four from then on. A draining
// owner (someone waits for it to leave) does not wait for a target that
// failed twice in a row: its shard goes to the next-ranked node instead.
const maxRetryFences = 4

// retryAfter returns the back-off after the fails-th aborted handoff in
// a row to one target.
func (p *Planner) retryAfter(fails int) time.Duration {
	d := p.cfg.FenceDelay
	for i := 1; i < fails && d < maxRetryFences*p.cfg.FenceDelay; i++ {
		d *= 2
	}
	return min(d, maxRetryFences*p.cfg.FenceDelay)
}

// aborted notes that m's handoff was aborted at now.
func (p *Planner) aborted(m Move, now time.Time) {
	byTarget := p.failed[m.Shard]
	if byTarget == nil {
		byTarget = map[string]*failedMove{}
		p.failed[m.Shard] = byTarget
	}
	f := byTarget[m.To]
	if f == nil {
		f = &failedMove{}
		byTarget[m.To] = f
	}
	f.fails++
	f.until = now.Add(p.retryAfter(f.fails))
}

// backingOff returns the record of shard's aborted handoffs to target if
// the shard may not be moved there at now.
func (p *Planner) backingOff(shard ShardRef, target string, now time.Time) (*failedMove, bool) {
	f := p.failed[shard][target]
	return f, f != nil && now.Before(f.until)
}

// staleMoveFences is, with ConfirmMoves, how many fence delays a move may
// wait for its handoff's outcome before it is aborted: a backstop. A
// transfer reports within one fence delay less (it runs under that
// deadline), and a new leader starts its own at once, so only a
// Transfer that ignores its context waits that long.
const staleMoveFences = 4

// Planner is the leader's deterministic decision core: given the applied
// table and the leader's clock, it returns the commands that move the
// table toward its target. It keeps leader-local timing (when a node was
// first seen down, when a move began), never replicated: a new leader
// starts its timers afresh, which only ever delays, never hastens, a
// reassignment. Not safe for concurrent use.
type Planner struct {
	cfg       PlannerConfig
	downSince map[string]time.Time
	witnessed map[string]time.Time // see Witnessed
	moveSince map[ShardRef]time.Time
	confirmed map[ShardRef]Move
	refused   map[ShardRef]Move                   // handoffs the old owner could not carry out
	failed    map[ShardRef]map[string]*failedMove // aborted handoffs by shard and target: see retryAfter
	// holdUntil, holdExcept: see Hold.
	holdUntil  time.Time
	holdExcept string
	// ranks caches, by group, the rendezvous ranking of each shard over
	// the group's eligible nodes: they change far less often than the
	// planner steps, and ranking every shard at every step was most of a
	// step's cost.
	ranks map[string]*groupRanks
	// quiet is the last Step that returned nothing: the table it read
	// (by pointer and version) and until when (NextDeadline) the same
	// table gives the same answer. Confirm, Refuse and Witnessed, which
	// change what Step decides from that table, forget it.
	quiet quietStep
}

type quietStep struct {
	t       *Table
	version uint64
	until   time.Time // zero: no deadline
}

// groupRanks is one group's cached rankings over eligible.
type groupRanks struct {
	group    string
	eligible []string
	ranked   [][]string // by shard index; nil until first asked
}

// groupRanks returns group's cached rankings, dropping them when the
// group's eligible nodes changed since they were cached.
func (p *Planner) groupRanks(group string, eligible []string) *groupRanks {
	g := p.ranks[group]
	if g == nil || !slices.Equal(g.eligible, eligible) {
		g = &groupRanks{group: group, eligible: slices.Clone(eligible)}
		p.ranks[group] = g
	}
	return g
}

// at returns Ranked(group, i, eligible), computed once. The result is
// shared: its capacity is its length, so an append copies, and it must
// not be modified in place.
func (g *groupRanks) at(i int) []string {
	if i >= len(g.ranked) {
		g.ranked = slices.Grow(g.ranked, i+1-len(g.ranked))[:i+1]
	}
	r := g.ranked[i]
	if r == nil {
		r = Ranked(g.group, i, g.eligible)
		r = r[:len(r):len(r)]
		g.ranked[i] = r
	}
	return r
}

// Hold makes the fence delay of every node except except that is seen
// down from now on count from until at the earliest. A new leader holds
// its timers for twice the leader lease after its election: until then
// an old leader on the far side of a partition may still be renewing
// the nodes on its side (see the package documentation). The previous
// leader itself is excepted: its own lease was anchored before the
// election.
//
// It changes nothing a Step that reads the same table decides: the hold
// counts only when a node is first seen down, a change of the table.
func (p *Planner) Hold(until time.Time, except string) {
	p.holdUntil, p.holdExcept = until, except
}

// NewPlanner returns a planner with empty timers.
func NewPlanner(cfg PlannerConfig) *Planner {
	if cfg.MaxMoving <= 0 {
		cfg.MaxMoving = 1
	}
	return &Planner{
		cfg:       cfg,
		downSince: map[string]time.Time{},
		witnessed: map[string]time.Time{},
		moveSince: map[ShardRef]time.Time{},
		confirmed: map[ShardRef]Move{},
		refused:   map[ShardRef]Move{},
		failed:    map[ShardRef]map[string]*failedMove{},
		ranks:     map[string]*groupRanks{},
	}
}

// Confirm records that the handoff m (as begun) finished: the old owner
// stopped admitting and shipped its state. The next Step completes it
// without waiting for the fence delay.
func (p *Planner) Confirm(m Move) { p.confirmed[m.Shard], p.quiet = m, quietStep{} }

// Refuse records that the handoff m (as begun) cannot finish now: its old
// owner is alive and answered that it could not ship the shard's state,
// or (with ConfirmMoves) the transfer failed. The next Step aborts the
// move (the old owner keeps the shard and serves it again) instead of
// completing it with state missing, and the shard is not moved to that
// target again for a fence delay, doubling with each abort in a row (see
// maxRetryFences).
func (p *Planner) Refuse(m Move) { p.refused[m.Shard], p.quiet = m, quietStep{} }

// Witnessed records that node's lease was, by its peers' account, last
// renewed no later than at (see the package documentation, "A crashed
// leader's fence"): while the planner sees node down, its shards may go
// to others FenceDelay after at, though not before it was seen down, nor
// later than without the witness. A Step that sees node not down
// forgets it, so a caller gives it again before each Step for as long
// as it holds; a zero at forgets it at once.
func (p *Planner) Witnessed(node string, at time.Time) {
	prev, ok := p.witnessed[node]
	switch {
	case at.IsZero() && !ok, ok && at.Equal(prev):
		return // given again, as callers do before each Step
	case at.IsZero():
		delete(p.witnessed, node)
	default:
		p.witnessed[node] = at
	}
	p.quiet = quietStep{}
}

// fenceEnds is when the shards of node, seen down, may go to others.
func (p *Planner) fenceEnds(node string) (time.Time, bool) {
	since, ok := p.downSince[node]
	if !ok {
		return time.Time{}, false
	}
	end := since.Add(p.cfg.FenceDelay)
	if w, ok := p.witnessed[node]; ok {
		if early := w.Add(p.cfg.FenceDelay); early.Before(end) {
			end = early
		}
		if end.Before(since) {
			end = since
		}
	}
	return end, true
}

// DownSince reports when the planner first saw node down.
func (p *Planner) DownSince(node string) (time.Time, bool) {
	t, ok := p.downSince[node]
	return t, ok
}

// NextDeadline is the earliest instant after after (zero: any) at which
// one of the planner's fence delays runs out (a down node's shards may be
// reassigned, an unconfirmed handoff completed or, with ConfirmMoves,
// aborted, a refused shard moved again), so that its caller can Step then
// instead of at its next periodic pass; false if there is none. A caller
// gives the instant of its last Step: a delay that ran out by then was
// acted on, though it stays while its node stays down.
func (p *Planner) NextDeadline(after time.Time) (time.Time, bool) {
	var next time.Time
	note := func(at time.Time) {
		if at.After(after) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for name := range p.downSince {
		if end, ok := p.fenceEnds(name); ok {
			note(end)
		}
	}
	for _, t := range p.moveSince {
		if p.cfg.ConfirmMoves {
			t = t.Add((staleMoveFences - 1) * p.cfg.FenceDelay)
		}
		note(t.Add(p.cfg.FenceDelay))
	}
	for _, byTarget := range p.failed {
		for _, f := range byTarget {
			if !f.until.IsZero() {
				note(f.until)
			}
		}
	}
	return next, !next.IsZero()
}

// Step observes t at now and returns the commands to propose, in order:
// aborts, completions, direct assignments, then new handoffs. Each
// command carries preconditions, so proposing a stale plan is harmless.
//
// A caller that changes a table between two Steps must change its
// Version (Table.Apply does): Step skips the scan of every shard when it
// is given the table of its last Step, which returned nothing, at the
// same Version, before the next deadline of its timers and with nothing
// confirmed, refused or witnessed since.
func (p *Planner) Step(t *Table, now time.Time) []Command {
	if q := p.quiet; q.t == t && q.version == t.Version && (q.until.IsZero() || now.Before(q.until)) {
		return nil
	}
	out := p.step(t, now)
	p.quiet = quietStep{}
	if len(out) == 0 {
		// A deadline at or before now was acted on by this step.
		until, _ := p.NextDeadline(now)
		p.quiet = quietStep{t: t, version: t.Version, until: until}
	}
	return out
}

func (p *Planner) step(t *Table, now time.Time) []Command {
	for name, n := range t.Nodes {
		if n.Status == StatusDown {
			if _, ok := p.downSince[name]; !ok {
				since := now
				if name != p.holdExcept && since.Before(p.holdUntil) {
					since = p.holdUntil
				}
				p.downSince[name] = since
			}
		} else {
			delete(p.downSince, name)
			delete(p.witnessed, name)
		}
	}
	for name := range p.downSince {
		if _, ok := t.Nodes[name]; !ok {
			delete(p.downSince, name)
		}
	}
	for name := range p.witnessed {
		if n, ok := t.Nodes[name]; !ok || n.Status != StatusDown {
			delete(p.witnessed, name)
		}
	}
	if t.ShardCount == 0 {
		return nil
	}

	var aborts, completes, assigns, begins, shrinks []Move
	var sets [][]string // replica sets of assigns
	moving := 0
	type candidate struct {
		m        Move
		draining bool
	}
	var planned []candidate
	live := map[ShardRef]bool{}

	for _, gn := range t.GroupNames() {
		g := t.Groups[gn]
		eligible := t.Eligible(gn)
		ranks := p.groupRanks(gn, eligible)
		for i, s := range g.Shards {
			ref := ShardRef{Group: gn, Index: i}
			owner := t.Nodes[s.Owner]
			if s.MovingTo != "" {
				live[ref] = true
				m := Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: s.MovingTo}
				target := t.Nodes[s.MovingTo]
				switch {
				case owner == nil || owner.Status == StatusDown || target == nil || !slices.Contains(eligible, s.MovingTo):
					aborts = append(aborts, m)
				default:
					since, ok := p.moveSince[ref]
					if !ok {
						since = now
						p.moveSince[ref] = now
					}
					// A confirmation wins over a refusal of the same move: two
					// transfers of it may run (one per leadership term), and
					// the one that shipped the state decides.
					c, confirmed := p.confirmed[ref]
					r, refused := p.refused[ref]
					switch {
					case confirmed && c == m:
						completes = append(completes, m)
						delete(p.failed[ref], m.To) // it got there
					case refused && r == m:
						aborts = append(aborts, m)
						p.aborted(m, now)
					case !p.cfg.ConfirmMoves && !now.Before(since.Add(p.cfg.FenceDelay)):
						completes = append(completes, m)
					case p.cfg.ConfirmMoves && !now.Before(since.Add(staleMoveFences*p.cfg.FenceDelay)):
						aborts = append(aborts, m)
						p.aborted(m, now)
					default:
						moving++
					}
				}
				continue
			}
			all := ranks.at(i)
			ranked := all
			target := ""
			if len(ranked) > 0 {
				target = ranked[0]
			}
			if r := t.Replication(); len(ranked) > r {
				ranked = ranked[:r:r]
			}
			if target == s.Owner || s.Owner == "" || owner == nil || owner.Status == StatusDown {
				delete(p.failed, ref) // settled where it should be, or placed afresh
			}
			switch {
			case s.Owner != "" && owner != nil && owner.Status == StatusDown:
				// Before the check for a target: with no eligible node
				// (every survivor's store failing, say) the shard still
				// fails over to a live follower holding its records.
				if end, ok := p.fenceEnds(s.Owner); ok && !now.Before(end) {
					if to, set := failoverTarget(t, gn, i, s, eligible, target); to != "" {
						assigns = append(assigns, Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: to})
						sets = append(sets, set)
					}
				}
			case target == "":
			case s.Owner == "" || owner == nil:
				// Nothing was ever committed here (or its owner left the
				// table): every wanted replica is trivially in sync.
				assigns = append(assigns, Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: target})
				sets = append(sets, slices.Clone(ranked)) // ranked is the cache's
			case target == s.Owner:
				shrinks = append(shrinks, staleReplicas(t, ref, s, ranked)...)
			default:
				shrinks = append(shrinks, staleReplicas(t, ref, s, ranked)...)
				// A draining owner's moves go first, and so do those of an
				// owner whose store fails: its writes fail until they move.
				draining := owner.Status == StatusDraining || owner.StoreFailing != ""
				if f, ok := p.backingOff(ref, target, now); ok {
					// Its last handoff there was aborted: let the old owner
					// recover, and the target get ready, first. A draining
					// owner tries the next-ranked node after two failures.
					alt := ""
					if draining && f.fails >= 2 {
						alt = p.nextRanked(ref, all, s.Owner, now)
					}
					if alt == "" {
						continue
					}
					target = alt
				}
				planned = append(planned, candidate{
					m:        Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: target},
					draining: draining,
				})
			}
		}
	}
	for gn := range p.ranks {
		if _, ok := t.Groups[gn]; !ok {
			delete(p.ranks, gn)
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
	for ref, byTarget := range p.failed {
		if _, ok := t.Shard(ref); !ok {
			delete(p.failed, ref)
			continue
		}
		for _, f := range byTarget {
			if !now.Before(f.until) {
				f.until = time.Time{} // passed: no deadline to wake for
			}
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
	}{{OpAbort, aborts}, {OpComplete, completes}, {OpAssign, assigns}, {OpBegin, begins}, {OpShrink, shrinks}} {
		if len(x.moves) > 0 {
			c := Command{Op: x.op, Moves: x.moves}
			if x.op == OpAssign {
				c.Sets = sets
			}
			out = append(out, c)
		}
	}
	return out
}

// failoverTarget picks the new owner of shard s (index i of group gn)
// whose owner is down: the best-ranked follower of its in-sync set that
// is up and eligible, which holds every record the old owner committed;
// its new set is that follower and the set's other live members. A
// shard with no such follower (a set of the owner alone, or one assigned
// before replica sets existed) goes to the rendezvous target with a set
// of that node alone: what only the dead owner held is not available to
// it (docs/cluster.md says when that can happen).
//
// A follower that still hosts the kind but publishes another policy digest
// than the cluster's is not eligible for new shards; it is still preferred
// to a node without the records when no eligible follower is up (losing
// acknowledged state is worse than a short disagreement), and the planner
// hands the shard on to an eligible node, with its state, at the next
// step.
func failoverTarget(t *Table, gn string, i int, s Shard, eligible []string, target string) (string, []string) {
	var live []string
	for _, r := range s.Followers() {
		if slices.Contains(eligible, r) {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		req := t.Groups[gn].Requires
		for _, r := range s.Followers() {
			n := t.Nodes[r]
			if n == nil || n.Status != StatusUp || !n.Manifest.Satisfies(req) {
				continue
			}
			if _, ok := n.Hosts(gn); ok {
				live = append(live, r)
			}
		}
	}
	if len(live) == 0 {
		return target, []string{target}
	}
	to := Rendezvous(gn, i, live)
	set := []string{to}
	for _, r := range live {
		if r != to {
			set = append(set, r)
		}
	}
	return to, set
}

// staleReplicas returns the shrinks that drop from s's in-sync set the
// followers that are down or gone, and those beyond the replica count
// that the ranking no longer wants (once the set is larger than it).
// Dropping a follower never loses a committed record.
func staleReplicas(t *Table, ref ShardRef, s Shard, want []string) []Move {
	var out []Move
	size := len(s.Replicas)
	for _, r := range s.Replicas {
		if r == s.Owner {
			continue // Followers, without allocating
		}
		n := t.Nodes[r]
		switch {
		case n == nil || n.Status == StatusDown:
		case size > t.Replication() && !slices.Contains(want, r):
		default:
			continue
		}
		out = append(out, Move{Shard: ref, From: s.Owner, Epoch: s.Epoch, To: r})
		size--
	}
	return out
}

// nextRanked returns the first node of ranked, other than owner, that
// shard's handoffs are not backing off from at now; "" if there is none.
func (p *Planner) nextRanked(shard ShardRef, ranked []string, owner string, now time.Time) string {
	for _, n := range ranked {
		if _, off := p.backingOff(shard, n, now); n != owner && !off {
			return n
		}
	}
	return ""
}
