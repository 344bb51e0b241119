package tempest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/tempesttest"
)

// TestAskOnePlacementLookupPerHop: an ask reads the placement table once
// on each node it passes, the caller's routing and the owner's admission,
// whether the owner is the caller's node or another. The counts are of
// every read of each node's applied table while one ask of an active
// actor runs; reads of the nodes' background loops can only add to them,
// so each count is the fewest any of a run of asks saw.
func TestAskOnePlacementLookupPerHop(t *testing.T) {
	c := demoCluster(t, tempesttest.Options{Nodes: 2})
	n1, n2 := c.Node("n1"), c.Node("n2")
	var reads [2]atomic.Int64
	tempest.ObservePlacementReads(n1, func() { reads[0].Add(1) })
	tempest.ObservePlacementReads(n2, func() { reads[1].Add(1) })
	t.Cleanup(func() {
		tempest.ObservePlacementReads(n1, nil)
		tempest.ObservePlacementReads(n2, nil)
	})
	keyOn := func(owner string) string {
		for k := 0; ; k++ {
			key := fmt.Sprintf("lookup-%d", k)
			at, _, err := n1.Locate(n1.Ref(demo.Echo, key))
			if err != nil {
				t.Fatal(err)
			}
			if at == owner {
				return key
			}
		}
	}
	ctx := context.Background()
	msg := demo.EchoIn{Text: "lookup"}
	for _, tc := range []struct {
		name   string
		key    string
		n1, n2 int64 // reads per ask on n1 (the caller) and n2
	}{
		{"local owner", keyOn("n1"), 1, 0},
		{"remote owner", keyOn("n2"), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := n1.Ref(demo.Echo, tc.key)
			if _, err := n1.Ask(ctx, ref, msg); err != nil { // activates it
				t.Fatal(err)
			}
			least := [2]int64{-1, -1}
			for range 50 {
				before := [2]int64{reads[0].Load(), reads[1].Load()}
				if _, err := n1.Ask(ctx, ref, msg); err != nil {
					t.Fatal(err)
				}
				for i := range least {
					if d := reads[i].Load() - before[i]; least[i] < 0 || d < least[i] {
						least[i] = d
					}
				}
			}
			if least[0] != tc.n1 || least[1] != tc.n2 {
				t.Errorf("an ask read the placement table %d times on n1 (the caller) and %d on n2, want %d and %d",
					least[0], least[1], tc.n1, tc.n2)
			}
		})
	}
}
