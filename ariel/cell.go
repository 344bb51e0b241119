package ariel

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// Run-token states of a cell. Transitions:
//
//	stDetached --mail--> stPending (doorbell rung once)
//	stDetached|stPending --Attach--> stReady
//	stIdle --mail (sender CAS)--> stReady --worker CAS--> stRunning
//	stRunning --drained empty (under the mailbox lock)--> stIdle
//	stRunning --fairness budget--> stReady (re-queued at the back)
//	stRunning --passivated--> stDetached or stPending
//	stRunning --stopped--> stStopped (final)
const (
	stDetached int32 = iota
	stPending
	stIdle
	stReady
	stRunning
	stStopped
)

// Envelope kinds. Everything but kUser travels in the system lane, which is
// drained before user mail and never refused.
const (
	kUser uint8 = iota
	kStart
	kStop
	kPassivate
	kRestart
	kReply
	kUndelivered
	kTimeout
	kFunc
)

// envelope is one message in a mailbox. Envelopes are stored by value in
// the mailbox ring, so a tell allocates nothing.
type envelope struct {
	msg      any
	from     *Cell      // local sending actor, nil otherwise
	xfrom    *actor.Ref // sender on another node (rare), nil otherwise
	ask      *pending
	deadline int64 // unix nanos; 0 means none
	enq      int64 // unix nanos of enqueue; set only when latency is observed
	kind     uint8
}

// Cell is the scheduler's per-actor record: the bounded mailbox, its system
// lane, the run-token, and the actor value once attached. A cell exists for
// an identity before (and after) the actor value does: mail admitted to a
// cell without an actor waits there, and the Activator is asked to attach one.
// Cells are created and owned by the Scheduler; callers hold them only as
// opaque handles returned by a Router.
type Cell struct {
	state atomic.Int32 // run-token, one of st*
	count atomic.Int32 // admitted user messages: reserved by senders + queued
	limit int32

	mu   sync.Mutex // guards buf, head, n, sys and the stIdle/stDetached transitions
	head int32
	n    int32
	buf  []envelope // ring; grows by doubling up to limit, dropped when drained
	sys  []envelope

	act actor.Actor // touched only by the run-token holder (or under mu while detached)
	ref actor.Ref   // unpinned identity
	inc atomic.Uint64
	s   *Scheduler
	ext *cellExt // rare per-cell data, created on demand by the run-token holder
}

// cellExt holds what few actors use; keeping it out of Cell keeps idle actors
// small.
type cellExt struct {
	parent      *Cell
	children    []*Cell // guarded by the cell's mu
	recvTimeout time.Duration
	recvTimer   Timer
	last        int64 // unix nanos of the last turn, kept only with a receive timeout
}

// Ref returns the identity of the cell, pinned to its current incarnation.
func (c *Cell) Ref() actor.Ref { return c.ref.WithIncarnation(c.inc.Load()) }

// reserve admits one user message: it takes a mailbox slot that the sender
// fills later (at the end of its turn). It returns the error to report.
func (c *Cell) reserve() error {
	if c.state.Load() == stStopped {
		return actor.ErrActorTerminated
	}
	if c.count.Add(1) > c.limit {
		c.count.Add(-1)
		return actor.ErrRefused
	}
	return nil
}

// unreserve returns a slot taken by reserve that will not be filled.
func (c *Cell) unreserve(k int) { c.count.Add(int32(-k)) }

// pushUser appends envelopes whose slots were reserved. It returns false when
// the cell has stopped; the caller then owns the envelopes' failure.
func (c *Cell) pushUser(es []envelope) bool {
	c.mu.Lock()
	if c.state.Load() == stStopped {
		c.mu.Unlock()
		return false
	}
	need := int(c.n) + len(es)
	if need > len(c.buf) {
		c.grow(need)
	}
	size := int32(len(c.buf))
	tail := c.head + c.n
	for i := range es {
		idx := tail + int32(i)
		if idx >= size {
			idx -= size
		}
		c.buf[idx] = es[i]
	}
	c.n += int32(len(es))
	c.mu.Unlock()
	return true
}

// grow resizes the ring to hold at least need envelopes. Called with mu held.
func (c *Cell) grow(need int) {
	size := len(c.buf) * 2
	if size < 8 {
		size = 8
	}
	for size < need {
		size *= 2
	}
	nb := make([]envelope, size)
	for i := int32(0); i < c.n; i++ {
		idx := c.head + i
		if idx >= int32(len(c.buf)) {
			idx -= int32(len(c.buf))
		}
		nb[i] = c.buf[idx]
	}
	c.buf, c.head = nb, 0
}

// pushSys appends to the system lane, which is never refused. It returns
// false when the cell has stopped.
func (c *Cell) pushSys(e envelope) bool {
	c.mu.Lock()
	if c.state.Load() == stStopped {
		c.mu.Unlock()
		return false
	}
	c.sys = append(c.sys, e)
	c.mu.Unlock()
	return true
}

// take moves up to len(dst) envelopes into dst: the whole system lane first,
// user mail only when the system lane is empty. When both are empty it
// releases the run-token (stRunning -> stIdle) under the lock, so a sender
// that pushes afterwards sees stIdle and wakes the cell: no mail is stranded
// by the idle transition. The caller must hold the run-token.
func (c *Cell) take(dst []envelope) int {
	c.mu.Lock()
	if len(c.sys) > 0 {
		// One system message at a time: a stop or a passivation ends the
		// cycle, and what follows it must stay queued.
		k := copy(dst[:1], c.sys)
		rest := copy(c.sys, c.sys[k:])
		clear(c.sys[rest:])
		c.sys = c.sys[:rest]
		if rest == 0 {
			c.sys = nil // idle actors keep no storage
		}
		c.mu.Unlock()
		return k
	}
	k := int32(len(dst))
	if c.n < k {
		k = c.n
	}
	if k == 0 {
		if c.act == nil {
			c.state.Store(stDetached)
		} else {
			c.state.Store(stIdle)
		}
		// An empty large ring is released: idle actors keep no storage.
		if len(c.buf) > 64 {
			c.buf, c.head = nil, 0
		}
		c.mu.Unlock()
		return 0
	}
	size := int32(len(c.buf))
	for i := int32(0); i < k; i++ {
		idx := c.head + i
		if idx >= size {
			idx -= size
		}
		dst[i] = c.buf[idx]
		c.buf[idx] = envelope{}
	}
	c.head += k
	if c.head >= size {
		c.head -= size
	}
	c.n -= k
	c.mu.Unlock()
	c.count.Add(-k)
	return int(k)
}

// hasMail reports whether anything is queued. Called with mu held.
func (c *Cell) hasMailLocked() bool { return c.n > 0 || len(c.sys) > 0 }

// drainAll empties the mailbox of a stopped cell and returns what it held.
func (c *Cell) drainAll() []envelope {
	c.mu.Lock()
	out := make([]envelope, 0, int(c.n)+len(c.sys))
	out = append(out, c.sys...)
	for i := int32(0); i < c.n; i++ {
		idx := c.head + i
		if idx >= int32(len(c.buf)) {
			idx -= int32(len(c.buf))
		}
		out = append(out, c.buf[idx])
	}
	c.count.Add(-c.n)
	c.buf, c.sys, c.head, c.n = nil, nil, 0, 0
	c.mu.Unlock()
	return out
}

func (c *Cell) extension() *cellExt {
	if c.ext == nil {
		c.ext = &cellExt{}
	}
	return c.ext
}

// pushOne appends one reserved envelope; see pushUser.
func (c *Cell) pushOne(e envelope) bool {
	c.mu.Lock()
	if c.state.Load() == stStopped {
		c.mu.Unlock()
		return false
	}
	if int(c.n) == len(c.buf) {
		c.grow(int(c.n) + 1)
	}
	idx := c.head + c.n
	if idx >= int32(len(c.buf)) {
		idx -= int32(len(c.buf))
	}
	c.buf[idx] = e
	c.n++
	c.mu.Unlock()
	return true
}
