package prospero_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
)

func putOne(t *testing.T, s *prospero.BoltStore, key string) {
	t.Helper()
	id := prospero.Identity{Kind: "counter", Key: key}
	rec, err := s.Get(context.Background(), id)
	if err != nil && !errors.Is(err, prospero.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), id, rec.Version, prospero.Record{State: []byte(key)}); err != nil {
		t.Fatal(err)
	}
}

// openPutClose opens the store at path, writes key and closes it.
func openPutClose(t *testing.T, path, key string) {
	t.Helper()
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	putOne(t, s, key)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func copyStore(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func wantReplaced(t *testing.T, path string) {
	t.Helper()
	s, err := prospero.NewBoltStore(path)
	if err == nil {
		_ = s.Close()
		t.Fatal("opened")
	}
	t.Log(err)
	if !errors.Is(err, prospero.ErrStoreReplaced) {
		t.Fatalf("open: %v, want ErrStoreReplaced", err)
	}
	wantCorruptNaming(t, err, path)
}

// A state store removed, replaced by another, or by an older copy of
// itself (a backup) under a stopped node is refused at the next open:
// in a cluster the node would serve it as the owner it still is, and its
// replicas would take it over what was acknowledged. Removing the mark
// accepts the file (restored on purpose).
func TestBoltStoreReplacedUnderAStoppedNodeIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	backup := filepath.Join(dir, "backup.db")
	openPutClose(t, path, "a")
	copyStore(t, path, backup)
	openPutClose(t, path, "a") // acknowledged after the backup
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	mark := prospero.MarkFile(path)
	markAtOpen := filepath.Join(dir, "mark-at-open")
	copyStore(t, mark, markAtOpen)
	putOne(t, s, "a")
	// A copy of the running store, and of its mark as written at open,
	// is what a crash (kill -9) leaves.
	crashed := filepath.Join(dir, "crashed.db")
	copyStore(t, path, crashed)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.db")
	copyStore(t, path, good)
	goodMark := filepath.Join(dir, "good-mark")
	copyStore(t, mark, goodMark)

	t.Run("an older copy", func(t *testing.T) {
		copyStore(t, backup, path)
		wantReplaced(t, path)
	})
	t.Run("removed", func(t *testing.T) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		wantReplaced(t, path)
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused open created a file: %v", err)
		}
	})
	t.Run("another store", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "state.db")
		o, err := prospero.NewBoltStore(other)
		if err != nil {
			t.Fatal(err)
		}
		putOne(t, o, "a")
		putOne(t, o, "b")
		putOne(t, o, "c")
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
		copyStore(t, other, path)
		wantReplaced(t, path)
	})
	t.Run("the last copy", func(t *testing.T) {
		copyStore(t, good, path)
		s, err := prospero.NewBoltStore(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("after a crash", func(t *testing.T) {
		copyStore(t, markAtOpen, mark)
		copyStore(t, backup, path)
		wantReplaced(t, path) // older than the last open
		copyStore(t, crashed, path)
		s, err := prospero.NewBoltStore(path)
		if err != nil {
			t.Fatalf("the store a crash left: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		copyStore(t, goodMark, mark)
	})
	t.Run("a copy from a clean stop, after a start that wrote nothing", func(t *testing.T) {
		// A cold backup, then a start and a crash (kill -9): the start
		// wrote no record, and the mark at close is never written.
		copyStore(t, good, path)
		copyStore(t, goodMark, mark)
		cold := filepath.Join(t.TempDir(), "cold.db")
		copyStore(t, path, cold)
		s, err := prospero.NewBoltStore(path)
		if err != nil {
			t.Fatal(err)
		}
		markAtOpen := filepath.Join(t.TempDir(), "mark")
		copyStore(t, mark, markAtOpen)
		_ = s.Close()
		copyStore(t, markAtOpen, mark)
		copyStore(t, cold, path)
		wantReplaced(t, path)
		copyStore(t, good, path)
		copyStore(t, goodMark, mark)
	})
	t.Run("restored on purpose", func(t *testing.T) {
		copyStore(t, backup, path)
		if err := os.Remove(mark); err != nil {
			t.Fatal(err)
		}
		s, err := prospero.NewBoltStore(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = prospero.NewBoltStore(path) // and marked again
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
	})
	t.Run("a mark of zeros: a first write cut off by a crash", func(t *testing.T) {
		if err := os.WriteFile(mark, make([]byte, 40), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := prospero.NewBoltStore(path)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a damaged mark", func(t *testing.T) {
		if err := os.WriteFile(mark, []byte("garbage, not a mark"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := prospero.NewBoltStore(path)
		wantCorruptNaming(t, err, mark)
	})
}

// A crash while one slot of the mark is written leaves the other.
func TestBoltStoreMarkSurvivesATornSlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	for range 3 {
		openPutClose(t, path, "a")
	}
	for slot := range 2 {
		b, err := os.ReadFile(prospero.MarkFile(path))
		if err != nil {
			t.Fatal(err)
		}
		torn := append([]byte(nil), b...)
		torn[slot*64+10] ^= 0xff
		if err := os.WriteFile(prospero.MarkFile(path), torn, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := prospero.NewBoltStore(path)
		if err != nil {
			t.Fatalf("slot %d torn: %v", slot, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
