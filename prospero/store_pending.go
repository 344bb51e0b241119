package prospero

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Writes sent before they commit (PutAsyncSent).
//
// A replicated store sends a write to the shard's followers while the
// local transaction that makes it durable has not even begun, and may
// acknowledge it once every follower has it. So that the local store
// never goes on without such a write:
//
//   - PutAsyncSent decides the write at once: it checks the expected
//     version against the newest write of the identity (one still on its
//     way to bbolt, or what bbolt holds), gives it the kind's next
//     version, and appends it to the pending log ("state.db.pending"),
//     one write(2) and no fsync: the page cache outlives the process.
//     Then the caller may send it. The write joins the group commit like
//     any other, already decided.
//   - A transaction that commits decided writes also stores the sequence
//     number of the last one (in the epoch bucket, under "/pending"), so
//     a restart gives back exactly the logged writes that had not
//     committed, in order.
//   - The log is two files ("state.db.pending", "state.db.pending.1"),
//     each written from its start. Once every logged write has committed,
//     the next one is written at the start of the current file again; a
//     file past pendingSwitch hands over to the other one once every
//     write in that one has committed, which under steady load is long
//     since the case, so the log stays about two pendingSwitch in size
//     however long no moment finds every write committed. What follows
//     the entries written since a file's start is older entries, all
//     committed, or the middle of one (its checksum fails): a restart
//     skips both. A restart reads both files and gives back their writes
//     in the order of their sequence numbers.
//   - The files are checked after each such commit: removed or replaced
//     under the running node, they damage the store.
//   - If such a transaction fails to commit, the store is damaged (every
//     later operation fails) rather than serve state that lacks writes
//     other nodes may have acknowledged; the next open writes them back
//     from the log.
//   - Get of an identity with a decided write not yet committed, and
//     every scan, wait for that commit: the node never reads older state
//     than it sent.
//
// A write that cannot be decided at once (another operation on the
// identity — a deletion, a replicated record, a write not decided ahead —
// is queued and not committed yet; the store is damaged or closing; the
// log is full) is queued as PutAsync's are, and sent once it committed.
//
// Entry layout: length of the rest (4 bytes big endian), CRC-32C of the
// payload (4), payload: sequence (8), kind and key (uvarint length and
// bytes each), version (8), incarnation (uvarint), state (uvarint length
// and bytes), the owner's epoch (uvarint; an entry of an earlier build
// ends at the state: epoch 0). An entry cut short or failing its checksum was being
// written when the process died, before it was sent; reading stops there,
// and at an entry whose sequence number does not follow the one before
// it (an older entry, or the middle of one that looks like an entry).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrSentNotCommitted is the cause of the damage (a *CorruptError) of a
// store whose group commit failed after its writes were sent: the file
// is sound, the pending log holds the writes, and a restart, once the
// disk is fixed, writes them back.
var ErrSentNotCommitted = errors.New("writes already sent to replicas failed to commit")

// pendingMark is the epoch bucket's key for the sequence number of the
// last decided write committed. No identity's "kind/key" begins with '/'.
var pendingMark = []byte("/pending")

// pendingSwitch is the size past which the pending log's next write
// goes to the start of its other file, once every write logged there
// has committed.
const pendingSwitch = 4 << 20

// maxPendingLog bounds a pending log file that could not hand over (the
// other file holds writes not committed yet: commits far slower than
// writes): past it, writes are no longer decided ahead (they wait for
// their commit before being sent) until the log can be written from a
// start again.
const maxPendingLog = 64 << 20

// pendingLog is one of the pending log's two files.
type pendingLog struct {
	f    *os.File
	fi   os.FileInfo // the file opened
	name string
	size int64  // bytes written since its start
	last uint64 // sequence number of the last write logged in it
}

// PendingLogFiles returns the names of the pending log's two files of
// the store at path, which belong with it.
func PendingLogFiles(path string) [2]string { return [2]string{path + ".pending", path + ".pending.1"} }

// pendingWrite is one decided write.
type pendingWrite struct {
	seq     uint64
	id      Identity
	version uint64
	rec     Record
	// noEpoch: an earlier build logged it, without the epoch; that build
	// stored its own writes without one (the identity's epoch was left
	// as a replicated copy had set it), so it is written back as it
	// would have been (putDecidedTx).
	noEpoch bool
}

func appendPending(buf []byte, w pendingWrite) []byte {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint64(buf, w.seq)
	buf = binary.AppendUvarint(buf, uint64(len(w.id.Kind)))
	buf = append(buf, w.id.Kind...)
	buf = binary.AppendUvarint(buf, uint64(len(w.id.Key)))
	buf = append(buf, w.id.Key...)
	buf = binary.BigEndian.AppendUint64(buf, w.version)
	buf = binary.AppendUvarint(buf, w.rec.Incarnation)
	buf = binary.AppendUvarint(buf, uint64(len(w.rec.State)))
	buf = append(buf, w.rec.State...)
	buf = binary.AppendUvarint(buf, w.rec.Epoch)
	payload := buf[start+8:]
	binary.BigEndian.PutUint32(buf[start:], uint32(len(payload)+4))
	binary.BigEndian.PutUint32(buf[start+4:], crc32.Checksum(payload, castagnoli))
	return buf
}

// decodePending returns the whole entries at the head of b, in order,
// as long as their sequence numbers follow one another.
func decodePending(b []byte) []pendingWrite {
	var out []pendingWrite
	for len(b) >= 8 {
		n := binary.BigEndian.Uint32(b)
		if n < 4 || uint64(n) > uint64(len(b)-4) {
			return out
		}
		payload := b[8 : 4+n]
		if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
			return out
		}
		w, ok := decodePendingEntry(payload)
		if !ok || (len(out) > 0 && w.seq != out[len(out)-1].seq+1) {
			// The entries written since a file's start are one run of
			// consecutive sequence numbers: one that does not follow is
			// an older entry behind them (committed), or bytes that only
			// look like one (a record's state in the middle of an older
			// entry).
			return out
		}
		out = append(out, w)
		b = b[4+n:]
	}
	return out
}

func decodePendingEntry(p []byte) (pendingWrite, bool) {
	var w pendingWrite
	field := func() ([]byte, bool) {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return nil, false
		}
		v := p[k : k+int(n)]
		p = p[k+int(n):]
		return v, true
	}
	if len(p) < 8 {
		return w, false
	}
	w.seq = binary.BigEndian.Uint64(p)
	p = p[8:]
	kind, ok1 := field()
	key, ok2 := field()
	if !ok1 || !ok2 || len(p) < 8 {
		return w, false
	}
	w.id = Identity{Kind: string(kind), Key: string(key)}
	w.version = binary.BigEndian.Uint64(p)
	p = p[8:]
	inc, k := binary.Uvarint(p)
	if k <= 0 {
		return w, false
	}
	w.rec.Incarnation = inc
	p = p[k:]
	state, ok := field()
	if !ok {
		return w, false
	}
	if len(p) > 0 {
		e, k := binary.Uvarint(p)
		if k <= 0 || k != len(p) {
			return w, false
		}
		w.rec.Epoch = e
	} else {
		w.noEpoch = true // an entry of an earlier build ends at the state
	}
	if len(state) > 0 {
		w.rec.State = append([]byte(nil), state...)
	}
	return w, true
}

// openPending opens the pending log of the store at path, writes back
// into db the logged writes that had not committed, in order, and
// empties the log. It returns its files, the sequence number of the last
// decided write, and how many writes it gave back.
func openPending(path string, db *bolt.DB) (logs [2]pendingLog, last uint64, n int, err error) {
	defer func() {
		if err != nil {
			for _, l := range logs {
				if l.f != nil {
					_ = l.f.Close()
				}
			}
		}
	}()
	type logged struct {
		w    pendingWrite
		name string // of its file
	}
	var all []logged
	for i, name := range PendingLogFiles(path) {
		// A symbolic link (to /dev/null, say) or a special file would
		// take the writes and give none back after a crash: damage, as a
		// file replaced under the running node is.
		if fi, err := os.Lstat(name); err == nil && !fi.Mode().IsRegular() {
			what := kindOfFile(fi.Mode())
			if fi.Mode()&os.ModeSymlink != 0 {
				what = "symbolic link"
			}
			return logs, 0, 0, &CorruptError{Path: name, Err: fmt.Errorf("it is a %s, not a file", what)}
		}
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return logs, 0, 0, fmt.Errorf("prospero: open %s: %w", name, err)
		}
		logs[i] = pendingLog{f: f, name: name}
		b, err := io.ReadAll(f)
		if err != nil {
			return logs, 0, 0, fmt.Errorf("prospero: read %s: %w", name, err)
		}
		for _, w := range decodePending(b) {
			all = append(all, logged{w, name})
		}
		logs[i].size = int64(len(b))
	}
	if err := db.View(func(tx *bolt.Tx) error {
		last = committedPending(tx)
		return nil
	}); err != nil {
		return logs, 0, 0, fmt.Errorf("prospero: read %s: %w", path, err)
	}
	var redo []logged
	for _, l := range all {
		if l.w.seq > last {
			redo = append(redo, l)
		}
	}
	slices.SortFunc(redo, func(a, b logged) int { return cmp.Compare(a.w.seq, b.w.seq) })
	if len(redo) > 0 {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, l := range redo {
				w := l.w
				if w.id.Validate() != nil {
					return &CorruptError{Path: l.name, Err: fmt.Errorf("a pending write of %q names no valid identity", w.id.String())}
				}
				applied, err := putDecidedTx(tx, w.id, w.version, w.rec, w.noEpoch)
				if errors.Is(err, ErrVersionConflict) {
					continue // a newer owner's record is stored: superseded
				}
				if err != nil {
					return &CorruptError{Path: path, Err: fmt.Errorf("record %q: %w", w.id.String(), err)}
				}
				if applied {
					n++
				}
			}
			last = redo[len(redo)-1].w.seq
			return markPending(tx, last)
		})
		if err != nil {
			var ce *CorruptError
			if errors.As(err, &ce) {
				return logs, 0, 0, err
			}
			return logs, 0, 0, fmt.Errorf("prospero: write back the pending log of %s: %w", path, err)
		}
	}
	for i := range logs {
		l := &logs[i]
		if l.size > 0 {
			if err := l.f.Truncate(0); err != nil {
				return logs, 0, 0, fmt.Errorf("prospero: empty %s: %w", l.name, err)
			}
		}
		l.size = 0
		if l.fi, err = l.f.Stat(); err != nil {
			return logs, 0, 0, fmt.Errorf("prospero: open %s: %w", l.name, err)
		}
	}
	return logs, last, n, nil
}

// committedPending is the sequence number of the last decided write tx's
// database holds.
func committedPending(tx *bolt.Tx) uint64 {
	if eb := tx.Bucket(epochBucket); eb != nil {
		if v := eb.Get(pendingMark); len(v) == 8 {
			return binary.BigEndian.Uint64(v)
		}
	}
	return 0
}

func markPending(tx *bolt.Tx, seq uint64) error {
	eb, err := tx.CreateBucketIfNotExists(epochBucket)
	if err != nil {
		return err
	}
	return eb.Put(pendingMark, binary.BigEndian.AppendUint64(nil, seq))
}

// putDecidedTx stores a decided write at (rec.Epoch, version), ordered
// against the stored record by (epoch, version): it replaces a record of
// an older epoch whatever its version (an older owner's copy that
// reached the store after the write was decided), is not applied when
// the store holds that version or a newer one of the same epoch (a write
// given back twice), and fails with ErrVersionConflict when the store
// holds a record of a newer epoch (a newer owner's: this write is
// superseded).
//
// noEpoch is a write an earlier build logged without its epoch: it is
// written back as that build would have, by version alone, the
// identity's epoch left as it is. Ordering it by epoch would take it, at
// epoch 0, for older than any replicated copy, and drop a write that may
// have been acknowledged.
func putDecidedTx(tx *bolt.Tx, id Identity, version uint64, rec Record, noEpoch bool) (bool, error) {
	b, err := tx.CreateBucketIfNotExists([]byte(id.Kind))
	if err != nil {
		return false, err
	}
	key := []byte(id.Key)
	cur, err := storedVersion(b.Get(key))
	if err != nil {
		return false, err
	}
	switch {
	case cur == 0:
	case noEpoch || rec.Epoch == 0:
		// An earlier build's entry, or a write outside a cluster: by
		// version alone (supersedes).
		if cur >= version {
			return false, nil
		}
	default:
		e, err := storedEpoch(tx, id)
		switch {
		case err != nil:
			return false, err
		case supersedes(e, rec.Epoch):
			return false, supersededError(id, e, rec.Epoch)
		case e == rec.Epoch && cur >= version:
			return false, nil
		}
	}
	if b.Sequence() < max(cur, version) {
		if err := b.SetSequence(max(cur, version)); err != nil {
			return false, err
		}
	}
	if err := b.Put(key, encodeRecord(id.Kind, id.Key, version, rec)); err != nil {
		return false, err
	}
	if noEpoch {
		return true, nil
	}
	return true, setEpoch(tx, id, rec.Epoch)
}

// decided is the newest decided write of an identity not yet committed.
type decided struct {
	seq     uint64
	version uint64
}

// PutAsyncSent is PutAsync for a write its caller sends elsewhere (to
// replicas) before it is durable here: sent is called with the write's
// version before done. Usually the write is decided at once — its
// expected version checked against the newest write of the identity,
// its version taken, the write appended to the pending log
// ("state.db.pending", no fsync) — and sent is called on the caller's
// goroutine before PutAsyncSent returns; the write then joins the group
// commit as decided. A write that cannot be decided at once (another
// operation on the identity is queued, the store is damaged or closing,
// the log is full) waits for its commit, and sent is called on the
// store's goroutine then. A write that fails gets no sent call, only
// done's error. sent must not block nor call the store; done is called
// as PutAsync's.
//
// A decided write that has not reached the database when the process
// stops is written back at the next open (Recovered counts them). If
// the group commit holding decided writes fails, the store is damaged
// (a *CorruptError wrapping ErrSentNotCommitted): it must not serve
// without writes that may have been acknowledged elsewhere. Get of an
// identity with a decided write not committed yet, and every scan, wait
// for that commit.
//
// lazy says that the caller does not wait for the local commit (it counts
// the write as committed once its replicas have it): a decided write then
// starts no commit of its own while other writes will soon start one,
// and commits within a few milliseconds otherwise (as the replicated
// batches ApplyReplicatedLater queues), so that more writes share each
// fsync. A read that waits for it has it committed at once.
func (s *BoltStore) PutAsyncSent(id Identity, expected uint64, rec Record, lazy bool, sent func(version uint64), done func(uint64, error)) {
	if err := id.Validate(); err != nil {
		done(0, err)
		return
	}
	rec.State = append([]byte(nil), rec.State...)
	s.pmu.Lock()
	seq, version, ok := s.decideLocked(id, expected, rec)
	if !ok {
		s.touched[id]++
		s.pmu.Unlock()
		s.commit.queued(asyncPut{id: id, expected: expected, rec: rec, done: func(v uint64, err error) {
			s.untouch(id)
			if err == nil {
				sent(v)
			}
			done(v, err)
		}})
		return
	}
	// Queued under pmu: the group committer takes decided writes in the
	// order of their sequence numbers.
	s.commit.queued(asyncPut{id: id, rec: rec, decided: seq, version: version, lazy: lazy, done: done})
	s.pmu.Unlock()
	sent(version)
}

// decideLocked decides a write (see the top of the file): it returns
// its sequence number and version, or false if it cannot be decided now.
func (s *BoltStore) decideLocked(id Identity, expected uint64, rec Record) (seq, version uint64, ok bool) {
	if s.touched[id] > 0 || s.damaged.Load() != nil || s.pstop {
		return 0, 0, false
	}
	cur, floor := uint64(0), s.seqs[id.Kind]
	if d, ok := s.decided[id]; ok {
		cur = d.version
	} else {
		var stored, bseq, epoch uint64
		err := s.faultGuarded(func() error {
			return s.db.View(func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte(id.Kind))
				if b == nil {
					return nil
				}
				var err error
				stored, err = storedVersion(b.Get([]byte(id.Key)))
				bseq = b.Sequence()
				if err == nil {
					epoch, err = storedEpoch(tx, id)
				}
				return err
			})
		})
		if err != nil || (stored != 0 && supersedes(epoch, rec.Epoch)) {
			return 0, 0, false // the queued write reports it (or the newer owner's record)
		}
		cur, floor = stored, max(floor, bseq)
	}
	if cur != expected {
		return 0, 0, false // the queued write reports the conflict
	}
	l := &s.plogs[s.pcur]
	switch {
	case s.pdone == s.pseq:
		// Every logged write committed: write the current file from its
		// start again. What follows the new entries is older ones, all
		// committed (their sequence numbers are at most the mark), or
		// the middle of one (its checksum fails): a restart skips both.
		l.size = 0
	case l.size >= s.pswitch && s.plogs[1-s.pcur].last <= s.pdone:
		// Every write logged in the other file committed: go on there,
		// from its start.
		s.pcur = 1 - s.pcur
		l = &s.plogs[s.pcur]
		l.size = 0
	case l.size > maxPendingLog:
		return 0, 0, false
	}
	version = max(floor, cur) + 1
	seq = s.pseq + 1
	s.pbuf = appendPending(s.pbuf[:0], pendingWrite{seq: seq, id: id, version: version, rec: rec})
	if _, err := l.f.WriteAt(s.pbuf, l.size); err != nil {
		return 0, 0, false
	}
	l.size += int64(len(s.pbuf))
	l.last = seq
	s.pseq = seq
	s.seqs[id.Kind] = version
	s.decided[id] = decided{seq: seq, version: version}
	return seq, version, true
}

// checkPending reports a pending log file that is no longer the file
// the store opened (removed or replaced while the node ran), and its
// name: the writes it logs since would not come back after a kill. The
// group commit checks the files once its decided writes committed; the
// store is then damaged, so the node stops before it relies on a log
// nobody would read.
func (s *BoltStore) checkPending() (string, error) {
	for i := range s.plogs {
		// name and fi are set at open and only read since; the rest of
		// the entry is pmu's.
		l := &s.plogs[i]
		fi, err := statFile(l.name)
		switch {
		case err != nil:
			return l.name, fmt.Errorf("removed while the node was running (%v); writes sent to replicas would not come back after a crash: restart the node, which creates it again", err)
		case !os.SameFile(fi, l.fi):
			return l.name, errors.New("replaced by another file while the node was running; writes sent to replicas would not come back after a crash: restart the node")
		}
	}
	return "", nil
}

// untouch ends an operation on id queued while decided writes could not
// see it.
func (s *BoltStore) untouch(ids ...Identity) {
	s.pmu.Lock()
	for _, id := range ids {
		if s.touched[id]--; s.touched[id] <= 0 {
			delete(s.touched, id)
		}
	}
	s.pcond.Broadcast() // settle
	s.pmu.Unlock()
}

// Hold marks an operation on ids on its way to the store before it is
// queued (a replicated batch being checked against the placement table):
// until release, no write of them is decided ahead, and Get of one waits.
// A replica checks a batch's epoch and queues it under a hold, so that a
// write this node decides as the shard's new owner either comes after the
// check, which then refuses the batch as stale, or waits for the batch.
func (s *BoltStore) Hold(ids ...Identity) (release func()) {
	s.touch(ids...)
	return func() { s.untouch(ids...) }
}

// touch counts queued operations on ids: no write of them is decided
// ahead until they committed.
func (s *BoltStore) touch(ids ...Identity) {
	s.pmu.Lock()
	for _, id := range ids {
		s.touched[id]++
	}
	s.pmu.Unlock()
}

// seqFloor is the lowest sequence a write of kind must take its version
// above: versions given to decided writes not committed yet.
func (s *BoltStore) seqFloor(kind string) uint64 {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.seqs[kind]
}

// decidedCommitted records that the decided writes of group up to
// sequence last committed.
func (s *BoltStore) decidedCommitted(group []asyncPut, last uint64) {
	s.pmu.Lock()
	s.pdone = max(s.pdone, last)
	for i := range group {
		w := &group[i]
		if w.decided != 0 && s.decided[w.id].seq == w.decided {
			delete(s.decided, w.id)
		}
	}
	s.pcond.Broadcast()
	s.pmu.Unlock()
}

// settle waits until the decided write of id (nil: every decided write)
// committed, and every operation on id queued (a replicated record
// above all), or the store is damaged, closed or abandoned. A replica
// acknowledges records on receipt and writes them in a later group
// commit; once it owns their shard (a promotion, a failover), it must
// read id with them: state read without them would be written over,
// and the late record would then overwrite that write or fail its
// commit.
func (s *BoltStore) settle(id *Identity) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	want := s.pseq
	if id != nil {
		want = s.decided[*id].seq
	}
	waiting := func() bool { return s.pdone < want || (id != nil && s.touched[*id] > 0) }
	if waiting() {
		s.commit.hurry()
	}
	for waiting() && s.damaged.Load() == nil && !s.pclosed && !s.abandoned.Load() {
		s.pcond.Wait()
	}
}
