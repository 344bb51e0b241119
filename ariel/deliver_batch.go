package ariel

import (
	"errors"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// Inbox is a local actor resolved once, for a caller that hands it many
// tells from other nodes: the mail layer keeps one per recipient instead
// of resolving every message. A tell through an Inbox is admitted exactly
// like Deliver(to, from, msg, time.Time{}, nil): same mailbox bound, same
// errors, same counters. When the cell behind it is no longer the
// actor's (the actor stopped, or the cell was replaced), Tell falls back
// to Deliver, which looks the identity up again; Live reports that state
// so the caller can resolve a fresh Inbox.
//
// An Inbox is safe for concurrent use. It holds no goroutine and needs no
// closing.
type Inbox struct {
	s   *Scheduler
	c   *Cell
	ref actor.Ref // as resolved, with its pin
}

// Inbox resolves to on this node through the local router, as Deliver
// does. Errors are Deliver's (actor.ErrUnknownKind,
// actor.ErrActorTerminated, actor.ErrProcessUnavailable for an actor of
// another node, ErrClosed).
func (s *Scheduler) Inbox(to actor.Ref) (*Inbox, error) {
	if s.closing.Load() {
		return nil, ErrClosed
	}
	c, err := s.local.Resolve(to)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, actor.ErrProcessUnavailable
	}
	return &Inbox{s: s, c: c, ref: to}, nil
}

// Ref returns the reference the inbox was resolved for.
func (in *Inbox) Ref() actor.Ref { return in.ref }

// Live reports whether the inbox still reaches the actor directly: its
// cell has not ended and a pinned reference still names its incarnation.
// When it returns false, Tell still works (through Deliver), but a new
// Inbox is cheaper.
func (in *Inbox) Live() bool {
	if in.s.closing.Load() || in.c.state.Load() >= stStopped {
		return false
	}
	pin := in.ref.Incarnation()
	return pin == 0 || pin == in.c.inc.Load()
}

// direct reports whether a tell may go to the cached cell without a
// lookup: a pinned reference must still name the cell's incarnation.
func (in *Inbox) direct() bool {
	pin := in.ref.Incarnation()
	return pin == 0 || pin == in.c.inc.Load()
}

// Tell admits msg for the inbox's actor from the remote sender from (zero
// if none). The error is the admission outcome, as for Deliver.
func (in *Inbox) Tell(from actor.Ref, msg any) error {
	s, c := in.s, in.c
	if s.closing.Load() {
		return ErrClosed
	}
	if !in.direct() {
		return s.Deliver(in.ref, from, msg, time.Time{}, nil)
	}
	if err := c.reserve(); err != nil {
		if errors.Is(err, actor.ErrActorTerminated) {
			// The cell ended: the identity may live on in a new one.
			return s.Deliver(in.ref, from, msg, time.Time{}, nil)
		}
		s.countRefusal(err)
		return err
	}
	e := envelope{msg: msg, x: peerTell}
	if !from.IsZero() {
		e.x = &xinfo{from: from, peer: true}
	}
	if s.latency != nil {
		e.enq = s.clock.Now().UnixNano()
	}
	if !c.pushOne(e) {
		c.unreserve(1)
		return s.Deliver(in.ref, from, msg, time.Time{}, nil)
	}
	s.wake(c, nil)
	return nil
}

// envelopeBufs recycles the envelope slices of TellBatch.
var envelopeBufs = sync.Pool{New: func() any { b := make([]envelope, 0, 64); return &b }}

// TellBatch admits msgs, all from the remote sender from, in order, with
// one mailbox lock and one wake-up for the whole batch. It admits the
// longest prefix the mailbox has room for and returns its length; when
// that is not all of msgs, err is the refusal of msgs[n] (the caller
// refuses the rest, which keeps the recipient's order). Each message not
// admitted is counted as a refusal would be.
func (in *Inbox) TellBatch(from actor.Ref, msgs []any) (n int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	s, c := in.s, in.c
	if s.closing.Load() {
		return 0, ErrClosed
	}
	if !in.direct() || c.state.Load() >= stStopped {
		return in.tellEach(from, msgs)
	}
	k := int(c.reserveUpTo(int32(min(len(msgs), 1<<30))))
	if k == 0 {
		// Full, or ended meanwhile: Tell tells the two apart.
		return in.tellEach(from, msgs)
	}
	x := peerTell
	if !from.IsZero() {
		x = &xinfo{from: from, peer: true} // shared by the batch: read, never written
	}
	var enq int64
	if s.latency != nil {
		enq = s.clock.Now().UnixNano()
	}
	bp := envelopeBufs.Get().(*[]envelope)
	es := (*bp)[:0]
	for _, m := range msgs[:k] {
		es = append(es, envelope{msg: m, x: x, enq: enq})
	}
	ok := c.pushUser(es)
	clear(es)
	*bp = es[:0]
	if cap(es) <= 1024 {
		envelopeBufs.Put(bp)
	}
	if !ok {
		c.unreserve(k)
		return in.tellEach(from, msgs)
	}
	s.wake(c, nil)
	if k < len(msgs) {
		in.countRest(s.refusal, len(msgs)-k)
		return k, s.refusal
	}
	return k, nil
}

// tellEach is TellBatch one message at a time, stopping at the first
// refusal.
func (in *Inbox) tellEach(from actor.Ref, msgs []any) (int, error) {
	for i, m := range msgs {
		if err := in.Tell(from, m); err != nil {
			in.countRest(err, len(msgs)-i-1)
			return i, err
		}
	}
	return len(msgs), nil
}

// countRest counts k messages refused with err without being tried.
func (in *Inbox) countRest(err error, k int) {
	for range k {
		in.s.countRefusal(err)
	}
}
