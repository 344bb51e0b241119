package prospero_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// fillBoltStore writes n records to a new store at path and closes it.
func fillBoltStore(t *testing.T, path string, n int) {
	t.Helper()
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]prospero.Identity, n)
	for i := range ids {
		ids[i] = prospero.Identity{Kind: "counter", Key: fmt.Sprintf("k%05d", i)}
	}
	if err := s.Import(context.Background(), ids, prospero.Record{Incarnation: 1, State: []byte(strings.Repeat("s", 300))}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A state store cut to half its size (a full disk, a bad copy) is
// refused at open with ErrCorrupt naming the file: no panic, and no
// node that serves what it cannot read.
func TestBoltStoreTruncatedIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	fillBoltStore(t, path, 2000)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	s, err := prospero.NewBoltStore(path)
	if err == nil {
		// Show what the node would do with it.
		ctx := context.Background()
		for i := range 2000 {
			_, _ = s.Get(ctx, prospero.Identity{Kind: "counter", Key: fmt.Sprintf("k%05d", i)})
		}
		_ = s.Close()
		t.Fatal("a truncated state store opened")
	}
	t.Log(err)
	if !errors.Is(err, prospero.ErrCorrupt) {
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
	var ce *prospero.CorruptError
	if !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("open: %v, want a CorruptError naming %s", err, path)
	}
}

// Garbage written over the middle of the file is found at open too.
func TestBoltStoreGarbageIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	fillBoltStore(t, path, 2000)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(i*7 + 13)
	}
	if _, err := f.WriteAt(junk, fi.Size()/3); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	s, err := prospero.NewBoltStore(path)
	if err == nil {
		_ = s.Close()
		t.Fatal("a damaged state store opened")
	}
	t.Log(err)
	if !errors.Is(err, prospero.ErrCorrupt) {
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
}

// A state store cut short while the node runs (someone truncates the
// file, a bad restore over a live node) used to crash the process with a
// fatal SIGBUS from bbolt's memory map. Every operation now returns
// ErrCorrupt naming the file, and keeps returning it: nothing more is read
// from or written to a file that is no longer what the open check saw.
func TestBoltStoreDamagedWhileOpenIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	fillBoltStore(t, path, 2000)
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	id := prospero.Identity{Kind: "counter", Key: "k00010"}
	if _, err := s.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	if s.Damaged() != nil {
		t.Fatal("damaged before anything happened")
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	check := func(op string, err error) {
		t.Helper()
		var ce *prospero.CorruptError
		if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), path) {
			t.Fatalf("%s on a store cut short: %v, want a CorruptError naming %s", op, err, path)
		}
	}
	_, err = s.Get(ctx, prospero.Identity{Kind: "counter", Key: "k01999"})
	check("Get", err)
	_, err = s.Put(ctx, id, prospero.AnyVersion, prospero.Record{Incarnation: 1, State: []byte("x")})
	check("Put", err)
	check("Delete", s.Delete(ctx, id, prospero.AnyVersion))
	check("Import", s.Import(ctx, []prospero.Identity{id}, prospero.Record{Incarnation: 1}))
	done := make(chan error, 1)
	s.PutAsync(id, prospero.AnyVersion, prospero.Record{Incarnation: 1}, func(_ uint64, err error) { done <- err })
	check("PutAsync", <-done)
	check("Damaged", s.Damaged())
}

// A state store replaced while open (a backup moved over a live node's
// file) is refused too: writes would go to the old, unlinked file and be
// lost at the next start.
func TestBoltStoreReplacedWhileOpenIsAnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	fillBoltStore(t, path, 10)
	fillBoltStore(t, filepath.Join(dir, "backup.db"), 10)
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Rename(filepath.Join(dir, "backup.db"), path); err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(context.Background(), prospero.Identity{Kind: "counter", Key: "k00001"}, prospero.AnyVersion, prospero.Record{Incarnation: 1})
	if !errors.Is(err, prospero.ErrCorrupt) || !strings.Contains(err.Error(), "replaced") || !strings.Contains(err.Error(), path) {
		t.Fatalf("Put to a replaced store: %v", err)
	}
}

// Pages overwritten under a running follower (a bad disk, a stray
// write): the replica stream's apply and the scans that catch-ups,
// handoffs and the inventory run trip bbolt's page assertions. Each
// returns ErrCorrupt naming the file, and the node goes on (and is told
// through DamagedCh) instead of dying of the panic.
func TestBoltStoreReplicaPathsSurvivePagesOverwritten(t *testing.T) {
	for _, op := range []string{"ApplyReplicated", "ScanIDs", "ScanHeld"} {
		t.Run(op, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			fillBoltStore(t, path, 2000)
			s, err := prospero.NewBoltStore(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := f.Stat()
			junk := []byte(strings.Repeat("\xa5\x5a\x3c\xc3", 1024))
			for off := int64(2 * 4096); off < fi.Size(); off += 4096 {
				if _, err := f.WriteAt(junk, off); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			ctx := context.Background()
			all := func(prospero.Identity) bool { return true }
			switch op {
			case "ApplyReplicated":
				recs := make([]prospero.Replicated, 200)
				for i := range recs {
					recs[i] = prospero.Replicated{ID: prospero.Identity{Kind: "counter", Key: fmt.Sprintf("k%05d", i*10)}, Epoch: 9, Version: 99, Incarnation: 1, State: []byte("x")}
				}
				_, err = s.ApplyReplicated(recs)
			case "ScanIDs":
				err = s.ScanIDs(ctx, all, func(prospero.Identity) error { return nil })
			case "ScanHeld":
				err = s.ScanHeld(ctx, all, func(prospero.Identity, uint64, uint64) error { return nil })
			}
			var ce *prospero.CorruptError
			if !errors.As(err, &ce) || ce.Path != path {
				t.Fatalf("%s over overwritten pages: %v, want a CorruptError naming %s", op, err, path)
			}
			select {
			case <-s.DamagedCh():
			default:
				t.Fatal("DamagedCh not closed")
			}
		})
	}
}

// Records at rest whose identity is not valid (an older version wrote
// them) are no damage: the store opens, counts and lists them, Get of
// one is refused, and the held listing a peer reads leaves them out.
func TestBoltStoreCountsInvalidIdentitiesAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	fillBoltStore(t, path, 3)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := []prospero.Identity{{Kind: "counter", Key: "\xff\xfe"}, {Kind: "counter", Key: strings.Repeat("k", actor.MaxKeyLen+1)}}
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("counter"))
		for _, id := range bad {
			if err := b.Put([]byte(id.Key), binary.AppendUvarint(binary.BigEndian.AppendUint64(nil, 99), 1)); err != nil {
				return err
			}
		}
		// The file as an upgrade leaves it: records from before carry
		// no checksum.
		return tx.Bucket([]byte("/epochs")).Put([]byte("/format"), []byte{1})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	got := s.InvalidIdentities()
	if got.Count != len(bad) || len(got.First) != len(bad) {
		t.Fatalf("InvalidIdentities = %d %q, want %q", got.Count, got.First, bad)
	}
	for _, id := range bad {
		if _, err := s.Get(context.Background(), id); !errors.Is(err, prospero.ErrInvalidIdentity) {
			t.Errorf("Get(%q) = %v, want ErrInvalidIdentity", id, err)
		}
	}
	held := 0
	err = s.ScanHeld(context.Background(), func(prospero.Identity) bool { return true }, func(id prospero.Identity, _, _ uint64) error {
		if id.Validate() != nil {
			t.Errorf("ScanHeld listed %q", id)
		}
		held++
		return nil
	})
	if err != nil || held != 3 {
		t.Fatalf("ScanHeld: %d records, %v; want the 3 valid ones", held, err)
	}
}

// A damaged meta page is refused at open, naming it. bbolt keeps two
// and silently uses the other when one does not verify: that is the
// previous transaction, so the last write committed (acknowledged) would
// be lost without a word. A file cut to any size short of its pages is
// refused as cut short, the smallest ones included.
func TestBoltStoreDamagedMetaPageIsCorrupt(t *testing.T) {
	ctx := context.Background()
	id := prospero.Identity{Kind: "counter", Key: "k"}
	for _, page := range []int{0, 1} {
		path := filepath.Join(t.TempDir(), "state.db")
		s, err := prospero.NewBoltStore(path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := s.Put(ctx, id, 0, prospero.Record{State: []byte("1")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, id, v, prospero.Record{State: []byte("2")}); err != nil { // acknowledged
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 8)
		off := int64(page*os.Getpagesize()) + 16 + 48 // the meta's transaction id
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 1
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		s, err = prospero.NewBoltStore(path)
		if err == nil {
			rec, gerr := s.Get(ctx, id)
			_ = s.Close()
			t.Fatalf("meta page %d damaged: the store opened (and reads %q, %v)", page, rec.State, gerr)
		}
		var ce *prospero.CorruptError
		if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), fmt.Sprintf("meta page %d", page)) {
			t.Fatalf("meta page %d damaged: %v, want a CorruptError naming the file and the page", page, err)
		}
	}
	for _, size := range []int64{100, 4096, 8191, 8192, 12288} {
		path := filepath.Join(t.TempDir(), "state.db")
		fillBoltStore(t, path, 2000)
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		_, err := prospero.NewBoltStore(path)
		if !errors.Is(err, prospero.ErrCorrupt) || !strings.Contains(err.Error(), "cut short") {
			t.Fatalf("cut to %d bytes: %v, want ErrCorrupt saying it was cut short", size, err)
		}
	}
}

// A store another process (here another open) holds is not judged from
// its meta pages, which may be read torn while it writes: the open waits
// for bbolt's lock and fails as a lock timeout, never as damage.
func TestBoltStoreHeldElsewhereIsNotCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(context.Background(), prospero.Identity{Kind: "counter", Key: "k"}, 0, prospero.Record{State: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	// Make the meta pages read as damaged to anyone who reads them now.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	saved := make([]byte, 8)
	off := int64(16 + 56) // page 0's checksum
	if _, err := f.ReadAt(saved, off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{1, 2, 3, 4, 5, 6, 7, 8}, off); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = f.WriteAt(saved, off); _ = f.Close() }()
	_, err = prospero.NewBoltStore(path)
	if err == nil || errors.Is(err, prospero.ErrCorrupt) || !errors.Is(err, prospero.ErrStoreInUse) {
		t.Fatalf("a store open elsewhere: %v, want ErrStoreInUse (bbolt's lock timeout), not damage", err)
	}
}

// A directory where the store's file belongs is damage naming the file
// (the agent's code for damaged files, as for the other files of the
// data directory), said to be a directory, not taken for a file cut
// short.
func TestBoltStoreOnADirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := prospero.NewBoltStore(path)
	var ce *prospero.CorruptError
	if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), "it is a directory, not a file") {
		t.Fatalf("a directory as the store: %v, want a CorruptError naming it a directory", err)
	}
}

// A free list that names a page still in use (a torn or misdirected
// write) reads back without a word from bbolt, which hands that page out
// again on the next commit, or panics there. The open check finds it:
// ErrCorrupt naming the file, before anything is written.
func TestBoltStoreFreeListNamingAPageInUseIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	fillBoltStore(t, path, 200)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The newer meta page (see TestBoltStoreDamagedMetaPageIsCorrupt):
	// root bucket's page at 16, free list's page at 32, transaction id
	// at 48, after the 16-byte page header.
	ps := os.Getpagesize()
	ne := binary.NativeEndian
	var root, free, txid uint64
	for _, m := range []int{0, ps} {
		meta := b[m+16:]
		if tx := ne.Uint64(meta[48:]); tx >= txid {
			txid, root, free = tx, ne.Uint64(meta[16:]), ne.Uint64(meta[32:])
		}
	}
	// A free-list page: its id, flags 0x10, a count, an overflow, ids.
	page := make([]byte, ps)
	ne.PutUint64(page, free)
	ne.PutUint16(page[8:], 0x10)
	ne.PutUint16(page[10:], 1)
	ne.PutUint64(page[16:], root)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(page, int64(free)*int64(ps)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	s, err := prospero.NewBoltStore(path)
	if err == nil {
		// Show what the node would do with it.
		_, perr := s.Put(context.Background(), prospero.Identity{Kind: "counter", Key: "new"}, 0, prospero.Record{State: []byte("x")})
		_ = s.Close()
		t.Fatalf("a state store whose free list names a page in use opened; a write then returned %v", perr)
	}
	t.Log(err)
	var ce *prospero.CorruptError
	if !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("open: %v, want a CorruptError naming %s", err, path)
	}
}

// A pending log file that is a symbolic link (to /dev/null, say) or a
// special file would take the writes sent to replicas and give none
// back after a crash: the open refuses it naming it.
func TestBoltStorePendingLogNotAFileIsCorrupt(t *testing.T) {
	for _, target := range []string{os.DevNull, "elsewhere"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "state.db")
		fillBoltStore(t, path, 1)
		name := prospero.PendingLogFiles(path)[1]
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
		s, err := prospero.NewBoltStore(path)
		if err == nil {
			_ = s.Close()
			t.Fatalf("a pending log linked to %s opened", target)
		}
		t.Log(err)
		wantCorruptNaming(t, err, name)
	}
}

// wantCorruptNaming fails t unless err, an open's, is a *CorruptError
// naming path.
func wantCorruptNaming(t *testing.T, err error, path string) {
	t.Helper()
	var ce *prospero.CorruptError
	if !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("open: %v, want a CorruptError naming %s", err, path)
	}
}

// oneRecordFile writes counter/key with state into a new store, closes
// it and returns its path and bytes.
func oneRecordFile(t *testing.T, key, state string) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	id := prospero.Identity{Kind: "counter", Key: key}
	if _, err := s.Put(context.Background(), id, 0, prospero.Record{State: []byte(state)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// A bit flipped in a record's state on the disk (bbolt checksums only
// its meta pages) is found by the record's checksum at open, instead of
// being served and replicated as the actor's state.
func TestBoltStoreFlippedBitInARecordIsCorrupt(t *testing.T) {
	path, b := oneRecordFile(t, "k", "balance=1000;owner=alice")
	at := bytes.Index(b, []byte("balance=1000"))
	if at < 0 || bytes.LastIndex(b, []byte("balance=1000")) != at {
		t.Fatal("the record's state is not in the file once")
	}
	b[at+8] ^= 0x08 // "1000" becomes "9000"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := prospero.NewBoltStore(path)
	if err == nil {
		rec, gerr := s.Get(context.Background(), prospero.Identity{Kind: "counter", Key: "k"})
		_ = s.Close()
		t.Fatalf("opened; the record reads %q, %v", rec.State, gerr)
	}
	t.Log(err)
	var ce *prospero.CorruptError
	if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("open: %v, want a CorruptError naming %s and the checksum", err, path)
	}
}

// A record written before records carried a checksum (the version's top
// bit clear) reads as it did.
func TestBoltStoreReadsRecordsWithoutAChecksum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := binary.BigEndian.AppendUint64(nil, 5)
	old = binary.AppendUvarint(old, 2)
	old = append(old, "state"...)
	if err := db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket([]byte("counter"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), old)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := prospero.Identity{Kind: "counter", Key: "k"}
	rec, err := s.Get(context.Background(), id)
	if err != nil || rec.Version != 5 || rec.Incarnation != 2 || string(rec.State) != "state" {
		t.Fatalf("Get: %+v, %v; want version 5, incarnation 2, state \"state\"", rec, err)
	}
	// Written again, it carries a checksum and reads the same.
	v, err := s.Put(context.Background(), id, 5, prospero.Record{Incarnation: 2, State: []byte("state2")})
	if err != nil || v != 6 {
		t.Fatalf("Put: %d, %v; want version 6", v, err)
	}
	if rec, err := s.Get(context.Background(), id); err != nil || rec.Version != 6 || string(rec.State) != "state2" {
		t.Fatalf("Get after Put: %+v, %v", rec, err)
	}
}

// The record's checksum covers its key and the flag that says it has
// one: a bit flipped in either is found at open too.
func TestBoltStoreFlippedKeyOrFlagIsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name string
		flip func(b []byte, state int)
	}{
		{"in the key", func(b []byte, _ int) {
			at := bytes.Index(b, []byte("alice-account"))
			b[at] ^= 0x02 // "clice-account"
		}},
		{"in the checksum flag", func(b []byte, state int) {
			b[state-1-8] ^= 0x80 // the version's top bit, before the incarnation (one byte) and the state
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, b := oneRecordFile(t, "alice-account", "balance=1000")
			state := bytes.Index(b, []byte("balance=1000"))
			if state < 0 || bytes.Count(b, []byte("alice-account")) != 1 {
				t.Fatal("the record is not in the file once")
			}
			tc.flip(b, state)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := prospero.NewBoltStore(path)
			if err == nil {
				_ = s.Close()
				t.Fatal("opened")
			}
			t.Log(err)
			wantCorruptNaming(t, err, path)
		})
	}
}

// A file whose records are of a format this build does not know (a
// later build's) is refused, not rewritten as this build's.
func TestBoltStoreOfALaterFormatIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	fillBoltStore(t, path, 1)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("/epochs")).Put([]byte("/format"), []byte{9}) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	s, err := prospero.NewBoltStore(path)
	if err == nil {
		_ = s.Close()
		t.Fatal("opened")
	}
	if !errors.Is(err, prospero.ErrCorrupt) || !strings.Contains(err.Error(), "later build") {
		t.Fatalf("open: %v, want ErrCorrupt naming a later build", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the refused open wrote to the file")
	}
}

// formatOf reads the file's format value (the store closed).
func formatOf(t *testing.T, path string) []byte {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	_ = db.View(func(tx *bbolt.Tx) error {
		v = bytes.Clone(tx.Bucket([]byte("/epochs")).Get([]byte("/format")))
		return nil
	})
	return v
}

// setFormat writes the file's format value (the store closed).
func setFormat(t *testing.T, path string, v byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("/epochs")).Put([]byte("/format"), []byte{v}) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A file this build opened may hold epoch values with a checksum (12
// bytes), which a build from before them takes for damage. Its format
// says so in a way such a build refuses as a later build's (any value
// above 2, the last it knew), rather than as damage, which the runbook
// answers by moving the state aside. A file an earlier build wrote opens
// here and is marked so from then on.
func TestAnEarlierBuildRefusesThisBuildsFileAsALaterBuilds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	fillBoltStore(t, path, 3)
	v := formatOf(t, path)
	earlierRefuses := len(v) != 1 || v[0] > 2 // the rule of the builds before epoch checksums
	if !earlierRefuses {
		t.Fatalf("format %x: a build from before epoch checksums would read this file", v)
	}
	// An earlier build's file (format 2, no flag) opens and reads here,
	// and is flagged by the open.
	setFormat(t, path, 2)
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), prospero.Identity{Kind: "counter", Key: "k00001"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := formatOf(t, path); !bytes.Equal(got, v) {
		t.Fatalf("format after an open of an earlier build's file: %x, want %x", got, v)
	}
	// The flag on a format this build does not know is still a later
	// build's.
	setFormat(t, path, v[0]|0x03)
	if s, err := prospero.NewBoltStore(path); err == nil {
		_ = s.Close()
		t.Fatal("opened a file of an unknown flagged format")
	} else if !errors.Is(err, prospero.ErrCorrupt) || !strings.Contains(err.Error(), "later build") {
		t.Fatalf("open: %v, want ErrCorrupt naming a later build", err)
	}
}
