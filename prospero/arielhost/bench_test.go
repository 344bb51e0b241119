package arielhost_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
)

// benchNode is a supervisor on a real scheduler, for benchmarks.
func benchNode(b *testing.B, store prospero.StateStore) (*prospero.Supervisor, *ariel.Scheduler) {
	return benchNodeKind(b, store, persistent)
}

// benchNodeKind is benchNode with the counter kind's options.
func benchNodeKind(b *testing.B, store prospero.StateStore, kind prospero.KindOptions) (*prospero.Supervisor, *ariel.Scheduler) {
	b.Helper()
	sup, err := prospero.NewSupervisor(prospero.Config{Store: store, TickInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sup.Register("counter", func(string) actor.Actor { return &counter{} }, kind); err != nil {
		b.Fatal(err)
	}
	sched, err := ariel.New(ariel.Config{Activator: arielhost.Activator(sup), Faults: arielhost.Faults(sup)})
	if err != nil {
		b.Fatal(err)
	}
	if err := arielhost.Start(sup, sched); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Do not wait for the graceful passivation of every activation
		// (one fsync'd write each): it would dominate the run's wall time.
		short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_ = sup.Close(short)
		ctx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
		defer cancel2()
		_ = sched.Close(ctx)
		_ = store.Close()
	})
	return sup, sched
}

func boltStore(b *testing.B) prospero.StateStore {
	s, err := prospero.NewBoltStore(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkHydration measures dormant → first message handled: an ask to
// an identity whose state is at rest (hydrate, restore, Started turn,
// the ask's turn, the reply). The baseline is the same ask to an active
// actor.
func BenchmarkHydration(b *testing.B) {
	ctx := context.Background()
	b.Run("baseline-active", func(b *testing.B) {
		_, sched := benchNode(b, prospero.NewMemStore())
		ref := actor.Virtual("counter", "warm")
		if _, err := sched.Ask(ctx, ref, "get"); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for b.Loop() {
			t := time.Now()
			if _, err := sched.Ask(ctx, ref, "get"); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		reportPercentiles(b, lat)
	})
	for _, st := range []struct {
		name string
		open func(*testing.B) prospero.StateStore
	}{
		{"mem", func(*testing.B) prospero.StateStore { return prospero.NewMemStore() }},
		{"bolt", boltStore},
	} {
		b.Run("dormant-"+st.name, func(b *testing.B) {
			store := st.open(b)
			// b.N identities at rest, written before the clock starts.
			ids := make([]prospero.Identity, b.N)
			for i := range ids {
				ids[i] = prospero.Identity{Kind: "counter", Key: fmt.Sprint(i)}
			}
			rec := prospero.Record{Incarnation: 1, State: binary.AppendUvarint(nil, 42)}
			if bs, ok := store.(*prospero.BoltStore); ok {
				if err := bs.Import(ctx, ids, rec); err != nil {
					b.Fatal(err)
				}
			} else {
				for _, id := range ids {
					if _, err := store.Put(ctx, id, 0, rec); err != nil {
						b.Fatal(err)
					}
				}
			}
			_, sched := benchNode(b, store)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := time.Now()
				v, err := sched.Ask(ctx, ids[i].Ref(), "get")
				if err != nil || v != uint64(42) {
					b.Fatalf("ask: %v %v", v, err)
				}
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkActivations measures activations per second of fresh
// identities (nothing at rest) under parallel senders; the baseline is
// the same asks to a few already active actors.
func BenchmarkActivations(b *testing.B) {
	ctx := context.Background()
	b.Run("baseline-active", func(b *testing.B) {
		_, sched := benchNode(b, prospero.NewMemStore())
		for i := range 8 {
			if _, err := sched.Ask(ctx, actor.Virtual("counter", fmt.Sprint(i)), "get"); err != nil {
				b.Fatal(err)
			}
		}
		var next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ref := actor.Virtual("counter", fmt.Sprint(next.Add(1)%8))
				if _, err := sched.Ask(ctx, ref, "get"); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "asks/s")
	})
	for _, st := range []struct {
		name string
		open func(*testing.B) prospero.StateStore
	}{
		{"mem", func(*testing.B) prospero.StateStore { return prospero.NewMemStore() }},
		{"bolt", boltStore},
	} {
		b.Run("fresh-"+st.name, func(b *testing.B) {
			_, sched := benchNode(b, st.open(b))
			var next atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ref := actor.Virtual("counter", fmt.Sprint(next.Add(1)))
					if _, err := sched.Ask(ctx, ref, "get"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "activations/s")
		})
	}
}
