package placement_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/placement"
)

// TestPlannerRandomized drives the planner through seeded random churn
// and checks its safety rules on every command it emits.
func TestPlannerRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			const fenceD = 3 * time.Second
			const maxMoving = 4
			tb := placement.NewTable()
			mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 32})
			// Kinds: tk, "strict" (requires Fairness) and "rare"; nodes
			// publish random subsets with one of two policy digests, as
			// during a rolling upgrade.
			kinds := []placement.KindSpec{{Name: tk}, {Name: "strict", Requires: []manifest.ClauseID{manifest.Fairness}}, {Name: "rare"}}
			p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fenceD, MaxMoving: maxMoving})
			now := time.Unix(0, 0)
			downSeen := map[string]time.Time{} // first step that saw the node down
			beganAt := map[placement.ShardRef]time.Time{}
			confirmed := map[placement.ShardRef]bool{}
			epochs := map[placement.ShardRef]uint64{}
			nodes := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
			for step := 0; step < 300; step++ {
				switch rng.IntN(6) {
				case 0:
					n := nodes[rng.IntN(len(nodes))]
					var m manifest.Manifest
					if rng.IntN(2) == 0 {
						m = mf(manifest.Fairness)
					} else {
						m = mf()
					}
					mustApply(t, tb, node(n, placement.StatusUp, m))
				case 1:
					n := nodes[rng.IntN(len(nodes))]
					mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: n, Status: placement.NodeStatus(1 + rng.IntN(3))})
				case 3: // a node publishes what it hosts
					n := nodes[rng.IntN(len(nodes))]
					if _, ok := tb.Nodes[n]; !ok {
						break
					}
					c := placement.Command{Op: placement.OpHosts, Name: n}
					for _, k := range kinds {
						if rng.IntN(3) > 0 {
							k.Digest = fmt.Sprintf("v%d", rng.IntN(2))
							c.Kinds = append(c.Kinds, k)
						}
					}
					mustApply(t, tb, c)
				case 2: // a handoff callback reports success
					for _, gn := range tb.GroupNames() {
						for i, s := range tb.Groups[gn].Shards {
							if s.MovingTo != "" && rng.IntN(2) == 0 {
								r := placement.ShardRef{Group: gn, Index: i}
								p.Confirm(placement.Move{Shard: r, From: s.Owner, Epoch: s.Epoch, To: s.MovingTo})
								confirmed[r] = true
							}
						}
					}
				}
				now = now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
				for name, ni := range tb.Nodes {
					if ni.Status == placement.StatusDown {
						if _, ok := downSeen[name]; !ok {
							downSeen[name] = now
						}
					} else {
						delete(downSeen, name)
					}
				}
				for _, c := range p.Step(tb, now) {
					for _, m := range c.Moves {
						s, _ := tb.Shard(m.Shard)
						switch c.Op {
						case placement.OpAssign:
							if ni, ok := tb.Nodes[s.Owner]; ok && ni.Status == placement.StatusDown {
								if now.Sub(downSeen[s.Owner]) < fenceD {
									t.Fatalf("step %d: %s taken from down %s after %s < fence", step, m.Shard, s.Owner, now.Sub(downSeen[s.Owner]))
								}
							} else if ok {
								t.Fatalf("step %d: direct reassignment away from live %s (%s)", step, s.Owner, ni.Status)
							}
						case placement.OpBegin:
							beganAt[m.Shard] = now
						case placement.OpComplete:
							if !confirmed[m.Shard] && now.Sub(beganAt[m.Shard]) < fenceD {
								t.Fatalf("step %d: unconfirmed %s completed %s after begin", step, m.Shard, now.Sub(beganAt[m.Shard]))
							}
						}
						switch c.Op {
						case placement.OpShrink:
							if m.To == s.Owner || !slices.Contains(s.Replicas, m.To) {
								t.Fatalf("step %d: shrink %s by %s, not a follower of %+v", step, m.Shard, m.To, s)
							}
							continue
						case placement.OpAssign:
							// Failover from a down owner goes to a live
							// follower of its in-sync set whenever one exists
							// that hosts the kind (with the agreed policy
							// digest or, failing that, another).
							req := tb.Groups[m.Shard.Group].Requires
							for _, f := range s.Followers() {
								ni, ok := tb.Nodes[f]
								if !ok {
									continue
								}
								if _, hosts := ni.Hosts(m.Shard.Group); hosts && s.Owner != "" && ni.Status == placement.StatusUp &&
									ni.Manifest.Satisfies(req) && !slices.Contains(s.Replicas, m.To) {
									t.Fatalf("step %d: %s failed over to %s outside its set %v (live follower %s)", step, m.Shard, m.To, s.Replicas, f)
								}
							}
						}
						if target, ok := tb.Nodes[m.To]; c.Op != placement.OpAbort && (!ok || target.Status != placement.StatusUp) {
							t.Fatalf("step %d: %s %s to %s which is not up", step, c.Op, m.Shard, m.To)
						}
						if c.Op != placement.OpAbort {
							if req := tb.Groups[m.Shard.Group].Requires; !tb.Nodes[m.To].Manifest.Satisfies(req) {
								t.Fatalf("step %d: %s placed on %s, which does not discharge %v", step, m.Shard, m.To, req)
							}
							// The kind's shards go only to nodes that host
							// it with the digest the cluster agrees on; the
							// one exception is a failover to a follower that
							// holds the records but another digest, when no
							// follower with the agreed one is up.
							k, ok := tb.Nodes[m.To].Hosts(m.Shard.Group)
							agreed := tb.Policy(m.Shard.Group).Digest
							if !ok {
								t.Fatalf("step %d: %s %s to %s, which does not host %q", step, c.Op, m.Shard, m.To, m.Shard.Group)
							}
							if k.Digest != agreed {
								eligible := tb.Eligible(m.Shard.Group)
								follower := c.Op == placement.OpAssign && slices.Contains(s.Followers(), m.To)
								for _, f := range s.Followers() {
									follower = follower && !slices.Contains(eligible, f)
								}
								if !follower {
									t.Fatalf("step %d: %s %s to %s, which hosts %q as %+v, agreed digest %q",
										step, c.Op, m.Shard, m.To, m.Shard.Group, k, agreed)
								}
							}
						}
					}
					mustApply(t, tb, c)
					if c.Op == placement.OpComplete || c.Op == placement.OpAbort {
						for _, m := range c.Moves {
							delete(confirmed, m.Shard)
						}
					}
				}
				moving := 0
				for _, gn := range tb.GroupNames() {
					g := tb.Groups[gn]
					for i, s := range g.Shards {
						r := placement.ShardRef{Group: gn, Index: i}
						if s.Epoch < epochs[r] {
							t.Fatalf("step %d: %s epoch went back", step, r)
						}
						epochs[r] = s.Epoch
						if s.MovingTo != "" {
							moving++
						}
						if s.Owner != "" && (len(s.Replicas) == 0 || s.Replicas[0] != s.Owner) {
							t.Fatalf("step %d: %s owned by %s has set %v", step, r, s.Owner, s.Replicas)
						}
						if len(slices.Compact(slices.Sorted(slices.Values(s.Replicas)))) != len(s.Replicas) {
							t.Fatalf("step %d: %s set %v repeats a node", step, r, s.Replicas)
						}
					}
				}
				if moving > maxMoving {
					t.Fatalf("step %d: %d moves in flight", step, moving)
				}
			}
		})
	}
}
