// Package boltcheck checks that a bbolt file's pages agree with each
// other before a node writes to it. bbolt reads a damaged free list
// without a word (a torn or misdirected write can leave one naming a
// page still in use) and then, on the first commit, hands that page out
// again or panics ("page N already freed"): the node would crash, or
// overwrite live data, long after it started. A check at open turns that
// into an error the caller reports as damage to the file.
package boltcheck

import (
	"errors"
	"fmt"
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
