package prospero

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tempest-actors/tempest/internal/crashhook"
)

func openBoltAt(t *testing.T, path string) *BoltStore {
	t.Helper()
	s, err := NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// holdCommits makes every group commit wait, before its transaction
// commits, until the returned release is called (or fail with err).
func holdCommits(t *testing.T, err error) (release func()) {
	hold := make(chan struct{})
	beforeCommit = func() error {
		<-hold
		return err
	}
	t.Cleanup(func() { beforeCommit = nil })
	closed := false
	return func() {
		if !closed {
			closed = true
			close(hold)
		}
	}
}

type putOutcome struct {
	v   uint64
	err error
}

// putSent is PutAsyncSent, returning the version sent (0: none before it
// returned) and a channel with done's outcome.
func putSent(s *BoltStore, id Identity, expected uint64, state string) (sent uint64, done chan putOutcome) {
	done = make(chan putOutcome, 1)
	s.PutAsyncSent(id, expected, Record{State: []byte(state)}, false, func(v uint64) { sent = v },
		func(v uint64, err error) { done <- putOutcome{v, err} })
	return sent, done
}

func TestDecidedWritesAreSentBeforeTheyCommitAndReadAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
		release := holdCommits(t, nil)
		id := Identity{Kind: "counter", Key: "a"}

		v1, done1 := putSent(s, id, 0, "1")
		if v1 != 1 {
			t.Fatalf("sent version %d before PutAsyncSent returned, want 1", v1)
		}
		// The next write of the identity is decided from the first, not
		// from the store, while the first has not committed.
		v2, done2 := putSent(s, id, 1, "2")
		if v2 != 2 {
			t.Fatalf("second write sent at version %d, want 2", v2)
		}
		got := make(chan Record, 1)
		go func() {
			rec, err := s.Get(context.Background(), id)
			if err != nil {
				t.Error(err)
			}
			got <- rec
		}()
		synctest.Wait()
		select {
		case <-done1:
			t.Fatal("done before the commit")
		case <-got:
			t.Fatal("Get returned before the write it must see committed")
		default:
		}
		release()
		for _, d := range []chan putOutcome{done1, done2} {
			if o := <-d; o.err != nil {
				t.Fatal(o.err)
			}
		}
		if rec := <-got; rec.Version != 2 || string(rec.State) != "2" {
			t.Fatalf("Get after the commit: version %d %q, want 2 \"2\"", rec.Version, rec.State)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestDecidedWriteConflictIsReported(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	id := Identity{Kind: "counter", Key: "a"}
	if _, done := putSent(s, id, 0, "1"); (<-done).err != nil {
		t.Fatal("first write failed")
	}
	sent, done := putSent(s, id, 0, "stale")
	if sent != 0 {
		t.Fatalf("a write expecting the wrong version was sent (version %d)", sent)
	}
	if o := <-done; !errors.Is(o.err, ErrVersionConflict) {
		t.Fatalf("done: %v, want ErrVersionConflict", o.err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A process killed after it sent writes and before their transaction
// committed leaves them in the pending log only: the next open writes
// them back, at the versions sent.
func TestDecidedWritesComeBackAfterAStopBeforeTheirCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s := openBoltAt(t, path)
	a, b := Identity{Kind: "counter", Key: "a"}, Identity{Kind: "counter", Key: "b"}
	if _, done := putSent(s, a, 0, "a1"); (<-done).err != nil {
		t.Fatal("first write failed")
	}
	release := holdCommits(t, nil)
	va, _ := putSent(s, a, 1, "a2")
	vb, _ := putSent(s, b, 0, "b1")
	if va != 2 || vb != 3 {
		t.Fatalf("sent versions %d and %d, want 2 and 3", va, vb)
	}
	// What a kill -9 now leaves on disk: the database without the
	// transaction in progress, and the log.
	crashed := filepath.Join(t.TempDir(), "state.db")
	copyFile(t, path, crashed)
	copyFile(t, path+".pending", crashed+".pending")
	release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := openBoltAt(t, crashed)
	if r.Recovered() != 2 {
		t.Fatalf("Recovered = %d, want 2", r.Recovered())
	}
	for id, want := range map[Identity]Record{a: {Version: 2, State: []byte("a2")}, b: {Version: 3, State: []byte("b1")}} {
		rec, err := r.Get(context.Background(), id)
		if err != nil || rec.Version != want.Version || !bytes.Equal(rec.State, want.State) {
			t.Fatalf("%s after the restart: %+v, %v; want version %d %q", id, rec, err, want.Version, want.State)
		}
	}
	// Later writes take versions above those given back.
	if v, done := putSent(r, a, 2, "a3"); v != 4 || (<-done).err != nil {
		t.Fatalf("write after the restart sent at %d, want 4", v)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	again := openBoltAt(t, crashed)
	defer again.Close()
	if again.Recovered() != 0 {
		t.Fatalf("second open gave back %d writes, want 0", again.Recovered())
	}
}

func TestFailedCommitOfSentWritesDamagesTheStoreUntilRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBoltAt(t, path)
	release := holdCommits(t, errors.New("disk failed"))
	release()
	id := Identity{Kind: "counter", Key: "a"}
	sent, done := putSent(s, id, 0, "1")
	if sent != 1 {
		t.Fatalf("sent %d, want 1", sent)
	}
	if o := <-done; o.err == nil {
		t.Fatal("done reported a failed commit as committed")
	}
	beforeCommit = nil
	var ce *CorruptError
	if !errors.As(s.Damaged(), &ce) {
		t.Fatalf("Damaged() = %v, want a *CorruptError", s.Damaged())
	}
	if _, err := s.Get(context.Background(), id); !errors.As(err, &ce) {
		t.Fatalf("Get on the damaged store: %v, want the damage", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openBoltAt(t, path)
	defer r.Close()
	if rec, err := r.Get(context.Background(), id); err != nil || rec.Version != 1 || string(rec.State) != "1" || r.Recovered() != 1 {
		t.Fatalf("after the restart: %+v, %v, recovered %d; want version 1 \"1\", 1", rec, err, r.Recovered())
	}
}

// The log is written from its start again once everything in it
// committed, over older entries: none of those may come back, not even
// one whose identity was deleted since.
func TestPendingLogNeverBringsBackCommittedWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBoltAt(t, path)
	a, b := Identity{Kind: "counter", Key: "a"}, Identity{Kind: "counter", Key: "b"}
	// Two entries in the log (the second decided while the first had not
	// committed), then both commit.
	release := holdCommits(t, nil)
	_, done1 := putSent(s, a, 0, "x1")
	_, done2 := putSent(s, a, 1, "x2")
	release()
	if (<-done1).err != nil || (<-done2).err != nil {
		t.Fatal("write failed")
	}
	beforeCommit = nil
	del := make(chan error, 1)
	s.DeleteAsync(a, 2, func(err error) { del <- err })
	if err := <-del; err != nil {
		t.Fatal(err)
	}
	// Everything committed: b's entry is written over x1's, x2's stays.
	if _, done := putSent(s, b, 0, "y1"); (<-done).err != nil {
		t.Fatal("write failed")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn entry at the end (the process died while writing it).
	f, err := os.OpenFile(path+".pending", os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write(appendPending(nil, pendingWrite{seq: 99, id: a, version: 99, rec: Record{State: []byte("torn")}})[:20])
	_ = f.Close()

	r := openBoltAt(t, path)
	defer r.Close()
	if r.Recovered() != 0 {
		t.Fatalf("Recovered = %d, want 0", r.Recovered())
	}
	if rec, err := r.Get(context.Background(), a); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted record back after a restart: %+v, %v", rec, err)
	}
}

func TestPendingEntriesRoundTrip(t *testing.T) {
	in := []pendingWrite{
		{seq: 1, id: Identity{Kind: "k", Key: "a"}, version: 7, rec: Record{Incarnation: 3, State: []byte("state")}},
		{seq: 2, id: Identity{Kind: "k", Key: "b"}, version: 8},
	}
	var buf []byte
	for _, w := range in {
		buf = appendPending(buf, w)
	}
	out := decodePending(buf)
	if len(out) != 2 || out[0].version != 7 || string(out[0].rec.State) != "state" || out[0].rec.Incarnation != 3 ||
		out[1].id.Key != "b" || out[1].seq != 2 {
		t.Fatalf("round trip: %+v", out)
	}
	// An entry whose sequence number does not follow (an older one left
	// behind the entries written since the file's start) ends them.
	stale := appendPending(append([]byte(nil), buf...), pendingWrite{seq: 1, id: Identity{Kind: "k", Key: "c"}, version: 9})
	if out := decodePending(stale); len(out) != 2 {
		t.Fatalf("an entry out of sequence was read: %d entries, want 2", len(out))
	}
	buf[len(buf)-1] ^= 1 // the second entry's last byte
	if out := decodePending(buf); len(out) != 1 {
		t.Fatalf("a damaged entry was read: %d entries", len(out))
	}
}

func FuzzDecodePending(f *testing.F) {
	f.Add(appendPending(nil, pendingWrite{seq: 1, id: Identity{Kind: "k", Key: "a"}, version: 1, rec: Record{State: []byte("s")}}))
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, w := range decodePending(b) {
			again := decodePending(appendPending(nil, w))
			if len(again) != 1 || again[0].seq != w.seq || again[0].id != w.id || again[0].version != w.version ||
				!bytes.Equal(again[0].rec.State, w.rec.State) {
				t.Fatalf("entry does not round trip: %+v", w)
			}
		}
	})
}

// A lazy decided write (its caller does not wait for the local commit)
// starts no commit of its own: it commits within the linger, or at once
// when a read needs it.
func TestLazyDecidedWriteCommitsWhenReadOrAfterTheLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
		a, b := Identity{Kind: "counter", Key: "a"}, Identity{Kind: "counter", Key: "b"}
		lazyPut := func(id Identity) (uint64, chan putOutcome) {
			var sent uint64
			done := make(chan putOutcome, 1)
			s.PutAsyncSent(id, 0, Record{State: []byte("1")}, true, func(v uint64) { sent = v },
				func(v uint64, err error) { done <- putOutcome{v, err} })
			return sent, done
		}
		if v, _ := lazyPut(a); v != 1 {
			t.Fatalf("sent %d, want 1", v)
		}
		synctest.Wait()
		if g := s.CommitStats().Groups; g != 0 {
			t.Fatalf("a lazy write started a commit at once (%d groups)", g)
		}
		start := time.Now()
		if rec, err := s.Get(context.Background(), a); err != nil || rec.Version != 1 {
			t.Fatalf("Get: %+v, %v", rec, err)
		}
		if waited := time.Since(start); waited >= lingerLazy {
			t.Fatalf("the read waited out the linger (%v) instead of having the write committed", waited)
		}
		if g := s.CommitStats().Groups; g != 1 {
			t.Fatalf("groups after the read: %d, want 1", g)
		}
		_, done := lazyPut(b)
		time.Sleep(lingerLazy)
		if o := <-done; o.err != nil || o.v != 2 {
			t.Fatalf("lazy write after the linger: %+v", o)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// The pending log removed under a running store: the writes logged from
// then on would be lost to a kill, so the store stops (damaged) once the
// group in progress committed; a restart creates the log again.
func TestPendingLogRemovedWhileRunningDamagesTheStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBoltAt(t, path)
	a := Identity{Kind: "counter", Key: "a"}
	if err := os.Remove(path + ".pending"); err != nil {
		t.Fatal(err)
	}
	if _, done := putSent(s, a, 0, "1"); (<-done).err != nil {
		t.Fatal("the write in progress must still commit")
	}
	var ce *CorruptError
	if !errors.As(s.Damaged(), &ce) || ce.Path != path+".pending" {
		t.Fatalf("Damaged() = %v, want the pending log named", s.Damaged())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openBoltAt(t, path)
	defer r.Close()
	if rec, err := r.Get(context.Background(), a); err != nil || rec.Version != 1 {
		t.Fatalf("after the restart: %+v, %v", rec, err)
	}
	if _, err := os.Stat(path + ".pending"); err != nil {
		t.Fatalf("the restart did not create the log again: %v", err)
	}
}

// A test crash (crashhook.Abandon) leaves the store as a kill would: a
// lazy decided write that had not started committing never commits in
// this process, and the next open gives it back from the pending log.
func TestAbandonedStoreGivesDecidedWritesBackAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openBoltAt(t, path)
	a := Identity{Kind: "counter", Key: "a"}
	done := make(chan putOutcome, 1)
	var sent uint64
	s.PutAsyncSent(a, 0, Record{State: []byte("1")}, true, func(v uint64) { sent = v },
		func(v uint64, err error) { done <- putOutcome{v, err} })
	if sent != 1 {
		t.Fatalf("sent %d, want 1", sent)
	}
	crashhook.Abandon(s)
	if o := <-done; !errors.Is(o.err, ErrStoreClosed) {
		t.Fatalf("the abandoned write: %+v, want ErrStoreClosed", o)
	}
	// A read of it does not wait for a commit that will not come.
	if _, err := s.Get(context.Background(), a); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read after the crash: %v, want ErrNotFound (the write never reached the file)", err)
	}
	if _, err := s.Put(context.Background(), Identity{Kind: "counter", Key: "b"}, 0, Record{}); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("a write after the crash: %v, want ErrStoreClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openBoltAt(t, path)
	defer r.Close()
	if rec, err := r.Get(context.Background(), a); err != nil || rec.Version != 1 || r.Recovered() != 1 {
		t.Fatalf("after the restart: %+v, %v, recovered %d", rec, err, r.Recovered())
	}
}

// Under steady load no moment may find every logged write committed;
// the log must still not grow with the writes: it goes on in its other
// file once everything there committed. A kill then leaves writes not
// committed in both files, and the next open gives them all back, in
// order.
func TestPendingLogAlternatesFilesUnderSteadyLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s := openBoltAt(t, path)
	s.pswitch = 300 // about eight entries
	// A commit, once it took its group, says so and waits for step.
	step, entered := make(chan struct{}), make(chan struct{}, 1000)
	beforeCommit = func() error {
		entered <- struct{}{}
		<-step
		return nil
	}
	t.Cleanup(func() { beforeCommit = nil })
	id := Identity{Kind: "counter", Key: "a"}
	sizes := func() (total int64) {
		for _, name := range PendingLogFiles(path) {
			fi, err := os.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			total += fi.Size()
		}
		return total
	}
	// Each write is decided while the one before it has not committed:
	// the commit of that one alone waits for step.
	const writes = 200
	var prev chan putOutcome
	for v := uint64(1); v <= writes; v++ {
		sent, done := putSent(s, id, v-1, fmt.Sprintf("state %03d", v))
		if sent != v {
			t.Fatalf("write %d sent at %d", v, sent)
		}
		if prev != nil {
			step <- struct{}{}
			if o := <-prev; o.err != nil {
				t.Fatal(o.err)
			}
		}
		<-entered // the commit of write v took it, alone
		prev = done
	}
	if total := sizes(); total > 2*(s.pswitch+64) {
		t.Fatalf("the pending log holds %d bytes after %d writes, never all committed at once; want at most about %d", total, writes, 2*s.pswitch)
	}
	// From here nothing commits: the commit of the loop's last write
	// waits for step, and every later write queues behind it. A write of
	// another identity, then, with the current file taken as past the
	// switch, many more: the file that holds the uncommitted writes of
	// before must never be written from its start again while they have
	// not committed, however far the other file grows.
	other := Identity{Kind: "counter", Key: "b"}
	var held []chan putOutcome
	if sent, done := putSent(s, other, 0, "b1"); sent == 0 {
		t.Fatal("the write of b was not sent")
	} else {
		held = append(held, done)
	}
	s.pmu.Lock()
	s.plogs[s.pcur].size = s.pswitch
	s.pmu.Unlock()
	const more = 30       // about four times the switch size
	cur := uint64(writes) // a's version (b's write took the next one of the kind)
	for v := writes + 1; v <= writes+more; v++ {
		sent, done := putSent(s, id, cur, fmt.Sprintf("state %03d", v))
		if sent <= cur {
			t.Fatalf("write %d not sent (version %d after %d)", v, sent, cur)
		}
		cur = sent
		held = append(held, done)
	}
	var spans [2]bool
	for i, name := range PendingLogFiles(path) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range decodePending(b) {
			spans[i] = spans[i] || w.version >= writes
		}
	}
	if !spans[0] || !spans[1] {
		t.Fatalf("the uncommitted writes are in the files %v; want both", spans)
	}
	crashed := filepath.Join(t.TempDir(), "state.db")
	copyFile(t, path, crashed)
	for _, name := range PendingLogFiles(path) {
		copyFile(t, name, crashed+name[len(path):])
	}
	close(step)
	<-prev
	for _, d := range held {
		<-d
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openBoltAt(t, crashed)
	defer r.Close()
	rec, err := r.Get(context.Background(), id)
	if err != nil || rec.Version <= writes || string(rec.State) != fmt.Sprintf("state %03d", writes+more) {
		t.Fatalf("after the restart: %+v, %v; want the state of write %d", rec, err, writes+more)
	}
	if rec, err := r.Get(context.Background(), other); err != nil || string(rec.State) != "b1" {
		t.Fatalf("b after the restart: %+v, %v; want its write given back", rec, err)
	}
	if r.Recovered() != more+2 { // those, b's and the one whose commit was held
		t.Fatalf("Recovered = %d, want %d", r.Recovered(), more+2)
	}
}

// A group commit that fails without damage (a full disk, with nothing
// sent ahead) is reported by WriteFailure, from the first failure on,
// until a commit succeeds again.
func TestWriteFailureLastsUntilACommit(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	id := Identity{Kind: "counter", Key: "k"}
	put := func() error {
		ch := make(chan error, 1)
		s.PutAsync(id, 0, Record{State: []byte("x")}, func(_ uint64, err error) { ch <- err })
		return <-ch
	}
	full := errors.New("no space left on device")
	beforeCommit = func() error { return full }
	t.Cleanup(func() { beforeCommit = nil })
	for range 2 {
		if err := put(); !errors.Is(err, full) {
			t.Fatalf("put on a full disk: %v", err)
		}
	}
	if err := s.WriteFailure(); !errors.Is(err, full) || s.Damaged() != nil {
		t.Fatalf("WriteFailure %v, Damaged %v: want the failure, no damage", err, s.Damaged())
	}
	beforeCommit = nil
	if err := put(); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFailure(); err != nil {
		t.Fatalf("after a commit: %v", err)
	}
}

// A store whose commits failed reports the failure until its disk has
// room again, also when nothing more is written to it and when a small
// commit succeeds meanwhile: it checks the disk itself (probeDisk) while
// the failure lasts, and stops checking once it is over.
func TestWriteFailureEndsWhenTheDiskTakesWrites(t *testing.T) {
	dir := t.TempDir()
	free, size, err := diskSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := probeDisk(filepath.Join(dir, "state.db")); (err == nil) != (free >= min(probeRoom, size/10)) {
		t.Fatalf("the real probe with %d of %d bytes free: %v", free, size, err)
	}
	s := openBoltAt(t, filepath.Join(dir, "state.db"))
	// Closed twice (the StateStore contract), the second time with the
	// probe stopped already.
	defer s.Close()
	defer s.Close()
	full := errors.New("no space left on device")
	var (
		mu     sync.Mutex
		probes int
		space  bool
	)
	oldEvery, oldProbe := probeEvery, probeDisk
	probeEvery = time.Millisecond
	probeDisk = func(string) error {
		mu.Lock()
		defer mu.Unlock()
		probes++
		if !space {
			return full
		}
		return nil
	}
	t.Cleanup(func() { probeEvery, probeDisk = oldEvery, oldProbe })
	beforeCommit = func() error { return full }
	t.Cleanup(func() { beforeCommit = nil })
	ch := make(chan error, 1)
	s.PutAsync(Identity{Kind: "counter", Key: "k"}, 0, Record{State: []byte("x")}, func(_ uint64, err error) { ch <- err })
	if err := <-ch; !errors.Is(err, full) {
		t.Fatalf("put on a full disk: %v", err)
	}
	beforeCommit = nil
	probed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return probes
	}
	for probed() < 5 {
		time.Sleep(time.Millisecond)
	}
	if err := s.WriteFailure(); !errors.Is(err, full) {
		t.Fatalf("WriteFailure while the probes fail: %v", err)
	}
	// A small commit succeeds on a full disk, into pages the file has:
	// the failure stands while there is no room.
	s.PutAsync(Identity{Kind: "counter", Key: "k2"}, 0, Record{State: []byte("y")}, func(_ uint64, err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFailure(); !errors.Is(err, full) {
		t.Fatalf("WriteFailure after a commit with no room: %v", err)
	}
	mu.Lock()
	space = true
	mu.Unlock()
	for s.WriteFailure() != nil {
		time.Sleep(time.Millisecond)
	}
	// The probing stops with the failure: its goroutine ends.
	for {
		s.probe.mu.Lock()
		running := s.probe.running
		s.probe.mu.Unlock()
		if !running {
			break
		}
		time.Sleep(time.Millisecond)
	}
}

// A write that is not a group commit (a Put, a handoff's records stored
// with ApplyReplicated) and fails to commit is the store's write failure
// too; one that fails for a reason of its own (a version conflict) is
// not.
func TestSyncWriteFailureIsReported(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	id := Identity{Kind: "counter", Key: "k"}
	if _, err := s.Put(context.Background(), id, 0, Record{State: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), id, 0, Record{State: []byte("b")}); err == nil {
		t.Fatal("a Put expecting no record overwrote one")
	}
	if err := s.WriteFailure(); err != nil {
		t.Fatalf("a version conflict reported as a write failure: %v", err)
	}
	full := errors.New("no space left on device")
	crashhook.FailWrites(s, full)
	if _, err := s.Put(context.Background(), id, 1, Record{State: []byte("c")}); !errors.Is(err, full) {
		t.Fatalf("Put on a full disk: %v", err)
	}
	if err := s.WriteFailure(); !errors.Is(err, full) {
		t.Fatalf("WriteFailure after a failed Put: %v", err)
	}
	crashhook.FailWrites(s, nil)
	if _, err := s.Put(context.Background(), id, 1, Record{State: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFailure(); err != nil {
		t.Fatalf("WriteFailure after a Put committed with room: %v", err)
	}
}

// Room says whether the store's file system has room for its writes, as
// the probe measures it, and a test's FailWrites says it has none.
func TestRoom(t *testing.T) {
	s := openBoltAt(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	old := probeDisk
	t.Cleanup(func() { probeDisk = old })
	short := errors.New("3 bytes free")
	probeDisk = func(string) error { return short }
	if err := s.Room(); !errors.Is(err, short) {
		t.Fatalf("Room with no room: %v", err)
	}
	probeDisk = func(string) error { return nil }
	if err := s.Room(); err != nil {
		t.Fatalf("Room with room: %v", err)
	}
	full := errors.New("no space left on device")
	crashhook.FailWrites(s, full)
	if err := s.Room(); !errors.Is(err, full) {
		t.Fatalf("Room under FailWrites: %v", err)
	}
	crashhook.FailWrites(s, nil)
}

// A start refused because state.db is an older copy writes nothing:
// the writes only the pending log holds stay there, so that the remedy
// (putting back the file the node last ran with) gets them back.
func TestRefusedOpenLeavesThePendingLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	a, b := Identity{Kind: "counter", Key: "a"}, Identity{Kind: "counter", Key: "b"}
	s := openBoltAt(t, path)
	if _, done := putSent(s, a, 0, "a1"); (<-done).err != nil {
		t.Fatal("first write failed")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup.db")
	copyFile(t, path, backup)
	s = openBoltAt(t, path)
	if _, done := putSent(s, a, 1, "a2"); (<-done).err != nil {
		t.Fatal("second write failed")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBoltAt(t, path)
	release := holdCommits(t, nil)
	if v, _ := putSent(s, b, 0, "b1"); v == 0 {
		t.Fatal("not sent")
	}
	// A kill -9 now: b1 is in the pending log only.
	crashed := filepath.Join(t.TempDir(), "state.db")
	for _, suffix := range []string{"", ".pending", ".pending.1", ".mark"} {
		if _, err := os.Stat(path + suffix); err == nil {
			copyFile(t, path+suffix, crashed+suffix)
		}
	}
	release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pending, err := os.ReadFile(crashed + ".pending")
	if err != nil || len(pending) == 0 {
		t.Fatalf("the crashed pending log: %d bytes, %v", len(pending), err)
	}
	good := crashed + ".good"
	copyFile(t, crashed, good)

	copyFile(t, backup, crashed)
	if r, err := NewBoltStore(crashed); !errors.Is(err, ErrStoreReplaced) {
		if err == nil {
			_ = r.Close()
		}
		t.Fatalf("open on the backup: %v, want ErrStoreReplaced", err)
	}
	if after, _ := os.ReadFile(crashed + ".pending"); !bytes.Equal(after, pending) {
		t.Fatalf("the refused open changed the pending log: %d bytes, were %d", len(after), len(pending))
	}
	if after, _ := os.ReadFile(crashed); !bytes.Equal(after, mustRead(t, backup)) {
		t.Fatal("the refused open wrote into the file it refused")
	}
	// The remedy: the file the node last ran with.
	copyFile(t, good, crashed)
	r := openBoltAt(t, crashed)
	defer r.Close()
	if rec, err := r.Get(context.Background(), b); err != nil || string(rec.State) != "b1" || r.Recovered() != 1 {
		t.Fatalf("b after the remedy: %+v, %v, recovered %d; want b1 given back", rec, err, r.Recovered())
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
