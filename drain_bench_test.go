package tempest_test

import (
	"fmt"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/tempesttest"
)

// BenchmarkGracefulDrain measures how fast a node leaving gracefully
// hands its shards off: three nodes with the default 1,024 shards per
// kind (two kinds), no actors, one node stopped. With the default
// MaxMoving (32 handoffs at a time) against every shard moving at once
// as the baseline in the same run; the metric is shards handed off per
// second.
func BenchmarkGracefulDrain(b *testing.B) {
	for _, moving := range []int{32, 2048} {
		b.Run(fmt.Sprintf("max-moving-%d", moving), func(b *testing.B) {
			var shards int
			var took time.Duration
			for b.Loop() {
				b.StopTimer()
				c := tempesttest.New(b, tempesttest.Options{
					Nodes:         3,
					SettleTimeout: 3 * time.Minute,
					Register:      func(n *tempest.Node) error { return demo.Register(n, demo.Options{}) },
					Configure: func(name string, cfg *tempest.Config) {
						cfg.Cluster.Placement.Shards = 1024
						cfg.Cluster.Placement.MaxMoving = moving
						cfg.Cluster.Placement.ReconcileInterval = time.Second
						cfg.Cluster.LeaveTimeout = 2 * time.Minute
						cfg.CloseTimeout = 3 * time.Minute
					},
				})
				ps, _ := c.Node("n2").PlacementStatus()
				shards += ps.ShardsOwned
				b.StartTimer()
				t0 := time.Now()
				c.Stop("n2")
				took += time.Since(t0)
			}
			b.ReportMetric(float64(shards)/took.Seconds(), "shards/s")
		})
	}
}
