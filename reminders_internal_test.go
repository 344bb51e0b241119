package tempest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// The new owner of a handed-off shard deletes the copies it holds of the
// shard's reminder records that the old owner did not ship (it was a
// replica that missed a cancellation): kept, they would bring the
// cancelled reminder back. Other shards' records and actor state stay.
func TestHandoffDropsStaleReminderRecords(t *testing.T) {
	ctx := context.Background()
	store, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := &cluster{n: &Node{store: store}}
	shard := placement.ShardRef{Group: "acct", Index: 1}
	key := func(id, name string) reminders.Key {
		return reminders.Key{ID: prospero.Identity{Kind: "acct", Key: id}, Name: name}
	}
	shipped := reminders.ReminderID("acct#1", key("a", "r"))
	stale := reminders.ReminderID("acct#1", key("b", "r"))
	other := reminders.ReminderID("acct#10", key("c", "r")) // a shard whose name extends this one's
	progress := reminders.RecordID("acct#1")
	actorState := prospero.Identity{Kind: "acct", Key: "a"}
	for _, id := range []prospero.Identity{shipped, stale, other, progress, actorState} {
		if _, err := store.Put(ctx, id, 0, prospero.Record{State: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.dropStaleReminders(ctx, shard, map[string]bool{shipped.Key: true, progress.Key: true}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[prospero.Identity]bool{shipped: true, stale: false, other: true, progress: true, actorState: true} {
		_, err := store.Get(ctx, id)
		if got := err == nil; got != want {
			t.Errorf("%v kept %v, want %v (%v)", id, got, want, err)
		}
	}
	// A handoff that brought no progress record drops a stale one too.
	if err := c.dropStaleReminders(ctx, shard, map[string]bool{shipped.Key: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, progress); err == nil {
		t.Error("a stale progress record kept")
	}
}
