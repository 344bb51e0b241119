// Package boltcheck checks that a bbolt file's pages agree with each
// other before a node writes to it. bbolt reads a damaged free list
// without a word (a torn or misdirected write can leave one naming a
// page still in use) and then, on the first commit, hands that page out
// again or panics ("page N already freed"): the node would crash, or
// overwrite live data, long after it started. A check at open turns that
// into an error the caller reports as damage to the file.
package boltcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// ErrInconsistent is the error Check wraps when the pages disagree.
var ErrInconsistent = errors.New("its pages disagree")

// maxReported bounds how many inconsistencies an error lists.
const maxReported = 3

// Check reads every key and value of db, then runs bbolt's consistency
// check (every page below the high-water mark reachable or free, none
// both, none freed twice). The read runs on the caller's goroutine first
// and touches every page the check does, so that a page bbolt cannot
// even map faults (or panics) there, where the caller can recover it,
// not on the check's own goroutine. db must be opened read-write, which
// loads its free list on the caller's goroutine too. It costs two reads
// of the file.
func Check(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		if err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walk(b) }); err != nil {
			return err
		}
		if err := checkFreeList(tx); err != nil {
			return err
		}
		var found []string
		n := 0
		for err := range tx.Check() { // read to the end: the check's goroutine waits on each
			if n++; n <= maxReported {
				found = append(found, err.Error())
			}
		}
		if n > maxReported {
			found = append(found, fmt.Sprintf("and %d more", n-maxReported))
		}
		if found != nil {
			return fmt.Errorf("%w: %s", ErrInconsistent, strings.Join(found, "; "))
		}
		return nil
	})
}

// walk reads every value of b and of the buckets nested in it.
func walk(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				return walk(nb)
			}
		}
		return nil
	})
}

// checkFreeList reads the free list as bbolt wrote it, from the file, and
// refuses what bbolt's check does not look for and its allocator panics
// on or acts on: an id of a meta page (0 or 1), one at or past the
// high-water mark, one on the free list's own pages, and ids out of order
// or repeated (the map free list drops repeats as it loads, so the check
// never sees them, and its spans come out wrong).
func checkFreeList(tx *bolt.Tx) error {
	f, err := os.Open(tx.DB().Path())
	if err != nil {
		return err
	}
	defer f.Close()
	ps := int64(tx.DB().Info().PageSize)
	ne := binary.NativeEndian
	// The meta page of this transaction: a 16-byte page header, then
	// magic, version, page size, flags (4 bytes each), the root bucket
	// (16), the free list's page, the high-water mark and the
	// transaction id (8 each).
	var free, hwm uint64
	found := false
	meta := make([]byte, 16+64)
	for _, off := range []int64{0, ps} {
		if _, err := f.ReadAt(meta, off); err != nil {
			return fmt.Errorf("read a meta page: %w", err)
		}
		if m := meta[16:]; ne.Uint64(m[48:]) == uint64(tx.ID()) {
			free, hwm, found = ne.Uint64(m[32:]), ne.Uint64(m[40:]), true
		}
	}
	if !found || free == noFreeList {
		return nil // bbolt chose as it does; or no free list is kept
	}
	head := make([]byte, 24)
	if _, err := f.ReadAt(head, int64(free)*ps); err != nil {
		return fmt.Errorf("%w: free list page %d: %w", ErrInconsistent, free, err)
	}
	count, overflow, at := uint64(ne.Uint16(head[10:])), uint64(ne.Uint32(head[12:])), int64(16)
	if count == 0xFFFF { // the count does not fit: it is the first element
		count, at = ne.Uint64(head[16:]), 24
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if count > (overflow+1)*uint64(ps)/8 || int64(free)*ps+at+int64(count)*8 > fi.Size() {
		return fmt.Errorf("%w: the free list on page %d names %d pages, more than it holds", ErrInconsistent, free, count)
	}
	ids := make([]byte, count*8)
	if _, err := f.ReadAt(ids, int64(free)*ps+at); err != nil {
		return fmt.Errorf("%w: free list page %d: %w", ErrInconsistent, free, err)
	}
	var prev uint64
	for i := range count {
		id := ne.Uint64(ids[i*8:])
		switch {
		case id < 2:
			return fmt.Errorf("%w: the free list names meta page %d", ErrInconsistent, id)
		case id >= hwm:
			return fmt.Errorf("%w: the free list names page %d, at or past the high-water mark %d", ErrInconsistent, id, hwm)
		case id >= free && id <= free+overflow:
			return fmt.Errorf("%w: the free list names its own page %d", ErrInconsistent, id)
		case i > 0 && id <= prev:
			return fmt.Errorf("%w: the free list names page %d after page %d (repeated or out of order)", ErrInconsistent, id, prev)
		}
		prev = id
	}
	return nil
}

// noFreeList is the free list page id of a file that keeps none.
const noFreeList = 0xFFFFFFFFFFFFFFFF
