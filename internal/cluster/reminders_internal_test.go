package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/reminders"
)

// The new owner of a handed-off shard deletes the copies it holds of the
// shard's reminder records that the old owner did not ship (it was a
// replica that missed a cancellation): kept, they would bring the
// cancelled reminder back. Other shards' records and actor state stay,
// and so does a copy of a newer epoch than the old owner's: the removal
// deletes a copy as a replica does when its owner deletes it, never one
// newer by (epoch, version).
func TestHandoffDropsStaleReminderRecords(t *testing.T) {
	ctx := context.Background()
	store, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := &Engine{run: Deps{Store: store}}
	shard := placement.ShardRef{Group: "acct", Index: 1}
	const epoch = 4 // the old owner's
	key := func(id, name string) reminders.Key {
		return reminders.Key{ID: prospero.Identity{Kind: "acct", Key: id}, Name: name}
	}
	shipped := reminders.ReminderID("acct#1", key("a", "r"))
	stale := reminders.ReminderID("acct#1", key("b", "r"))
	staleCopy := reminders.ReminderID("acct#1", key("d", "r"))  // a replica's copy from an older owner
	sameEpoch := reminders.ReminderID("acct#1", key("e", "r"))  // a copy of the old owner's, at its epoch
	newerEpoch := reminders.ReminderID("acct#1", key("f", "r")) // a copy of a newer owner's
	other := reminders.ReminderID("acct#10", key("c", "r"))     // a shard whose name extends this one's
	progress := reminders.RecordID("acct#1")
	actorState := prospero.Identity{Kind: "acct", Key: "a"}
	for _, id := range []prospero.Identity{shipped, stale, other, progress, actorState} {
		if _, err := store.Put(ctx, id, 0, prospero.Record{State: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.ApplyReplicated([]prospero.Replicated{
		{ID: staleCopy, Epoch: epoch - 1, Version: 1 << 20, State: []byte("x")},
		{ID: sameEpoch, Epoch: epoch, Version: 7, State: []byte("x")},
		{ID: newerEpoch, Epoch: epoch + 1, Version: 1, State: []byte("x")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.dropStaleReminders(ctx, shard, epoch, map[string]bool{shipped.Key: true, progress.Key: true}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[prospero.Identity]bool{shipped: true, stale: false, staleCopy: false, sameEpoch: false,
		newerEpoch: true, other: true, progress: true, actorState: true} {
		_, err := store.Get(ctx, id)
		if got := err == nil; got != want {
			t.Errorf("%v kept %v, want %v (%v)", id, got, want, err)
		}
	}
	// A handoff that brought no progress record drops a stale one too.
	if err := c.dropStaleReminders(ctx, shard, epoch, map[string]bool{shipped.Key: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, progress); err == nil {
		t.Error("a stale progress record kept")
	}
}

// A handoff's record is stored at the old owner's epoch (the one before
// the handoff's) and the version it shipped, a reminder record as an
// actor's; one shipped without a version is refused as a bad request,
// whatever its kind.
func TestHandedOffRecordAtTheOldOwnersVersion(t *testing.T) {
	for _, id := range []prospero.Identity{
		reminders.ReminderID("acct#1", reminders.Key{ID: prospero.Identity{Kind: "acct", Key: "a"}, Name: "r"}),
		reminders.RecordID("acct#1"),
		{Kind: "acct", Key: "a"},
	} {
		rec := federation.StateRecord{Group: "acct", Shard: 1, Epoch: 5, Seq: 1,
			Actor: federation.Actor{Kind: id.Kind, Key: id.Key, Incarnation: 3}, State: []byte("x")}
		if _, err := handedOff(&rec, id); !errors.Is(err, federation.ErrBadRequest) {
			t.Errorf("%v shipped without a version: %v, want ErrBadRequest", id, err)
		}
		rec.Version = 9
		r, err := handedOff(&rec, id)
		if err != nil || r.ID != id || r.Epoch != 4 || r.Version != 9 || r.Incarnation != 3 || string(r.State) != "x" || r.Deleted {
			t.Errorf("%v shipped at version 9 of epoch 4: stored as %+v, %v", id, r, err)
		}
	}
}

// faultyReminderStore fails the writes of reminder records on demand:
// with fail set before they reach the store, with landed set after (the
// record is written, yet the caller is told it failed, as when a
// replicated write's replicas do not acknowledge it).
type faultyReminderStore struct {
	prospero.PrefixScanner // no AsyncStore: every write passes Put or Delete
	fail, landed           atomic.Bool
}

var errInjected = errors.New("injected store failure")

func (s *faultyReminderStore) fault(id prospero.Identity, write func() error) error {
	if id.Kind != reminders.RecordKind {
		return write()
	}
	if s.fail.Load() {
		return errInjected
	}
	if err := write(); err != nil {
		return err
	}
	if s.landed.Load() {
		return errInjected
	}
	return nil
}

func (s *faultyReminderStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (v uint64, err error) {
	err = s.fault(id, func() (err error) {
		v, err = s.PrefixScanner.Put(ctx, id, expected, rec)
		return err
	})
	return v, err
}

func (s *faultyReminderStore) Delete(ctx context.Context, id prospero.Identity, expected uint64) error {
	return s.fault(id, func() error { return s.PrefixScanner.Delete(ctx, id, expected) })
}

// holderHost is a running host with a reminder holder and nothing else.
type holderHost struct{ h *reminders.Holder }

func (h holderHost) Running() (*reminders.Holder, error)                 { return h.h, nil }
func (holderHost) Hosts(string) bool                                     { return false }
func (holderHost) StatusHere(context.Context, actor.Ref) (Status, error) { return Status{}, nil }
func (holderHost) PassivateHere(context.Context, actor.Ref) error        { return nil }
func (holderHost) ListReminders(context.Context, actor.Ref) ([]reminders.Info, error) {
	return nil, nil
}
func (holderHost) CancelReminder(context.Context, actor.Ref, string) error { return nil }

type noCodec struct{}

func (noCodec) Encode(string, any) (string, []byte, error) {
	return "", nil, reminders.ErrUnknownPayload
}
func (noCodec) Decode(string, string, []byte) (any, error) { return nil, reminders.ErrUnknownPayload }

type noTicks struct{}

func (noTicks) Deliver(actor.Ref, reminders.Tick, func() bool, func(error)) error { return nil }

// A handoff whose release of the shard's reminders cannot write what is
// not at rest fails, and so does every attempt until one can: none ships
// the records without a change a caller was told of. Here a Cancel
// failed after its deletion landed, so its reminder (registered, and not
// cancelled as far as its callers know) was in memory only; a retried
// handoff used to find the shard released and ship the store without it.
func TestFailedReminderReleaseFailsTheHandoff(t *testing.T) {
	ctx := t.Context()
	bolt, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	store := &faultyReminderStore{PrefixScanner: bolt}
	shard := placement.ShardRef{Group: "acct", Index: 1}
	e, err := reminders.New(reminders.Config{Store: store, Codec: noCodec{}, Deliver: noTicks{},
		ShardOf: func(prospero.Identity) string { return ShardKey(shard) }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.Acquire(ctx, ShardKey(shard)); err != nil {
		t.Fatal(err)
	}
	c := &Engine{h: holderHost{reminders.NewHolder(e, nil)}, run: Deps{Store: bolt}}
	id := prospero.Identity{Kind: "acct", Key: "a"}
	if err := e.RegisterFor(ctx, id, reminders.Reminder{Name: "r", Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	store.landed.Store(true)
	if err := e.Cancel(ctx, id, "r"); !errors.Is(err, errInjected) {
		t.Fatalf("Cancel with its write failing: %v", err)
	}
	store.landed.Store(false)
	store.fail.Store(true)
	for range 2 {
		if recs, err := c.releaseReminders(ctx, shard); !errors.Is(err, errInjected) {
			t.Fatalf("release with the store failing: %d records to ship, %v; want the store's error", len(recs), err)
		}
	}
	store.fail.Store(false)
	recs, err := c.releaseReminders(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	want := reminders.ReminderID(ShardKey(shard), reminders.Key{ID: id, Name: "r"})
	if !slices.ContainsFunc(recs, func(r shipped) bool { return r.id == want }) {
		t.Fatalf("the handoff ships %d records, not the reminder's", len(recs))
	}
	if e.Held(ShardKey(shard)) {
		t.Fatal("the shard is still held after its release")
	}
}
