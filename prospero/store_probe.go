package prospero

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A store whose commits fail (a full disk, an I/O error) reports it
// (WriteFailure). A node with nothing to write, such as one whose shards
// moved away because its store failed, would then report it forever; so
// while its commits fail, the store looks at the file system's free
// space every probeEvery, and reports its writes working again once there
// is room for them: probeRoom (enough for bbolt to grow the file, which
// it does by up to 16 MiB at a time, and for a raft log segment beside
// it), or a tenth of the file system when that is less. A commit that
// succeeds meanwhile, into pages the file already has, ends the failure
// only if there is room. The store writes nothing to find out, so it
// never takes the room that writers on the same disk are waiting for. A
// write that fails later, for want of space or for another reason (an
// I/O error the free space does not show), reports the failure anew.
var probeEvery = 2 * time.Second

const probeRoom = 32 << 20

// prober runs a store's probes: one goroutine at most, started by the
// first failed commit and ended by a successful probe or Close.
type prober struct {
	mu      sync.Mutex
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// probeDisk is the check, a variable for tests: nil when the file system
// holding path has room for the store's writes.
var probeDisk = func(path string) error {
	free, size, err := diskSpace(filepath.Dir(path))
	if err != nil {
		return err
	}
	if need := min(probeRoom, size/10); free < need {
		return fmt.Errorf("prospero: %d bytes free beside %s, want %d", free, path, need)
	}
	return nil
}

// update is db.Update for a write that is not a group commit: a
// transaction whose own function succeeded and that failed to commit (a
// full disk, an I/O error, or a test's FailWrites) is noted as the
// store's write failure, as a failed group commit is.
func (s *BoltStore) update(fn func(*bolt.Tx) error) error {
	ran := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		ran = true
		if err := s.failWrites.Load(); err != nil {
			return *err
		}
		return nil
	})
	switch {
	case err == nil:
		s.noteWriteSuccess()
	case ran:
		s.noteWriteFailure(err)
	}
	return err
}

// noteWriteFailure records a failed commit (WriteFailure) and starts
// looking for room.
func (s *BoltStore) noteWriteFailure(err error) {
	since := time.Now()
	if f := s.failing.Load(); f != nil {
		since = f.since
	}
	s.failing.Store(&writeFailure{err: err, since: since})
	s.startProbe()
}

// noteWriteSuccess ends a failure once a commit succeeded and there is
// room: a small commit succeeds on a full disk, into pages the file has.
func (s *BoltStore) noteWriteSuccess() {
	if f := s.failing.Load(); f != nil && s.Room() == nil {
		s.failing.CompareAndSwap(f, nil)
	}
}

// Room returns nil when the file system holding the store has room for
// its writes (32 MiB free, or a tenth of the file system if that is
// less), else why not: a node short of room moves its shards away before
// its writes fail, and a node restarted on a full disk takes none. A
// test's FailWrites says there is none.
func (s *BoltStore) Room() error {
	if err := s.failWrites.Load(); err != nil {
		return *err
	}
	return probeDisk(s.path)
}

// startProbe starts the probe goroutine unless it runs or the store is
// closing.
func (s *BoltStore) startProbe() {
	p := &s.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running || p.closed {
		return
	}
	if p.stop == nil {
		p.stop = make(chan struct{})
	}
	p.running = true
	p.wg.Add(1)
	go s.probeLoop()
}

func (s *BoltStore) probeLoop() {
	p := &s.probe
	defer p.wg.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		f := s.failing.Load()
		if f != nil && s.Room() == nil {
			// Only the failure seen before the probe: one that a commit
			// reported meanwhile stands.
			s.failing.CompareAndSwap(f, nil)
		}
		p.mu.Lock()
		if s.failing.Load() == nil {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// stopProbe ends the probe goroutine and waits for it; none starts after.
func (s *BoltStore) stopProbe() {
	p := &s.probe
	p.mu.Lock()
	if !p.closed && p.stop != nil {
		close(p.stop)
	}
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}
