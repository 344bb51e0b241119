package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
)

// A node whose state store is damaged while it runs shuts down without a
// handoff (none could succeed: it cannot read what it would ship) and says
// why; its counters, replicated to the other nodes, answer there with
// every acknowledged Add.
func TestShutdownOfADamagedStoreSkipsTheHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	var mu sync.Mutex
	dirs := map[string]string{}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3,
		Register: func(n *tempest.Node) error { return demo.Register(n, demo.Options{}) },
		Configure: func(name string, cfg *tempest.Config) {
			mu.Lock()
			dirs[name] = cfg.DataDir
			mu.Unlock()
		}})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	n1, n3 := c.Node("n1"), c.Node("n3")
	var keys []string
	for i := 0; len(keys) < 8; i++ {
		key := fmt.Sprintf("k%d", i)
		if c.Owner(actor.Virtual(demo.Counter, key)).Name() == "n3" {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		if _, err := n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Add{N: 1}); err != nil {
			t.Fatalf("add %s: %v", key, err)
		}
	}
	mu.Lock()
	path := filepath.Join(dirs["n3"], tempest.StateFile)
	mu.Unlock()
	// Moved away under the running node (as a backup moved over it
	// would be): found before the next transaction. Cutting the file
	// short instead can fault a write transaction that then holds
	// bbolt's lock for good, and the goroutine waiting for it outlives
	// the test.
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	// n3 finds the damage when it next needs the file.
	for i := 0; n3.StoreDamage() == nil; i++ {
		_, _ = n3.Ask(ctx, n3.Ref(demo.Counter, fmt.Sprintf("new%d", i)), demo.Add{N: 1})
		if ctx.Err() != nil {
			t.Fatal("n3 never found its state store damaged")
		}
	}
	err := n3.Shutdown(ctx)
	if !errors.Is(err, tempest.ErrHandoffIncomplete) || !errors.Is(err, prospero.ErrCorrupt) {
		t.Fatalf("Shutdown of a damaged node: %v, want ErrHandoffIncomplete naming the damage", err)
	}
	for _, n := range []*tempest.Node{n1, c.Node("n2")} {
		if a := n.FederationStats().HandoffsAborted; a != 0 {
			t.Errorf("%s: %d handoffs aborted: the damaged node began handoffs", n.Name(), a)
		}
	}
	for _, key := range keys {
		// An ask in flight to n3 as it went fails with an unknown
		// outcome, as after a crash; a read may be asked again.
		v, err := n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Get{})
		for errors.Is(err, actor.ErrProcessUnavailable) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond) // a client's pause before asking again
			v, err = n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Get{})
		}
		if err != nil {
			t.Fatalf("get %s after the shutdown: %v", key, err)
		}
		if got := v.(demo.CounterValue).N; got < 1 {
			t.Errorf("%s = %d after its owner's shutdown, 1 acknowledged", key, got)
		}
	}
}
