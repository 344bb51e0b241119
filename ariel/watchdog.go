package ariel

import "time"

// watchdog runs outside the pool. Every period (a quarter of the
// smallest turn budget in force) it reads each worker's turn gate: a
// worker whose gate has shown the same call-out for longer than the
// budget of the cell it runs (its kind's, or the scheduler's) is stuck in
// one turn, and abandon takes that turn away from it. The budget is
// measured from the first tick that saw the call-out, so a turn is
// abandoned no earlier than its budget and, when the budget is a multiple
// of the period, no later than one period after it.
func (s *Scheduler) watchdog() {
	defer s.wg.Done()
	type mark struct {
		gate  uint64
		since time.Time
	}
	marks := map[*worker]*mark{}
	tick := make(chan struct{}, 1)
	for {
		t := s.clock.AfterFunc(s.watchPeriod(), func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-s.closed:
			t.Stop()
			return
		case <-s.rearm: // a smaller budget came into force
			t.Stop()
			continue
		case <-tick:
		}
		now := s.clock.Now()
		ws := *s.workers.Load()
		live := make(map[*worker]bool, len(ws))
		for _, w := range ws {
			live[w] = true
			g := w.ex.gate.Load() &^ gateBusy
			if g&gateOut == 0 {
				delete(marks, w) // between call-outs or idle
				continue
			}
			m := marks[w]
			if m == nil || m.gate != g {
				marks[w] = &mark{gate: g, since: now}
				continue
			}
			c := w.cur.Load()
			if c == nil || now.Sub(m.since) < s.budgetOf(c) {
				continue
			}
			if s.abandon(w, g) {
				delete(marks, w)
			}
		}
		for w := range marks {
			if !live[w] {
				delete(marks, w)
			}
		}
	}
}

// watchPeriod is the watchdog's tick: a quarter of the smallest budget
// in force, at least a millisecond.
func (s *Scheduler) watchPeriod() time.Duration {
	return max(time.Duration(s.minBudget.Load())/4, time.Millisecond)
}

// WatchdogPeriod returns how often the watchdog looks at the workers: a
// turn is abandoned at most this long after its budget ran out (when the
// budget is a multiple of it).
func (s *Scheduler) WatchdogPeriod() time.Duration { return s.watchPeriod() }

// budgetOf returns the turn budget of c's actor.
func (s *Scheduler) budgetOf(c *Cell) time.Duration {
	if c.ref.IsVirtual() {
		return s.TurnBudget(c.ref.Kind())
	}
	return s.cfg.TurnBudget
}
