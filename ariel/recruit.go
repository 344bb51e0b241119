package ariel

import (
	"sync/atomic"
	"time"
)

// Recruiting. A turn that sends to many idle actors leaves its worker
// holding their groups of mail (seize.go), which it runs one after
// another while its siblings may have nothing to do. When what it still
// holds carries enough measured work, it shares it: the groups not run
// yet move into a heldShare, published on the worker, and idle workers
// are woken. Every worker, the holder included, then claims whole groups,
// four at a time, by advancing the share's one cursor (an atomic add: a
// group is claimed once, by whoever advanced past it) and runs each as
// the holder would have, as the start of its cell's drain cycle. A held
// cell's run-token stays taken until its group has run and its mailbox
// drained, whoever runs it, so per-sender FIFO and one turn at a time
// hold as without sharing.
//
// The measure: every recruitEvery held runs the holder reads the clock;
// the time per group since the previous reading, times the groups it
// still holds, is the work left. It shares when two readings in a row
// found at least recruitPerGroup a group (one window that a preemption
// or a collection fell into decides nothing), the work left reaches
// Config.RecruitWork (default 20µs, several times what waking a parked
// worker costs), and another worker runs nothing. A fan-out of short
// turns is never shared (each runs faster where its mail is than on a
// core whose caches are cold for it; see BenchmarkFanOutWork), nor one
// to a few recipients.

const (
	recruitEvery = 16
	// recruitMin is the fewest groups worth sharing.
	recruitMin = 4
	// recruitPerGroup is the least work per group worth sharing: a
	// group run on another core first moves its cell and its mail there
	// (cache misses worth about a microsecond on the reference machine),
	// so short turns run faster where their mail already is.
	recruitPerGroup = 2 * time.Microsecond
)

// heldShare is a worker's held groups opened to its siblings: groups
// [0, len(groups)) of mail in env, claimed through next.
type heldShare struct {
	groups []heldGroup
	env    []envelope
	_      [64]byte
	next   atomic.Int32
	_      [60]byte
	// moved counts the claimed groups whose mail was moved out of env:
	// once it reaches len(groups), the holder may reuse both arrays.
	moved atomic.Int32
}

// claimChunk is how many groups a claim takes at once: the cursor's
// cache line moves between cores once per chunk, not once per group.
const claimChunk = 4

// claim takes the next chunk of groups, groups[lo:hi]; lo == hi when all
// are taken.
func (sh *heldShare) claim() (lo, hi int) {
	n := len(sh.groups)
	hi = int(sh.next.Add(claimChunk))
	lo = hi - claimChunk
	return min(lo, n), min(hi, n)
}

// claimed is the chunk of a share a worker claimed: groups[next:hi] of
// sh have not run yet. A worker abandoned meanwhile gives them back
// (releaseHeld).
type claimed struct {
	sh       *heldShare
	next, hi int
	sibling  bool // sh is another worker's (Stats.Recruited)
}

// runClaimed runs the next group w claimed; false when none is left.
func (w *worker) runClaimed() bool {
	c := &w.claimed
	if c.next >= c.hi {
		return false
	}
	sh := c.sh
	g := sh.groups[c.next]
	sh.groups[c.next] = heldGroup{}
	c.next++
	if c.sibling {
		w.ex.cnt.recruited.Add(1)
	}
	if c.next == c.hi {
		*c = claimed{} // the share is not kept reachable from here
	}
	w.runGroup(g, sh.env[g.start:g.start+g.n], sh)
	return true
}

// left reports whether some group is not claimed yet.
func (sh *heldShare) left() bool { return int(sh.next.Load()) < len(sh.groups) }

// claimRest takes every group not claimed yet and calls fn for each.
func (sh *heldShare) claimRest(fn func(heldGroup, []envelope)) {
	for {
		i := sh.next.Load()
		if int(i) >= len(sh.groups) {
			return
		}
		if sh.next.CompareAndSwap(i, int32(len(sh.groups))) {
			for _, g := range sh.groups[i:] {
				fn(g, sh.env[g.start:g.start+g.n])
			}
			return
		}
	}
}

// measureHeld is called by the holder every recruitEvery held runs: it
// shares what it holds when the work left warrants it.
func (w *worker) measureHeld() {
	s := w.s
	if s.cfg.RecruitWork < 0 || w.share.Load() != nil {
		return
	}
	now := s.elapsed()
	if w.heldMark == 0 {
		w.heldMark, w.heldMarkRuns = now, w.heldRuns
		return
	}
	runs := w.heldRuns - w.heldMarkRuns
	per := time.Duration(now-w.heldMark) / time.Duration(max(runs, 1))
	w.heldMark, w.heldMarkRuns = now, w.heldRuns
	// Two windows in a row must say so: one that a preemption or a
	// garbage collection fell into says nothing of the turns.
	slow := per >= recruitPerGroup
	wasSlow := w.heldSlow
	w.heldSlow = slow
	left := len(w.held) - w.heldAt
	if !slow || !wasSlow || left < recruitMin || per*time.Duration(left) < s.cfg.RecruitWork || !w.siblingIdle() {
		return
	}
	w.shareHeld()
}

// siblingIdle reports whether another worker runs no cell: parked,
// spinning, or woken and not yet running anything.
func (w *worker) siblingIdle() bool {
	for _, v := range *w.s.workers.Load() {
		if v != w && v.cur.Load() == nil {
			return true
		}
	}
	return false
}

// shareHeld publishes the groups w holds and has not run, and wakes
// idle workers to claim them. w starts holding afresh.
func (w *worker) shareHeld() {
	s := w.s
	sh := &heldShare{groups: w.held[w.heldAt:], env: w.heldEnv}
	w.held, w.heldEnv, w.heldAt = nil, nil, 0
	if sp := w.spare; sp != nil && int(sp.moved.Load()) == len(sp.groups) {
		// Hold afresh in the arrays of a share whose mail is all out.
		w.held, w.heldEnv, w.spare = sp.groups[:0], sp.env[:0], nil
	}
	w.share.Store(sh)
	w.ex.cnt.shares.Add(1)
	// One worker per recruitMin groups, at most the parked ones: each
	// woken worker that finds more than it can take wakes no other.
	for i := len(sh.groups) / recruitMin; i > 0 && s.nparked.Load() > 0; i-- {
		if s.spinning.Load() > 0 {
			break // a spinner will find it
		}
		s.notify()
	}
}

// runOwnShare claims and runs one group of w's own share; false when
// there is none left, and the share is cleared then.
func (w *worker) runOwnShare() bool {
	sh := w.share.Load()
	if sh == nil {
		return false
	}
	if lo, hi := sh.claim(); lo < hi {
		w.claimed = claimed{sh: sh, next: lo, hi: hi}
		return w.runClaimed()
	}
	w.share.Store(nil)
	w.spare = sh
	return false
}

// runSiblingShare claims and runs one group of a sibling's share; false
// when no sibling has one to claim.
func (w *worker) runSiblingShare() bool {
	for _, v := range *w.s.workers.Load() {
		if v == w {
			continue
		}
		if sh := v.share.Load(); sh != nil && sh.left() {
			if lo, hi := sh.claim(); lo < hi {
				w.claimed = claimed{sh: sh, next: lo, hi: hi, sibling: true}
				return w.runClaimed()
			}
		}
	}
	return false
}

// runShared runs a group w claimed, else one of its own share.
func (w *worker) runShared() bool { return w.runClaimed() || w.runOwnShare() }
