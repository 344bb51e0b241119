package prospero

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/tempest-actors/tempest/internal/boltcheck"
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
// short faults on the memory map. Then boltcheck finds a free list that
// disagrees with the pages in use, which bbolt would act on at the first
// commit. The two cost two sequential reads of the file per start.
//
// Records whose identity is not valid (Identity.Validate: written by a
// version that did not check keys) are no damage to the file: they are
// counted and the first maxInvalidListed returned in invalid, so that
// the node reports them once at start; reads of them fail with
// ErrInvalidIdentity and handoffs and replication leave them out.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, invalid InvalidIdentities, err error) {
	fi, statErr := os.Stat(path)
	if statErr == nil && fi.Size() > 0 {
		if err := checkMeta(path, fi.Size()); err != nil {
			return nil, invalid, err
		}
	}
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
		var format byte
		if eb := tx.Bucket(epochBucket); eb != nil {
			f, ok := parseFormat(eb.Get(formatKey))
			if !ok {
				return &CorruptError{Path: path, Err: fmt.Errorf("records of format %x: written by a later build, which this one cannot read", eb.Get(formatKey))}
			}
			format = f
		}
		return tx.ForEach(func(kind []byte, b *bolt.Bucket) error {
			if string(kind) == string(epochBucket) {
				return b.ForEach(func(k, v []byte) error {
					if string(k) == string(formatKey) {
						return nil
					}
					if len(k) > 0 && k[0] == '/' {
						// The store's own keys (pendingMark, storeIDKey, opensKey).
						if len(v) != 8 {
							return &CorruptError{Path: path, Err: fmt.Errorf("value of %s: %d bytes", k, len(v))}
						}
						return nil
					}
					if _, err := parseEpoch(k, v); err != nil {
						return &CorruptError{Path: path, Err: fmt.Errorf("epoch of record %q: %w", k, err)}
					}
					return nil
				})
			}
			return b.ForEach(func(k, v []byte) error {
				if _, err := decodeRecord(string(kind), string(k), v, format); err != nil {
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
	if err == nil {
		if cerr := boltcheck.Check(db); cerr != nil {
			err = &CorruptError{Path: path, Err: cerr}
		}
	}
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

// bbolt's meta page, as it lays it out: a 16-byte page header, then the
// magic, version, page size and flags (4 bytes each), the root bucket
// (16), the freelist's page, the high-water page id, the transaction id
// and an FNV-64a checksum of the fields before it (8 bytes each), in the
// machine's byte order.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltMetaOffset = 16
	boltMetaSum    = 56 // bytes the checksum covers
	boltMetaLen    = 64
)

type boltMeta struct {
	pageSize   uint32
	pgid, txid uint64
}

// readMeta reads the meta page at off, reporting why it does not verify.
func readMeta(f *os.File, off int64) (boltMeta, error) {
	b := make([]byte, boltMetaLen)
	if _, err := f.ReadAt(b, off+boltMetaOffset); err != nil {
		return boltMeta{}, fmt.Errorf("unreadable: %w", err)
	}
	ne := binary.NativeEndian
	h := fnv.New64a()
	_, _ = h.Write(b[:boltMetaSum])
	switch {
	case ne.Uint32(b[0:]) != boltMagic:
		return boltMeta{}, errors.New("no bbolt meta page (bad magic)")
	case ne.Uint32(b[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("bbolt format version %d", ne.Uint32(b[4:]))
	case ne.Uint64(b[boltMetaSum:]) != h.Sum64():
		return boltMeta{}, errors.New("checksum mismatch")
	}
	return boltMeta{pageSize: ne.Uint32(b[8:]), pgid: ne.Uint64(b[40:]), txid: ne.Uint64(b[48:])}, nil
}

// checkMeta verifies both of a bbolt file's meta pages before bbolt opens
// it. bbolt writes them in turn, each at the end of a transaction, and on
// open silently uses the other when one does not verify: that is the
// previous transaction, so a damaged meta page would lose the last
// transaction committed (and acknowledged) without a word. A meta page
// lies within one disk sector, so a crash, even a power loss, leaves it
// whole: one that does not verify was damaged after it was written. It
// also refuses a file shorter than the pages its newest meta page names
// (cut short), before bbolt maps it.
func checkMeta(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // bbolt reports it
	}
	defer f.Close() // and so the lock
	if lockedElsewhere(f) {
		return nil
	}
	m0, err0 := readMeta(f, 0)
	ps := int64(os.Getpagesize())
	if err0 == nil {
		ps = int64(m0.pageSize)
	}
	if size < 2*ps {
		return &CorruptError{Path: path, Err: fmt.Errorf("the file is %d bytes, shorter than its two meta pages: it was cut short", size)}
	}
	m1, err1 := readMeta(f, ps)
	switch {
	case err0 != nil && err1 != nil:
		return &CorruptError{Path: path, Err: fmt.Errorf("neither meta page verifies (page 0: %v; page 1: %v)", err0, err1)}
	case err0 != nil:
		return &CorruptError{Path: path, Err: fmt.Errorf("meta page 0 does not verify (%v): the last transaction committed may be lost", err0)}
	case err1 != nil:
		return &CorruptError{Path: path, Err: fmt.Errorf("meta page 1 does not verify (%v): the last transaction committed may be lost", err1)}
	}
	newest := m0
	if m1.txid > m0.txid {
		newest = m1
	}
	if reach := int64(newest.pgid) * ps; reach > size {
		return &CorruptError{Path: path, Err: fmt.Errorf("the file is %d bytes but its pages reach %d bytes: it was cut short", size, reach)}
	}
	return nil
}
