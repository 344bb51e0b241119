package prospero

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/tempest-actors/tempest/internal/crashhook"
)

// BoltStore is the default StateStore: an embedded go.etcd.io/bbolt
// database in the node's data directory. Each kind has its own bucket;
// keys are actor keys; a value is the version (8 bytes, big endian), the
// incarnation (uvarint), the state bytes and a checksum (see
// encodeRecord). Versions come from the
// bucket's sequence, so they are never reused, not even after a Delete.
//
// Put and Delete are one fsync'd transaction each. PutAsync (AsyncStore)
// and DeleteAsync (AsyncDeleter) are group commit: a goroutine of the
// store commits every write and deletion queued while it committed the
// previous group in one transaction, so the writes of many actors share
// one fsync.
//
// BoltStore is safe for concurrent use. Reads run in parallel; writes
// are serialized by bbolt.
type BoltStore struct {
	db     *bolt.DB
	path   string
	commit *groupCommitter

	// damaged is set once the file was found damaged while open (cut
	// short, replaced, a fault on the memory map, a bbolt assertion);
	// every later operation returns it. wedged: that happened inside
	// bbolt, whose locks may be held since.
	damaged atomic.Pointer[CorruptError]
	// failing is the failure of the last group commit, nil once one
	// commits again (WriteFailure).
	failing atomic.Pointer[writeFailure]
	probe   prober // checks the disk while commits fail (store_probe.go)
	// failWrites, when set, fails every commit and probe as a full disk
	// would (crashhook.FailWrites, for tests).
	failWrites atomic.Pointer[error]
	hurt       chan struct{} // closed when damaged is set
	hurtOne    sync.Once
	wedged     atomic.Bool
	file       os.FileInfo  // the file opened
	mark       *storeMark   // state.db.mark (store_mark.go)
	format     byte         // of the file's records (formatKey)
	reach      atomic.Int64 // how far its pages reach (bbolt's high-water mark)

	invalid InvalidIdentities // found at open

	// Writes decided ahead (store_pending.go), guarded by pmu.
	pmu       sync.Mutex
	pcond     *sync.Cond
	plogs     [2]pendingLog // the pending log's two files, written in turn
	pcur      int           // the one written now
	pswitch   int64         // past this size, the next write goes to the other file if it can
	pbuf      []byte
	pseq      uint64      // sequence number of the last decided write
	pdone     uint64      // of the last one committed
	pstop     bool        // no write is decided ahead any more (closing)
	abandoned atomic.Bool // a test crash: nothing is written any more
	pclosed   bool
	decided   map[Identity]decided
	touched   map[Identity]int  // queued operations, not committed yet
	seqs      map[string]uint64 // per kind, the last version decided
	recovered int               // writes the pending log gave back at open

	mu     sync.RWMutex // guards closed against in-flight operations
	closed bool
}

var (
	_ AsyncStore    = (*BoltStore)(nil)
	_ AsyncDeleter  = (*BoltStore)(nil)
	_ PrefixScanner = (*BoltStore)(nil)
)

func kindOfFile(m os.FileMode) string {
	if m.IsDir() {
		return "directory"
	}
	return "special file (" + m.Type().String() + ")"
}

// ErrStoreInUse: another process holds the state store's file lock,
// most likely a node already running on the same data directory.
var ErrStoreInUse = errors.New("prospero: the state store is in use by another process (a node already running on this data directory?)")

// boltOpenTimeout bounds how long NewBoltStore waits for the file lock
// held by another process, instead of blocking forever.
const boltOpenTimeout = 2 * time.Second

// NewBoltStore opens (creating if needed) the database file at path.
// The parent directory is created with mode 0700.
func NewBoltStore(path string) (*BoltStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("prospero: state store directory: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, &CorruptError{Path: path, Err: fmt.Errorf("it is a %s, not a file", kindOfFile(fi.Mode()))}
	}
	// The mark is checked before anything is written (the pending log's
	// write-back, the store's ID): a refused open changes nothing.
	mark, err := openMark(path)
	if err != nil {
		return nil, err
	}
	db, invalid, err := openBolt(path, &bolt.Options{
		Timeout:      boltOpenTimeout,
		FreelistType: bolt.FreelistMapType,
	})
	if err != nil {
		_ = mark.f.Close()
	}
	var ce *CorruptError
	if errors.As(err, &ce) {
		return nil, err
	}
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("prospero: open state store %s: %w (%w)", path, ErrStoreInUse, err)
	}
	if err != nil {
		return nil, fmt.Errorf("prospero: open state store %s: %w", path, err)
	}
	closeAll := func() {
		_ = mark.f.Close()
		_ = db.Close()
	}
	fi, err := os.Stat(path)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("prospero: open state store %s: %w", path, err)
	}
	if err := mark.check(path, db); err != nil {
		closeAll()
		return nil, err
	}
	id, format, err := markStore(db)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("prospero: write the ID and format of state store %s: %w", path, err)
	}
	plogs, last, recovered, err := openPending(path, db)
	if err != nil {
		closeAll()
		return nil, err
	}
	if err := mark.seal(db, id); err != nil {
		for _, l := range plogs {
			_ = l.f.Close()
		}
		closeAll()
		return nil, err
	}
	s := &BoltStore{db: db, path: path, file: fi, mark: mark, format: format, hurt: make(chan struct{}), invalid: invalid,
		plogs: plogs, pswitch: pendingSwitch, pseq: last, pdone: last, recovered: recovered,
		decided: map[Identity]decided{}, touched: map[Identity]int{}, seqs: map[string]uint64{}}
	s.pcond = sync.NewCond(&s.pmu)
	s.reach.Store(pagesReach(db))
	s.commit = newGroupCommitter(s.commitGroup)
	return s, nil
}

// InvalidIdentities returns the records at rest found at open whose
// identity is not valid: written by a version that did not check keys
// (invalid UTF-8, too long). They are isolated, not damage: Get of one
// fails with ErrInvalidIdentity, and a node leaves them out of
// handoffs and replica copies instead of stalling the rest of their
// shard.
func (s *BoltStore) InvalidIdentities() InvalidIdentities { return s.invalid }

// Recovered returns how many writes the store gave back at open from its
// pending log: writes sent before they committed (PutAsyncSent) whose
// transaction had not committed when the process stopped.
func (s *BoltStore) Recovered() int { return s.recovered }

// Path returns the database file name.
func (s *BoltStore) Path() string { return s.path }

// DamagedCh returns a channel closed once the file is found damaged
// while open (see Damaged).
func (s *BoltStore) DamagedCh() <-chan struct{} { return s.hurt }

// damage records the first damage found and wakes DamagedCh's readers.
func (s *BoltStore) damage(ce *CorruptError) *CorruptError {
	s.damaged.CompareAndSwap(nil, ce)
	s.hurtOne.Do(func() {
		close(s.hurt)
		// Wake settle's waiters; damage may be found under pmu.
		go func() {
			s.pmu.Lock()
			s.pcond.Broadcast()
			s.pmu.Unlock()
		}()
	})
	return s.damaged.Load()
}

// writeFailure is a group commit's failure and when they began.
type writeFailure struct {
	err   error
	since time.Time
}

// WriteFailure reports that the store's writes fail (a full disk, an
// I/O error): the error of the last group commit, which failed, and the
// time the failures began; nil once the file system has room for its
// writes again (the store looks every 2 s while its commits fail, since
// a node may have nothing more to write, and at each commit that
// succeeds meanwhile; see store_probe.go). The
// writes' callers are told each time (their asks fail not committed);
// this is for an operator's view of the node, and for a cluster node to
// give up its shards meanwhile.
func (s *BoltStore) WriteFailure() error {
	f := s.failing.Load()
	if f == nil {
		return nil
	}
	return fmt.Errorf("state store writes failing since %s: %w", f.since.UTC().Format(time.RFC3339), f.err)
}

// Damaged returns the *CorruptError every operation has returned since
// the file was found damaged while open, or nil.
func (s *BoltStore) Damaged() error {
	if d := s.damaged.Load(); d != nil {
		return d
	}
	return nil
}

// guarded runs fn, one bbolt transaction, so that damage done to the
// file while it is open is an error and not the end of the process:
// bbolt reads pages through a memory map, and a file cut short faults
// (SIGBUS, fatal unless the goroutine asked for a panic instead), while a
// page overwritten with other bytes trips bbolt's assertions (panics).
// Before the transaction the file must still be the one opened and still
// hold every page the store has written (one stat against the high-water
// mark read after the last write; space bbolt allocated ahead but
// never wrote may go, bbolt grows the file again); a fault or panic inside it
// (damage that raced the check, or garbage in a page) is recovered. Both
// become a *CorruptError naming the file, kept for every later
// operation: the file is no longer what the open check verified, so
// nothing more is read from it or written to it until the node restarts
// and checks it again.
func (s *BoltStore) guarded(fn func() error) error {
	if d := s.damaged.Load(); d != nil {
		return d
	}
	if err := s.checkFile(); err != nil {
		return s.damage(&CorruptError{Path: s.path, Err: err})
	}
	return s.faultGuarded(fn)
}

// faultGuarded is guarded without the check of the file before fn: a
// fault or panic inside fn damages the store. For a read whose outcome
// a later guarded write checks again (decideLocked).
func (s *BoltStore) faultGuarded(fn func() error) (err error) {
	if d := s.damaged.Load(); d != nil {
		return d
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			// bbolt may hold its locks now (a fault while a transaction
			// began): Close must not wait for them.
			s.wedged.Store(true)
			err = s.damage(&CorruptError{Path: s.path,
				Err: fmt.Errorf("damaged while the node was running (%v); it is no longer read or written: restart the node to have it checked", r)})
		}
	}()
	return fn()
}

// guardedWrite is guarded for a write transaction: once it committed, the
// pages it wrote count for the next check (reads never move them).
func (s *BoltStore) guardedWrite(fn func() error) error {
	if s.abandoned.Load() {
		return ErrStoreClosed
	}
	return s.guarded(func() error {
		if err := fn(); err != nil {
			return err
		}
		if r := pagesReach(s.db); r > s.reach.Load() {
			s.reach.Store(r) // a commit wrote new pages
		}
		return nil
	})
}

// pagesReach is how many bytes of the file the pages of db's last
// committed transaction reach: bbolt never lowers it (freed pages are
// reused, the file is never compacted in place), so a file shorter than
// that has lost pages bbolt may read.
func pagesReach(db *bolt.DB) int64 {
	var n int64
	_ = db.View(func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	})
	return n
}

// statFile is os.Stat; a test runs a write between a check's stat and its
// comparison.
var statFile = os.Stat

// checkFile reports a file that is no longer the one the store opened
// (replaced or removed: writes would go to a file nobody reads again) or
// that no longer holds every page written (cut short).
func (s *BoltStore) checkFile() error {
	// The high-water mark first: a write that commits meanwhile grows the
	// file before it raises the mark, so a mark read after the stat could
	// be ahead of the size the stat saw without anything lost.
	reach := s.reach.Load()
	fi, err := statFile(s.path)
	switch {
	case err != nil:
		return fmt.Errorf("removed while the node was running (%v); it is no longer read or written: restore it and restart the node", err)
	case !os.SameFile(fi, s.file):
		return errors.New("replaced by another file while the node was running; it is no longer read or written: restart the node to open and check the new file")
	case fi.Size() < reach:
		return fmt.Errorf("cut short to %d bytes while the node was running (its pages reach %d); it is no longer read or written: restart the node to have it checked", fi.Size(), reach)
	}
	return nil
}

// corrupt names the file in an error about one record that does not
// decode.
func (s *BoltStore) corrupt(id Identity, err error) error {
	if errors.Is(err, errCorrupt) {
		return &CorruptError{Path: s.path, Err: fmt.Errorf("record %q: %w", id.String(), err)}
	}
	return err
}

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
	s.settle(&id)
	done, err := s.begin(ctx, id)
	if err != nil {
		return Record{}, err
	}
	defer done()
	var rec Record
	err = s.guarded(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(id.Kind))
			if b == nil {
				return ErrNotFound
			}
			v := b.Get([]byte(id.Key))
			if v == nil {
				return ErrNotFound
			}
			var derr, eerr error
			rec, derr = decodeRecord(id.Kind, id.Key, v, s.format)
			rec.Epoch, eerr = storedEpoch(tx, id)
			return s.corrupt(id, cmp.Or(derr, eerr))
		})
	})
	return rec, err
}

// ScanPrefix implements PrefixScanner: a cursor over the kind's bucket
// from prefix on, in one read transaction.
func (s *BoltStore) ScanPrefix(ctx context.Context, kind, prefix string) ([]Keyed, error) {
	s.settle(nil)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrStoreClosed
	}
	var out []Keyed
	err := s.guarded(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(kind))
			if b == nil {
				return nil
			}
			c := b.Cursor()
			p := []byte(prefix)
			for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
				if err := ctx.Err(); err != nil {
					return err
				}
				rec, err := decodeRecord(kind, string(k), v, s.format)
				if err != nil {
					return s.corrupt(Identity{Kind: kind, Key: string(k)}, err)
				}
				out = append(out, Keyed{Key: string(k), Record: rec})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Put implements StateStore.
func (s *BoltStore) Put(ctx context.Context, id Identity, expected uint64, rec Record) (uint64, error) {
	s.settle(&id)
	done, err := s.begin(ctx, id)
	if err != nil {
		return 0, err
	}
	defer done()
	var version uint64
	floor := s.seqFloor(id.Kind)
	err = s.guardedWrite(func() error {
		return s.update(func(tx *bolt.Tx) error {
			var err error
			version, err = putTx(tx, id, expected, rec, floor)
			return s.corrupt(id, err)
		})
	})
	if err != nil {
		return 0, err
	}
	return version, nil
}

// putTx is the conditional write of Put inside tx. Its version is above
// floor, the versions given to writes decided ahead.
func putTx(tx *bolt.Tx, id Identity, expected uint64, rec Record, floor uint64) (uint64, error) {
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
	if e, err := storedEpoch(tx, id); err != nil {
		return 0, err
	} else if cur != 0 && supersedes(e, rec.Epoch) {
		return 0, supersededError(id, e, rec.Epoch)
	}
	if b.Sequence() < max(cur, floor) {
		// The stored record came from a replica stream at the owner's
		// version, or writes decided ahead took versions the bucket has
		// not seen yet: keep versions increasing past them.
		if err := b.SetSequence(max(cur, floor)); err != nil {
			return 0, err
		}
	}
	version, err := b.NextSequence()
	if err != nil {
		return 0, err
	}
	if err := b.Put(key, encodeRecord(id.Kind, id.Key, version, rec)); err != nil {
		return 0, err
	}
	return version, setEpoch(tx, id, rec.Epoch)
}

// storedEpoch is the epoch of the record of id tx holds (0: none, or a
// record written outside a cluster); an epoch value that does not verify
// is an error wrapping errCorrupt.
func storedEpoch(tx *bolt.Tx, id Identity) (uint64, error) {
	eb := tx.Bucket(epochBucket)
	if eb == nil {
		return 0, nil
	}
	key := []byte(id.String())
	return parseEpoch(key, eb.Get(key))
}

// An identity's value in the epoch bucket: the epoch (8 bytes big
// endian), then a CRC-32C of the identity's "kind/key" and those 8 bytes
// (4), so that a bit flipped on the disk is found rather than read as
// another epoch (an older one would have a follower skip its owner's
// newer records while acknowledging them). An earlier build wrote the 8
// bytes alone: those read as they are, until the record is written
// again.
func epochValue(key []byte, epoch uint64) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 12), epoch)
	return binary.BigEndian.AppendUint32(v, epochSum(key, v))
}

func epochSum(key, epoch []byte) uint32 {
	return crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, epoch)
}

// parseEpoch reads v, the epoch value of key (nil: epoch 0).
func parseEpoch(key, v []byte) (uint64, error) {
	switch len(v) {
	case 0:
		if v == nil {
			return 0, nil
		}
	case 8:
		return binary.BigEndian.Uint64(v), nil
	case 12:
		if epochSum(key, v[:8]) != binary.BigEndian.Uint32(v[8:]) {
			return 0, errEpochSum
		}
		return binary.BigEndian.Uint64(v), nil
	}
	return 0, fmt.Errorf("%w: its epoch is %d bytes long", errCorrupt, len(v))
}

// setEpoch records epoch as the epoch of the record of id just written
// in tx (0: none).
func setEpoch(tx *bolt.Tx, id Identity, epoch uint64) error {
	if epoch == 0 {
		if eb := tx.Bucket(epochBucket); eb != nil {
			return eb.Delete([]byte(id.String()))
		}
		return nil
	}
	eb, err := tx.CreateBucketIfNotExists(epochBucket)
	if err != nil {
		return err
	}
	key := []byte(id.String())
	return eb.Put(key, epochValue(key, epoch))
}

// supersedes reports whether a stored record of epoch stored is a newer
// owner's than a write of epoch write, which must then not replace it. A
// write of epoch 0 is made outside a cluster (a standalone node, perhaps
// on a former cluster node's data directory, whose records all carry
// epochs): it is checked by its version alone, and stores no epoch.
func supersedes(stored, write uint64) bool { return write != 0 && stored > write }

// supersededError is the conflict of a write of id under epoch with the
// stored record of a newer epoch: a newer owner's, which the write must
// not replace.
func supersededError(id Identity, stored, epoch uint64) error {
	return fmt.Errorf("%w: %s holds a record of epoch %d, newer than this write's %d", ErrVersionConflict, id, stored, epoch)
}

// CommitStats counts the group commits of PutAsync writes and
// DeleteAsync deletions.
func (s *BoltStore) CommitStats() CommitStats { return s.commit.commitStats() }

// PutAsync implements AsyncStore: the write joins the next group commit.
func (s *BoltStore) PutAsync(id Identity, expected uint64, rec Record, done func(uint64, error)) {
	s.touch(id)
	s.commit.put(id, expected, rec, func(v uint64, err error) {
		s.untouch(id)
		done(v, err)
	})
}

// DeleteAsync implements AsyncDeleter: the deletion joins the next group
// commit.
func (s *BoltStore) DeleteAsync(id Identity, expected uint64, done func(error)) {
	s.touch(id)
	s.commit.del(id, expected, func(err error) {
		s.untouch(id)
		done(err)
	})
}

// commitGroup writes a group of queued puts, deletions and batches of
// replicated records in one transaction (one fsync), in the order
// queued. Each put and deletion is conditional on its own; one that
// conflicts fails alone. A replicated batch that fails (a record that
// does not decode, a write bbolt refuses) fails whole: the transaction
// is rolled back and run again without it, so that none of its records
// is stored and the others of the group still commit. If the
// transaction cannot commit, every one of the group fails with its
// error.
func (s *BoltStore) commitGroup(group []asyncPut) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		for i := range group {
			group[i].err = ErrStoreClosed
		}
		return
	}
	var last uint64 // the last decided write in group
	for i := range group {
		last = max(last, group[i].decided)
	}
	for {
		failed := -1 // the replicated batch that failed this try
		err := s.guardedWrite(func() error {
			return s.db.Update(func(tx *bolt.Tx) error {
				for i := range group {
					w := &group[i]
					switch {
					case w.decided != 0:
						applied, err := putDecidedTx(tx, w.id, w.version, w.rec, false)
						if errors.Is(err, ErrVersionConflict) {
							// A newer owner's record is stored: this write,
							// of an older epoch, is superseded, and fails
							// here (no path queues one so today). Its outputs
							// may have been released already (in the default
							// mode, once the followers received it), but then
							// it was committed on the shard's set, which the
							// newer owner took over from: its record holds
							// it. The store holds what it should.
							w.err = &CommitError{ID: w.id, Err: err}
							continue
						}
						if err == nil && !applied {
							// Something wrote the identity past the version
							// decided for it: never drop a sent write quietly.
							err = fmt.Errorf("a write of %s decided at version %d found a newer record stored", w.id, w.version)
						}
						if err != nil {
							w.err = s.corrupt(w.id, err)
							return w.err // sent already: the store must not go on without it
						}
					case w.repl != nil:
						if w.err != nil {
							continue // failed in an earlier try
						}
						n, err := applyReplicatedTx(tx, w.repl)
						if err != nil {
							failed = i
							w.err = err
							return err
						}
						w.version = uint64(n)
					case w.del:
						w.err = s.corrupt(w.id, deleteInTx(tx, w.id, w.expected))
					default:
						w.version, w.err = putTx(tx, w.id, w.expected, w.rec, s.seqFloor(w.id.Kind))
						w.err = s.corrupt(w.id, w.err)
					}
				}
				if last != 0 {
					if err := markPending(tx, last); err != nil {
						return err
					}
				}
				if beforeCommit != nil {
					return beforeCommit()
				}
				if err := s.failWrites.Load(); err != nil {
					return *err
				}
				return nil
			})
		})
		if failed >= 0 && s.damaged.Load() == nil {
			continue // run again without the failed batch
		}
		if err != nil {
			if last != 0 {
				// Writes sent before they committed, maybe acknowledged:
				// nothing more is served from a store without them; the
				// pending log gives them back at the next open.
				s.damage(&CorruptError{Path: s.path, Err: fmt.Errorf("%w (%v); the store is no longer read or written: restart the node, which writes them back from %s.pending and %[3]s.pending.1", ErrSentNotCommitted, err, s.path)})
			}
			for i := range group {
				group[i].version, group[i].err = 0, fmt.Errorf("prospero: commit state store: %w", err)
			}
			s.noteWriteFailure(err)
			return
		}
		s.noteWriteSuccess()
		if last != 0 {
			s.decidedCommitted(group, last)
			if name, err := s.checkPending(); err != nil {
				s.damage(&CorruptError{Path: name, Err: err})
			}
		}
		return
	}
}

func init() {
	crashhook.Abandon = func(store any) { store.(*BoltStore).abandon() }
	crashhook.FailWrites = func(store any, err error) {
		if err == nil {
			store.(*BoltStore).failWrites.Store(nil)
		} else {
			store.(*BoltStore).failWrites.Store(&err)
		}
	}
}

// abandon leaves the store as a killed process would (crashhook.Abandon):
// no write is committed or decided any more, and nothing else is written
// to the file.
func (s *BoltStore) abandon() {
	s.abandoned.Store(true)
	s.pmu.Lock()
	s.pstop = true
	s.pcond.Broadcast() // decided writes will not commit: nobody waits for them
	s.pmu.Unlock()
	s.commit.abandon()
}

// beforeCommit, if set, runs at the end of every group commit's
// transaction, before it commits; an error fails the transaction. Tests
// hold or fail commits with it.
var beforeCommit func() error

// Delete implements StateStore.
func (s *BoltStore) Delete(ctx context.Context, id Identity, expected uint64) error {
	s.settle(&id)
	done, err := s.begin(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	return s.guardedWrite(func() error { return s.deleteTx(id, expected) })
}

func (s *BoltStore) deleteTx(id Identity, expected uint64) error {
	return s.update(func(tx *bolt.Tx) error { return s.corrupt(id, deleteInTx(tx, id, expected)) })
}

// deleteInTx is the conditional deletion of Delete inside tx.
func deleteInTx(tx *bolt.Tx, id Identity, expected uint64) error {
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
	if err := b.Delete(key); err != nil {
		return err
	}
	return setEpoch(tx, id, 0)
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
	s.settle(nil)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrStoreClosed
	}
	return s.guardedWrite(func() error { return s.importTx(ids, rec) })
}

func (s *BoltStore) importTx(ids []Identity, rec Record) error {
	return s.update(func(tx *bolt.Tx) error {
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
			if floor := s.seqFloor(id.Kind); b.Sequence() < floor {
				if err := b.SetSequence(floor); err != nil {
					return err
				}
			}
			v, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put([]byte(id.Key), encodeRecord(id.Kind, id.Key, v, rec)); err != nil {
				return err
			}
			if err := setEpoch(tx, id, rec.Epoch); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteAll removes the records of ids, whatever their versions, in one
// transaction (one fsync). It is for dropping a batch this node no longer
// owns (the records of a shard it handed off), not for the supervisor's
// own deletions, which are conditional.
func (s *BoltStore) DeleteAll(ctx context.Context, ids []Identity) error {
	for _, id := range ids {
		if err := id.Validate(); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.settle(nil)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrStoreClosed
	}
	return s.guardedWrite(func() error {
		return s.update(func(tx *bolt.Tx) error {
			for _, id := range ids {
				if b := tx.Bucket([]byte(id.Kind)); b != nil {
					if err := b.Delete([]byte(id.Key)); err != nil {
						return err
					}
				}
				if err := setEpoch(tx, id, 0); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Close implements StateStore. It waits for operations in flight and
// commits the writes PutAsync queued.
func (s *BoltStore) Close() error {
	s.stopProbe()
	s.pmu.Lock()
	s.pstop = true // decided writes are queued under pmu: all are before the close
	s.pmu.Unlock()
	if s.wedged.Load() {
		// A transaction faulted holding bbolt's locks: the group commit
		// may be waiting for them, for good, inside a transaction it
		// began (holding s.mu for reading). Nothing more is written:
		// what is queued fails, and neither it nor s.mu is waited for;
		// the file stays mapped and locked until the process exits,
		// which a damaged store calls for anyway.
		s.commit.closeNoWait()
		s.pmu.Lock()
		s.pclosed = true
		s.pcond.Broadcast()
		s.pmu.Unlock()
		return nil
	}
	s.commit.close()
	s.pmu.Lock()
	s.pclosed = true
	s.pcond.Broadcast()
	s.pmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.wedged.Load() {
		// bbolt's locks may be held by a transaction that faulted: its
		// file stays mapped and locked until the process exits, which a
		// damaged store calls for anyway.
		return nil
	}
	for i := range s.plogs {
		_ = s.plogs[i].f.Close()
	}
	var merr error
	if s.damaged.Load() == nil && !s.abandoned.Load() && s.WriteFailure() == nil {
		// (After a failed commit bbolt's meta in memory may name a
		// transaction the disk does not hold: the mark stays as it was.)
		merr = s.mark.close(s.db)
	} else {
		_ = s.mark.f.Close() // the file is not read again: the mark stays as it was
	}
	if err := s.db.Close(); err != nil && !errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("prospero: close state store: %w", err)
	}
	return merr
}

// errCorrupt reports a stored value that cannot be decoded;
// errRecordSum, which matches it, one whose checksum fails.
var (
	errCorrupt   = errors.New("prospero: corrupt state record")
	errRecordSum = fmt.Errorf("%w: its checksum does not match (a bit flipped on the disk?)", errCorrupt)
	errEpochSum  = fmt.Errorf("%w: the checksum of its epoch does not match (a bit flipped on the disk?)", errCorrupt)
)

// A record at rest: the version (8 bytes big endian, its top bit set:
// recordSummed), the incarnation (uvarint), the state, and a CRC-32C
// (4 bytes big endian) of the record's kind and key (each preceded by
// its length as a uvarint) and of all that. bbolt checksums only its
// meta pages: a bit flipped in a record's page, its key included, would
// otherwise be served, and replicated, as an actor's state. Records
// written before the checksum have the top bit clear and none; the
// file's format (formatKey) says whether it may hold them.
const recordSummed = 1 << 63

// recordSum is the checksum of body, the record of kind/key without it.
func recordSum(kind, key string, body []byte) uint32 {
	var pre [2 * binary.MaxVarintLen64]byte
	n := binary.PutUvarint(pre[:], uint64(len(kind)))
	sum := crc32.Update(0, castagnoli, pre[:n])
	sum = crc32.Update(sum, castagnoli, []byte(kind))
	n = binary.PutUvarint(pre[:], uint64(len(key)))
	sum = crc32.Update(sum, castagnoli, pre[:n])
	sum = crc32.Update(sum, castagnoli, []byte(key))
	return crc32.Update(sum, castagnoli, body)
}

func encodeRecord(kind, key string, version uint64, rec Record) []byte {
	buf := make([]byte, 8, 8+binary.MaxVarintLen64+len(rec.State)+4)
	binary.BigEndian.PutUint64(buf, version|recordSummed)
	buf = binary.AppendUvarint(buf, rec.Incarnation)
	buf = append(buf, rec.State...)
	return binary.BigEndian.AppendUint32(buf, recordSum(kind, key, buf))
}

// storedVersion reads the version of a stored record (0 for none),
// without checking its sum: writes compare it, and a record that does
// not verify fails every read and the check at open.
func storedVersion(v []byte) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	if len(v) < 8 {
		return 0, errCorrupt
	}
	return binary.BigEndian.Uint64(v) &^ recordSummed, nil
}

// decodeRecord decodes v, the record of kind/key in a file of format
// (formatKey), copying it (bbolt memory is only valid inside the
// transaction). A file of formatAllSummed holds no record without a
// checksum, and one never marked none with: a flag bit flipped either
// way is damage too.
func decodeRecord(kind, key string, v []byte, format byte) (Record, error) {
	if len(v) < 9 {
		return Record{}, errCorrupt
	}
	version := binary.BigEndian.Uint64(v)
	summed := version&recordSummed != 0
	switch {
	case summed && format == formatNone:
		return Record{}, fmt.Errorf("%w: it has a checksum in a file that holds none", errCorrupt)
	case !summed && format == formatAllSummed:
		return Record{}, fmt.Errorf("%w: it lacks the checksum every record of this file has", errCorrupt)
	}
	if summed {
		if len(v) < 8+1+4 {
			return Record{}, errCorrupt
		}
		body := v[:len(v)-4]
		if recordSum(kind, key, body) != binary.BigEndian.Uint32(v[len(body):]) {
			return Record{}, errRecordSum
		}
		v, version = body, version&^recordSummed
	}
	inc, n := binary.Uvarint(v[8:])
	if n <= 0 {
		return Record{}, errCorrupt
	}
	rec := Record{Version: version, Incarnation: inc}
	if rest := v[8+n:]; len(rest) > 0 {
		rec.State = append([]byte(nil), rest...)
	}
	return rec, nil
}
