package ariel

import "github.com/tempest-actors/tempest/actor"

// Seizing. When a turn's flush finds a recipient idle with an empty
// mailbox, the flushing worker takes the recipient's run-token itself
// (the same Idle→Running compare-and-swap a wake does, so a sender's wake
// and a seize never both win) and keeps the recipient's whole group of
// mail in hand instead of pushing it into the mailbox and queueing the
// cell. The held groups run on this worker right after the current cycle,
// in the order they were seized, each as the start of an ordinary drain
// cycle of its cell: the held mail first, then whatever reached the
// mailbox meanwhile (which came later), so per-sender FIFO holds. A
// request/reply hop or a fan-out to idle actors then costs no mailbox
// lock, no run queue and no wake-up.
//
// Bounds: a worker holds at most heldMax groups and heldEnvMax messages
// (further mail is deposited as usual), besides those of a share it
// published and a chunk it claimed (recruit.go). A cycle whose turns seized ends
// after its current batch when its cell has more mail, and the cell waits
// in the worker's LIFO slot, so held cells wait at most one batch. A
// seize made by a held group's cycle is one link deeper than that group;
// past heldDepthMax links nothing more is seized (the mail is deposited
// and the recipient woken, through the LIFO slot and its bound), so a
// relay that keeps seizing cannot starve the worker's queues; and every
// heldProbe held runs the worker runs one cycle from the shared queue if
// it has one (the chain backstop). Held mail counts in its recipient's
// mailbox bound (its slots were reserved at Tell time), and each held
// group runs under the cell's fairness budget like any drain cycle.

const (
	heldMax      = 1024
	heldEnvMax   = 4096
	heldDepthMax = 64
	heldProbe    = 61
)

// heldGroup is mail a worker holds for a cell whose run-token it took:
// heldEnv[start : start+n].
type heldGroup struct {
	c        *Cell
	start, n int32
	depth    int32 // links of seizes from a cycle the worker found queued
}

// trySeize takes the run-token of the idle cell c, whose mailbox is
// empty, and holds es (a flush's group for c, capacity reserved) for it.
// It reports false, taking nothing, when c is busy, has mail, is not
// Reentrant (its mail must pass take, which sets it aside while the actor
// waits for a reply), or the worker holds as much as it may.
func (ex *executor) trySeize(c *Cell, es []envelope) bool {
	w := ex.w
	if w == nil || c.reent != actor.Reentrant || c.pend.Load() != 0 || c.state.Load() != stIdle ||
		ex.depth >= heldDepthMax || len(w.held) >= heldMax || len(w.heldEnv)+len(es) > heldEnvMax {
		return false
	}
	if !c.state.CompareAndSwap(stIdle, stRunning) {
		return false
	}
	start := len(w.heldEnv)
	if need := start + len(es); need > cap(w.heldEnv) {
		w.heldEnv = append(w.heldEnv, es...)
	} else {
		w.heldEnv = w.heldEnv[:need]
		for i := range es {
			moveEnvelope(&w.heldEnv[start+i], &es[i])
		}
	}
	w.held = append(w.held, heldGroup{c: c, start: int32(start), n: int32(len(es)), depth: ex.depth + 1})
	ex.seized++
	return true
}

// runHeld runs the next held group (runGroup).
func (w *worker) runHeld() {
	g := w.held[w.heldAt]
	w.held[w.heldAt] = heldGroup{}
	es := w.heldEnv[g.start : g.start+g.n]
	w.heldAt++
	if w.heldAt == len(w.held) {
		// Truncated, not cleared: es stays valid until it is run below,
		// and nothing is held anew before that.
		w.held, w.heldEnv, w.heldAt = w.held[:0], w.heldEnv[:0], 0
	}
	w.runGroup(g, es, nil)
}

// runGroup runs a held group, whichever worker held it: its mail is
// loaded into the batch (what does not fit goes to the head of the
// mailbox, its slots still reserved) and the cell's cycle starts from
// there. A group claimed from sh is counted in sh.moved once its mail is
// out of sh's arrays.
func (w *worker) runGroup(g heldGroup, es []envelope, sh *heldShare) {
	ex := &w.ex
	c := g.c
	if w.cur.Load() != c {
		w.cur.Store(c)
	}
	ex.depth = g.depth
	if len(es) == 1 {
		// One message (a request/reply hop): run it from a slot of its
		// own, then the cell's cycle, without loading a batch.
		moveEnvelope(&w.running, &es[0])
		es[0] = envelope{}
		if sh != nil {
			sh.moved.Add(1)
		}
		ex.runOne(c, &w.running)
		return
	}
	k := min(len(es), len(ex.batch), max(ex.budget, 1))
	for i := 0; i < k; i++ {
		moveEnvelope(&ex.batch[i], &es[i])
		es[i] = envelope{}
	}
	if k < len(es) {
		c.mu.Lock()
		c.prependLocked(es[k:])
		c.mu.Unlock()
		clear(es[k:])
	}
	if sh != nil {
		sh.moved.Add(1)
	}
	c.count.Add(int32(-k)) // as take does for what it takes
	ex.batchN = k
	ex.drain(c, k)
}

// runOne runs e, the one message held for the seized cell c, then c's
// cycle from its mailbox.
func (ex *executor) runOne(c *Cell, e *envelope) {
	c.count.Add(-1) // the slot reserved at Tell time
	ex.msgs++
	ex.gen, ex.pos = c.gen.Load()+1, -1
	if ex.s.traces() {
		ex.taken = ex.s.clock.Now() // picked up now, not with the last batch
	}
	if c.leased && e.kind == kUser && ex.leaseDue() && !ex.s.leaseCurrent() {
		ex.msgs-- // not run: counted when taken again
		c.unget([]envelope{*e})
		*e = envelope{}
		ex.lapsed(c, 0)
	} else if ok := ex.turn(c, e); ok {
		*e = envelope{}
		ex.drainCycle(c, 0)
	} else {
		*e = envelope{}
	}
	ex.cnt.cycles.Add(1)
	if ex.cycles++; ex.cycles%32 == 0 {
		ex.publish()
	}
}

// releaseHeld gives the groups a worker holds and has not run (claimed
// from a share and not run, or shared and not claimed) back to their
// cells: each group goes to the head of
// its mailbox (its slots are still reserved) and the cell, whose
// run-token the worker held, is queued on the shared injector. The watchdog calls it for a worker
// whose turn it abandoned.
func (s *Scheduler) releaseHeld(w *worker) {
	release := func(g heldGroup, es []envelope) {
		c := g.c
		c.mu.Lock()
		c.prependLocked(es)
		c.mu.Unlock()
		clear(es) // copied into the mailbox: not kept reachable here
		c.state.Store(stReady)
		s.inj.push(c)
	}
	for i := w.heldAt; i < len(w.held); i++ {
		g := w.held[i]
		release(g, w.heldEnv[g.start:g.start+g.n])
	}
	w.held, w.heldEnv, w.heldAt, w.spare = nil, nil, 0, nil
	// The groups it claimed from a share and had not run, and those of
	// its own share no worker claimed yet (recruit.go).
	if c := w.claimed; c.next < c.hi {
		for _, g := range c.sh.groups[c.next:c.hi] {
			release(g, c.sh.env[g.start:g.start+g.n])
		}
	}
	w.claimed = claimed{}
	if sh := w.share.Swap(nil); sh != nil {
		sh.claimRest(release)
	}
}
