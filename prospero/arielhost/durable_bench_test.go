package arielhost_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// BenchmarkDurableAsk measures an ask that changes an actor's state
// ("add") under each persistence mode, on one node: serially (one client,
// latency) and with 64 clients on 64 actors (throughput, and what group
// commit buys). The baseline, run first in the same run, is the kind that
// persists nothing; every other case also reports its p50 as a ratio to it.
//
//   - none: PersistNone, nothing written.
//   - passivation-bolt: written to bbolt only on passivation (never here).
//   - periodic-bolt: written to bbolt after every turn in the background;
//     the reply does not wait (acknowledged updates can be lost).
//   - every-turn-bolt: reply after commit; the reply waits for the fsync
//     of the group commit that holds the turn's write.
func BenchmarkDurableAsk(b *testing.B) {
	mem := func(*testing.B) prospero.StateStore { return prospero.NewMemStore() }
	cases := []struct {
		name  string
		store func(*testing.B) prospero.StateStore
		mode  prospero.Persistence
	}{
		{"none", mem, prospero.Persistence{Mode: prospero.PersistNone}},
		{"passivation-bolt", boltStore, prospero.Persistence{Mode: prospero.PersistOnPassivation}},
		{"periodic-bolt", boltStore, prospero.Persistence{Mode: prospero.PersistPeriodic, EveryTurns: 1}},
		{"every-turn-bolt", boltStore, prospero.Persistence{Mode: prospero.PersistEveryTurn}},
	}
	for _, shape := range []struct {
		name    string
		clients int
	}{{"serial", 1}, {"64-clients", 64}} {
		var baseP50 float64
		for _, tc := range cases {
			b.Run(shape.name+"/"+tc.name, func(b *testing.B) {
				kind := prospero.KindOptions{IdleTimeout: prospero.NeverIdle, Persistence: tc.mode}
				_, sched := benchNodeKind(b, tc.store(b), kind)
				ctx := context.Background()
				refs := make([]actor.Ref, shape.clients)
				for i := range refs {
					refs[i] = actor.Virtual("counter", fmt.Sprint(i))
					if _, err := sched.Ask(ctx, refs[i], "add"); err != nil {
						b.Fatal(err)
					}
				}
				var (
					mu   sync.Mutex
					lat  = make([]time.Duration, 0, b.N)
					next atomic.Int64
					wg   sync.WaitGroup
				)
				b.ResetTimer()
				start := time.Now()
				for c := range shape.clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var mine []time.Duration
						for next.Add(1) <= int64(b.N) {
							t := time.Now()
							if _, err := sched.Ask(ctx, refs[c], "add"); err != nil {
								b.Error(err)
								return
							}
							mine = append(mine, time.Since(t))
						}
						mu.Lock()
						lat = append(lat, mine...)
						mu.Unlock()
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if len(lat) == 0 {
					return
				}
				reportPercentiles(b, lat)
				b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "asks/s")
				p50 := float64(lat[len(lat)/2].Nanoseconds()) // sorted by reportPercentiles
				if tc.name == "none" {
					baseP50 = p50
				} else if baseP50 > 0 {
					b.ReportMetric(p50/baseP50, "p50-x-none")
				}
			})
		}
	}
}
