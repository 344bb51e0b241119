package reminders_test

import (
	"context"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// TestHolderSyncFollowsTheKeptShards drives a Holder over a real engine:
// a kept shard is loaded once it may be served and remembered at its
// epoch, a lapse keeps it, a new epoch loads it again, a shard no longer
// kept is released, and with loading off nothing is loaded.
func TestHolderSyncFollowsTheKeptShards(t *testing.T) {
	ctx := context.Background()
	e, err := reminders.New(reminders.Config{Store: prospero.NewMemStore(), Codec: codec{}, Deliver: &deliverer{},
		ShardOf: func(prospero.Identity) string { return "s1" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	defer closeEngine(t, e)
	h := reminders.NewHolder(e, nil)
	owned := map[string]bool{"s1": true, "s2": true, "s3": true, "s4": true}
	check := func(step string, held map[string]uint64) {
		t.Helper()
		for _, sh := range []string{"s1", "s2", "s3", "s4"} {
			want, ok := held[sh]
			if e.Held(sh) != ok || h.EpochOf(sh) != want {
				t.Fatalf("%s: %s held %v at epoch %d, want %v at %d", step, sh, e.Held(sh), h.EpochOf(sh), ok, want)
			}
		}
	}
	h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 3, Serve: true}, "s2": {Epoch: 4}}, owned, true)
	check("takeover", map[string]uint64{"s1": 3})
	h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 3}}, owned, true)
	check("lease lapsed", map[string]uint64{"s1": 3})
	h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 5, Serve: true}}, owned, true)
	check("owner changed and back", map[string]uint64{"s1": 5})
	h.Sync(ctx, nil, owned, true)
	check("moved away", nil)

	// Loaded outside Sync (a call that found it not loaded): kept at the
	// epoch noted first.
	if err := e.Acquire(ctx, "s3"); err != nil {
		t.Fatal(err)
	}
	h.Acquired("s3", 7)
	h.Acquired("s3", 8)
	h.Sync(ctx, map[string]reminders.Kept{"s3": {Epoch: 7, Serve: true}}, owned, true)
	check("acquired by a call", map[string]uint64{"s3": 7})
	if err := h.Release(ctx, "s3"); err != nil {
		t.Fatal(err)
	}
	check("released for a handoff", nil)

	h.Sync(ctx, map[string]reminders.Kept{"s4": {Epoch: 1, Serve: true}}, owned, false)
	check("store damaged", nil)
}
