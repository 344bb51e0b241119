package tempest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
)

// BenchmarkAsk compares an ask whose actor lives on the asking node
// (direct: scheduler only) with one forwarded to the owner on another
// node (QUIC round trip, encoding, the owner's fence and scheduler), in
// one two-node cluster on loopback. The standalone case is the baseline
// without any cluster routing.
func BenchmarkAsk(b *testing.B) {
	solo, err := tempest.New(tempest.Config{Name: "solo", DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	if err := demo.Register(solo, demo.Options{}); err != nil {
		b.Fatal(err)
	}
	if err := solo.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer solo.Close(context.Background())

	c := newBenchCluster(b)
	n1 := c.start("n1", 2)
	c.start("n2", 2)
	waitForB(b, 30*time.Second, c.settled)
	direct, forwarded := "", ""
	for k := 0; direct == "" || forwarded == ""; k++ {
		key := fmt.Sprintf("k%d", k)
		owner, _, err := n1.Locate(n1.Ref(demo.Echo, key))
		if err != nil {
			b.Fatal(err)
		}
		if owner == "n1" && direct == "" {
			direct = key
		} else if owner == "n2" && forwarded == "" {
			forwarded = key
		}
	}
	ctx := context.Background()
	msg := demo.EchoIn{Text: "benchmark"}
	for _, bc := range []struct {
		name string
		n    *tempest.Node
		key  string
	}{{"standalone", solo, "k"}, {"cluster-direct", n1, direct}, {"cluster-forwarded", n1, forwarded}} {
		b.Run(bc.name, func(b *testing.B) {
			ref := bc.n.Ref(demo.Echo, bc.key)
			if _, err := bc.n.Ask(ctx, ref, msg); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := bc.n.Ask(ctx, ref, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFailover measures the time from killing a node (no leave)
// until every actor it owned answers again on the survivors, with the
// test timing and with the default timing (run with -benchtime 1x).
func BenchmarkFailover(b *testing.B) {
	for _, tc := range []struct {
		name   string
		gossip membership.Timing
		place  placement.Config
	}{
		{"test-timing", gossipTiming(), placementTiming()},
		{"default-timing", membership.Timing{}, placement.Config{Shards: 64}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += failoverOnce(b, tc.gossip, tc.place)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func failoverOnce(b *testing.B, gossip membership.Timing, place placement.Config) time.Duration {
	b.StopTimer()
	c := newBenchCluster(b)
	c.gossip, c.place = gossip, place
	for _, name := range []string{"n1", "n2", "n3"} {
		c.start(name, 3)
	}
	waitForB(b, 60*time.Second, c.settled)
	n1 := c.live()[0]
	if n1.Name() == "n3" {
		n1 = c.live()[1]
	}
	var keys []string
	for k := 0; len(keys) < 8; k++ {
		key := fmt.Sprintf("k%d", k)
		if owner, _, _ := n1.Locate(n1.Ref(demo.Echo, key)); owner == "n3" {
			keys = append(keys, key)
		}
	}
	ctx := context.Background()
	for _, key := range keys {
		if _, err := n1.Ask(ctx, n1.Ref(demo.Echo, key), demo.EchoIn{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	killed := time.Now()
	_ = tempest.Halt(ctx, c.remove("n3"))
	waitForB(b, 120*time.Second, func() bool {
		for _, key := range keys {
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := n1.Ask(actx, n1.Ref(demo.Echo, key), demo.EchoIn{})
			cancel()
			if err != nil {
				return false
			}
		}
		return true
	})
	d := time.Since(killed)
	b.StopTimer()
	c.haltAll()
	return d
}

func waitForB(b *testing.B, d time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %v", d)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising
	}
}

// BenchmarkDurableAskCluster compares, in one two-node cluster on
// loopback, an ask forwarded to an actor on the other node that persists
// nothing (echo, the baseline) with a forwarded Add to the demo counter,
// which is durable by default (reply after commit on the owner's disk),
// serially and with 32 clients on 32 counters (group commit on the
// owner). Every case reports p50 and p99; the counter's also as a ratio
// to the baseline's p50.
func BenchmarkDurableAskCluster(b *testing.B) {
	c := newBenchCluster(b)
	n1 := c.start("n1", 2)
	c.start("n2", 2)
	waitForB(b, 30*time.Second, c.settled)
	remote := func(kind string, n int) []string {
		var keys []string
		for k := 0; len(keys) < n; k++ {
			key := fmt.Sprintf("%s%d", kind, k)
			if owner, _, err := n1.Locate(n1.Ref(kind, key)); err != nil {
				b.Fatal(err)
			} else if owner == "n2" {
				keys = append(keys, key)
			}
		}
		return keys
	}
	ctx := context.Background()
	var baseP50 float64
	for _, bc := range []struct {
		name    string
		kind    string
		msg     any
		clients int
	}{
		{"forwarded-echo/serial", demo.Echo, demo.EchoIn{Text: "benchmark"}, 1},
		{"forwarded-durable-add/serial", demo.Counter, demo.Add{N: 1}, 1},
		{"forwarded-echo/32-clients", demo.Echo, demo.EchoIn{Text: "benchmark"}, 32},
		{"forwarded-durable-add/32-clients", demo.Counter, demo.Add{N: 1}, 32},
	} {
		b.Run(bc.name, func(b *testing.B) {
			keys := remote(bc.kind, bc.clients)
			for _, key := range keys {
				if _, err := n1.Ask(ctx, n1.Ref(bc.kind, key), bc.msg); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([][]time.Duration, bc.clients)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i, key := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ref := n1.Ref(bc.kind, key)
					for next.Add(1) <= int64(b.N) {
						t := time.Now()
						if _, err := n1.Ask(ctx, ref, bc.msg); err != nil {
							b.Error(err)
							return
						}
						lat[i] = append(lat[i], time.Since(t))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			if len(all) == 0 {
				return
			}
			slices.Sort(all)
			p50 := float64(all[len(all)/2].Nanoseconds())
			b.ReportMetric(p50, "p50-ns")
			b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "asks/s")
			if bc.kind == demo.Echo {
				baseP50 = p50
			} else if baseP50 > 0 {
				b.ReportMetric(p50/baseP50, "p50-x-echo")
			}
		})
	}
}
