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
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	fi, statErr := os.Stat(path)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Path: path, Err: fmt.Errorf("unreadable page: %v", r)}
			if db != nil {
				_ = db.Close()
				db = nil
			}
		}
	}()
	db, err = bolt.Open(path, 0o600, opts)
	if err != nil {
		if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrVersionMismatch) {
			return nil, &CorruptError{Path: path, Err: err}
		}
		return nil, err
	}
	if statErr != nil {
		return db, nil // a new file
	}
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Size() > fi.Size() {
			return &CorruptError{Path: path, Err: fmt.Errorf("the file is %d bytes but its pages reach %d bytes: it was cut short", fi.Size(), tx.Size())}
		}
		return tx.ForEach(func(kind []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if _, err := decodeRecord(v); err != nil {
					return &CorruptError{Path: path, Err: fmt.Errorf("record %s/%s: %w", kind, k, err)}
				}
				return nil
			})
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}
