package prospero_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/storetest"
)

func TestMemStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) prospero.StateStore { return prospero.NewMemStore() })
}

func TestBoltStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) prospero.StateStore {
		s, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// State at rest survives closing and reopening the database file.
func TestBoltStoreReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "state.db")
	id := prospero.Identity{Kind: "counter", Key: "k"}
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Put(context.Background(), id, 0, prospero.Record{Incarnation: 4, State: []byte("42")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != v || got.Incarnation != 4 || string(got.State) != "42" {
		t.Fatalf("after reopen got %+v, want version %d incarnation 4 state 42", got, v)
	}
	// The version sequence continues; it does not restart at 1.
	v2, err := s.Put(context.Background(), prospero.Identity{Kind: "counter", Key: "other"}, 0, prospero.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if v2 <= v {
		t.Fatalf("version %d after reopen not above %d", v2, v)
	}
}

func TestParseIdentity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want prospero.Identity
		ok   bool
	}{
		{"counter/a", prospero.Identity{Kind: "counter", Key: "a"}, true},
		{"cart/user/42", prospero.Identity{Kind: "cart", Key: "user/42"}, true},
		{"counter", prospero.Identity{Kind: "counter"}, false},
		{"/a", prospero.Identity{Key: "a"}, false},
		{"a/", prospero.Identity{Kind: "a"}, false},
	} {
		got, err := prospero.ParseIdentity(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseIdentity(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, prospero.ErrInvalidIdentity) {
			t.Errorf("ParseIdentity(%q) error %v is not ErrInvalidIdentity", tc.in, err)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}

// BenchmarkStore compares Get and Put on bbolt against the in-memory
// store as the baseline. Put on bbolt pays one fsync per write.
func BenchmarkStore(b *testing.B) {
	state := make([]byte, 128)
	stores := []struct {
		name string
		open func(b *testing.B) prospero.StateStore
	}{
		{"mem", func(*testing.B) prospero.StateStore { return prospero.NewMemStore() }},
		{"bolt", func(b *testing.B) prospero.StateStore {
			s, err := prospero.NewBoltStore(filepath.Join(b.TempDir(), "state.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	ctx := context.Background()
	for _, st := range stores {
		b.Run(st.name+"/Get", func(b *testing.B) {
			s := st.open(b)
			defer s.Close()
			const keys = 1024
			for i := range keys {
				if _, err := s.Put(ctx, prospero.Identity{Kind: "k", Key: fmt.Sprint(i)}, 0, prospero.Record{State: state}); err != nil {
					b.Fatal(err)
				}
			}
			ids := make([]prospero.Identity, keys)
			for i := range ids {
				ids[i] = prospero.Identity{Kind: "k", Key: fmt.Sprint(i)}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := s.Get(ctx, ids[i%keys]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(st.name+"/Put", func(b *testing.B) {
			s := st.open(b)
			defer s.Close()
			id := prospero.Identity{Kind: "k", Key: "hot"}
			var v uint64
			b.ReportAllocs()
			for b.Loop() {
				nv, err := s.Put(ctx, id, v, prospero.Record{Incarnation: 1, State: state})
				if err != nil {
					b.Fatal(err)
				}
				v = nv
			}
		})
	}
}

func TestBoltStoreImport(t *testing.T) {
	s, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ids := []prospero.Identity{{Kind: "a", Key: "1"}, {Kind: "a", Key: "2"}, {Kind: "b", Key: "1"}}
	if _, err := s.Put(ctx, ids[0], 0, prospero.Record{State: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Import(ctx, ids, prospero.Record{Incarnation: 7, State: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, id := range ids {
		rec, err := s.Get(ctx, id)
		if err != nil || rec.Incarnation != 7 || string(rec.State) != "x" || seen[rec.Version] {
			t.Fatalf("%s: %+v %v", id, rec, err)
		}
		seen[rec.Version] = true
	}
	if err := s.Import(ctx, []prospero.Identity{{Kind: "a"}}, prospero.Record{}); !errors.Is(err, prospero.ErrInvalidIdentity) {
		t.Fatalf("Import of an invalid identity: %v", err)
	}
}

// DeleteAll drops the records it names whatever their versions, leaves
// the others, and takes names with no record.
func TestBoltStoreDeleteAll(t *testing.T) {
	s, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ids := []prospero.Identity{{Kind: "k", Key: "a"}, {Kind: "k", Key: "b"}, {Kind: "j", Key: "c"}}
	for _, id := range ids {
		if _, err := s.Put(ctx, id, 0, prospero.Record{State: []byte(id.Key)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteAll(ctx, []prospero.Identity{ids[0], ids[2], {Kind: "k", Key: "none"}, {Kind: "nokind", Key: "x"}}); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		_, err := s.Get(ctx, id)
		if gone := errors.Is(err, prospero.ErrNotFound); gone != (i != 1) {
			t.Errorf("%v after DeleteAll: %v", id, err)
		}
	}
	if err := s.DeleteAll(ctx, []prospero.Identity{{Kind: "", Key: "x"}}); !errors.Is(err, prospero.ErrInvalidIdentity) {
		t.Errorf("an invalid identity: %v", err)
	}
}
