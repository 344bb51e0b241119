package ariel

import (
	"github.com/tempest-actors/tempest/actor"
)

// Call chains and reentrancy.
//
// Every message carries the call chain it belongs to: the activations that
// wait, transitively, for it to be handled. An ask made in a turn extends
// the chain of the message that turn handles by the asker (it waits for
// the reply); a tell made in a turn carries that chain unchanged (nobody
// waits on a tell, but it is part of the same work). Asks and tells from
// program code start with no chain. A chain is a linked list from the
// newest asker back to the outermost, so extending it costs no allocation:
// its node lives in the ask's pending record.
//
// An actor whose kind is not Reentrant counts its outstanding in-turn asks
// (Cell.waiting). While it waits, take sets user mail aside (Cell.deferred,
// still holding its mailbox slots, so admission is unchanged) unless the
// message may run: an Interleaving message, or, for CallChainReentrant, a
// message whose chain contains this activation (it is work the actor is
// itself waiting for). For NonReentrant such an ask can never run before
// the wait ends, which waits for it: it fails at once with a DeadlockError
// naming the cycle. A message admitted ahead takes the earlier set-aside
// messages of its sender with it, so per-sender order holds. When the last
// continuation has run, the set-aside mail goes back to the head of the
// mailbox, in order.

// callChain is one link of a call chain: ref waits within parent.
type callChain struct {
	ref    actor.Ref // a waiting activation, pinned to its incarnation
	parent *callChain
	depth  int32 // links from here to the outermost, this one included
}

// contains reports whether r (pinned) waits in the chain.
func (c *callChain) contains(r actor.Ref) bool {
	for ; c != nil; c = c.parent {
		if c.ref == r {
			return true
		}
	}
	return false
}

// Refs returns the chain's activations, outermost first; nil for none.
func (c *callChain) Refs() []actor.Ref {
	if c == nil {
		return nil
	}
	out := make([]actor.Ref, c.depth)
	for i := c.depth - 1; c != nil && i >= 0; i, c = i-1, c.parent {
		out[i] = c.ref
	}
	return out
}

// chainOf builds a chain from refs (outermost first), as received from
// another node. It returns nil for an empty list and an error for one
// longer than actor.MaxCallChain.
func chainOf(refs []actor.Ref) (*callChain, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	if len(refs) > actor.MaxCallChain {
		return nil, actor.ErrCallChainTooLong
	}
	links := make([]callChain, len(refs))
	var parent *callChain
	for i, r := range refs {
		links[i] = callChain{ref: r, parent: parent, depth: int32(i + 1)}
		parent = &links[i]
	}
	return parent, nil
}

// cycle is the DeadlockError of an ask for self whose chain contains self.
func (c *callChain) cycle(self actor.Ref) error {
	refs := c.Refs()
	for i, r := range refs {
		if r == self {
			return &actor.DeadlockError{Cycle: append(refs[i:len(refs):len(refs)], self)}
		}
	}
	return &actor.DeadlockError{Cycle: append(refs, self)}
}

// turnChain is the chain of the message the current turn handles: for a
// continuation, the chain of the turn that made the ask.
func (ex *executor) turnChain() *callChain {
	e := ex.env
	if e == nil {
		return nil
	}
	if e.kind == kReply {
		return e.msg.(*replyMsg).chain
	}
	return e.chain
}

// mayInterleave reports whether e may run while c waits for a reply.
func (c *Cell) mayInterleave(e *envelope, self actor.Ref) bool {
	if _, ok := e.msg.(actor.Interleaving); ok {
		return true
	}
	return c.reent == actor.CallChainReentrant && e.chain.contains(self)
}

// sameSender reports whether a and b come from the same sender (program
// code counts as one sender).
func sameSender(a, b *envelope) bool {
	switch {
	case a.from != nil || b.from != nil:
		return a.from == b.from
	}
	return a.remoteSender() == b.remoteSender()
}

// takeWaiting is take for a cell that waits for a reply under a policy
// that is not Reentrant (see the comment at the top of this file). Called
// with mu held, the system lane empty or not to be taken; it unlocks mu.
func (c *Cell) takeWaiting(dst []envelope) int {
	self := c.Ref()
	var deadlocked []envelope
	k := 0
	for c.n > 0 && k == 0 {
		e := &c.buf[c.head]
		switch {
		case c.mayInterleave(e, self):
			// Its sender's earlier set-aside messages go first.
			for i := 0; i < len(c.deferred) && k < len(dst); {
				if sameSender(&c.deferred[i], e) {
					moveEnvelope(&dst[k], &c.deferred[i])
					k++
					c.deferred = append(c.deferred[:i], c.deferred[i+1:]...)
					continue
				}
				i++
			}
			if k < len(dst) {
				moveEnvelope(&dst[k], e)
				k++
				c.popHeadLocked()
			}
		case c.reent == actor.NonReentrant && e.ask != nil && e.chain.contains(self):
			deadlocked = append(deadlocked, *e)
			c.popHeadLocked()
			c.count.Add(-1)
		default:
			c.deferred = append(c.deferred, *e)
			c.popHeadLocked()
		}
	}
	c.mu.Unlock()
	c.count.Add(int32(-k))
	for i := range deadlocked {
		e := &deadlocked[i]
		c.s.g.deadlocks.Add(1)
		e.ask.complete(nil, e.chain.cycle(self), nil)
	}
	return k
}

// popHeadLocked removes the head of the ring (already copied out).
func (c *Cell) popHeadLocked() {
	c.buf[c.head] = envelope{}
	c.head++
	if c.head >= int32(len(c.buf)) {
		c.head = 0
	}
	c.n--
	c.pend.Add(-1)
}

// undefer puts the set-aside mail back at the head of the mailbox, in
// order, and forgets the wait: the actor takes any mail again. Run-token
// holder only.
func (c *Cell) undefer() {
	c.waiting = 0
	c.mu.Lock()
	if len(c.deferred) > 0 {
		c.prependLocked(c.deferred) // their slots were never given back
		clear(c.deferred)
		c.deferred = nil
	}
	c.mu.Unlock()
}

// unget puts envelopes taken but not run back at the head of the mailbox,
// in order. Run-token holder only.
func (c *Cell) unget(es []envelope) {
	c.mu.Lock()
	c.prependLocked(es)
	c.mu.Unlock()
	c.count.Add(int32(len(es))) // take gave their slots back
}

// prependLocked queues es before the mail in the ring. Called with mu held.
func (c *Cell) prependLocked(es []envelope) {
	need := len(es) + int(c.n)
	nb := getRing(ringSize(need, len(c.buf)))
	k := copy(nb, es)
	for i := int32(0); i < c.n; i++ {
		idx := c.head + i
		if idx >= int32(len(c.buf)) {
			idx -= int32(len(c.buf))
		}
		nb[k] = c.buf[idx]
		k++
	}
	if c.buf != nil {
		putRing(c.buf)
	}
	c.buf, c.head, c.n = nb, 0, int32(need)
	c.pend.Add(int32(len(es)))
}

// ringSize is the ring length that holds need envelopes, at least cur.
func ringSize(need, cur int) int {
	size := max(cur, minRing)
	for size < need {
		size *= 2
	}
	return size
}

// waitDone ends one outstanding in-turn ask of c (its continuation is
// about to run).
func (c *Cell) waitDone() {
	if c.waiting > 0 {
		c.waiting--
	}
}
