package placement

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"

	"github.com/tempest-actors/tempest/internal/boltcheck"
)

// ErrCorrupt marks a raft log or snapshot on disk that cannot be read
// back as written. errors.Is(err, ErrCorrupt) holds for every
// *CorruptError.
var ErrCorrupt = errors.New("placement: corrupt raft data")

// CorruptError says which file is damaged and how.
type CorruptError struct {
	Path string // the damaged file
	Err  error  // what was found
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("placement: %s is damaged: %v", e.Path, e.Err)
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns what was found.
func (e *CorruptError) Unwrap() error { return e.Err }

// The raft log keeps its own lower bound of what this node acknowledged.
// raft-wal checks only the last commit of its tail segment (a torn write
// is rolled back), so a damaged segment opens quietly at an earlier
// index, or empty: a node restarted on it would vote and serve having
// forgotten entries it acknowledged, which breaks raft's quorum
// arithmetic. The mark file (raft/log.mark) records, after every append
// the log store makes durable, the index of the last entry, and is
// lowered before raft truncates its tail; at open the log (with the
// newest snapshot) must reach it. The file has two slots written in
// turn, each with a sequence number and a checksum, so a torn write of
// the mark loses only the newest value.

const (
	markFile   = "log.mark"
	markSlot   = 32
	markMagic  = "TLM1"
	markFields = 4 + 8 + 8 // magic, sequence, index
)

// logMark is the durable lower bound of the log's last index. Safe for
// concurrent use (raft appends from one goroutine and compacts from
// another).
type logMark struct {
	path string

	mu    sync.Mutex
	f     *os.File
	seq   uint64
	index uint64
}

// openLogMark opens (creating) the mark file at path. history is empty
// for a node without raft state (no term, no log, no snapshot), else it
// says what the node has: such a node must have a valid mark, since a
// removed or emptied mark would let a log that lost entries through the
// check. A fresh node writes its first mark (index 0) at once, so from
// its first start on the file is never empty.
func openLogMark(path, history string) (*logMark, error) {
	if err := notAFile(path); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	existed := statErr == nil
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("placement: open %s: %w", path, err)
	}
	m := &logMark{path: path, f: f}
	buf := make([]byte, 2*markSlot)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		_ = f.Close()
		return nil, &CorruptError{Path: path, Err: fmt.Errorf("read: %w", err)}
	}
	valid := false
	for slot := 0; slot+markSlot <= n; slot += markSlot {
		b := buf[slot : slot+markSlot]
		if string(b[:4]) != markMagic || binary.LittleEndian.Uint32(b[markFields:]) != crc32.ChecksumIEEE(b[:markFields]) {
			continue
		}
		if seq := binary.LittleEndian.Uint64(b[4:]); !valid || seq > m.seq {
			m.seq, m.index, valid = seq, binary.LittleEndian.Uint64(b[12:]), true
		}
	}
	switch {
	case n > 0 && !valid:
		_ = f.Close()
		return nil, &CorruptError{Path: path, Err: errors.New("neither slot holds a valid mark")}
	case n == 0 && history != "":
		_ = f.Close()
		what := "is empty"
		if !existed {
			what = "is missing"
			_ = os.Remove(path) // leave the directory as it was found
		}
		return nil, &CorruptError{Path: path, Err: fmt.Errorf(
			"the mark %s but this node has raft state (%s): without it a log that lost acknowledged entries cannot be told from a whole one", what, history)}
	case n == 0:
		if err := m.write(0); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return m, nil
}

// get returns the mark.
func (m *logMark) get() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.index
}

// set makes index the mark, durably.
func (m *logMark) set(index uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if index == m.index {
		return nil
	}
	return m.write(index)
}

// write stores index in the next slot and syncs it. m.mu is held (or m
// not yet shared).
func (m *logMark) write(index uint64) error {
	b := make([]byte, markSlot)
	copy(b, markMagic)
	binary.LittleEndian.PutUint64(b[4:], m.seq+1)
	binary.LittleEndian.PutUint64(b[12:], index)
	binary.LittleEndian.PutUint32(b[markFields:], crc32.ChecksumIEEE(b[:markFields]))
	if _, err := m.f.WriteAt(b, int64((m.seq+1)%2)*markSlot); err != nil {
		return fmt.Errorf("placement: write %s: %w", m.path, err)
	}
	if err := m.f.Sync(); err != nil {
		return fmt.Errorf("placement: sync %s: %w", m.path, err)
	}
	m.seq++
	m.index = index
	return nil
}

func (m *logMark) close() error { return m.f.Close() }

// markedLog is the raft log store with the mark kept beside it.
type markedLog struct {
	raft.LogStore
	mark *logMark
}

var (
	_ raft.LogStore          = (*markedLog)(nil)
	_ raft.MonotonicLogStore = (*markedLog)(nil)
)

// IsMonotonic passes on raft-wal's: it only appends the next index, so
// raft must empty it when it installs a snapshot past its end rather
// than keep its old entries (after which every append would fail and
// the follower never catch up). Embedding the LogStore interface hides
// the method, hence this one.
func (l *markedLog) IsMonotonic() bool {
	m, ok := l.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (l *markedLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

// StoreLogs raises the mark once the entries are durable: raft
// acknowledges them only after StoreLogs returns.
func (l *markedLog) StoreLogs(logs []*raft.Log) error {
	if err := l.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	if len(logs) == 0 {
		return nil
	}
	return l.mark.set(logs[len(logs)-1].Index)
}

// DeleteRange lowers the mark first when raft truncates the tail (a
// follower dropping entries a new leader overrides, or a snapshot
// install), so that a crash in between never looks like lost entries.
func (l *markedLog) DeleteRange(lo, hi uint64) error {
	if hi >= l.mark.get() && lo > 0 {
		if err := l.mark.set(lo - 1); err != nil {
			return err
		}
	}
	return l.LogStore.DeleteRange(lo, hi)
}

// damaged turns err, a failure to open or read path under raft/, into a
// *CorruptError naming path; a permission error (the operator's to fix,
// the data may be whole) and an error that already names its file pass
// unchanged.
// notAFile is a *CorruptError when path exists and is not a regular file
// (a directory, a symbolic link, a device): such a file is damage, as a
// file whose bytes are; a missing one is not.
func notAFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().IsRegular() {
		return nil
	}
	what := "directory"
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		what = "symbolic link"
	case !fi.IsDir():
		what = "special file"
	}
	return &CorruptError{Path: path, Err: fmt.Errorf("it is a %s, not a file", what)}
}

func damaged(path string, err error) error {
	var ce *CorruptError
	if err == nil || errors.Is(err, fs.ErrPermission) || errors.As(err, &ce) {
		return err
	}
	return &CorruptError{Path: path, Err: err}
}

// loadWALMeta opens the raft log's metadata database (raft/wal/
// wal-meta.db: the segment list and raft's term and vote) and reads it
// back once, so that garbage in it is a *CorruptError naming it, not a
// bare "invalid database" or a panic: the WAL library reads it without
// checks (a missing bucket is a nil dereference), and a file cut short
// faults its memory map. raftwal.Open loads it again from the open
// handle.
func loadWALMeta(walDir string, meta *metadb.BoltMetaDB) (err error) {
	path := filepath.Join(walDir, metadb.FileName)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Path: path, Err: fmt.Errorf("reading it failed: %v", r)}
		}
	}()
	if err := checkWALMeta(path); err != nil {
		return damaged(path, err)
	}
	if _, err := meta.Load(walDir); err != nil {
		return damaged(path, err)
	}
	if _, err := meta.GetStable([]byte("CurrentTerm")); err != nil {
		return damaged(path, err)
	}
	return nil
}

// checkWALMeta checks the bbolt file at path, if there is one, before
// the WAL opens it (its own handle is not reachable): an empty file
// (the WAL creates it whole, under another name), one without the WAL's
// buckets, or one whose pages disagree (boltcheck) is damaged.
func checkWALMeta(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil // none yet; or opening it reports why
	}
	if fi.Size() == 0 {
		return errors.New("the file is empty")
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return nil // opened again below, which reports it
	}
	err = db.View(func(tx *bbolt.Tx) error {
		for _, b := range []string{metadb.MetaBucket, metadb.StableBucket} {
			if tx.Bucket([]byte(b)) == nil {
				return fmt.Errorf("it has no %q bucket: not a raft log's metadata", b)
			}
		}
		return nil
	})
	if err == nil {
		err = boltcheck.Check(db)
	}
	return errors.Join(err, db.Close())
}

// snapshotMeta is what raft's FileSnapshotStore writes as meta.json.
type snapshotMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// verifySnapshots reads every retained snapshot under dir (the
// FileSnapshotStore's directory): meta.json must decode and state.bin
// match its checksum. raft itself skips a snapshot whose metadata does
// not decode and falls back to an older one or none, which with a
// compacted log leaves a gap. It returns the newest snapshot's index.
// A snapshot left unfinished (DIR.tmp: a crash, or a write that failed
// on a full disk, while raft took it) is never read; it is removed, so
// that its room on a disk that may be full comes back.
func verifySnapshots(dir string) (uint64, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, damaged(dir, fmt.Errorf("placement: read %s: %w", dir, err))
	}
	var newest uint64
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), ".tmp") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return 0, damaged(dir, fmt.Errorf("placement: remove an unfinished snapshot: %w", err))
			}
			continue
		}
		if !e.IsDir() {
			continue
		}
		metaPath := filepath.Join(dir, e.Name(), "meta.json")
		b, err := os.ReadFile(metaPath)
		if err != nil {
			return 0, &CorruptError{Path: metaPath, Err: err}
		}
		var meta snapshotMeta
		if err := json.Unmarshal(b, &meta); err != nil {
			return 0, &CorruptError{Path: metaPath, Err: fmt.Errorf("does not decode: %w", err)}
		}
		if meta.Version < raft.SnapshotVersionMin || meta.Version > raft.SnapshotVersionMax || meta.Index == 0 {
			return 0, &CorruptError{Path: metaPath, Err: fmt.Errorf("version %d, index %d: not a snapshot this node wrote", meta.Version, meta.Index)}
		}
		statePath := filepath.Join(dir, e.Name(), "state.bin")
		f, err := os.Open(statePath)
		if err != nil {
			return 0, &CorruptError{Path: statePath, Err: err}
		}
		h := crc64.New(crc64.MakeTable(crc64.ECMA))
		_, err = io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			return 0, damaged(statePath, fmt.Errorf("placement: read %s: %w", statePath, err))
		}
		if !bytes.Equal(h.Sum(nil), meta.CRC) {
			return 0, &CorruptError{Path: statePath, Err: errors.New("checksum mismatch")}
		}
		newest = max(newest, meta.Index)
	}
	return newest, nil
}

// segmentFor names the WAL segment file of walDir holding index (the one
// with the highest base index not above it), or the newest segment when
// index is 0; walDir itself when there is none.
func segmentFor(walDir string, index uint64) string {
	names, _ := filepath.Glob(filepath.Join(walDir, "*.wal"))
	slices.Sort(names) // base indexes are zero-padded
	best := walDir
	for _, p := range names {
		var base, id uint64
		if _, err := fmt.Sscanf(filepath.Base(p), "%d-%x.wal", &base, &id); err != nil {
			continue
		}
		if index == 0 || base <= index {
			best = p
		}
	}
	return best
}

// raftHistory says what raft state the node has, or "" for none: a
// current term (the node took part in an election or heard a leader), a
// log or a snapshot.
func raftHistory(stable raft.StableStore, logs raft.LogStore, snapIndex uint64) (string, error) {
	var has []string
	term, err := stable.GetUint64([]byte("CurrentTerm"))
	if err != nil {
		return "", err
	}
	if term > 0 {
		has = append(has, fmt.Sprintf("term %d", term))
	}
	last, err := logs.LastIndex()
	if err != nil {
		return "", err
	}
	if last > 0 {
		has = append(has, fmt.Sprintf("log to index %d", last))
	}
	if snapIndex > 0 {
		has = append(has, fmt.Sprintf("snapshot to index %d", snapIndex))
	}
	return strings.Join(has, ", "), nil
}

// verifyLog checks at open that the raft log is whole: every entry from
// the first to the last reads back and decodes, it follows the newest
// snapshot without a gap, and together with it reaches the mark
// (created: this start created the log, raft/wal had none). It calls
// seen, if not nil, with each command after the snapshot.
func verifyLog(walDir string, created bool, logs raft.LogStore, snapIndex, mark uint64, seen func(l *raft.Log, c Command)) (err error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return &CorruptError{Path: walDir, Err: err}
	}
	last, err := logs.LastIndex()
	if err != nil {
		return &CorruptError{Path: walDir, Err: err}
	}
	if created && snapIndex < mark {
		// Not a segment cut short: the log itself is gone (raft/wal
		// removed or emptied, and created anew by this start).
		return &CorruptError{Path: walDir, Err: fmt.Errorf(
			"the raft log holds no entry (removed or emptied?), the newest snapshot ends at index %d, but this node acknowledged entries up to %d: acknowledged entries were lost", snapIndex, mark)}
	}
	if reach := max(last, snapIndex); reach < mark {
		return &CorruptError{Path: segmentFor(walDir, 0), Err: fmt.Errorf(
			"the raft log ends at index %d but this node acknowledged entries up to %d: acknowledged entries were lost", reach, mark)}
	}
	if last > 0 && first > snapIndex+1 {
		return &CorruptError{Path: segmentFor(walDir, first), Err: fmt.Errorf(
			"the raft log starts at index %d but the newest snapshot ends at %d: entries between are missing", first, snapIndex)}
	}
	idx := first
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Path: segmentFor(walDir, idx), Err: fmt.Errorf("entry %d: %v", idx, r)}
		}
	}()
	var l raft.Log
	for ; last > 0 && idx <= last; idx++ {
		if err := logs.GetLog(idx, &l); err != nil {
			return &CorruptError{Path: segmentFor(walDir, idx), Err: fmt.Errorf("entry %d: %w", idx, err)}
		}
		if l.Index != idx {
			return &CorruptError{Path: segmentFor(walDir, idx), Err: fmt.Errorf("entry %d reads back as index %d", idx, l.Index)}
		}
		if l.Type == raft.LogCommand {
			c, err := DecodeCommand(l.Data)
			if err != nil {
				return &CorruptError{Path: segmentFor(walDir, idx), Err: fmt.Errorf("entry %d: %w", idx, err)}
			}
			if seen != nil && idx > snapIndex {
				seen(&l, c)
			}
		}
	}
	return nil
}

// MemberFile, beside raft/ in the data directory, says that the
// directory has held raft state: written once raft/ is set up, it
// outlives a raft/ removed alone.
const MemberFile = "raft.member"

// checkRaftDir refuses a data directory whose raft/ was removed or
// emptied (its log.mark, written at a node's first start, is gone)
// although it held raft state (MemberFile): a node that lost its raft
// log, and with it the entries it acknowledged as a voter, must not come
// back under its old name, since it could help elect a leader without
// them. An empty data directory is a new node. A deliberate reset of
// raft state (docs/placement.md) removes MemberFile too.
func checkRaftDir(dataDir, name string) error {
	member := filepath.Join(dataDir, MemberFile)
	if _, err := os.Stat(member); err != nil {
		return nil
	}
	if err := CheckDataDir(dataDir, name); err != nil {
		return err
	}
	raftDir := filepath.Join(dataDir, "raft")
	if _, err := os.Stat(filepath.Join(raftDir, markFile)); !errors.Is(err, fs.ErrNotExist) {
		return nil // there; openLogMark checks it
	}
	if holdsFiles(raftDir) { // then openLogMark names the missing mark
		return nil
	}
	return &CorruptError{Path: raftDir, Err: fmt.Errorf(
		"its raft state is gone (no %s), but this data directory held raft state (%s says so): a node that lost its raft log must not come back under its old name", markFile, member)}
}

// holdsFiles reports whether any file is left under dir.
func holdsFiles(dir string) bool {
	held := false
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			held = true
			return fs.SkipAll
		}
		return nil
	})
	return held
}

// checkMemberFile refuses raft state (history, see raftHistory) in a
// data directory without MemberFile, which was removed: there is no
// telling whose state it is, and a node started on it under any name
// would vote with its term and vote. A directory whose first start
// stopped before it wrote MemberFile holds no raft state yet.
func checkMemberFile(dataDir, history string) error {
	member := filepath.Join(dataDir, MemberFile)
	if _, err := os.Stat(member); history == "" || !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return &CorruptError{Path: member, Err: fmt.Errorf(
		"it is missing, but raft/ holds raft state (%s): without it there is no telling which node's state that is", history)}
}

// ErrOtherNodesData is the error CheckDataDir wraps when the data
// directory held the raft state of a node with another name.
var ErrOtherNodesData = errors.New("placement: the data directory is another node's")

// CheckDataDir checks that the data directory dir, if it has held raft
// state (MemberFile, which holds the name of the node that wrote it),
// held it for the node name. Started under another name, a node would
// vote with the other's term and vote, present its data ID and serve
// its state at rest as its own: data directories swapped between two
// nodes, or a --name mistyped. The error wraps ErrOtherNodesData. A
// MemberFile that does not hold one node name is a *CorruptError.
func CheckDataDir(dir, name string) error {
	path := filepath.Join(dir, MemberFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return damaged(path, fmt.Errorf("placement: %w", err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMemberFile+1))
	if err != nil {
		return damaged(path, fmt.Errorf("placement: read %s: %w", path, err))
	}
	owner, ok := strings.CutSuffix(string(b), "\n")
	if !ok || owner == "" || len(b) > maxMemberFile || strings.ContainsAny(owner, "\n\r\x00") || !utf8.ValidString(owner) {
		return &CorruptError{Path: path, Err: errors.New("it does not hold a node name (one line)")}
	}
	if owner != name {
		return fmt.Errorf("%w: %s says it held the raft state of node %q, and this node is named %q: "+
			"start it under the name %[3]q, or give %[4]q a data directory of its own",
			ErrOtherNodesData, path, owner, name)
	}
	return nil
}

// maxMemberFile bounds what CheckDataDir reads of MemberFile: a node
// name and its newline.
const maxMemberFile = 1024

// markRaftDir writes MemberFile (the node's name) once, durably.
func markRaftDir(dataDir, name string) error {
	member := filepath.Join(dataDir, MemberFile)
	if _, err := os.Stat(member); err == nil {
		return nil
	}
	f, err := os.OpenFile(member, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("placement: %w", err)
	}
	_, err = f.WriteString(name + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dataDir)
	}
	if err != nil {
		return fmt.Errorf("placement: write %s: %w", member, err)
	}
	return nil
}

// syncDir fsyncs directory dir, so that a file created in it survives a
// crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
