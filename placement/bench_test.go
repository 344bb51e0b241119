package placement_test

import (
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
)

var sinkInt int

func BenchmarkShardOf(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	b.Run("placement.ShardOf", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			sinkInt += placement.ShardOf("counter", keys[i&1023], 1024)
		}
	})
	b.Run("baseline=hash/fnv", func(b *testing.B) {
		b.ReportAllocs()
		h := fnv.New64a()
		for i := 0; b.Loop(); i++ {
			h.Reset()
			h.Write([]byte("counter"))
			h.Write([]byte{0})
			h.Write([]byte(keys[i&1023]))
			sinkInt += int(h.Sum64() % 1024)
		}
	})
}

var sinkErr error

// BenchmarkCheck measures the fence on the routing hot path, against a
// bare map lookup of the owner.
func BenchmarkCheck(b *testing.B) {
	tb := placement.NewTable()
	tb.Apply(placement.Command{Op: placement.OpInit, Shards: 1024})
	tb.Apply(placement.Command{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "a", Status: placement.StatusUp}})
	tb.Apply(hosts("a", tk))
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 1})
	for _, c := range p.Step(tb, time.Unix(0, 0)) {
		tb.Apply(c)
	}
	owners := map[int]string{}
	for i := 0; i < 1024; i++ {
		s, _ := tb.Shard(ref(i))
		owners[i] = s.Owner
	}
	b.Run("CheckOwnership", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			sinkErr = placement.CheckOwnership(tb, "a", ref(i&1023), 1, true)
		}
	})
	b.Run("baseline=map-lookup", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if owners[i&1023] != "a" {
				sinkErr = fmt.Errorf("x")
			}
		}
	})
	b.Run("Node.Check", func(b *testing.B) {
		c := newTestCluster(b, 1)
		n := c.start("solo")
		waitFor(b, 30*time.Second, "settled", func() bool { return c.settled("solo") })
		waitFor(b, 10*time.Second, "lease", func() bool { return n.Check(ref(0), 0, time.Now()) == nil })
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			sinkErr = n.Check(ref(i&63), 0, time.Now())
		}
		if sinkErr != nil {
			b.Fatal(sinkErr)
		}
	})
}
