package ariel

import "time"

// watchdog runs outside the pool. It notices a busy worker (cur set) whose
// drain-cycle count has not moved for longer than the turn budget — cycles are bounded by the fairness
// budget, so only a long turn keeps one open — reports BudgetExhausted
// through the fault hook, and replaces the stuck worker so the pool keeps
// its capacity. The stuck goroutine finishes its turn whenever the handler
// returns, hands its queue over and exits.
func (s *Scheduler) watchdog() {
	defer s.wg.Done()
	budget := s.cfg.TurnBudget
	period := budget / 4
	if period < time.Millisecond {
		period = time.Millisecond
	}
	type mark struct {
		cycle    uint64
		since    time.Time
		reported bool
	}
	marks := map[*worker]*mark{}
	tick := make(chan struct{}, 1)
	for {
		t := s.clock.AfterFunc(period, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-s.closed:
			t.Stop()
			return
		case <-tick:
		}
		now := s.clock.Now()
		ws := *s.workers.Load()
		live := make(map[*worker]bool, len(ws))
		for _, w := range ws {
			live[w] = true
			cy := w.ex.cnt.cycles.Load()
			m := marks[w]
			if m == nil || m.cycle != cy || w.cur.Load() == nil {
				marks[w] = &mark{cycle: cy, since: now}
				continue
			}
			if m.reported || now.Sub(m.since) < budget {
				continue
			}
			m.reported = true
			s.exhausted(w)
		}
		for w := range marks {
			if !live[w] {
				delete(marks, w)
			}
		}
	}
}

// exhausted handles a worker stuck in one turn: a replacement worker takes
// its place (and its queued work), then the fault is reported.
func (s *Scheduler) exhausted(w *worker) {
	s.g.exhausted.Add(1)
	c := w.cur.Load()
	s.lifeMu.Lock()
	if s.closing.Load() {
		s.lifeMu.Unlock()
		return
	}
	old := *s.workers.Load()
	ws := make([]*worker, 0, len(old))
	for _, v := range old {
		if v != w {
			ws = append(ws, v)
		}
	}
	nw := s.newWorker(w.id)
	ws = append(ws, nw)
	w.retired.Store(true)
	s.workers.Store(&ws)
	s.nworkers.Add(1)
	s.wg.Add(1)
	go nw.run()
	s.lifeMu.Unlock()

	// Move what the stuck worker had queued.
	if n := w.next.Swap(nil); n != nil {
		s.inj.push(n)
	}
	var tmp [localQSize]*Cell
	for {
		k := w.q.grab(tmp[:])
		if k == 0 {
			break
		}
		s.inj.pushMany(tmp[:k])
	}
	s.notify()

	if c != nil {
		inc := c.inc.Load()
		s.faults.Fault(Fault{Ref: c.ref.WithIncarnation(inc), Incarnation: inc, Outcome: BudgetExhausted,
			Err: ErrBudgetExhausted})
	}
}
