package prospero

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// holdWriter takes bbolt's writer lock of s until the function it returns
// is called: the group committer's next transaction waits for it, so that
// everything queued meanwhile is committed in one group.
func holdWriter(t *testing.T, s *BoltStore) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.db.Update(func(*bolt.Tx) error {
			close(held)
			<-done
			return nil
		})
	}()
	<-held
	return func() { close(done) }
}

// A replica's batches join the node's own group commits: the records of
// other nodes and this node's writes queued together share one
// transaction (one fsync), instead of a transaction each.
func TestApplyReplicatedAsyncSharesTheGroupCommit(t *testing.T) {
	s, err := NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := s.CommitStats()
	release := holdWriter(t, s)
	var wg sync.WaitGroup
	const n = 20
	for i := range n {
		wg.Add(2)
		s.PutAsync(Identity{Kind: "own", Key: fmt.Sprint(i)}, 0, Record{State: []byte("mine")}, func(_ uint64, err error) {
			if err != nil {
				t.Errorf("put: %v", err)
			}
			wg.Done()
		})
		recs := []Replicated{{ID: Identity{Kind: "theirs", Key: fmt.Sprint(i)}, Epoch: 2, Version: 7, State: []byte("copy")}}
		s.ApplyReplicatedAsync(recs, func(applied int, err error) {
			if err != nil || applied != 1 {
				t.Errorf("apply: %d applied, %v", applied, err)
			}
			wg.Done()
		})
	}
	release()
	wg.Wait()
	st := s.CommitStats()
	// The committer may have taken the first write before the writer
	// lock was free, and the rest once it was: two groups at most.
	if groups := st.Groups - before.Groups; groups > 2 {
		t.Errorf("%d writes and %d replicated batches took %d commits, want at most 2", n, n, groups)
	}
	if got := st.Replicated - before.Replicated; got != n {
		t.Errorf("Replicated = %d, want %d", got, n)
	}
	if got := st.Writes - before.Writes; got != n {
		t.Errorf("Writes = %d, want %d", got, n)
	}
	for i := range n {
		rec, err := s.Get(t.Context(), Identity{Kind: "theirs", Key: fmt.Sprint(i)})
		if err != nil || rec.Version != 7 || string(rec.State) != "copy" {
			t.Fatalf("replicated record %d: %+v, %v", i, rec, err)
		}
	}
}

// A replicated batch that cannot be stored fails whole (none of its
// records lands), and alone: the writes and batches queued in the same
// group still commit.
func TestApplyReplicatedAsyncFailedBatchFailsAlone(t *testing.T) {
	s, err := NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A value too short to hold a version: applying over it fails.
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("theirs"))
		if err != nil {
			return err
		}
		return b.Put([]byte("bad"), []byte{1, 2})
	}); err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, s)
	var wg sync.WaitGroup
	wg.Add(4)
	var putErr, goodErr, badErr, laterErr error
	s.PutAsync(Identity{Kind: "own", Key: "a"}, 0, Record{State: []byte("mine")}, func(_ uint64, err error) { putErr = err; wg.Done() })
	s.ApplyReplicatedAsync([]Replicated{{ID: Identity{Kind: "theirs", Key: "good"}, Epoch: 2, Version: 3, State: []byte("g")}},
		func(_ int, err error) { goodErr = err; wg.Done() })
	s.ApplyReplicatedAsync([]Replicated{
		{ID: Identity{Kind: "theirs", Key: "first"}, Epoch: 2, Version: 4, State: []byte("f")},
		{ID: Identity{Kind: "theirs", Key: "bad"}, Epoch: 2, Version: 5, State: []byte("b")},
	}, func(_ int, err error) { badErr = err; wg.Done() })
	s.PutAsync(Identity{Kind: "own", Key: "b"}, 0, Record{State: []byte("mine")}, func(_ uint64, err error) { laterErr = err; wg.Done() })
	release()
	wg.Wait()
	if putErr != nil || goodErr != nil || laterErr != nil {
		t.Fatalf("the other writes of the group failed: %v, %v, %v", putErr, goodErr, laterErr)
	}
	var ce *CorruptError
	if badErr == nil || !errors.As(badErr, &ce) && !errors.Is(badErr, errCorrupt) {
		t.Fatalf("the batch over a damaged record: %v, want an error saying it is damaged", badErr)
	}
	ctx := t.Context()
	for _, id := range []Identity{{Kind: "own", Key: "a"}, {Kind: "own", Key: "b"}, {Kind: "theirs", Key: "good"}} {
		if _, err := s.Get(ctx, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if _, err := s.Get(ctx, Identity{Kind: "theirs", Key: "first"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a record of the failed batch was stored: %v", err)
	}
}

// Get of an identity waits for the replicated records of it queued and
// not committed yet: a replica that acknowledged them on receipt and
// then became the owner (a promotion, a failover) must hydrate from
// them. It read the state from before them, wrote its next state on top
// of that, and the late record then overwrote that write, or failed its
// commit (a newer version stored) and damaged the store.
func TestGetWaitsForQueuedReplicatedRecords(t *testing.T) {
	s, err := NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := Identity{Kind: "counter", Key: "k"}
	if _, err := s.ApplyReplicated([]Replicated{{ID: id, Epoch: 2, Version: 5, State: []byte("old")}}); err != nil {
		t.Fatal(err)
	}
	hold := holdWriter(t, s) // the batch below stays queued
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release()
	applied := make(chan error, 1)
	s.ApplyReplicatedLater([]Replicated{{ID: id, Epoch: 2, Version: 9, State: []byte("acknowledged")}}, func(_ int, err error) { applied <- err })
	got := make(chan Record, 1)
	go func() {
		rec, err := s.Get(t.Context(), id)
		if err != nil {
			t.Error(err)
		}
		got <- rec
	}()
	select {
	case rec := <-got:
		t.Fatalf("Get returned %q (version %d) while a replicated record of it was queued", rec.State, rec.Version)
	case <-time.After(50 * time.Millisecond): // Get must still be waiting: nothing can let it go
	}
	release()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if rec := <-got; rec.Version != 9 || string(rec.State) != "acknowledged" {
		t.Fatalf("Get = %q at version %d, want the queued record", rec.State, rec.Version)
	}
}

// A hold (a replicated batch being checked before it is queued) keeps a
// write of its identities from being decided ahead, and Get of one
// waits for it: a new owner's write either comes after the check, which
// then refuses the batch, or after the batch.
func TestHoldKeepsWritesFromBeingDecidedAhead(t *testing.T) {
	s, err := NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := Identity{Kind: "counter", Key: "k"}
	release := s.Hold(id)
	sent := make(chan uint64, 1)
	done := make(chan error, 1)
	s.PutAsyncSent(id, 0, Record{State: []byte("mine")}, false, func(v uint64) { sent <- v }, func(_ uint64, err error) { done <- err })
	select {
	case v := <-sent:
		t.Fatalf("a write decided ahead (version %d) while a batch of its identity was held", v)
	default:
	}
	got := make(chan Record, 1)
	go func() {
		rec, _ := s.Get(t.Context(), id)
		got <- rec
	}()
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-sent
	if rec := <-got; string(rec.State) != "mine" {
		t.Fatalf("Get = %q, want the write queued behind the hold", rec.State)
	}
}

// ApplyReplicated (a handoff's records) holds its identities while it
// runs: a write of one decided meanwhile would be decided on the state
// without them and then find them stored at a higher version, which
// damaged the store (a write sent to replicas that cannot commit).
func TestApplyReplicatedHoldsItsIdentities(t *testing.T) {
	s, err := NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := Identity{Kind: "counter", Key: "k"}
	hold := holdWriter(t, s) // ApplyReplicated waits for bbolt's writer
	applied := make(chan error, 1)
	go func() {
		_, err := s.ApplyReplicated([]Replicated{{ID: id, Epoch: 3, Version: 50, State: []byte("shipped")}})
		applied <- err
	}()
	for {
		s.pmu.Lock()
		held := s.touched[id] > 0
		s.pmu.Unlock()
		if held {
			break
		}
		runtime.Gosched() // until ApplyReplicated holds id (a state, not a time)
	}
	sent := make(chan uint64, 1)
	done := make(chan error, 1)
	s.PutAsyncSent(id, 0, Record{State: []byte("mine")}, false, func(v uint64) { sent <- v }, func(_ uint64, err error) { done <- err })
	select {
	case v := <-sent:
		t.Fatalf("a write decided ahead (version %d) while a handoff's records of its identity were being stored", v)
	default:
	}
	hold()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	// The write expected no record; the handoff's is there now: a plain
	// conflict for its caller, not damage.
	if err := <-done; err == nil || s.Damaged() != nil {
		t.Fatalf("the write after the handoff's records: %v, store damage %v; want a conflict and no damage", err, s.Damaged())
	}
}
