package tempest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/tempesttest"
)

// TestPausedOwnerEndsItsActivationsBeforeTakeover freezes the network of
// an owner whose durable counters are being written: their replication
// round trips hang instead of failing. Once its lease lapses the owner
// must end those activations at once, not after the replication timeout,
// so that no identity is ever active on two nodes: checked from the
// lifecycle events of all three nodes.
func TestPausedOwnerEndsItsActivationsBeforeTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{
		Nodes:    3,
		Register: func(n *tempest.Node) error { return demo.Register(n, demo.Options{}) },
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	victim := c.Node("n3")
	var mine []actor.Ref
	for k := 0; len(mine) < 12 && k < 400; k++ {
		ref := victim.Ref(demo.Counter, fmt.Sprintf("lapse-%d", k))
		if owner, _, _ := victim.Locate(ref); owner == victim.Name() {
			mine = append(mine, ref)
		}
	}
	if len(mine) == 0 {
		t.Fatal("n3 owns none of the keys")
	}

	// Durable writes in flight on the victim when its network freezes:
	// asks made on the victim itself keep coming.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	acked := make(chan struct{}, 1)
	for _, ref := range mine {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, err := victim.Ask(actx, ref, demo.Add{N: 1})
				acancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond) // pacing a refused sender
					continue
				}
				select {
				case acked <- struct{}{}:
				default:
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	<-acked

	c.Pause(victim.Name())
	other := c.Node("n1")
	for _, ref := range mine {
		for {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := other.Ask(actx, ref, demo.Get{})
			acancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never answered for %s after the pause: %v", other.Name(), ref, err)
			}
		}
	}
	for victim.Stats().Supervisor.Active > 0 {
		if ctx.Err() != nil {
			t.Fatalf("the paused owner still holds %d activations", victim.Stats().Supervisor.Active)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	if err := c.SingleActivation(); err != nil {
		t.Error(err)
	}
}

// GET /v1/placement says whether the answering node's table is current:
// a node cut off from the cluster keeps answering from its applied table,
// but once its lease lapses it says so (current false), as `tempest
// placement` then warns.
func TestPlacementOfACutOffNodeIsNotCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	current := func(n *tempest.Node) bool {
		t.Helper()
		srv, err := httpapi.New(httpapi.Config{Node: n})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/placement", nil))
		var pb httpapi.PlacementBody
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &pb) != nil {
			t.Fatalf("GET /v1/placement on %s: %d %s", n.Name(), rec.Code, rec.Body)
		}
		return pb.Current
	}
	n3 := c.Node("n3")
	waitFor(t, 30*time.Second, "n3's table current", func() bool { return current(n3) })
	c.Partition("n3")
	waitFor(t, 30*time.Second, "n3's table no longer current", func() bool { return !current(n3) })
	if !current(c.Node("n1")) {
		t.Error("n1's table is not current while it is in the cluster")
	}
}
