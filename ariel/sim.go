package ariel

import (
	"math/rand/v2"
	"sync"
)

// simRunner is the simulated scheduler: one goroutine runs every turn,
// choosing the next ready actor with a seeded generator, and moves the
// virtual clock to the next timer whenever nothing is ready. Given the same
// seed and the same program-code input (sent before the runner has work, or
// from inside actors), it runs the same sequence of turns.
type simRunner struct {
	s     *Scheduler
	clock *SimClock
	ex    executor
	rng   *rand.Rand

	mu     sync.Mutex
	ready  []*Cell
	wakeup chan struct{}
}

func newSimRunner(s *Scheduler) *simRunner {
	r := &simRunner{
		s:      s,
		clock:  s.clock.(*SimClock),
		rng:    rand.New(rand.NewPCG(s.cfg.Seed, s.cfg.Seed^0x9e3779b97f4a7c15)),
		wakeup: make(chan struct{}, 1),
	}
	// One message per cycle: every turn is a scheduling choice, which is
	// what a simulation wants to explore.
	r.ex = executor{s: s, cnt: s.newCounters(), budget: 1}
	return r
}

func (r *simRunner) push(c *Cell) {
	r.mu.Lock()
	r.ready = append(r.ready, c)
	r.mu.Unlock()
	r.signal()
}

func (r *simRunner) signal() {
	select {
	case r.wakeup <- struct{}{}:
	default:
	}
}

func (r *simRunner) pick() *Cell {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropSpurious()
	n := len(r.ready)
	if n == 0 {
		return nil
	}
	// Draw only when there is a choice, so how often program code found
	// the runner idle does not shift the sequence of choices.
	i := 0
	if n > 1 {
		i = r.rng.IntN(n)
	}
	c := r.ready[i]
	// Keep the remaining order stable (not swap-remove): the order of the
	// ready list is part of the replayed state.
	copy(r.ready[i:], r.ready[i+1:])
	r.ready[n-1] = nil
	r.ready = r.ready[:n-1]
	return c
}

// dropSpurious takes out of the ready list every cell with nothing
// queued, before a draw counts it. Only program code makes one: a send
// from outside pushes its message and then wakes the cell, and when the
// runner took the message in between, the late wake finds the cell idle
// and readies it for nothing. How often that happens depends on the OS
// scheduler, so a draw that counted such cells would not replay; a cell
// the runner readied always has mail, which only the runner takes.
// Called with r.mu held.
func (r *simRunner) dropSpurious() {
	kept := r.ready[:0]
	for _, c := range r.ready {
		if c.pend.Load() > 0 || !c.state.CompareAndSwap(stReady, stRunning) {
			kept = append(kept, c)
			continue
		}
		if c.release() {
			r.s.activeDec()
			continue
		}
		c.state.Store(stReady) // mail arrived meanwhile: it stays
		kept = append(kept, c)
	}
	clear(r.ready[len(kept):])
	r.ready = kept
}

func (r *simRunner) run() {
	markTurnGoroutine(1)
	s := r.s
	defer s.wg.Done()
	for {
		if s.closing.Load() {
			return
		}
		// Hold an activity token while working so WaitIdle sees the
		// runner as busy until nothing is ready and no timer is pending.
		s.activeInc()
		for !s.closing.Load() {
			if c := r.pick(); c != nil {
				if c.state.CompareAndSwap(stReady, stRunning) {
					r.ex.drain(c, 0)
				}
				continue
			}
			if !r.clock.AdvanceToNext() {
				break
			}
		}
		r.ex.publish()
		s.activeDec()
		select {
		case <-r.wakeup:
		case <-s.closed:
			return
		}
	}
}
