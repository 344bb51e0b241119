package prospero

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// putSentAt is putSent for a write made under epoch.
func putSentAt(s *BoltStore, id Identity, epoch, expected uint64, state string) (sent uint64, done chan putOutcome) {
	done = make(chan putOutcome, 1)
	s.PutAsyncSent(id, expected, Record{Epoch: epoch, State: []byte(state)}, false, func(v uint64) { sent = v },
		func(v uint64, err error) { done <- putOutcome{v, err} })
	return sent, done
}

func mustApply(t *testing.T, s *BoltStore, want int, recs ...Replicated) {
	t.Helper()
	n, err := s.ApplyReplicated(recs)
	if err != nil || n != want {
		t.Fatalf("ApplyReplicated: %d applied, %v; want %d", n, err, want)
	}
}

func mustGet(t *testing.T, s *BoltStore, id Identity, epoch uint64, state string) Record {
	t.Helper()
	rec, err := s.Get(context.Background(), id)
	if err != nil || rec.Epoch != epoch || string(rec.State) != state {
		t.Fatalf("Get(%s) = %+v, %v; want epoch %d, state %q", id, rec, err, epoch, state)
	}
	return rec
}

// A node that becomes a shard's owner writes over the copy it held as a
// replica at a version of its own sequence. That write is stored under
// its epoch, so a late copy of the old owner, at a higher version of the
// old owner's sequence but an older epoch, never replaces it.
func TestOwnWritesKeepTheirEpochAgainstOlderCopies(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	id := Identity{Kind: "counter", Key: "a"}
	mustApply(t, s, 1, Replicated{ID: id, Epoch: 5, Version: 10, State: []byte("old owner")})
	v, done := putSentAt(s, id, 6, 10, "new owner")
	if o := <-done; o.err != nil || o.v != v {
		t.Fatalf("write as the new owner: %+v (sent %d)", o, v)
	}
	mustGet(t, s, id, 6, "new owner")
	// The old owner's copy sent before it lost the shard, arriving late.
	mustApply(t, s, 0, Replicated{ID: id, Epoch: 5, Version: v + 100, State: []byte("late copy")})
	mustGet(t, s, id, 6, "new owner")
	// A synchronous write keeps its epoch too.
	if _, err := s.Put(context.Background(), id, v, Record{Epoch: 6, State: []byte("again")}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, 0, Replicated{ID: id, Epoch: 5, Version: v + 200, State: []byte("late copy")})
	rec := mustGet(t, s, id, 6, "again")
	var held []uint64
	err := s.ScanHeld(context.Background(), func(Identity) bool { return true }, func(_ Identity, epoch, version uint64) error {
		held = append(held, epoch, version)
		return nil
	})
	if err != nil || len(held) != 2 || held[0] != 6 || held[1] != rec.Version {
		t.Fatalf("ScanHeld = %v, %v; want [6 %d]", held, err, rec.Version)
	}
}

// A decided write and a copy of an older epoch queued after it share a
// group commit: the write, made by the shard's newer owner, stays.
func TestDecidedWriteOutranksAnOlderEpochsCopyInItsGroup(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	id := Identity{Kind: "counter", Key: "a"}
	mustApply(t, s, 1, Replicated{ID: id, Epoch: 5, Version: 10, State: []byte("old owner")})
	release := holdWriter(t, s)
	_, done := putSentAt(s, id, 6, 10, "new owner")
	applied := make(chan int, 1)
	s.ApplyReplicatedAsync([]Replicated{{ID: id, Epoch: 5, Version: 500, State: []byte("late copy")}}, func(n int, err error) {
		if err != nil {
			t.Errorf("apply: %v", err)
		}
		applied <- n
	})
	release()
	if o := <-done; o.err != nil {
		t.Fatalf("decided write: %v", o.err)
	}
	if n := <-applied; n != 0 {
		t.Fatalf("the older epoch's copy applied (%d records) over the newer owner's write", n)
	}
	mustGet(t, s, id, 6, "new owner")
	if err := s.Damaged(); err != nil {
		t.Fatalf("store damaged: %v", err)
	}
}

// A write of an owner whose shard has moved on (a record of a newer
// epoch is stored) is refused with ErrVersionConflict, sent nowhere, and
// the newer record stays; a decided write that meets one at its commit
// is superseded: not applied, and not damage.
func TestWriteOfAnOlderEpochIsSuperseded(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	id := Identity{Kind: "counter", Key: "a"}
	if _, done := putSentAt(s, id, 5, 0, "mine"); (<-done).err != nil {
		t.Fatal("first write failed")
	}
	mustApply(t, s, 1, Replicated{ID: id, Epoch: 6, Version: 1, State: []byte("newer owner")})
	sent, done := putSentAt(s, id, 5, 1, "stale")
	if o := <-done; sent != 0 || !errors.Is(o.err, ErrVersionConflict) {
		t.Fatalf("write under an older epoch: sent at %d, %v; want none sent and ErrVersionConflict", sent, o.err)
	}
	if _, err := s.Put(context.Background(), id, 1, Record{Epoch: 5, State: []byte("stale")}); !errors.Is(err, ErrVersionConflict) {
		t.Fatalf("Put under an older epoch: %v; want ErrVersionConflict", err)
	}
	mustGet(t, s, id, 6, "newer owner")
	err := s.db.Update(func(tx *bolt.Tx) error {
		applied, err := putDecidedTx(tx, id, 9, Record{Epoch: 5, State: []byte("decided")}, false)
		if applied || !errors.Is(err, ErrVersionConflict) {
			t.Errorf("decided write under an older epoch: applied %v, %v; want ErrVersionConflict", applied, err)
		}
		applied, err = putDecidedTx(tx, id, 1, Record{Epoch: 6, State: []byte("newer owner")}, false)
		if applied || err != nil {
			t.Errorf("the same write given back: applied %v, %v; want not applied", applied, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, id, 6, "newer owner")
	if err := s.Damaged(); err != nil {
		t.Fatalf("store damaged: %v", err)
	}
}

// A standalone node started on a former cluster node's data directory
// writes without an epoch (epoch 0, no placement) over records that all
// carry one: checked by version alone, and stored without an epoch.
// Refused as superseded, every such identity could never be written again.
func TestWriteOutsideAClusterOverAnEpochedRecord(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	a, b := Identity{Kind: "counter", Key: "a"}, Identity{Kind: "counter", Key: "b"}
	v, err := s.Put(context.Background(), a, 0, Record{Epoch: 5, State: []byte("from the cluster")})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, 1, Replicated{ID: b, Epoch: 7, Version: 3, State: []byte("a copy")})
	if v, err = s.Put(context.Background(), a, v, Record{State: []byte("standalone")}); err != nil {
		t.Fatalf("Put without an epoch over the owner's write of epoch 5: %v", err)
	}
	mustGet(t, s, a, 0, "standalone")
	{
		_, done := putSentAt(s, b, 0, 3, "standalone")
		if o := <-done; o.err != nil {
			t.Fatalf("PutAsync without an epoch over a copy of epoch 7: %v", o.err)
		}
	}
	mustGet(t, s, b, 0, "standalone")
	// The version check still holds.
	if _, err := s.Put(context.Background(), a, v-1, Record{State: []byte("stale")}); !errors.Is(err, ErrVersionConflict) {
		t.Fatalf("Put at an old version: %v; want ErrVersionConflict", err)
	}
	// A decided write of epoch 0 written back over a newer version is not
	// applied (by version alone, as an earlier build's entry).
	mustApply(t, s, 1, Replicated{ID: a, Epoch: 9, Version: v + 5, State: []byte("newer")})
	err = s.db.Update(func(tx *bolt.Tx) error {
		applied, err := putDecidedTx(tx, a, v+1, Record{State: []byte("older")}, false)
		if applied || err != nil {
			t.Errorf("decided write of epoch 0 under a newer version: applied %v, %v; want not applied", applied, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, a, 9, "newer")
}

// The epoch of a decided write travels in the pending log: written back
// after a crash, the record has it.
func TestPendingLogKeepsTheEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBoltAt(t, path)
	id := Identity{Kind: "counter", Key: "a"}
	mustApply(t, s, 1, Replicated{ID: id, Epoch: 5, Version: 10, State: []byte("old owner")})
	release := holdCommits(t, nil)
	putSentAt(s, id, 7, 10, "new owner")
	crashed := filepath.Join(t.TempDir(), "state.db")
	copyFile(t, path, crashed)
	copyFile(t, path+".pending", crashed+".pending")
	release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openBoltAt(t, crashed)
	defer r.Close()
	if r.Recovered() != 1 {
		t.Fatalf("Recovered = %d, want 1", r.Recovered())
	}
	mustGet(t, r, id, 7, "new owner")
	mustApply(t, r, 0, Replicated{ID: id, Epoch: 5, Version: 900, State: []byte("late copy")})
}

// An entry of an earlier build's pending log (no epoch after the state)
// still reads, as epoch 0.
func TestPendingEntryWithoutEpochReads(t *testing.T) {
	w := pendingWrite{seq: 1, id: Identity{Kind: "k", Key: "a"}, version: 7, rec: Record{Incarnation: 2, State: []byte("s")}}
	out := decodePending(appendPendingNoEpoch(w))
	if len(out) != 1 || out[0].version != 7 || out[0].rec.Epoch != 0 || !out[0].noEpoch || string(out[0].rec.State) != "s" {
		t.Fatalf("earlier entry: %+v", out)
	}
	w.rec.Epoch = 1 << 40
	if out := decodePending(appendPending(nil, w)); len(out) != 1 || out[0].rec.Epoch != 1<<40 {
		t.Fatalf("entry with an epoch: %+v", out)
	}
}

// A deletion drops the record's epoch with it: a record written at the
// identity later is not taken for one of that epoch.
func TestDeletionDropsTheEpoch(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	id := Identity{Kind: "counter", Key: "a"}
	mustApply(t, s, 1, Replicated{ID: id, Epoch: 9, Version: 10, State: []byte("copy")})
	if err := s.Delete(context.Background(), id, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), id, 0, Record{State: []byte("local")}); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, id, 0, "local")
}

// appendPendingNoEpoch is w's pending log entry as an earlier build
// wrote it: without the epoch (w's must be 0, one byte) after the state.
func appendPendingNoEpoch(w pendingWrite) []byte {
	buf := appendPending(nil, w)
	payload := buf[8 : len(buf)-1]
	out := binary.BigEndian.AppendUint32(nil, uint32(len(payload)+4))
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(payload, castagnoli))
	return append(out, payload...)
}

// An identity's epoch carries a checksum: a bit flipped in it on the
// disk is found at open (a CorruptError naming the record), not read as
// another epoch, which could have this node, as a follower, skip its
// owner's newer records. An earlier build's value (the 8 bytes alone)
// still reads.
func TestFlippedBitInAnEpochIsCorrupt(t *testing.T) {
	id := Identity{Kind: "counter", Key: "a"}
	key := []byte(id.String())
	for _, c := range []struct {
		name  string
		value func(good []byte) []byte
		ok    bool
		epoch uint64
	}{
		{"as written", func(good []byte) []byte { return good }, true, 7},
		{"an earlier build's", func([]byte) []byte { return binary.BigEndian.AppendUint64(nil, 9) }, true, 9},
		{"flipped epoch bit", func(good []byte) []byte { good[7] ^= 1; return good }, false, 0},
		{"flipped sum bit", func(good []byte) []byte { good[11] ^= 0x80; return good }, false, 0},
		{"cut short", func(good []byte) []byte { return good[:10] }, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			s := openBoltAt(t, path)
			mustApply(t, s, 1, Replicated{ID: id, Epoch: 7, Version: 3, State: []byte("copy")})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				eb := tx.Bucket(epochBucket)
				return eb.Put(key, c.value(append([]byte(nil), eb.Get(key)...)))
			})
			if cerr := db.Close(); err != nil || cerr != nil {
				t.Fatal(err, cerr)
			}
			r, err := NewBoltStore(path)
			if !c.ok {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), id.String()) {
					t.Fatalf("open: %v; want a CorruptError naming %s and %s", err, path, id)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			mustGet(t, r, id, c.epoch, "copy")
		})
	}
	if _, err := parseEpoch(key, []byte{}); !errors.Is(err, errCorrupt) {
		t.Fatalf("an empty epoch value: %v; want errCorrupt", err)
	}
}

// A decided write an earlier build logged (no epoch in the entry) and
// did not commit before it stopped is written back at the first start of
// this build as that build would have, by version: that build stored its
// own writes without an epoch, leaving the identity's epoch as a
// replicated copy had set it, so ordering the entry (epoch 0) by epoch
// would drop a write that may have been acknowledged.
func TestEarlierBuildsPendingWriteComesBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBoltAt(t, path)
	id := Identity{Kind: "counter", Key: "a"}
	mustApply(t, s, 1, Replicated{ID: id, Epoch: 5, Version: 10, State: []byte("copy")})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	legacy := appendPendingNoEpoch(pendingWrite{seq: 1, id: id, version: 11, rec: Record{State: []byte("crashed write")}})
	if err := os.WriteFile(path+".pending", legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	r := openBoltAt(t, path)
	defer r.Close()
	if r.Recovered() != 1 {
		t.Fatalf("Recovered = %d, want 1", r.Recovered())
	}
	rec := mustGet(t, r, id, 5, "crashed write")
	if rec.Version != 11 {
		t.Fatalf("version %d, want 11", rec.Version)
	}
}

// A decided write that meets a newer epoch's record in its group commit
// (no path queues one ahead of it today: a replicated batch queued first
// holds the identity, and one queued after commits after it) fails alone
// as superseded; the group commits and the store is not damaged.
func TestSupersededDecidedWriteFailsAlone(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	a, b := Identity{Kind: "counter", Key: "a"}, Identity{Kind: "counter", Key: "b"}
	mustApply(t, s, 1, Replicated{ID: a, Epoch: 6, Version: 3, State: []byte("newer owner")})
	group := []asyncPut{
		{id: a, rec: Record{Epoch: 5, State: []byte("stale")}, decided: 1, version: 20},
		{id: b, rec: Record{Epoch: 5, State: []byte("fine")}, decided: 2, version: 21},
	}
	s.commitGroup(group)
	if err := group[0].err; !errors.Is(err, ErrNotCommitted) || !errors.Is(err, ErrVersionConflict) {
		t.Fatalf("superseded decided write: %v; want ErrNotCommitted and ErrVersionConflict", err)
	}
	if err := group[1].err; err != nil {
		t.Fatalf("the other write of the group: %v", err)
	}
	mustGet(t, s, a, 6, "newer owner")
	mustGet(t, s, b, 5, "fine")
	if err := s.Damaged(); err != nil {
		t.Fatalf("store damaged: %v", err)
	}
}
