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
