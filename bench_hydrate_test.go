package tempest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
)

// BenchmarkFirstAskAfterMove measures, in one three-node cluster on
// loopback, the first ask to each persistent counter of the shards a planned move
// (the hand-back to a node that rejoins) gave the new owner, asked from
// a node that stayed: cold (the old owners send no HydrateRequest, so
// the first ask pays the hydration) and warm (the new owner activated
// the counters that were active before the move). Each iteration runs
// both, one round each, on fresh counters; setup is not timed. It
// reports the mean first ask of each and warm/cold.
//
//	go test -run '^$' -bench FirstAskAfterMove -benchtime 3x .
func BenchmarkFirstAskAfterMove(b *testing.B) {
	// Counters that write their value at rest every turn: hydrating one
	// reads its record from the state store, as a real actor's would.
	every := prospero.Persistence{Mode: prospero.PersistEveryTurn}
	c := tempesttest.New(b, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		return demo.Register(n, demo.Options{CounterPersistence: &every})
	}})
	settled := func() bool { return c.Unsettled() == "" }
	ctx := context.Background()
	n1 := c.Node("n1")
	const keys = 128
	var cold, warm time.Duration
	var coldN, warmN int
	round := 0
	for b.Loop() {
		for _, warmed := range []bool{false, true} {
			b.StopTimer()
			round++
			if err := c.Close("n3"); err != nil {
				b.Fatal(err)
			}
			waitForB(b, 60*time.Second, settled)
			for _, n := range c.Nodes() {
				tempest.SetWarmHandoff(n, warmed)
			}
			refs := make([]actor.Ref, keys)
			for k := range keys {
				refs[k] = n1.Ref(demo.Counter, fmt.Sprintf("first%d-%d", round, k))
				if _, err := n1.Ask(ctx, refs[k], demo.Add{N: 1}); err != nil {
					b.Fatal(err)
				}
			}
			n3 := c.Start("n3")
			tempest.SetWarmHandoff(n3, warmed)
			var moved []actor.Ref
			waitForB(b, 60*time.Second, func() bool {
				if !settled() {
					return false
				}
				moved = moved[:0]
				for _, ref := range refs {
					if o, _, _ := n1.Locate(ref); o == "n3" {
						moved = append(moved, ref)
					}
				}
				return len(moved) > 0
			})
			if warmed {
				// What a warm handoff promises: active before traffic.
				waitForB(b, 30*time.Second, func() bool {
					for _, ref := range moved {
						if st, err := n3.Status(ctx, ref); err != nil || !st.Active {
							return false
						}
					}
					return true
				})
			}
			b.StartTimer()
			start := time.Now()
			for _, ref := range moved {
				if _, err := n1.Ask(ctx, ref, demo.Get{}); err != nil {
					b.Fatal(err)
				}
			}
			d := time.Since(start)
			if warmed {
				warm, warmN = warm+d, warmN+len(moved)
			} else {
				cold, coldN = cold+d, coldN+len(moved)
			}
		}
	}
	b.StopTimer()
	if coldN > 0 && warmN > 0 {
		cm := float64(cold.Microseconds()) / float64(coldN)
		wm := float64(warm.Microseconds()) / float64(warmN)
		b.ReportMetric(cm, "cold-µs/first-ask")
		b.ReportMetric(wm, "warm-µs/first-ask")
		b.ReportMetric(wm/cm, "warm/cold")
	}
}
