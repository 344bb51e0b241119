package tempest_test

import (
	"context"
	"fmt"
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
