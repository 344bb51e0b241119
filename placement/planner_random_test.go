package placement_test

import (
	"fmt"
	"math/rand/v2"
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
			mustApply(t, tb, placement.Command{Op: placement.OpKind, Name: "strict", Requires: []manifest.ClauseID{manifest.Fairness}})
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
						if target, ok := tb.Nodes[m.To]; c.Op != placement.OpAbort && (!ok || target.Status != placement.StatusUp) {
							t.Fatalf("step %d: %s %s to %s which is not up", step, c.Op, m.Shard, m.To)
						}
						if c.Op != placement.OpAbort {
							if req := tb.Groups[m.Shard.Group].Requires; !tb.Nodes[m.To].Manifest.Satisfies(req) {
								t.Fatalf("step %d: %s placed on %s, which does not discharge %v", step, m.Shard, m.To, req)
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
					}
				}
				if moving > maxMoving {
					t.Fatalf("step %d: %d moves in flight", step, moving)
				}
			}
		})
	}
}
