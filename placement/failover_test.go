package placement_test

import (
	"os"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
)

// TestFailoverTimeDefaults measures kill → every shard served again with
// the production timing defaults (DownAfter plus the fence delay, about
// 3.5 s; it runs only when TEMPEST_SOAK is set, e.g. from make soak).
// This cluster uses the in-memory raft transport, which has no separate
// heartbeat timeout; package cli's TestFailoverRealProcesses measures the
// real thing.
func TestFailoverTimeDefaults(t *testing.T) {
	if os.Getenv("TEMPEST_SOAK") == "" {
		t.Skip("set TEMPEST_SOAK=1 to measure failover with default timing")
	}
	c := newTestCluster(t, 3)
	c.defaults = true
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 60*time.Second, "settled", func() bool { return c.settled(names...) })
	leader := c.leaders()[0]
	var victim string
	for _, n := range names {
		if n != leader {
			victim = n
		}
	}
	owned := c.node(leader).Table().Owned(victim)
	killed := time.Now()
	// A crash as raft sees it; gossip has not noticed (the slower path).
	c.stop(victim, placement.PeerAlive)
	waitFor(t, 60*time.Second, "failover", func() bool {
		for _, r := range owned {
			ok := false
			for _, n := range c.live() {
				if n.Check(r, 0, time.Now()) == nil {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
	d := placement.DefaultConfig()
	t.Logf("failover with defaults (raft-detected crash): %s; DownAfter %s + fence delay %s",
		time.Since(killed).Round(10*time.Millisecond), d.DownAfter, placement.FenceDelay(d.Lease, d.ClockDrift, d.LeaseMargin))
}
