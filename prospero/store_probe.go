package prospero

import (
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"time"
)

// A store whose group commits fail (a full disk, an I/O error) reports
// it (WriteFailure) until a commit succeeds again. A node with nothing to
// write, such as one whose shards moved away because its store failed,
// would then report it forever; so while its commits fail, the store
// checks the disk itself, every probeEvery, by writing probeSize bytes
// to a file beside it (PATH.probe), syncing and removing it. Once that
// succeeds, WriteFailure reports nil again, as after a commit; a write
// that fails later reports the failure anew.
//
// probeSize is bbolt's allocation step (it grows a file larger than that
// by 16 MiB at a time): a disk that cannot take it may fail the next
// commit that needs to grow the file. The bytes are random so that a
// compressing file system stores all of them.
var probeEvery = 2 * time.Second

const probeSize = 16 << 20

// prober runs a store's probes: one goroutine at most, started by the
// first failed commit and ended by a successful probe or Close.
type prober struct {
	mu      sync.Mutex
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// probeDisk is the check, a variable for tests.
var probeDisk = func(path string) error {
	name := path + ".probe"
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(name)
	buf := make([]byte, 1<<20)
	r := rand.NewChaCha8([32]byte{})
	_, _ = r.Read(buf)
	for n := 0; n < probeSize && err == nil; n += len(buf) {
		_, err = f.Write(buf)
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
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
		if f != nil && s.failWrites.Load() == nil && probeDisk(s.path) == nil {
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
	p.closed = true
	if p.stop != nil {
		close(p.stop)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
