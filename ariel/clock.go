package ariel

import (
	"container/heap"
	"github.com/tempest-actors/tempest/clock"
	"sync"
	"time"
)

// Clock is the scheduler's time source, the project's one (see package
// clock). The simulated scheduler calls AfterFunc's functions on its own
// goroutine.
type Clock = clock.Clock

// Timer is a pending AfterFunc.
type Timer = clock.Timer

// RealClock is the wall clock.
type RealClock = clock.Real

// SimClock is a virtual clock. Time moves only when Advance (or the
// simulated scheduler, when it has nothing ready) moves it; due timers then
// run in deadline order, ties in creation order, on the goroutine that moved
// time. It is safe for concurrent use.
type SimClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers simHeap
}

var _ Clock = (*SimClock)(nil)

// NewSimClock returns a virtual clock reading start.
func NewSimClock(start time.Time) *SimClock { return &SimClock{now: start} }

// Now returns the virtual time.
func (c *SimClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d.
func (c *SimClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &simTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	return t
}

// After returns a channel that receives the virtual time once Now()+d is
// reached.
func (c *SimClock) After(d time.Duration) <-chan time.Time {
	ch, _ := c.NewTimer(d)
	return ch
}

// NewTimer returns a channel that receives the virtual time once Now()+d
// is reached, and its stop func.
func (c *SimClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	ch := make(chan time.Time, 1)
	t := c.AfterFunc(d, func() {
		select {
		case ch <- c.Now():
		default:
		}
	})
	return ch, t.Stop
}

// NewTicker returns a channel that receives the virtual time every d, and
// its stop func. A tick the receiver has not taken yet is not doubled.
func (c *SimClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	d = max(d, time.Nanosecond)
	ch := make(chan time.Time, 1)
	var mu sync.Mutex
	stopped := false
	var t Timer
	var tick func()
	tick = func() {
		select {
		case ch <- c.Now():
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t = c.AfterFunc(d, tick)
		}
	}
	mu.Lock()
	t = c.AfterFunc(d, tick)
	mu.Unlock()
	return ch, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// Pending reports how many timers are waiting.
func (c *SimClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves time forward by d and runs every timer due by then.
func (c *SimClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for c.fireNext(end) {
	}
	c.mu.Lock()
	if end.After(c.now) {
		c.now = end
	}
	c.mu.Unlock()
}

// AdvanceToNext moves time to the earliest pending timer and runs every timer
// due then. It reports whether there was one.
func (c *SimClock) AdvanceToNext() bool {
	c.mu.Lock()
	if len(c.timers) == 0 {
		c.mu.Unlock()
		return false
	}
	at := c.timers[0].at
	c.mu.Unlock()
	for c.fireNext(at) {
	}
	return true
}

// fireNext runs the earliest timer due at or before end.
func (c *SimClock) fireNext(end time.Time) bool {
	c.mu.Lock()
	if len(c.timers) == 0 || c.timers[0].at.After(end) {
		c.mu.Unlock()
		return false
	}
	t := heap.Pop(&c.timers).(*simTimer)
	if t.at.After(c.now) {
		c.now = t.at
	}
	c.mu.Unlock()
	t.f()
	return true
}

type simTimer struct {
	c     *SimClock
	at    time.Time
	seq   uint64
	f     func()
	index int
}

func (t *simTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	return true
}

type simHeap []*simTimer

func (h simHeap) Len() int { return len(h) }
func (h simHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h simHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *simHeap) Push(x any) {
	t := x.(*simTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *simHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
