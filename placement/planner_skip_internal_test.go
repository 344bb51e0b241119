package placement

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/manifest"
)

// TestPlannerSkipDecidesAsAFullStep: Step, which skips its scan when
// nothing it reads changed, returns at every step what a planner that
// always scans (step) returns, through seeded churn of nodes, kinds and
// statuses, confirmations, refusals, witnesses and holds, steps at a
// deadline, a nanosecond before it and at random times, and plans that
// are sometimes not applied (a proposal that failed).
func TestPlannerSkipDecidesAsAFullStep(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			cfg := PlannerConfig{FenceDelay: 3 * time.Second, MaxMoving: 3, ConfirmMoves: seed%2 == 0}
			skip, full := NewPlanner(cfg), NewPlanner(cfg)
			tb := NewTable()
			tb.Apply(Command{Op: OpInit, Shards: 16})
			nodes := []string{"n0", "n1", "n2", "n3", "n4"}
			kinds := []string{"a", "b"}
			now := time.Unix(1000, 0)
			last := now
			for step := 0; step < 400; step++ {
				switch rng.IntN(12) {
				case 0:
					n := nodes[rng.IntN(len(nodes))]
					tb.Apply(Command{Op: OpNode, Node: &NodeInfo{Name: n, Status: StatusUp, Manifest: manifest.Manifest{}}})
				case 1:
					n := nodes[rng.IntN(len(nodes))]
					tb.Apply(Command{Op: OpStatus, Name: n, Status: NodeStatus(1 + rng.IntN(3))})
				case 2:
					n := nodes[rng.IntN(len(nodes))]
					c := Command{Op: OpHosts, Name: n}
					for _, k := range kinds {
						if rng.IntN(3) > 0 {
							c.Kinds = append(c.Kinds, KindSpec{Name: k, Digest: fmt.Sprint("v", rng.IntN(2))})
						}
					}
					tb.Apply(c)
				case 3, 4: // a handoff's outcome
					for _, gn := range tb.GroupNames() {
						for i, s := range tb.Groups[gn].Shards {
							if s.MovingTo == "" || rng.IntN(3) > 0 {
								continue
							}
							m := Move{Shard: ShardRef{Group: gn, Index: i}, From: s.Owner, Epoch: s.Epoch, To: s.MovingTo}
							if rng.IntN(2) == 0 {
								skip.Confirm(m)
								full.Confirm(m)
							} else {
								skip.Refuse(m)
								full.Refuse(m)
							}
						}
					}
				case 5: // a witness, given again or not, or withdrawn
					n := nodes[rng.IntN(len(nodes))]
					at := time.Time{}
					if rng.IntN(3) > 0 {
						at = now.Add(-time.Duration(rng.IntN(5000)) * time.Millisecond)
					}
					skip.Witnessed(n, at)
					full.Witnessed(n, at)
				case 6:
					until := now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
					n := nodes[rng.IntN(len(nodes))]
					skip.Hold(until, n)
					full.Hold(until, n)
				}
				// The next instant: a deadline of the timers, just before
				// one, or a random step forward.
				switch d, _ := skip.NextDeadline(last); {
				case !d.IsZero() && rng.IntN(3) == 0:
					now = d
				case !d.IsZero() && rng.IntN(3) == 0:
					now = d.Add(-time.Nanosecond)
				default:
					now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
				}
				if now.Before(last) {
					now = last
				}
				last = now
				got, want := skip.Step(tb, now), full.step(tb, now)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d at %s: Step returned %+v, a full scan %+v", step, now.Sub(time.Unix(1000, 0)), got, want)
				}
				if rng.IntN(4) > 0 { // else: as if the proposals failed
					for _, c := range got {
						tb.Apply(c)
					}
				}
			}
		})
	}
}
