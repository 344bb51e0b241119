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

// A write that grows the file while another operation checks it is no
// damage: the check read the size before that write and must not compare
// it with the high-water mark the write raised afterwards (a node once
// stopped as "cut short" under load for this).
func TestBoltStoreCheckRacingAGrowingWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	big := make([]byte, 256<<10) // beyond the file's allocation ahead
	grown := false
	statFile = func(name string) (os.FileInfo, error) {
		fi, err := os.Stat(name)
		if !grown {
			grown = true
			// What a concurrent writer does between this stat and the
			// comparison: grow the file, then raise the mark.
			before := s.reach.Load()
			if _, perr := s.Put(ctx, Identity{Kind: "counter", Key: "big"}, 0, Record{Incarnation: 1, State: big}); perr != nil {
				t.Errorf("the concurrent write: %v", perr)
			}
			if s.reach.Load() <= fi.Size() || s.reach.Load() <= before {
				t.Errorf("the concurrent write did not raise the mark past the size seen (%d, was %d, size %d)", s.reach.Load(), before, fi.Size())
			}
		}
		return fi, err
	}
	defer func() { statFile = os.Stat }()
	if _, err := s.Get(ctx, Identity{Kind: "counter", Key: "a"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get racing a growing write = %v, want ErrNotFound", err)
	}
	if d := s.Damaged(); d != nil {
		t.Fatalf("damaged: %v", d)
	}
}
