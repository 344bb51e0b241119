package prospero_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
