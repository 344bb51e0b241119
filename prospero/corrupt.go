package prospero

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrCorrupt marks data at rest that cannot be read back as written: a
// damaged or truncated state store. errors.Is(err, ErrCorrupt) holds for
// every *CorruptError.
var ErrCorrupt = errors.New("prospero: corrupt data")

// CorruptError says which file is damaged and how.
type CorruptError struct {
	Path string // the damaged file
	Err  error  // what was found
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("prospero: %s is damaged: %v", e.Path, e.Err)
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns what was found.
func (e *CorruptError) Unwrap() error { return e.Err }

// openBolt opens the bbolt file at path and reads every record once, so
// that a damaged file is refused at open as a *CorruptError rather than
// a panic deep inside a later read: bbolt trusts its pages and asserts
// (panics) on a page that is not what its parent says, and a file cut
// short faults on the memory map. The walk costs one sequential read of
// the file per start.
//
// Records whose identity is not valid (Identity.Validate: written by a
// version that did not check keys) are no damage to the file: they are
// counted and the first maxInvalidListed returned in invalid, so that
// the node reports them once at start; reads of them fail with
// ErrInvalidIdentity and handoffs and replication leave them out.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, invalid InvalidIdentities, err error) {
	fi, statErr := os.Stat(path)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Path: path, Err: fmt.Errorf("unreadable page: %v", r)}
			if db != nil {
				_ = db.Close()
				db = nil
			}
			invalid = InvalidIdentities{}
		}
	}()
	db, err = bolt.Open(path, 0o600, opts)
	if err != nil {
		if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrVersionMismatch) {
			return nil, invalid, &CorruptError{Path: path, Err: err}
		}
		return nil, invalid, err
	}
	if statErr != nil {
		return db, invalid, nil // a new file
	}
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Size() > fi.Size() {
			return &CorruptError{Path: path, Err: fmt.Errorf("the file is %d bytes but its pages reach %d bytes: it was cut short", fi.Size(), tx.Size())}
		}
		return tx.ForEach(func(kind []byte, b *bolt.Bucket) error {
			if string(kind) == string(epochBucket) {
				return b.ForEach(func(k, v []byte) error {
					if len(v) != 8 {
						return &CorruptError{Path: path, Err: fmt.Errorf("replica epoch of %s: %d bytes", k, len(v))}
					}
					return nil
				})
			}
			return b.ForEach(func(k, v []byte) error {
				if _, err := decodeRecord(v); err != nil {
					return &CorruptError{Path: path, Err: fmt.Errorf("record %q: %w", string(kind)+"/"+string(k), err)}
				}
				if id := (Identity{Kind: string(kind), Key: string(k)}); id.Validate() != nil {
					invalid.Count++
					if len(invalid.First) < maxInvalidListed {
						invalid.First = append(invalid.First, id)
					}
				}
				return nil
			})
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, InvalidIdentities{}, err
	}
	return db, invalid, nil
}

// maxInvalidListed bounds InvalidIdentities.First.
const maxInvalidListed = 10

// InvalidIdentities are the records at rest a state store found at open
// whose identity is not valid (see BoltStore.InvalidIdentities).
type InvalidIdentities struct {
	Count int        // how many
	First []Identity // the first of them, at most 10
}
