package tempest_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/tempesttest"
)

// TestActorsInventory lists a kind's identities on a clustered node:
// the active ones, and with dormant also those at rest in its store,
// including one activated before the node restarted.
func TestActorsInventory(t *testing.T) {
	c := demoCluster(t, tempesttest.Options{Nodes: 1})
	n := c.Node("n1")
	ctx := ctxT(t)
	for _, k := range []string{"b", "a", "c"} {
		if _, err := n.AskJSON(ctx, demo.Counter, k, []byte(`{"Add":{"n":1}}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Passivate(ctx, n.Ref(demo.Counter, "b")); err != nil {
		t.Fatal(err)
	}
	keys := func(es []tempest.ActorEntry) (active, dormant []string) {
		for _, e := range es {
			if e.Active {
				active = append(active, e.Key)
			} else {
				dormant = append(dormant, e.Key)
			}
		}
		return
	}
	got, err := n.Actors(ctx, demo.Counter, false)
	if err != nil {
		t.Fatal(err)
	}
	if a, d := keys(got); !slices.Equal(a, []string{"a", "c"}) || d != nil {
		t.Fatalf("active %v, dormant %v; want [a c] and none", a, d)
	}
	// The index is written behind activations: wait until b is listed.
	waitFor(t, 10*time.Second, "b in the dormant inventory", func() bool {
		got, err = n.Actors(ctx, demo.Counter, true)
		_, d := keys(got)
		return err == nil && slices.Equal(d, []string{"b"})
	})
	if a, _ := keys(got); !slices.Equal(a, []string{"a", "c"}) || got[0].Key != "a" || got[1].Key != "b" {
		t.Fatalf("inventory %+v: want a, b, c in key order", got)
	}
	if _, err := n.Actors(ctx, "nokind", false); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
	if got, err := n.Actors(ctx, demo.Echo, true); err != nil || len(got) != 0 {
		t.Fatalf("echo: %v, %v; want nothing", got, err)
	}

	// After a crash and a restart nothing is active, and all three are at
	// rest.
	c.KillAll()
	n = c.Start("n1")
	c.WaitSettled()
	got, err = n.Actors(ctx, demo.Counter, true)
	if a, d := keys(got); err != nil || a != nil || !slices.Equal(d, []string{"a", "b", "c"}) {
		t.Fatalf("after a restart: active %v, dormant %v, %v; want none and [a b c]", a, d, err)
	}
}
