package ariel

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
//	stRunning --passivated, mailbox empty--> stGone (final; removed from
//	the map; a sender that finds it looks the identity up again)
const (
	stDetached int32 = iota
	stPending
	stIdle
	stReady
	stRunning
	stStopped
	stGone
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
	kTimer  // a tick of an activation's timer (*actTimer)
	kNotice // a notice for the identity (*notice), see Scheduler.Notify
)

// envelope is one message in a mailbox. Envelopes are stored by value in
// the mailbox ring, so a tell allocates nothing.
type envelope struct {
	msg      any
	from     *Cell  // local sending actor, nil otherwise
	x        *xinfo // rare extras (see xinfo), nil otherwise
	ask      *pending
	deadline int64      // unix nanos; 0 means none
	enq      int64      // unix nanos of enqueue; set only when latency is observed
	chain    *callChain // the activations waiting on this message (see reentrancy.go)
	kind     uint8
	// gen, when not zero, is the generation of the recipient's actor
	// value this envelope is for (its own replies, timers and notices):
	// it is dropped if that value was abandoned meanwhile.
	gen uint32
}

// xinfo is what few envelopes carry, behind one pointer so that the
// envelope every message copies does not grow: the sender on another
// node, and the trace of a traced tell (an ask keeps its trace in its
// pending record). Read-only once the envelope is queued; TellBatch shares
// one among a batch.
type xinfo struct {
	from  actor.Ref // the sender on another node; zero for none
	trace *msgTrace // nil: untraced
	// peer marks mail that arrived from another node (Deliver, Inbox),
	// which Reject does not offer a Resender (see Resender).
	peer bool
}

// peerTell is the xinfo of an untraced tell from another node with no
// sender: shared, so that such a tell allocates nothing for its mark.
var peerTell = &xinfo{peer: true}

// fromPeer reports whether e arrived from another node.
func (e *envelope) fromPeer() bool { return e.x != nil && e.x.peer }

// remoteSender is the sender on another node, zero for none.
func (e *envelope) remoteSender() actor.Ref {
	if e.x == nil {
		return actor.Ref{}
	}
	return e.x.from
}

// tellTrace is the trace of a traced tell, nil for any other envelope.
func (e *envelope) tellTrace() *msgTrace {
	if e.x == nil {
		return nil
	}
	return e.x.trace
}

// moveEnvelope copies src to dst field by field. A whole-struct copy uses
// 16-byte moves, which stall when the source was just written with 8-byte
// stores (store forwarding) — the common case on a request/reply hop.
func moveEnvelope(dst, src *envelope) {
	dst.msg = src.msg
	dst.from = src.from
	dst.x = src.x
	dst.ask = src.ask
	dst.deadline = src.deadline
	dst.enq = src.enq
	dst.chain = src.chain
	dst.kind = src.kind
	dst.gen = src.gen
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
	pend  atomic.Int32 // queued messages, user and system; written under mu
	limit int32

	mu   sync.Mutex // guards buf, head, n, sys and the stIdle/stDetached transitions
	head int32
	n    int32
	buf  []envelope // ring; grows by doubling up to limit, dropped when drained
	sys  []envelope
	// passq is the passivation queued in sys and not taken yet: further
	// Passivate calls join it instead of queueing another one.
	passq *passReq
	// owed is how many user messages that waited for the actor's
	// activation are still queued: they run before a passivation queued
	// behind them in the system lane, so every activation makes progress.
	owed int32

	act actor.Actor   // touched only by the run-token holder (or under mu while detached)
	ref actor.Ref     // unpinned identity
	inc atomic.Uint64 // 0: a virtual cell whose incarnation is not known yet (no actor attached since it was created)
	// gen counts the actor values abandoned in this cell: envelopes
	// stamped with an older generation are dropped. Written by the
	// run-token holder.
	gen atomic.Uint32
	// stopped is set with the move to stStopped, on a line senders only
	// read (the run-token's line is written by every push and take): a
	// turn's repeated sends look at it (see resolvedBefore).
	stopped atomic.Bool
	s       *Scheduler
	ext     *cellExt // rare per-cell data, created on demand by the run-token holder
	// rungAt and attachedAt (unix ns) are when the Activator was last rung
	// for this cell and when an actor was last attached: the activation a
	// traced ask waited for (TurnTimes.Activating). Written only when the
	// scheduler has a tracer.
	rungAt, attachedAt atomic.Int64
	// after, when set, runs after each turn that ended normally (the
	// kind asked for it with SetAfterTurn).
	after AfterTurn
	// holds: the turn's outputs stay in the executor until the turn has
	// ended (its kind has an after-turn hook, or SetHoldOutputs), so that
	// the hook or a staged effect can hold them.
	holds bool
	// leased: the actor's user mail runs only while the scheduler's
	// lease is current (its kind is SetLeased); parked: the cell waits
	// for it (Scheduler.lapsedCells, guarded by lapsedMu).
	leased, parked bool
	// held is the turn outputs the after-turn hook keeps back, in turn
	// order; made by the run-token holder at the first Hold.Wait.
	held *holdQueue
	// reent is the actor's policy while it waits for a reply; waiting
	// counts its outstanding in-turn asks (kept only when reent is not
	// Reentrant; run-token holder only), and deferred holds the user mail
	// set aside meanwhile, oldest first (guarded by mu).
	reent    actor.Reentrancy
	waiting  int32
	deferred []envelope
}

// stop moves the cell to stStopped (final). Called with mu held.
func (c *Cell) stop() {
	c.state.Store(stStopped)
	c.stopped.Store(true)
}

// closedTo reports whether pushes are refused: the cell stopped (final)
// or was removed from the map (the sender must look the identity up
// again). Called with mu held.
func (c *Cell) closedTo() bool {
	st := c.state.Load()
	return st == stStopped || st == stGone
}

// gone reports whether the cell was removed from the map: a push that
// failed on it should be retried on a fresh lookup.
func (c *Cell) gone() bool { return c.state.Load() == stGone }

// pinMatches reports whether a reference pinned to pin (0: unpinned)
// reaches the cell. A virtual cell whose incarnation is not known yet
// admits any pin; the supervisor sets the incarnation when it attaches.
func (c *Cell) pinMatches(pin uint64) bool {
	if pin == 0 {
		return true
	}
	inc := c.inc.Load()
	return inc == 0 || inc == pin
}

// cellExt holds what few actors use; keeping it out of Cell keeps idle actors
// small.
type cellExt struct {
	parent      *Cell
	children    []*Cell // guarded by the cell's mu
	recvTimeout time.Duration
	recvTimer   Timer
	last        int64 // unix nanos of the last turn, kept only with a receive timeout
	// timers are the live timers of the current activation; guarded by
	// the cell's mu.
	timers map[*actTimer]struct{}
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
		return c.s.refusal
	}
	return nil
}

// reserveUpTo admits up to n user messages at once and returns how many
// it got (0: the mailbox is full).
func (c *Cell) reserveUpTo(n int32) int32 {
	v := c.count.Add(n)
	if v <= c.limit {
		return n
	}
	over := v - c.limit
	if over >= n {
		c.count.Add(-n)
		return 0
	}
	c.count.Add(-over)
	return n - over
}

// unreserve returns a slot taken by reserve that will not be filled.
func (c *Cell) unreserve(k int) { c.count.Add(int32(-k)) }

// pushUser appends envelopes whose slots were reserved. It returns false when
// the cell has stopped; the caller then owns the envelopes' failure.
func (c *Cell) pushUser(es []envelope) bool {
	c.mu.Lock()
	if c.closedTo() {
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
		moveEnvelope(&c.buf[idx], &es[i])
	}
	c.n += int32(len(es))
	c.pend.Add(int32(len(es)))
	c.mu.Unlock()
	return true
}

// grow resizes the ring to hold at least need envelopes. Called with mu held.
func (c *Cell) grow(need int) {
	size := len(c.buf) * 2
	if size < minRing {
		size = minRing
	}
	for size < need {
		size *= 2
	}
	nb := getRing(size)
	for i := int32(0); i < c.n; i++ {
		idx := c.head + i
		if idx >= int32(len(c.buf)) {
			idx -= int32(len(c.buf))
		}
		nb[i] = c.buf[idx]
	}
	putRing(c.buf)
	c.buf, c.head = nb, 0
}

// Mailbox rings are pooled per power-of-two size: an empty mailbox returns
// its ring, so idle actors hold no ring and busy ones do not allocate.
const minRing = 2

// keepRing is the largest ring an empty mailbox keeps: enough for a
// request/reply hop without touching the pool, small for an idle actor.
const keepRing = 2

var ringPools [32]sync.Pool

func ringClass(size int) int { return bits.Len(uint(size)) - 1 }

func getRing(size int) []envelope {
	if p := ringPools[ringClass(size)].Get(); p != nil {
		return unsafe.Slice((*envelope)(p.(unsafe.Pointer)), size)
	}
	return make([]envelope, size)
}

// putRing returns a ring whose slots are all zero.
func putRing(b []envelope) {
	if len(b) == 0 {
		return
	}
	clear(b)
	ringPools[ringClass(len(b))].Put(unsafe.Pointer(unsafe.SliceData(b)))
}

// pushSys appends to the system lane, which is never refused. It returns
// false when the cell has stopped.
func (c *Cell) pushSys(e envelope) bool {
	c.mu.Lock()
	if c.closedTo() {
		c.mu.Unlock()
		return false
	}
	c.sys = append(c.sys, e)
	c.pend.Add(1)
	c.mu.Unlock()
	return true
}

// take moves up to len(dst) envelopes into dst: one system message if any
// (the system lane is drained before user mail), user mail otherwise. It
// returns 0 when both are empty, and takeLapsed, taking nothing, when
// the actor's kind is leased and the lease has run out (see lease.go).
// The caller must hold the run-token.
func (c *Cell) take(dst []envelope) int {
	if c.pend.Load() <= 0 {
		// Nothing queued: skip the lock. A push racing this read is caught
		// by release, which looks at pend again after marking the cell idle.
		return 0
	}
	c.mu.Lock()
	if len(c.sys) > 0 && (c.owed == 0 || c.n == 0 || c.sys[0].kind != kPassivate) {
		// One system message at a time: a stop or a passivation ends the
		// cycle, and what follows it must stay queued.
		if c.sys[0].kind == kPassivate {
			c.passq = nil // later requests queue a new passivation
		}
		dst[0] = c.sys[0]
		rest := copy(c.sys, c.sys[1:])
		c.sys[rest] = envelope{}
		c.sys = c.sys[:rest]
		if rest == 0 {
			c.sys = nil // idle actors keep no storage
		}
		c.pend.Add(-1)
		c.mu.Unlock()
		return 1
	}
	if c.leased && c.n > 0 && c.act != nil && !c.s.leaseCurrent() {
		// Before any user mail moves (set-aside mail included), so
		// that nothing needs putting back.
		c.mu.Unlock()
		return takeLapsed
	}
	if c.waiting > 0 {
		return c.takeWaiting(dst)
	}
	k := int32(len(dst))
	if c.n < k {
		k = c.n
	}
	if k == 0 {
		c.mu.Unlock()
		return 0
	}
	if c.owed > 0 {
		if len(c.sys) > 0 && k > c.owed {
			k = c.owed // a passivation waits behind the owed mail only
		}
		c.owed = max(c.owed-k, 0)
	}
	size := int32(len(c.buf))
	for i := int32(0); i < k; i++ {
		idx := c.head + i
		if idx >= size {
			idx -= size
		}
		moveEnvelope(&dst[i], &c.buf[idx])
		c.buf[idx] = envelope{}
	}
	c.head += k
	if c.head >= size {
		c.head -= size
	}
	c.n -= k
	c.pend.Add(-k)
	if c.n == 0 && len(c.buf) > keepRing {
		putRing(c.buf)
		c.buf, c.head = nil, 0
	}
	c.mu.Unlock()
	c.count.Add(-k)
	return int(k)
}

// release gives up the run-token after the mailbox was found empty. It
// marks the cell idle and then looks at the mailbox once more: a sender
// that pushed before the mark skipped its wake (it saw stRunning), so the
// worker takes the token back itself. It returns false when it did (keep
// draining) and true when the token is gone.
func (c *Cell) release() bool {
	if c.act == nil {
		// No actor (a system message ran for a cell at rest): back to
		// detached, under the lock so a sender rings the doorbell.
		c.mu.Lock()
		if c.hasMailLocked() {
			c.mu.Unlock()
			return false
		}
		c.state.Store(stDetached)
		c.mu.Unlock()
		return true
	}
	c.state.Store(stIdle)
	if c.pend.Load() <= 0 {
		return true
	}
	return !c.state.CompareAndSwap(stIdle, stRunning)
}

// hasMail reports whether anything is queued. Called with mu held.
func (c *Cell) hasMailLocked() bool { return c.n > 0 || len(c.sys) > 0 }

// pushSysLive appends to the system lane of a cell that has an actor
// attached (a notice for a cell at rest would only ring its doorbell to
// be dropped). It returns false otherwise.
func (c *Cell) pushSysLive(e envelope) bool {
	c.mu.Lock()
	switch c.state.Load() {
	case stDetached, stPending, stStopped, stGone:
		c.mu.Unlock()
		return false
	}
	c.sys = append(c.sys, e)
	c.pend.Add(1)
	c.mu.Unlock()
	return true
}

// takeUserLocked removes the queued user mail and returns it. Called with
// mu held.
func (c *Cell) takeUserLocked() []envelope {
	out := make([]envelope, 0, int(c.n)+len(c.deferred))
	out = append(out, c.deferred...)
	c.count.Add(int32(-len(c.deferred)))
	c.deferred = nil
	for i := int32(0); i < c.n; i++ {
		idx := c.head + i
		if idx >= int32(len(c.buf)) {
			idx -= int32(len(c.buf))
		}
		out = append(out, c.buf[idx])
	}
	c.count.Add(-c.n)
	c.pend.Add(-c.n)
	putRing(c.buf)
	c.buf, c.head, c.n, c.owed = nil, 0, 0, 0
	return out
}

// drainAll empties the mailbox of a stopped cell and returns what it held.
func (c *Cell) drainAll() []envelope {
	c.mu.Lock()
	out := make([]envelope, 0, int(c.n)+len(c.sys)+len(c.deferred))
	out = append(out, c.sys...)
	out = append(out, c.deferred...)
	c.count.Add(int32(-len(c.deferred)))
	c.deferred = nil
	for i := int32(0); i < c.n; i++ {
		idx := c.head + i
		if idx >= int32(len(c.buf)) {
			idx -= int32(len(c.buf))
		}
		out = append(out, c.buf[idx])
	}
	c.count.Add(-c.n)
	c.pend.Store(0)
	putRing(c.buf)
	c.buf, c.sys, c.head, c.n, c.owed, c.passq = nil, nil, 0, 0, 0, nil
	c.mu.Unlock()
	return out
}

func (c *Cell) extension() *cellExt {
	if c.ext == nil {
		c.ext = &cellExt{}
	}
	return c.ext
}

// passReq is the payload of a queued passivation: the final callbacks of
// every Passivate call that joined it, run in the one passivation turn.
type passReq struct {
	finals []func(actor.Actor) // guarded by the cell's mu while queued
	// quiet: the value is taken out without a Passivating turn (Detach).
	quiet bool
}

// pushPassivate queues a passivation in the system lane, or joins the one
// already queued (one passivation puts the actor to rest; a burst of
// requests must not queue a rest-and-reactivate cycle each, ahead of the
// user mail). It fails with actor.ErrActorTerminated when the cell has
// stopped and with ErrNotAttached when it has no actor (a passivation is
// for the actor value attached now; queued, it would wait for the next
// one).
func (c *Cell) pushPassivate(final func(actor.Actor), quiet bool) error {
	c.mu.Lock()
	switch c.state.Load() {
	case stStopped, stGone:
		c.mu.Unlock()
		return actor.ErrActorTerminated
	case stDetached, stPending:
		c.mu.Unlock()
		return ErrNotAttached
	}
	if r := c.passq; r != nil {
		if final != nil {
			r.finals = append(r.finals, final)
		}
		c.mu.Unlock()
		return nil
	}
	r := &passReq{quiet: quiet}
	if final != nil {
		r.finals = []func(actor.Actor){final}
	}
	c.passq = r
	c.sys = append(c.sys, envelope{kind: kPassivate, msg: r})
	c.pend.Add(1)
	c.mu.Unlock()
	return nil
}

// pushOne appends one reserved envelope; see pushUser.
func (c *Cell) pushOne(e envelope) bool {
	c.mu.Lock()
	if c.closedTo() {
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
	c.pend.Add(1)
	c.mu.Unlock()
	return true
}
