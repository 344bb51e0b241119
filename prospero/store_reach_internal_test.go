package prospero

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The damage check is against the pages the store wrote, not the size
// the file once had: bbolt allocates ahead, and cutting only that
// unwritten tail loses nothing (the store serves on and grows the file
// again), while cutting a page it wrote is damage.
func TestBoltStoreDamageIsAboutWrittenPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	id := Identity{Kind: "counter", Key: "a"}
	v, err := s.Put(ctx, id, 0, Record{Incarnation: 1, State: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	reach := s.reach.Load()
	if reach <= 0 || reach >= fi.Size() {
		t.Fatalf("pages reach %d of a %d-byte file: want bbolt's allocation ahead for this test", reach, fi.Size())
	}
	if err := os.Truncate(path, reach); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, id); err != nil || string(rec.State) != "one" {
		t.Fatalf("Get after the unwritten tail was cut: %+v, %v", rec, err)
	}
	if _, err := s.Put(ctx, id, v, Record{Incarnation: 1, State: []byte("two")}); err != nil {
		t.Fatalf("Put after the unwritten tail was cut: %v", err)
	}
	if s.Damaged() != nil {
		t.Fatalf("damaged: %v", s.Damaged())
	}
	if err := os.Truncate(path, s.reach.Load()-4096); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, id)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("Get after a written page was cut: %v, want a CorruptError naming %s", err, path)
	}
}
