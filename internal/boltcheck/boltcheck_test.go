package boltcheck_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tempest-actors/tempest/internal/boltcheck"
)

// withFreePages writes a file whose free list holds some pages: records
// written, then most of them deleted.
func withFreePages(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1000)
	for round := range 2 {
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for i := range 200 {
				k := []byte(fmt.Sprintf("k%04d", i))
				if round == 1 && i > 10 {
					if err := b.Delete(k); err != nil {
						return err
					}
					continue
				}
				if err := b.Put(k, val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// editFreeList rewrites the free list of the file at path with edit.
func editFreeList(t *testing.T, path string, edit func(ids []uint64, own, hwm uint64) []uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ne := binary.NativeEndian
	ps := int(ne.Uint32(b[16+8:]))
	var free, hwm, txid uint64
	for _, off := range []int{0, ps} {
		m := b[off+16:]
		if tx := ne.Uint64(m[48:]); tx >= txid {
			txid, free, hwm = tx, ne.Uint64(m[32:]), ne.Uint64(m[40:])
		}
	}
	page := b[int(free)*ps:]
	count := int(ne.Uint16(page[10:]))
	if count == 0 || count == 0xFFFF {
		t.Fatalf("free list of %d pages: not what this test edits", count)
	}
	ids := make([]uint64, count)
	for i := range ids {
		ids[i] = ne.Uint64(page[16+8*i:])
	}
	ids = edit(ids, free, hwm)
	ne.PutUint16(page[10:], uint16(len(ids)))
	for i, id := range ids {
		ne.PutUint64(page[16+8*i:], id)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, path string) error {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	defer db.Close()
	return boltcheck.Check(db)
}

func TestCheckFindsABadFreeList(t *testing.T) {
	if err := check(t, withFreePages(t)); err != nil {
		t.Fatalf("a whole file: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(ids []uint64, own, hwm uint64) []uint64
	}{
		{"a meta page", func(ids []uint64, _, _ uint64) []uint64 { return append([]uint64{0}, ids...) }},
		{"a page freed twice", func(ids []uint64, _, _ uint64) []uint64 { return slices.Insert(ids, 1, ids[0]) }},
		{"a page past the high-water mark", func(ids []uint64, _, hwm uint64) []uint64 { return append(ids, hwm+5) }},
		{"its own page", func(ids []uint64, own, _ uint64) []uint64 {
			ids = append(ids, own)
			slices.Sort(ids)
			return ids
		}},
		{"a page in use", func(ids []uint64, _, hwm uint64) []uint64 {
			for id := uint64(2); id < hwm; id++ { // the first page not free is in use
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
					slices.Sort(ids)
					return ids
				}
			}
			t.Fatal("every page is free")
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := withFreePages(t)
			editFreeList(t, path, tc.edit)
			err := check(t, path)
			t.Log(err)
			if !errors.Is(err, boltcheck.ErrInconsistent) {
				t.Fatalf("Check: %v, want ErrInconsistent", err)
			}
		})
	}
}
