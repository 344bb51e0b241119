package ariel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// localQSize is the capacity of a worker's run queue.
const localQSize = 256

// nextRunsMax bounds how many cycles in a row a worker takes from its LIFO
// slot before it looks at its queue and the shared injector, so a ping-pong
// pair cannot starve other ready actors.
const nextRunsMax = 64

// worker is one pool goroutine with its own run queue and LIFO slot.
type worker struct {
	ex         executor
	s          *Scheduler
	id         int
	next       atomic.Pointer[Cell] // the freshest wake: runs next, warm
	q          localQ
	wakeCh     chan struct{}
	cur        atomic.Pointer[Cell] // the cell of the current or last cycle; nil while idle
	tick       uint32
	nextRuns   int
	mustNotify bool
	seen       []uint64
	// The groups of mail this worker holds for cells whose run-token it
	// took at a flush (see seize.go): held[heldAt:] have not run yet;
	// heldRuns counts held groups run in a row.
	held     []heldGroup
	heldEnv  []envelope
	heldAt   int
	heldRuns int
	running  envelope // the one held message being handled (runOne)
	// share is the held groups this worker opened to its siblings
	// (recruit.go); heldMark and heldMarkRuns are the clock reading and
	// heldRuns at the last measure of the held runs.
	share        atomic.Pointer[heldShare]
	spare        *heldShare // a share all claimed, whose arrays it may reuse
	claimed      claimed    // groups it claimed from a share and has not run
	heldMark     int64      // Scheduler.elapsed; 0: none
	heldMarkRuns int
	heldSlow     bool // the last window's groups were long enough to share
}

func (s *Scheduler) newWorker(id int) *worker {
	w := &worker{s: s, id: id, wakeCh: make(chan struct{}, 1)}
	w.ex = executor{s: s, w: w, cnt: s.newCounters(), budget: s.cfg.FairnessMessages}
	return w
}

func (w *worker) run() {
	markTurnGoroutine(0)
	s := w.s
	defer func() {
		// An abandoned worker was counted out when the watchdog took
		// its turn (Close does not wait for it), and its held mail
		// given back.
		if !w.ex.fenced() {
			// Closed: mail held for seized cells goes back to their
			// mailboxes, like the mail of cells still queued.
			s.releaseHeld(w)
			s.wg.Done()
		}
	}()
	for !s.closing.Load() {
		var c *Cell
		if held := w.heldAt < len(w.held); held || w.claimed.next < w.claimed.hi || w.share.Load() != nil {
			// The chain backstop: a worker busy with held mail (its own,
			// claimed from a share, or its share's) looks at the shared
			// queue every heldProbe runs.
			w.heldRuns++
			if w.heldRuns%heldProbe == 0 && s.inj.n.Load() > 0 {
				c = s.inj.pop()
			} else if held && w.heldRuns%recruitEvery == 0 {
				w.measureHeld() // may share what it holds
			}
			if c == nil {
				if w.heldAt < len(w.held) {
					w.runHeld()
				} else {
					w.runShared() // false once its share is all claimed
				}
			}
		} else {
			w.heldRuns, w.heldMark, w.heldSlow = 0, 0, false
			if c = w.find(); c == nil {
				if !w.runSiblingShare() {
					w.idle()
				}
				continue
			}
		}
		if c != nil {
			if !c.state.CompareAndSwap(stReady, stRunning) {
				continue // cannot happen: only the waker's CAS winner queues a cell
			}
			if w.cur.Load() != c {
				w.cur.Store(c)
			}
			w.ex.depth = 0
			w.ex.drain(c, 0)
		}
		if w.mustNotify {
			w.mustNotify = false
			s.notify()
		}
	}
}

// find returns the next ready cell: the LIFO slot, the own queue, the
// shared injector, then a steal from a sibling. Every 61st look checks the
// injector first so work from outside the pool is never starved.
func (w *worker) find() *Cell {
	s := w.s
	w.tick++
	if w.tick%61 == 0 && s.inj.n.Load() > 0 {
		if c := s.inj.pop(); c != nil {
			return c
		}
	}
	if w.next.Load() != nil {
		if c := w.next.Swap(nil); c != nil {
			if w.nextRuns < nextRunsMax {
				w.nextRuns++
				return c
			}
			w.pushLocal(c)
		}
	}
	w.nextRuns = 0
	if c := w.q.pop(); c != nil {
		return c
	}
	if s.inj.n.Load() > 0 {
		if c := s.inj.pop(); c != nil {
			return c
		}
	}
	return w.steal()
}

// pushNext puts a freshly woken cell in the LIFO slot; the cell it
// displaces goes to the tail of the run queue, where siblings can steal it.
func (w *worker) pushNext(c *Cell) {
	if old := w.next.Swap(c); old != nil {
		w.pushLocal(old)
	}
}

func (w *worker) pushLocal(c *Cell) {
	if !w.q.push(c) {
		// Full: move half the queue and c to the injector.
		var tmp [localQSize/2 + 1]*Cell
		n := w.q.grab(tmp[:localQSize/2])
		tmp[n] = c
		w.s.inj.pushMany(tmp[:n+1])
	}
	w.mustNotify = true
}

// steal takes half of a sibling's run queue.
func (w *worker) steal() *Cell {
	ws := *w.s.workers.Load()
	n := len(ws)
	if n <= 1 {
		return nil
	}
	start := int(w.tick) % n
	for i := 0; i < n; i++ {
		v := ws[(start+i)%n]
		if v == w {
			continue
		}
		var tmp [localQSize / 2]*Cell
		k := v.q.grab(tmp[:])
		if k == 0 {
			continue
		}
		w.ex.cnt.steals.Add(1)
		for _, c := range tmp[1:k] {
			if !w.q.push(c) {
				w.s.inj.push(c)
			}
		}
		if k > 1 {
			w.mustNotify = true
		}
		return tmp[0]
	}
	return nil
}

// hasWork reports whether w would find something to run.
func (w *worker) hasWork() bool {
	s := w.s
	if w.next.Load() != nil || w.q.size() > 0 || s.inj.n.Load() > 0 {
		return true
	}
	for _, v := range *s.workers.Load() {
		if v.q.size() > 0 {
			return true
		}
		if sh := v.share.Load(); sh != nil && sh.left() {
			return true
		}
	}
	return false
}

// idle spins briefly looking for work, then parks. A producer that makes
// work visible and then finds no spinner wakes a parked worker; a worker
// registers as parked before it stops spinning and looks once more after,
// so one of the two always sees the other (no lost wake-up).
func (w *worker) idle() {
	s := w.s
	w.cur.Store(nil)
	w.ex.publish()
	s.spinning.Add(1)
	var seen []uint64
	for i := 0; i < s.cfg.SpinIterations; i++ {
		if s.closing.Load() {
			s.spinning.Add(-1)
			return
		}
		if w.hasWork() {
			if s.spinning.Add(-1) == 0 {
				s.notify() // keep one looking if more is queued
			}
			return
		}
		if i == 0 {
			seen = w.sampleSiblings()
		}
		if i%4 == 3 {
			runtime.Gosched()
		}
	}
	// A sibling stuck in one long cycle the whole spin keeps its LIFO slot
	// hostage: take it.
	if c := w.stealNext(seen); c != nil {
		s.spinning.Add(-1)
		w.next.Store(c)
		return
	}
	s.idleMu.Lock()
	s.idle = append(s.idle, w)
	s.nparked.Add(1)
	s.idleMu.Unlock()
	s.spinning.Add(-1)
	if w.hasWork() || s.closing.Load() {
		s.unpark(w)
		return
	}
	w.ex.cnt.parks.Add(1)
	<-w.wakeCh
}

func (w *worker) sampleSiblings() []uint64 {
	ws := *w.s.workers.Load()
	w.seen = w.seen[:0]
	for _, v := range ws {
		w.seen = append(w.seen, v.ex.cnt.cycles.Load())
	}
	return w.seen
}

func (w *worker) stealNext(seen []uint64) *Cell {
	ws := *w.s.workers.Load()
	if len(ws) != len(seen) {
		return nil
	}
	for i, v := range ws {
		if v == w || v.cur.Load() == nil || v.ex.cnt.cycles.Load() != seen[i] {
			continue
		}
		if c := v.next.Swap(nil); c != nil {
			w.ex.cnt.steals.Add(1)
			return c
		}
	}
	return nil
}

// unpark removes w from the parked list if it is still there. If a waker
// already took it, that waker's token stays in wakeCh and causes one
// harmless spurious wake-up later.
func (s *Scheduler) unpark(w *worker) {
	s.idleMu.Lock()
	for i, v := range s.idle {
		if v == w {
			s.idle = append(s.idle[:i], s.idle[i+1:]...)
			s.nparked.Add(-1)
			break
		}
	}
	s.idleMu.Unlock()
}

// notify makes sure someone will look at newly queued work: nothing to do
// when a worker is spinning (it will find it), otherwise one parked worker
// is woken.
func (s *Scheduler) notify() {
	if s.spinning.Load() > 0 || s.nparked.Load() == 0 {
		return
	}
	s.idleMu.Lock()
	n := len(s.idle)
	if n == 0 {
		s.idleMu.Unlock()
		return
	}
	w := s.idle[n-1]
	s.idle[n-1] = nil
	s.idle = s.idle[:n-1]
	s.nparked.Add(-1)
	s.idleMu.Unlock()
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

// wakeAll wakes every parked worker (shutdown).
func (s *Scheduler) wakeAll() {
	s.idleMu.Lock()
	idle := s.idle
	s.idle = nil
	s.nparked.Store(0)
	s.idleMu.Unlock()
	for _, w := range idle {
		select {
		case w.wakeCh <- struct{}{}:
		default:
		}
	}
	if s.sim != nil {
		s.sim.signal()
	}
}

// handOff moves a retiring worker's queued cells to the injector.
func (w *worker) handOff() {
	s := w.s
	if c := w.next.Swap(nil); c != nil {
		s.inj.push(c)
	}
	var tmp [localQSize]*Cell
	for {
		n := w.q.grab(tmp[:])
		if n == 0 {
			break
		}
		s.inj.pushMany(tmp[:n])
	}
	s.notify()
}

// localQ is a worker's bounded run queue: the owner pushes at the tail and
// pops at the head; siblings steal from the head. Only the owner writes
// tail; head moves by CAS.
type localQ struct {
	head atomic.Uint32
	tail atomic.Uint32
	buf  [localQSize]atomic.Pointer[Cell]
}

func (q *localQ) size() uint32 { return q.tail.Load() - q.head.Load() }

// push appends c; false when full. Owner only.
func (q *localQ) push(c *Cell) bool {
	h, t := q.head.Load(), q.tail.Load()
	if t-h >= localQSize {
		return false
	}
	q.buf[t%localQSize].Store(c)
	q.tail.Store(t + 1)
	return true
}

// pop takes the head. Owner only (siblings use grab).
func (q *localQ) pop() *Cell {
	for {
		h, t := q.head.Load(), q.tail.Load()
		if h == t {
			return nil
		}
		c := q.buf[h%localQSize].Load()
		if q.head.CompareAndSwap(h, h+1) {
			return c
		}
	}
}

// grab takes up to half the queue (at least one item when not empty, at most
// len(dst)) into dst and returns how many. Safe from any goroutine.
func (q *localQ) grab(dst []*Cell) int {
	for {
		h, t := q.head.Load(), q.tail.Load()
		n := t - h
		if n == 0 || n > localQSize {
			if n == 0 {
				return 0
			}
			continue // torn read of head/tail; retry
		}
		n -= n / 2
		if n > uint32(len(dst)) {
			n = uint32(len(dst))
		}
		for i := uint32(0); i < n; i++ {
			dst[i] = q.buf[(h+i)%localQSize].Load()
		}
		if q.head.CompareAndSwap(h, h+n) {
			return int(n)
		}
	}
}

// injector is the shared FIFO for work from outside the pool and for
// cells that used up their fairness budget.
type injector struct {
	mu   sync.Mutex
	q    []*Cell
	head int
	n    atomic.Int32
}

func (in *injector) push(c *Cell) {
	in.mu.Lock()
	in.q = append(in.q, c)
	in.n.Add(1)
	in.mu.Unlock()
}

func (in *injector) pushMany(cs []*Cell) {
	in.mu.Lock()
	in.q = append(in.q, cs...)
	in.n.Add(int32(len(cs)))
	in.mu.Unlock()
}

func (in *injector) pop() *Cell {
	in.mu.Lock()
	if in.head == len(in.q) {
		in.mu.Unlock()
		return nil
	}
	c := in.q[in.head]
	in.q[in.head] = nil
	in.head++
	if in.head == len(in.q) {
		in.q, in.head = in.q[:0], 0
	} else if in.head > 1024 && in.head*2 > len(in.q) {
		k := copy(in.q, in.q[in.head:])
		clear(in.q[k:])
		in.q, in.head = in.q[:k], 0
	}
	in.n.Add(-1)
	in.mu.Unlock()
	return c
}
