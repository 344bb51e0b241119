package reminders_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// startedEngine is a started engine over store whose identities are all
// of shard s1, which it holds none of yet.
func startedEngine(t *testing.T, store prospero.StateStore) *reminders.Engine {
	t.Helper()
	e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: &deliverer{},
		ShardOf: func(prospero.Identity) string { return "s1" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestHolderSyncFollowsTheKeptShards drives a Holder over a real engine:
// a kept shard is loaded once it may be served and remembered at its
// epoch, a lapse keeps it, a new epoch loads it again, a shard no longer
// kept is released, and with loading off nothing is loaded.
func TestHolderSyncFollowsTheKeptShards(t *testing.T) {
	ctx := context.Background()
	e := startedEngine(t, prospero.NewMemStore())
	defer closeEngine(t, e)
	h := reminders.NewHolder(e, nil)
	// What the node owns, with epochs, as its table would show alongside
	// keep: the shards kept, and s1 moving away at the end.
	owned := func(keep map[string]reminders.Kept) map[string]uint64 {
		o := map[string]uint64{}
		for sh, k := range keep {
			o[sh] = k.Epoch
		}
		return o
	}
	check := func(step string, held map[string]uint64) {
		t.Helper()
		for _, sh := range []string{"s1", "s2", "s3", "s4"} {
			want, ok := held[sh]
			if e.Held(sh) != ok || h.EpochOf(sh) != want {
				t.Fatalf("%s: %s held %v at epoch %d, want %v at %d", step, sh, e.Held(sh), h.EpochOf(sh), ok, want)
			}
		}
	}
	h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 3, Serve: true}, "s2": {Epoch: 4}},
		owned(map[string]reminders.Kept{"s1": {Epoch: 3}, "s2": {Epoch: 4}}), true)
	check("takeover", map[string]uint64{"s1": 3})
	h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 3}}, owned(map[string]reminders.Kept{"s1": {Epoch: 3}}), true)
	check("lease lapsed", map[string]uint64{"s1": 3})
	h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 5, Serve: true}}, owned(map[string]reminders.Kept{"s1": {Epoch: 5}}), true)
	check("owner changed and back", map[string]uint64{"s1": 5})
	h.Sync(ctx, nil, map[string]uint64{"s1": 5}, true)
	check("moved away", nil)

	// Loaded outside Sync (a call that found it not loaded): kept at the
	// epoch noted first.
	if err := h.AcquireAt(ctx, "s3", 7); err != nil {
		t.Fatal(err)
	}
	if err := h.AcquireAt(ctx, "s3", 8); err != nil {
		t.Fatal(err)
	}
	h.Sync(ctx, map[string]reminders.Kept{"s3": {Epoch: 7, Serve: true}}, map[string]uint64{"s3": 7}, true)
	check("acquired by a call", map[string]uint64{"s3": 7})
	if err := h.Release(ctx, "s3"); err != nil {
		t.Fatal(err)
	}
	check("released for a handoff", nil)

	h.Sync(ctx, map[string]reminders.Kept{"s4": {Epoch: 1, Serve: true}}, map[string]uint64{"s4": 1}, false)
	check("store damaged", nil)
}

// A call loading a shard outside Sync (AcquireAt) races the passes: no
// pass may find the shard held with no epoch recorded, which would make
// it release the shard (dropping what it has not written) and load it
// again. The passes here keep the shard at the epoch the call gave and
// load nothing themselves, so a pass that released it leaves it unheld.
func TestHolderAcquireAtRacesSync(t *testing.T) {
	ctx := context.Background()
	e := startedEngine(t, prospero.NewMemStore())
	defer closeEngine(t, e)
	for i := range 200 {
		h := reminders.NewHolder(e, nil)
		shard := fmt.Sprintf("r%d", i)
		keep := map[string]reminders.Kept{shard: {Epoch: 2, Serve: true}}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 20 {
				h.Sync(ctx, keep, map[string]uint64{shard: 2}, false) // never loads itself
			}
		}()
		if err := h.AcquireAt(ctx, shard, 2); err != nil {
			t.Fatal(err)
		}
		<-done
		if !e.Held(shard) || h.EpochOf(shard) != 2 {
			t.Fatalf("round %d: held %v at epoch %d, want held at 2", i, e.Held(shard), h.EpochOf(shard))
		}
	}
}

// A shard lost to a failover while a change of it was not at rest (a
// cancellation whose write failed: its caller was told so, and the
// reminder stays registered in memory until a write puts it back). The
// release used to write that change: refused while another node owned
// the shard, so the shard stayed held, and written once the shard came
// back at a later epoch, over the records of the owner meanwhile, which
// had cancelled the reminder: it fired again. A shard this node no longer
// owns at the epoch it acquired it in is dropped without writing.
func TestHolderDropsAShardLostWithoutWritingIt(t *testing.T) {
	ctx := context.Background()
	store, e, h := cancelFailedWhileCutOff(t)
	// A failover: another node owns s0 (epoch 2).
	h.Sync(ctx, nil, nil, true)
	if e.Held("s0") {
		t.Error("the shard another node owns is still held here")
	}
	// The other owner cancels r; its deletion reaches this node's copy.
	store.fail.Store(false)
	deleteReminderRecords(t, store.MemStore, "s0")
	// The shard comes back at epoch 3.
	for range 2 {
		h.Sync(ctx, map[string]reminders.Kept{"s0": {Epoch: 3, Serve: true}}, map[string]uint64{"s0": 3}, true)
	}
	if !e.Held("s0") || h.EpochOf("s0") != 3 {
		t.Fatalf("the shard back at epoch 3: held %v at epoch %d", e.Held("s0"), h.EpochOf("s0"))
	}
	if infos, err := e.ListOf(acct); err != nil || len(infos) != 0 {
		t.Fatalf("reminders of %v: %+v, %v: the one the other owner cancelled came back", acct, infos, err)
	}
}

// A shard paused (its node cut off, its lease lapsed) while a change of
// it was not at rest, whose next epoch is already this node's again when
// the table catches up (another node owned it in between): the periodic
// flush used to write the paused shard's leftovers before the reminder
// loop's next pass dropped it, over the records of the owner meanwhile.
// A paused shard is not flushed.
func TestPausedShardIsNotFlushed(t *testing.T) {
	ctx := context.Background()
	store, e, h := cancelFailedWhileCutOff(t)
	// The lease lapsed: paused, still held at epoch 1.
	h.Sync(ctx, map[string]reminders.Kept{"s0": {Epoch: 1}}, map[string]uint64{"s0": 1}, true)
	// Another node owned s0 meanwhile and cancelled r; this node owns it
	// again at epoch 3, and the periodic flush runs before the loop's
	// next pass.
	store.fail.Store(false)
	deleteReminderRecords(t, store.MemStore, "s0")
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		h.Sync(ctx, map[string]reminders.Kept{"s0": {Epoch: 3, Serve: true}}, map[string]uint64{"s0": 3}, true)
	}
	if infos, err := e.ListOf(acct); err != nil || len(infos) != 0 {
		t.Fatalf("reminders of %v: %+v, %v: the one the other owner cancelled came back", acct, infos, err)
	}
}

// cancelFailedWhileCutOff returns an engine holding shard s0 at epoch 1
// (its periodic flush off) with reminder r of acct registered, and a
// cancellation of r whose write failed: the store refuses writes until
// its fail flag is cleared.
func cancelFailedWhileCutOff(t *testing.T) (*faultyStore, *reminders.Engine, *reminders.Holder) {
	t.Helper()
	ctx := context.Background()
	store := &faultyStore{MemStore: prospero.NewMemStore()}
	e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: &deliverer{},
		ShardOf: func(prospero.Identity) string { return "s0" }, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeEngine(t, e) })
	h := reminders.NewHolder(e, nil)
	h.Sync(ctx, map[string]reminders.Kept{"s0": {Epoch: 1, Serve: true}}, map[string]uint64{"s0": 1}, true)
	if err := e.RegisterFor(ctx, acct, reminders.Reminder{Name: "r", Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	store.fail.Store(true) // cut off: the cancellation's write fails
	if err := e.Cancel(ctx, acct, "r"); err == nil {
		t.Fatal("a cancellation whose write failed returned nil")
	}
	return store, e, h
}

// deleteReminderRecords deletes the reminder records of shard from store,
// as their other owner's cancellations reaching this node's copy would.
func deleteReminderRecords(t *testing.T, store *prospero.MemStore, shard string) {
	t.Helper()
	ctx := context.Background()
	recs, err := reminders.Records(ctx, store, shard)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Key != shard {
			if err := store.Delete(ctx, prospero.Identity{Kind: reminders.RecordKind, Key: r.Key}, prospero.AnyVersion); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// slowLoadStore holds the loads of one shard (its head record) until
// open is closed.
type slowLoadStore struct {
	*prospero.MemStore
	shard string
	open  chan struct{}
}

func (s *slowLoadStore) Get(ctx context.Context, id prospero.Identity) (prospero.Record, error) {
	if id == reminders.RecordID(s.shard) {
		select {
		case <-s.open:
		case <-ctx.Done():
			return prospero.Record{}, ctx.Err()
		}
	}
	return s.MemStore.Get(ctx, id)
}

// A call loading a shard slowly (AcquireAt) does not hold up the passes
// over the others: a shard whose lease lapsed is paused meanwhile.
func TestHolderPassesGoOnWhileACallLoads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &slowLoadStore{MemStore: prospero.NewMemStore(), shard: "s2", open: make(chan struct{})}
		e := startedEngine(t, store)
		defer closeEngine(t, e)
		h := reminders.NewHolder(e, nil)
		h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 1, Serve: true}}, map[string]uint64{"s1": 1}, true)
		loaded := make(chan error, 1)
		go func() { loaded <- h.AcquireAt(ctx, "s2", 4) }()
		synctest.Wait() // the load waits in the store
		passed := make(chan struct{})
		go func() {
			h.Sync(ctx, map[string]reminders.Kept{"s1": {Epoch: 1}, "s2": {Epoch: 4, Serve: true}},
				map[string]uint64{"s1": 1, "s2": 4}, false)
			close(passed)
		}()
		synctest.Wait()
		select {
		case <-passed:
		default:
			t.Fatal("a pass waited for a call's load of another shard")
		}
		close(store.open)
		if err := <-loaded; err != nil {
			t.Fatal(err)
		}
		if !e.Held("s2") || h.EpochOf("s2") != 4 {
			t.Fatalf("s2 held %v at epoch %d, want held at 4", e.Held("s2"), h.EpochOf("s2"))
		}
	})
}
