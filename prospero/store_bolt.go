package prospero

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// BoltStore is the default StateStore: an embedded go.etcd.io/bbolt
// database in the node's data directory. Each kind has its own bucket;
// keys are actor keys; a value is the version (8 bytes, big endian), the
// incarnation (uvarint) and the state bytes. Versions come from the
// bucket's sequence, so they are never reused, not even after a Delete.
//
// Put and Delete are one fsync'd transaction each. PutAsync (AsyncStore)
// is group commit: a goroutine of the store commits every write queued
// while it committed the previous group in one transaction, so the
// writes of many actors share one fsync.
//
// BoltStore is safe for concurrent use. Reads run in parallel; writes
// are serialized by bbolt.
type BoltStore struct {
	db     *bolt.DB
	commit *groupCommitter

	mu     sync.RWMutex // guards closed against in-flight operations
	closed bool
}

var _ AsyncStore = (*BoltStore)(nil)

// boltOpenTimeout bounds how long NewBoltStore waits for the file lock
// held by another process, instead of blocking forever.
const boltOpenTimeout = 2 * time.Second

// NewBoltStore opens (creating if needed) the database file at path.
// The parent directory is created with mode 0700.
func NewBoltStore(path string) (*BoltStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("prospero: state store directory: %w", err)
	}
	db, err := openBolt(path, &bolt.Options{
		Timeout:      boltOpenTimeout,
		FreelistType: bolt.FreelistMapType,
	})
	var ce *CorruptError
	if errors.As(err, &ce) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("prospero: open state store %s: %w", path, err)
	}
	s := &BoltStore{db: db}
	s.commit = newGroupCommitter(s.commitGroup)
	return s, nil
}

// Path returns the database file name.
func (s *BoltStore) Path() string { return s.db.Path() }

func (s *BoltStore) begin(ctx context.Context, id Identity) (func(), error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrStoreClosed
	}
	return s.mu.RUnlock, nil
}

// Get implements StateStore.
func (s *BoltStore) Get(ctx context.Context, id Identity) (Record, error) {
	done, err := s.begin(ctx, id)
	if err != nil {
		return Record{}, err
	}
	defer done()
	var rec Record
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(id.Kind))
		if b == nil {
			return ErrNotFound
		}
		v := b.Get([]byte(id.Key))
		if v == nil {
			return ErrNotFound
		}
		var derr error
		rec, derr = decodeRecord(v)
		return derr
	})
	return rec, err
}

// Put implements StateStore.
func (s *BoltStore) Put(ctx context.Context, id Identity, expected uint64, rec Record) (uint64, error) {
	done, err := s.begin(ctx, id)
	if err != nil {
		return 0, err
	}
	defer done()
	var version uint64
	err = s.db.Update(func(tx *bolt.Tx) error {
		var err error
		version, err = putTx(tx, id, expected, rec)
		return err
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// putTx is the conditional write of Put inside tx.
func putTx(tx *bolt.Tx, id Identity, expected uint64, rec Record) (uint64, error) {
	b, err := tx.CreateBucketIfNotExists([]byte(id.Kind))
	if err != nil {
		return 0, err
	}
	key := []byte(id.Key)
	cur, err := storedVersion(b.Get(key))
	if err != nil {
		return 0, err
	}
	if cur != expected {
		return 0, fmt.Errorf("%w: %s is at version %d, not %d", ErrVersionConflict, id, cur, expected)
	}
	version, err := b.NextSequence()
	if err != nil {
		return 0, err
	}
	if err := b.Put(key, encodeRecord(version, rec)); err != nil {
		return 0, err
	}
	return version, nil
}

// CommitStats counts the group commits of PutAsync writes.
func (s *BoltStore) CommitStats() CommitStats { return s.commit.commitStats() }

// PutAsync implements AsyncStore: the write joins the next group commit.
func (s *BoltStore) PutAsync(id Identity, expected uint64, rec Record, done func(uint64, error)) {
	s.commit.put(id, expected, rec, done)
}

// commitGroup writes a group of queued puts in one transaction (one
// fsync). Each put is conditional on its own; one that conflicts fails
// alone. If the transaction cannot commit, every put of the group fails
// with its error.
func (s *BoltStore) commitGroup(group []asyncPut) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		for i := range group {
			group[i].err = ErrStoreClosed
		}
		return
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for i := range group {
			w := &group[i]
			w.version, w.err = putTx(tx, w.id, w.expected, w.rec)
		}
		return nil
	})
	if err != nil {
		for i := range group {
			group[i].version, group[i].err = 0, fmt.Errorf("prospero: commit state store: %w", err)
		}
	}
}

// Delete implements StateStore.
func (s *BoltStore) Delete(ctx context.Context, id Identity, expected uint64) error {
	done, err := s.begin(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(id.Kind))
		if b == nil {
			if expected == 0 || expected == AnyVersion {
				return nil
			}
			return fmt.Errorf("%w: %s is at version 0, not %d", ErrVersionConflict, id, expected)
		}
		key := []byte(id.Key)
		cur, err := storedVersion(b.Get(key))
		if err != nil {
			return err
		}
		if expected != AnyVersion && cur != expected {
			return fmt.Errorf("%w: %s is at version %d, not %d", ErrVersionConflict, id, cur, expected)
		}
		if cur == 0 {
			return nil
		}
		return b.Delete(key)
	})
}

// Import writes rec for every identity in ids in one transaction (one
// fsync), unconditionally, each under a fresh version. It is for bulk
// loading (restoring a backup, receiving a batch of handed-off state),
// not for the supervisor's own writes, which are conditional.
func (s *BoltStore) Import(ctx context.Context, ids []Identity, rec Record) error {
	for _, id := range ids {
		if err := id.Validate(); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrStoreClosed
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		var (
			b    *bolt.Bucket
			kind string
		)
		for _, id := range ids {
			if b == nil || id.Kind != kind {
				var err error
				if b, err = tx.CreateBucketIfNotExists([]byte(id.Kind)); err != nil {
					return err
				}
				kind = id.Kind
			}
			v, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put([]byte(id.Key), encodeRecord(v, rec)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Close implements StateStore. It waits for operations in flight and
// commits the writes PutAsync queued.
func (s *BoltStore) Close() error {
	s.commit.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil && !errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("prospero: close state store: %w", err)
	}
	return nil
}

// errCorrupt reports a stored value that cannot be decoded.
var errCorrupt = errors.New("prospero: corrupt state record")

func encodeRecord(version uint64, rec Record) []byte {
	buf := make([]byte, 8, 8+binary.MaxVarintLen64+len(rec.State))
	binary.BigEndian.PutUint64(buf, version)
	buf = binary.AppendUvarint(buf, rec.Incarnation)
	return append(buf, rec.State...)
}

func storedVersion(v []byte) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	if len(v) < 8 {
		return 0, errCorrupt
	}
	return binary.BigEndian.Uint64(v), nil
}

// decodeRecord copies v (bbolt memory is only valid inside the
// transaction).
func decodeRecord(v []byte) (Record, error) {
	if len(v) < 9 {
		return Record{}, errCorrupt
	}
	inc, n := binary.Uvarint(v[8:])
	if n <= 0 {
		return Record{}, errCorrupt
	}
	rec := Record{Version: binary.BigEndian.Uint64(v), Incarnation: inc}
	if rest := v[8+n:]; len(rest) > 0 {
		rec.State = append([]byte(nil), rest...)
	}
	return rec, nil
}
