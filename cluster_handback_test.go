package tempest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/tempesttest"
)

// TestClusterHandbackKeepsAcknowledgedAdds restarts a node on its own
// data dir while counters take a continuous stream of Adds through a
// node that stays up. The restarted node first hands its shards off,
// then takes shards back from the nodes that served them meanwhile: no
// acknowledged Add may be lost, and no reply may fall below one already
// acknowledged.
func TestClusterHandbackKeepsAcknowledgedAdds(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	n1 := c.Node("n1")

	// Counters spread over the shards, each asked by its own goroutine
	// one Add at a time, so that every reply is the count of Adds it
	// has seen.
	const keys = 24
	type tally struct {
		acked     int64 // acknowledged Adds
		attempted int64 // Adds sent (an unacknowledged one may have run)
		last      int64 // highest acknowledged reply
		bad       []string
	}
	tallies := make([]tally, keys)
	var total atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := n1.Ref(demo.Counter, fmt.Sprintf("h%d", k))
			tl := &tallies[k]
			for loadCtx.Err() == nil {
				actx, acancel := context.WithTimeout(loadCtx, 5*time.Second)
				tl.attempted++
				got, err := n1.Ask(actx, ref, demo.Add{N: 1})
				acancel()
				if err != nil {
					continue
				}
				v := got.(demo.CounterValue).N
				if v <= tl.last && len(tl.bad) < 5 {
					tl.bad = append(tl.bad, fmt.Sprintf("reply %d after an acknowledged %d", v, tl.last))
				}
				tl.acked++
				total.Add(1)
				tl.last = max(tl.last, v)
			}
		}()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopLoad()
			wg.Wait()
		}
	}
	defer stop()

	// Let every counter be active somewhere, with n3 among the owners.
	waitFor(t, 20*time.Second, "Adds acknowledged", func() bool { return total.Load() >= 3*keys })
	onN3 := 0
	for k := range keys {
		if o, _, _ := n1.Locate(n1.Ref(demo.Counter, fmt.Sprintf("h%d", k))); o == "n3" {
			onN3++
		}
	}
	if onN3 == 0 {
		t.Fatal("no counter on n3; pick more keys")
	}

	for round := range 3 {
		if err := c.Close("n3"); err != nil {
			t.Fatalf("round %d: graceful close of n3: %v", round, err)
		}
		c.WaitSettled()
		c.Start("n3")
		why := ""
		waitFor(t, 30*time.Second, "n3 owning counters again", func() bool {
			if why = c.Unsettled(); why != "" {
				return false
			}
			for k := range keys {
				if o, _, _ := n1.Locate(n1.Ref(demo.Counter, fmt.Sprintf("h%d", k))); o == "n3" {
					return true
				}
			}
			why = "n3 owns none of the counters"
			return false
		}, &why)
	}
	stop()

	for k := range keys {
		tl := tallies[k]
		key := fmt.Sprintf("h%d", k)
		for _, b := range tl.bad {
			t.Errorf("%s: %s", key, b)
		}
		got, err := n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Get{})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		v := got.(demo.CounterValue).N
		if v < tl.acked || v > tl.attempted {
			t.Errorf("%s = %d after %d acknowledged Adds of %d sent", key, v, tl.acked, tl.attempted)
		}
	}
	checkSingleActivation(t, c)
}
