package prospero

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// The store's mark.
//
// A state store replaced under a stopped node is read as the node's own
// at the next start: removed (the node starts with an empty store), or
// restored from a backup (it serves what the backup held). In a cluster
// the node is still its shards' owner in the placement table, so it
// serves that old state and its replicas take it over the newer state
// they held: acknowledged writes are lost without a word. So:
//
//   - Each store has an ID, 8 random bytes written into it when it is
//     created (the epoch bucket, under "/store").
//   - Beside it, "state.db.mark" holds that ID and the number of the
//     last bbolt transaction the file held, written when the store opens
//     (after a transaction that counts the open, so that no copy taken
//     before it holds that number, and after the pending log is written
//     back) and when it closes. Its
//     two slots are written in turn in place, each fdatasync'd, so a
//     crash while one is written leaves the other.
//   - At open, a mark naming another ID (the file removed, replaced by a
//     new or another node's) or a newer transaction (a copy from before
//     the node last opened or closed the store: a backup) is a
//     *CorruptError wrapping ErrStoreReplaced. A store restored on
//     purpose is accepted once the mark is removed.
//
// A copy taken while the node ran, after its last open, and restored
// after a crash is not found: the mark is not written on every commit,
// which would cost a second fsync per group commit.

// ErrStoreReplaced is the cause (in a *CorruptError naming the store)
// when the state store is not the file the node last ran with, or an
// older copy of it.
var ErrStoreReplaced = errors.New("the state store is not the file this node last ran with")

// MarkFile returns the name of the mark of the store at path.
func MarkFile(path string) string { return path + ".mark" }

// storeIDKey is the epoch bucket's key for the store's ID.
var storeIDKey = []byte("/store")

// formatKey is the epoch bucket's key for the format of the file's
// records (recordSummed), one byte: formatSomeSummed or formatAllSummed
// once this build opened the file; a file without it is formatNone.
// The value is not 8 bytes long, which a build from before the checksum
// takes for damage: it refuses the file at open rather than read a
// checksum as state. A value this build does not know is a newer
// build's: the file is refused, not rewritten.
//
// formatEpochSummed is a flag on it, set by every open of this build:
// the file's epoch values may carry a checksum (epochValue, 12 bytes).
// A build from before them reads the flagged byte as a later build's
// format and refuses the file as one, rather than as damage (a 12-byte
// epoch value is damage to it), which the runbook would answer by
// moving the state aside.
var formatKey = []byte("/format")

const (
	formatNone       byte = 0 // an earlier build's file: no record has a checksum
	formatSomeSummed byte = 1 // marked when it held records: those without a checksum are from before
	formatAllSummed  byte = 2 // marked empty: every record has a checksum

	formatEpochSummed byte = 0x10 // flag: epoch values may have a checksum
)

// parseFormat reads the format value v (nil: formatNone), without its
// flag; false when this build does not know it (a later build's).
func parseFormat(v []byte) (byte, bool) {
	if v == nil {
		return formatNone, true
	}
	if len(v) != 1 || v[0]&^formatEpochSummed > formatAllSummed {
		return 0, false
	}
	return v[0] &^ formatEpochSummed, true
}

const (
	markMagic = "TSM1"
	markLen   = 4 + 8 + 8 + 8 + 4 // magic, slot sequence, store ID, transaction, CRC-32C
	markSlot  = 64
)

// storeMark is the open mark file.
type storeMark struct {
	f       *os.File
	seq     uint64     // of the slot written last
	last    *markValue // what the mark held at open; nil: nothing
	created bool       // the file did not exist
	id      uint64     // the store's, once sealed
}

type markValue struct {
	id, txid uint64
}

// readStoreID returns the ID db holds (0: none), its format (without
// the flag) and whether the format carries formatEpochSummed.
func readStoreID(db *bolt.DB) (id uint64, format byte, flagged bool, err error) {
	err = db.View(func(tx *bolt.Tx) error {
		if eb := tx.Bucket(epochBucket); eb != nil {
			if v := eb.Get(storeIDKey); len(v) == 8 {
				id = binary.BigEndian.Uint64(v)
			}
			if v := eb.Get(formatKey); len(v) == 1 {
				format, _ = parseFormat(v) // openBolt refused a format it does not know
				flagged = v[0]&formatEpochSummed != 0
			}
		}
		return nil
	})
	return id, format, flagged, err
}

// markStore gives db an ID and a format if it has none, before anything
// else is written to it (the pending log's write-back writes records
// with checksums), and returns them: formatAllSummed for a file that
// holds no record yet, formatSomeSummed for one an earlier build wrote.
// It also counts the open (opensKey), in a transaction of its own, so
// that the mark sealed after it names a transaction no copy of the file
// taken before this open holds, even when nothing else is written (a
// start after a clean stop, then a crash). A full disk skips the count
// for a file that has its ID and its format, flagged: the node still
// starts. A file not flagged yet must be (it is about to receive epoch
// values an earlier build takes for damage): without room for that, the
// open fails.
func markStore(db *bolt.DB) (uint64, byte, error) {
	id, format, flagged, err := readStoreID(db)
	if err != nil {
		return 0, 0, err
	}
	marked := id != 0 && format != formatNone
	var b [8]byte
	for id == 0 {
		_, _ = rand.Read(b[:])
		id = binary.BigEndian.Uint64(b[:])
	}
	binary.BigEndian.PutUint64(b[:], id)
	err = db.Update(func(tx *bolt.Tx) error {
		eb, err := tx.CreateBucketIfNotExists(epochBucket)
		if err != nil {
			return err
		}
		if format == formatNone {
			format = formatAllSummed
			_ = tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
				if string(name) != string(epochBucket) {
					if k, _ := bk.Cursor().First(); k != nil {
						format = formatSomeSummed
						return errStop
					}
				}
				return nil
			})
			flagged = false
		}
		if !flagged {
			if err := eb.Put(formatKey, []byte{format | formatEpochSummed}); err != nil {
				return err
			}
		}
		var opens uint64
		if v := eb.Get(opensKey); len(v) == 8 {
			opens = binary.BigEndian.Uint64(v)
		}
		if err := eb.Put(opensKey, binary.BigEndian.AppendUint64(nil, opens+1)); err != nil {
			return err
		}
		return eb.Put(storeIDKey, b[:])
	})
	if err != nil && marked && flagged && noSpace(err) {
		err = nil
	}
	return id, format, err
}

// opensKey is the epoch bucket's key for how many times the store was
// opened (8 bytes big endian).
var opensKey = []byte("/opens")

var errStop = errors.New("stop")

// openMark opens (creating) the mark of the store at path and reads it,
// before the store is opened: a mark that names a store while there is
// no file at path is refused at once, so that the refused start creates
// none. check and seal do the rest; close it on error.
func openMark(path string) (*storeMark, error) {
	name := MarkFile(path)
	if fi, err := os.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		return nil, &CorruptError{Path: name, Err: fmt.Errorf("it is a %s, not a file", kindOfFile(fi.Mode()))}
	}
	_, statErr := os.Stat(name)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("prospero: open %s: %w", name, err)
	}
	m := &storeMark{f: f, created: statErr != nil}
	fail := func(err error) (*storeMark, error) {
		_ = f.Close()
		return nil, err
	}
	last, ok, err := m.read()
	switch {
	case err != nil:
		return fail(&CorruptError{Path: name, Err: err})
	case !ok:
		// Empty, or zeros (the file grown by a first write that a crash
		// cut off before its data reached the disk): never sealed.
		if b, _ := io.ReadAll(io.LimitReader(f, 2*markSlot+1)); len(bytes.Trim(b, "\x00")) > 0 {
			return fail(&CorruptError{Path: name, Err: errors.New("neither slot holds a valid mark")})
		}
	default:
		m.last = &last
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return fail(&CorruptError{Path: path, Err: fmt.Errorf("%w: it is gone, and %s names store %016x "+
				"(the file was removed or moved away)", ErrStoreReplaced, name, last.id)})
		}
	}
	return m, nil
}

// check compares db, the store at path as it opened (before anything is
// written to it), with the mark: a file without the ID the mark names
// (a new one, another node's) or older than the mark's transaction (a
// copy from before the last open or close: a backup) is refused. It
// writes nothing.
func (m *storeMark) check(path string, db *bolt.DB) error {
	if m.last == nil {
		return nil
	}
	id, _, _, err := readStoreID(db)
	if err != nil {
		return fmt.Errorf("prospero: read the ID of state store %s: %w", path, err)
	}
	name := m.f.Name()
	if id != m.last.id {
		return &CorruptError{Path: path, Err: fmt.Errorf("%w: %s names store %016x, and this file is %s "+
			"(the file was replaced by a new one or another node's)", ErrStoreReplaced, name, m.last.id, storeName(id))}
	}
	if now := txID(db); now < m.last.txid {
		return &CorruptError{Path: path, Err: fmt.Errorf("%w: it holds transaction %d, and this node last ran with "+
			"transaction %d (%s): it is an older copy, restored from a backup?", ErrStoreReplaced, now, m.last.txid, name)}
	}
	return nil
}

func storeName(id uint64) string {
	if id == 0 {
		return "a store without an ID"
	}
	return fmt.Sprintf("store %016x", id)
}

// seal marks db, whose ID is id, as it is now, once the pending log was
// written back: the open goes ahead. The file is synced first, so that
// the mark never names a transaction the disk may not hold. A full disk
// leaves the mark as it was (the next open or close writes it): the
// node still starts, to hand its shards away.
func (m *storeMark) seal(db *bolt.DB, id uint64) error {
	m.id = id
	if err := db.Sync(); err != nil {
		return fmt.Errorf("prospero: sync state store: %w", err)
	}
	if m.created {
		if err := syncDir(filepath.Dir(m.f.Name())); err != nil {
			return fmt.Errorf("prospero: create %s: %w", m.f.Name(), err)
		}
	}
	if err := m.write(markValue{id: id, txid: txID(db)}); err != nil && !noSpace(err) {
		return err
	}
	return nil
}

// txID is the number of the last transaction db committed.
func txID(db *bolt.DB) uint64 {
	var id uint64
	_ = db.View(func(tx *bolt.Tx) error {
		id = uint64(tx.ID())
		return nil
	})
	return id
}

// read returns the newest valid slot; ok is false when neither is.
func (m *storeMark) read() (v markValue, ok bool, err error) {
	buf := make([]byte, 2*markSlot)
	n, err := m.f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return v, false, fmt.Errorf("read: %w", err)
	}
	for slot := 0; slot+markLen <= n; slot += markSlot {
		b := buf[slot : slot+markLen]
		if string(b[:4]) != markMagic || binary.BigEndian.Uint32(b[markLen-4:]) != crc32.Checksum(b[:markLen-4], castagnoli) {
			continue
		}
		if seq := binary.BigEndian.Uint64(b[4:]); !ok || seq > m.seq {
			m.seq, ok = seq, true
			v = markValue{id: binary.BigEndian.Uint64(b[12:]), txid: binary.BigEndian.Uint64(b[20:])}
		}
	}
	return v, ok, nil
}

// write writes v into the slot not written last, durably.
func (m *storeMark) write(v markValue) error {
	m.seq++
	b := make([]byte, markLen)
	copy(b, markMagic)
	binary.BigEndian.PutUint64(b[4:], m.seq)
	binary.BigEndian.PutUint64(b[12:], v.id)
	binary.BigEndian.PutUint64(b[20:], v.txid)
	binary.BigEndian.PutUint32(b[markLen-4:], crc32.Checksum(b[:markLen-4], castagnoli))
	if _, err := m.f.WriteAt(b, int64(m.seq%2)*markSlot); err != nil {
		return fmt.Errorf("prospero: write %s: %w", m.f.Name(), err)
	}
	if err := m.f.Sync(); err != nil {
		return fmt.Errorf("prospero: write %s: %w", m.f.Name(), err)
	}
	return nil
}

// close marks db as it is now and closes the mark. A full disk leaves
// the mark as it was.
func (m *storeMark) close(db *bolt.DB) error {
	err := m.write(markValue{id: m.id, txid: txID(db)})
	if noSpace(err) {
		err = nil
	}
	return errors.Join(err, m.f.Close())
}

// noSpace reports whether err is a full disk or quota.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// syncDir fsyncs directory dir, so that a file created in it survives a
// crash.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // a directory cannot be opened for a sync there
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
