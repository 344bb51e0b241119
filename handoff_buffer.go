package tempest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/placement"
)

// Mail that may not be sent now but may be soon waits in bounded
// per-recipient queues in the routing layer, under the retry policy of
// retry.go: mail for a shard being handed off (or not placed, its owner
// down, this node's table behind, its lease not fresh, no link to its
// owner's node) from an actor, and asks from anyone; mail from anyone
// that the owner's node refused
// NOT_OWNER, NOT_SERVING or BUSY; and mail of this node's own senders
// that this node admitted and then fenced off (remote.ResendAll). Each
// recipient's queue is routed again in
// order when the table changes, or when its head's back-off ends, to
// whichever node owns the shard then (this one included). Once a
// recipient has a queue, later mail for it joins the queue even if the
// move has completed meanwhile, so mail from one sender to one recipient
// keeps its order; a message sent on from a queue and refused again goes
// back to the place it first got (bufItem.seq), ahead of what was queued
// behind it. Fenced-off mail left the recipient's mailbox, so it
// was sent before anything queued for the recipient since: it goes ahead
// of that mail, behind mail fenced off earlier (addUnrun), and is handed
// over before the mailbox admits mail again. A moving shard's queues hold at most
// handoffBufferPerShard messages, and so do one shard's for every other
// cause (one kind's while its shard is not known); beyond that the sender
// gets actor.ErrRefused, as for a full mailbox, and program code's tell
// is counted given up. A tell still waiting tellRetryWait after its own
// first refusal (a resent tell keeps it when it is refused again) is
// reported Undelivered to its sender with actor.ErrProcessUnavailable
// (program code: counted, Stats().Retry.GaveUp),
// and an ask is dropped at its deadline (the scheduler fails it then). A
// move that is aborted leaves the shard with its old owner, where the
// waiting mail then goes. A tell from program code whose route is in flux
// when it is sent does not wait here: Node.Tell returns what it knows at
// once, so it waits itself (awaitRetry). One refused by another node, or
// fenced off here after admission, waits here as any other mail.

// Limits of the handoff buffers.
const (
	handoffBufferPerShard = 1024
	handoffBufferWait     = tellRetryWait
)

// handoffBuffer is the routing layer's retry queues, keyed by recipient
// identity and bounded per shard.
type handoffBuffer struct {
	n        atomic.Int64 // messages buffered (the fast path reads only this)
	mu       sync.Mutex
	queues   map[string]*bufQueue // by recipient kind/key
	perShard map[string]int
	// resentTells is, by recipient, the tells this node sent again (to another
	// node) lately and when each began to wait: a refusal that echoes one
	// of them keeps its start, so that no tell is resent longer than the
	// wait, and any other refused tell's wait starts at its own refusal.
	resentTells map[string][]resentTell
	limit       int
	wait        time.Duration
	// seq numbers mail as it first waits, in the order it was sent.
	seq uint64
	// resentN counts the records in resentTells (the send path reads only
	// this).
	resentN atomic.Int64
	// kick wakes the retry loop when mail is queued.
	kick chan struct{}
	// Counters (Stats().Retry).
	parked, resent, gaveUp atomic.Uint64
}

type bufQueue struct {
	to    actor.Ref
	shard string
	items []bufItem
}

// bufItem is one waiting message. A NOT_OWNER refusal by avoid while
// this node's table showed avoid at avoidEpoch waits until the table
// shows something else; any other cause waits until due (zero: the next
// table change).
type bufItem struct {
	m          ariel.Outbound
	since      time.Time // a tell's start of the wait
	due        time.Time
	attempt    int
	avoid      string
	avoidEpoch uint64
	// unrun marks mail this node admitted and then fenced off
	// (addUnrun): it waits ahead of the mail queued for its recipient.
	unrun bool
	// seq is the message's place in its recipient's queue, given when it
	// first waits and kept while it is sent again: a resent message that
	// is refused once more goes back ahead of what was queued behind it.
	// It also names the item while it waits (remove, update).
	seq uint64
}

// before reports whether a waits ahead of b in their recipient's queue:
// fenced-off mail first, then each by the place it got when it first
// waited.
func (a bufItem) before(b bufItem) bool {
	if a.unrun != b.unrun {
		return a.unrun
	}
	return a.seq < b.seq
}

// place is where a message sent on from a queue waits if it is refused
// again: kept with the record of its resend.
type place struct {
	seq   uint64
	unrun bool
}

func (it bufItem) place() place { return place{seq: it.seq, unrun: it.unrun} }

// resentTell is a tell sent again: its sender, its message in the form
// a refusal echoes it, and the start of its wait.
type resentTell struct {
	from  actor.Ref
	msg   any
	since time.Time
	id    uint64 // the number the tell had when it was resent
	place place  // where it waits if refused; zero once a direct send made it unreliable (sentDirect)
}

func newHandoffBuffer(limit int, wait time.Duration) *handoffBuffer {
	return &handoffBuffer{queues: map[string]*bufQueue{}, perShard: map[string]int{}, resentTells: map[string][]resentTell{},
		limit: limit, wait: wait, kick: make(chan struct{}, 1)}
}

func bufKey(to actor.Ref) string { return to.Kind() + "/" + to.Key() }

// queued reports whether mail for to waits in a buffer.
func (b *handoffBuffer) queued(to actor.Ref) bool {
	if b.n.Load() == 0 {
		return false
	}
	b.mu.Lock()
	_, ok := b.queues[bufKey(to)]
	b.mu.Unlock()
	return ok
}

// add queues it behind mail already waiting for its recipient, or, when
// it is a message sent again from the queue and refused once more (it.seq
// set), back at its place: ahead of the mail that was queued behind it.
// shard names the recipient's shard for the bound; it is taken from the
// existing queue when there is one. With mustExist, it is queued only if
// a queue exists (ok false otherwise). A tell waits from it.since, or from
// now when that is zero.
func (b *handoffBuffer) add(it bufItem, shard string, now time.Time, mustExist bool) (ok bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := bufKey(it.m.To)
	q := b.queues[k]
	if q == nil {
		if mustExist {
			return false, nil
		}
		q = &bufQueue{to: it.m.To.WithIncarnation(0), shard: shard}
		b.queues[k] = q
	}
	if b.perShard[q.shard] >= b.limit {
		if len(q.items) == 0 {
			delete(b.queues, k)
		}
		return true, fmt.Errorf("%w: handoff buffer of %s full", actor.ErrRefused, q.shard)
	}
	if it.since.IsZero() {
		it.since = now
	}
	b.insertLocked(q, it)
	b.perShard[q.shard]++
	b.n.Add(1)
	b.parked.Add(1)
	select { // the retry loop sets its timer for this one's wait
	case b.kick <- struct{}{}:
	default:
	}
	return true, nil
}

// insertLocked puts it in q at its place (bufItem.before), giving it one
// if it has none yet: behind everything when it first waits.
func (b *handoffBuffer) insertLocked(q *bufQueue, it bufItem) {
	if it.seq == 0 {
		b.seq++
		it.seq = b.seq
	}
	at := len(q.items)
	for at > 0 && it.before(q.items[at-1]) {
		at--
	}
	q.items = slices.Insert(q.items, at, it)
}

// nextSeq gives a place to a message refused after it was sent directly
// and sent again at once, before it waits (its resend record names it by
// that).
func (b *handoffBuffer) nextSeq() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	return b.seq
}

// addUnrun queues items, mail for one recipient that this node admitted
// and then fenced off, in their mailbox order, ahead of every message
// waiting for that recipient but behind mail fenced off before them (the
// leading run of unrun items, which left the mailbox earlier): mail sent
// after a fenced-off message, whether it waits here already or comes
// later, stays behind it. Nothing of it is sent from here; the retry loop
// routes it. All of items is queued, or none when the shard's queues are
// full (false).
func (b *handoffBuffer) addUnrun(items []bufItem, shard string, now time.Time) bool {
	if len(items) == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := bufKey(items[0].m.To)
	q := b.queues[k]
	if q != nil {
		shard = q.shard
	}
	if b.perShard[shard]+len(items) > b.limit {
		return false
	}
	if q == nil {
		q = &bufQueue{to: items[0].m.To.WithIncarnation(0), shard: shard}
		b.queues[k] = q
	}
	for _, it := range items {
		it.unrun = true
		if it.since.IsZero() {
			it.since = now
		}
		it.seq = 0 // behind mail fenced off before it, ahead of the rest
		b.insertLocked(q, it)
	}
	b.perShard[shard] += len(items)
	b.n.Add(int64(len(items)))
	b.parked.Add(uint64(len(items)))
	select { // the retry loop routes them
	case b.kick <- struct{}{}:
	default:
	}
	return true
}

// requeue puts it back at its place in its recipient's queue (making the
// queue again if it went), after the retry loop took it and its send was
// refused at once, so that it goes before what was queued behind it. It
// was counted out of the bound when it was taken; it is counted in again
// even if that exceeds the bound, as it held its place already.
func (b *handoffBuffer) requeue(it bufItem, shard string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := bufKey(it.m.To)
	q := b.queues[k]
	if q == nil {
		q = &bufQueue{to: it.m.To.WithIncarnation(0), shard: shard}
		b.queues[k] = q
	}
	b.insertLocked(q, it)
	b.perShard[q.shard]++
	b.n.Add(1)
}

// head returns the first waiting message for key.
func (b *handoffBuffer) head(k string) (bufItem, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil || len(q.items) == 0 {
		return bufItem{}, false
	}
	return q.items[0], true
}

// indexLocked is where the message numbered seq waits in q, or -1. A
// refusal may have put another message ahead of it since the retry loop
// read it as the head, so the loop names the message it took.
func indexLocked(q *bufQueue, seq uint64) int {
	for i := range q.items {
		if q.items[i].seq == seq {
			return i
		}
	}
	return -1
}

// update replaces the waiting message it.seq names for key (its
// back-off).
func (b *handoffBuffer) update(k string, it bufItem) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[k]; q != nil {
		if i := indexLocked(q, it.seq); i >= 0 {
			q.items[i] = it
		}
	}
}

// remove takes the waiting message numbered seq out of key's queue, and
// the queue when it is empty then.
func (b *handoffBuffer) remove(k string, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil {
		return
	}
	i := indexLocked(q, seq)
	if i < 0 {
		return
	}
	q.items = slices.Delete(q.items, i, i+1)
	b.n.Add(-1)
	if b.perShard[q.shard]--; b.perShard[q.shard] <= 0 {
		delete(b.perShard, q.shard)
	}
	if len(q.items) == 0 {
		delete(b.queues, k)
	}
}

func (b *handoffBuffer) keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.queues))
	for k := range b.queues {
		out = append(out, k)
	}
	return out
}

// noteResent records that this node is sending the tell it (waiting
// since it.since, at its place) again, to another node, in the form msg a
// refusal of it echoes. It is noted before the send: the refusal can come
// back before the send returns. At most the bound's worth are kept per
// recipient, the oldest forgotten first.
func (b *handoffBuffer) noteResent(k string, it bufItem, msg any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.resentTells[k]
	if len(l) >= b.limit {
		l = append(l[:0], l[1:]...)
		b.resentN.Add(-1)
	}
	b.resentTells[k] = append(l, resentTell{from: it.m.From, msg: msg, since: it.since, id: it.seq, place: it.place()})
	b.resentN.Add(1)
}

// forgetResent drops the record of the resend of the tell numbered seq
// to key's recipient (its send failed: nothing left).
func (b *handoffBuffer) forgetResent(k string, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.resentTells[k]
	for i, rt := range l {
		if rt.id == seq {
			b.dropResentLocked(k, l, i)
			return
		}
	}
}

func (b *handoffBuffer) dropResentLocked(k string, l []resentTell, i int) {
	copy(l[i:], l[i+1:])
	l[len(l)-1] = resentTell{}
	if l = l[:len(l)-1]; len(l) == 0 {
		delete(b.resentTells, k)
	} else {
		b.resentTells[k] = l
	}
	b.resentN.Add(-1)
}

// placeOf returns when the refused tell m began to wait and where it
// waits: if it is one this node sent again (the same sender and a message
// same finds equal), that tell's start and place, and the record is
// forgotten; else now, the tell's own first refusal, and no place yet.
// A refusal echoes only the message, so of several equal tells resent
// it cannot tell which one it is for; it takes the newest record. Equal
// tells may trade places among themselves unseen, while the record of an
// older resend that ran (no refusal comes for it) is never taken for a
// newer one's refusal, which would put that one ahead of mail sent
// before it.
func (b *handoffBuffer) placeOf(m ariel.Outbound, now time.Time, same func(a, b any) bool) (time.Time, place) {
	if b.resentN.Load() == 0 {
		return now, place{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := bufKey(m.To)
	l := b.resentTells[k]
	for i := len(l) - 1; i >= 0; i-- {
		if rt := l[i]; rt.from == m.From && same(rt.msg, m.Msg) {
			b.dropResentLocked(k, l, i)
			return rt.since, rt.place
		}
	}
	return now, place{}
}

// sentDirect is told of a tell from `from` to `to` sent straight to its
// owner, not from a queue. A record of an earlier resend of an equal tell
// that was not refused would otherwise give this one's refusal the
// earlier one's place, ahead of mail queued after that; refusals of
// both, if any, come back in the order they were sent, so from now on
// arrival order places them. The records keep their start (the wait is
// counted from it as before).
func (b *handoffBuffer) sentDirect(to, from actor.Ref) {
	if b.resentN.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.resentTells[bufKey(to)]
	for i := range l {
		if l[i].from == from {
			l[i].place = place{}
		}
	}
}

// sweep forgets the resent tells whose wait ended a wait ago (a refusal
// of one comes a round trip after it was sent, and it is sent no later
// than the end of its wait). A pass of the retry loop calls it once, not
// once per recipient: it walks every recipient resent to lately, under
// the lock every send takes. It returns when the next of those kept is to
// be forgotten (zero: none is kept).
func (b *handoffBuffer) sweep(now time.Time) (next time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, l := range b.resentTells {
		kept := l[:0]
		for _, rt := range l {
			if end := rt.since.Add(2 * b.wait); now.Before(end) {
				kept = append(kept, rt)
				if next.IsZero() || end.Before(next) {
					next = end
				}
			}
		}
		clear(l[len(kept):])
		b.resentN.Add(-int64(len(l) - len(kept)))
		if len(kept) == 0 {
			delete(b.resentTells, k)
		} else {
			b.resentTells[k] = kept
		}
	}
	return next
}

// expire removes the messages of key that waited too long: tells older
// than the wait, asks past their deadline. It returns them.
func (b *handoffBuffer) expire(k string, now time.Time) []bufItem {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil {
		return nil
	}
	var gone []bufItem
	kept := q.items[:0]
	for _, it := range q.items {
		if (it.m.AskID != 0 && !now.Before(it.m.Deadline)) || (it.m.AskID == 0 && now.Sub(it.since) >= b.wait) {
			gone = append(gone, it)
			continue
		}
		kept = append(kept, it)
	}
	for i := len(kept); i < len(q.items); i++ {
		q.items[i] = bufItem{}
	}
	q.items = kept
	b.n.Add(-int64(len(gone)))
	if b.perShard[q.shard] -= len(gone); b.perShard[q.shard] <= 0 {
		delete(b.perShard, q.shard)
	}
	if len(q.items) == 0 {
		delete(b.queues, k)
	}
	return gone
}

// expiry is when it leaves its queue unsent.
func (b *handoffBuffer) expiry(it bufItem) time.Time {
	if it.m.AskID != 0 {
		return it.m.Deadline
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return it.since.Add(b.wait)
}

// inHandoff reports whether a locator error says the recipient's shard is
// being handed off, and the shard's name for the buffer bound.
func inHandoff(err error) (shard string, ok bool) {
	if !errors.Is(err, placement.ErrHandoff) {
		return "", false
	}
	var h *remoteHint
	if errors.As(err, &h) && h.shard != "" {
		return h.shard, true
	}
	return "?", true
}

// shardOf names the bucket of the buffer bound for mail to `to` that
// waits because of err: the moving shard when the error names it, else
// the recipient's shard by this node's table, else (not placed, no
// table) the recipient's kind. A busy owner of one shard so fills only
// that shard's bucket, not every recipient's of its kind.
func (r *remote) shardOf(to actor.Ref, err error) string {
	var h *remoteHint
	if errors.As(err, &h) && h.shard != "" {
		return h.shard
	}
	if r.shardName != nil {
		if s, ok := r.shardName(to); ok {
			return s
		}
	}
	return "kind:" + to.Kind()
}

// mayPark reports whether m may wait in the buffer rather than fail at
// once: every ask, and a tell from an actor. A tell from program code
// returns its error to Node.Tell, which waits in the caller's goroutine.
func mayPark(m ariel.Outbound) bool {
	return m.To.IsVirtual() && (m.AskID != 0 || !m.From.IsZero())
}

// buffer queues mail whose recipient's shard is in flux (locErr
// resendable), or that must wait behind mail already buffered for its
// recipient. handled reports that m was taken (err is then its admission
// outcome).
func (r *remote) buffer(m ariel.Outbound, locErr error) (handled bool, err error) {
	if r.buf == nil || !mayPark(m) {
		return false, nil
	}
	if locErr == nil {
		if r.buf.n.Load() == 0 { // the common case: nothing waits anywhere
			return false, nil
		}
		return r.buf.add(bufItem{m: m}, "", r.sched.Clock().Now(), true)
	}
	if !resendable(locErr) {
		return false, nil
	}
	now := r.sched.Clock().Now()
	it := bufItem{m: m}
	if _, moving := inHandoff(locErr); !moving {
		it.due = now.Add(retryBackoff(0)) // a lease or a table catching up is no table change
	}
	return r.buf.add(it, r.shardOf(m.To, locErr), now, false)
}

// retry takes mail that node refused with err (resendable) after it was
// sent by this node's table at sentEpoch (0: not known), this node's own
// fence included: it is sent again at once if the table routes it
// elsewhere now, else it waits. p is its place in its recipient's queue
// when it was sent from there (zero: sent directly; a tell's is found with
// its start). It reports whether it took m; a false means the caller
// reports err.
func (r *remote) retry(m ariel.Outbound, sentEpoch uint64, p place, err error) bool {
	if r.buf == nil || !m.To.IsVirtual() || m.Msg == nil || !resendable(err) {
		return false
	}
	if m.AskID != 0 && !r.sched.AskPending(m.AskID) {
		return true // answered meanwhile (its deadline, its caller gone): nothing to send
	}
	now := r.sched.Clock().Now()
	refuser, notOwner := refusedBy(err)
	var since time.Time
	if m.AskID == 0 {
		since, p = r.buf.placeOf(m, now, r.sameMsg)
	}
	it := bufItem{m: m, since: since, seq: p.seq, unrun: p.unrun}
	if notOwner {
		node, epoch, local, lerr := r.locate(m.To)
		switch {
		case lerr == nil && !r.buf.queued(m.To) && (local || node != refuser || (sentEpoch != 0 && epoch != sentEpoch)):
			noted := m.AskID == 0 && !local
			if noted {
				if it.seq == 0 {
					it.seq = r.buf.nextSeq() // the record names it by that
				}
				r.noteResent(it)
			}
			serr := r.route(m, it.place())
			if serr != nil && noted {
				r.buf.forgetResent(bufKey(m.To), it.seq) // not sent
			}
			switch {
			case serr == nil:
				r.buf.resent.Add(1)
				return true
			case !resendable(serr):
				r.buf.resent.Add(1)
				r.fail(m, serr)
				return true
			}
			// Refused at once, nothing sent (no link to the node the
			// table names now): it waits for a change or the back-off.
			err = serr
			it.due = now.Add(retryBackoff(0))
		case lerr == nil:
			it.avoid, it.avoidEpoch = node, epoch
		default:
			if _, moving := inHandoff(lerr); !moving {
				it.due = now.Add(retryBackoff(0))
			}
		}
	} else if wait, busy := busyFor(err); busy {
		it.due = now.Add(wait)
	} else {
		it.due = now.Add(retryBackoff(0))
	}
	if _, berr := r.buf.add(it, r.shardOf(m.To, err), now, false); berr != nil {
		r.fail(m, berr)
	}
	return true
}

// flushBuffered routes buffered mail again: each recipient's queue, in
// order, as far as its head may go now; the others keep theirs, minus
// what expired. It returns the earliest time a head waits for, or the
// record of tells sent again is to be swept (zero: only a table change). The retry loop calls it; one goroutine at a time.
func (r *remote) flushBuffered() (next time.Time) {
	if r.buf == nil {
		return time.Time{}
	}
	now := r.sched.Clock().Now()
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	earlier(r.buf.sweep(now)) // also once nothing waits: the record ends
	if r.buf.n.Load() == 0 {
		return next
	}
	for _, k := range r.buf.keys() {
		for _, it := range r.buf.expire(k, now) {
			if it.m.AskID != 0 {
				r.fail(it.m, actor.ErrDeadlineExceeded)
				continue
			}
			if !it.m.From.IsZero() {
				r.buf.gaveUp.Add(1) // program code's: fail counts it
			}
			r.fail(it.m, fmt.Errorf("%w: placement did not settle in time", actor.ErrProcessUnavailable))
		}
		for {
			it, ok := r.buf.head(k)
			if !ok {
				break
			}
			if it.m.AskID != 0 && !r.sched.AskPending(it.m.AskID) {
				r.buf.remove(k, it.seq) // answered meanwhile (its deadline, its caller gone)
				continue
			}
			if now.Before(it.due) {
				earlier(it.due)
				earlier(r.buf.expiry(it))
				break
			}
			node, epoch, local, err := r.locate(it.m.To)
			if err == nil && it.avoid != "" && !local && node == it.avoid && epoch == it.avoidEpoch {
				earlier(r.buf.expiry(it)) // the table still names the refuser: wait for a change
				break
			}
			if err != nil {
				if resendable(err) {
					it.attempt++
					it.due = time.Time{} // a move ends with a table change
					if _, moving := inHandoff(err); !moving {
						it.due = now.Add(retryBackoff(it.attempt))
					}
					r.buf.update(k, it)
					earlier(it.due)
					earlier(r.buf.expiry(it))
					break
				}
				r.fail(it.m, err)
				r.buf.remove(k, it.seq)
				continue
			}
			r.buf.remove(k, it.seq)
			if it.m.AskID == 0 && !local {
				r.noteResent(it)
			}
			if serr := r.sendRouted(it.m, node, epoch, local, it.place()); serr != nil {
				if it.m.AskID == 0 && !local {
					r.buf.forgetResent(k, it.seq) // not sent
				}
				if resendable(serr) {
					// Refused at once, nothing sent (no link to the owner
					// yet): it keeps its place and waits again.
					it.attempt++
					it.due = now.Add(retryBackoff(it.attempt))
					it.avoid, it.avoidEpoch = "", 0
					r.buf.requeue(it, r.shardOf(it.m.To, serr))
					earlier(it.due)
					earlier(r.buf.expiry(it))
					break
				}
				r.buf.resent.Add(1)
				r.fail(it.m, serr)
			} else {
				r.buf.resent.Add(1)
			}
		}
	}
	return next
}

// noteResent records the tell it as sent again to another node, with its
// message in the form a refusal echoes it (a registered *T as its T).
func (r *remote) noteResent(it bufItem) {
	msg := it.m.Msg
	if r.reg != nil {
		if v, err := r.reg.Value(msg); err == nil {
			msg = v
		}
	}
	r.buf.noteResent(bufKey(it.m.To), it, msg)
}

// sameMsg reports whether a refusal's echo b is the message a this node
// sent: equal values, or (a codec whose decoding is not the very value
// encoded, a nil slice decoded empty) the same encoding.
func (r *remote) sameMsg(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	if r.reg == nil {
		return false
	}
	ta, ea, err := r.reg.Append(nil, a)
	if err != nil {
		return false
	}
	tb, eb, err := r.reg.Append(nil, b)
	return err == nil && ta == tb && bytes.Equal(ea, eb)
}

// route sends mail where its recipient lives now: a local actor through
// the scheduler, a remote one through the Mailer, stamped. p is its
// place in a retry queue (zero: none).
func (r *remote) route(m ariel.Outbound, p place) error {
	node, epoch, local, err := r.locate(m.To)
	if err != nil {
		return err
	}
	return r.sendRouted(m, node, epoch, local, p)
}

// sendRouted sends m as routed to node at epoch (local: this node). Mail
// routed here is this node's own again (ariel.Scheduler.DeliverRouted):
// an ask is answered to its caller directly, and mail fenced off here once
// more comes back in its recipient's batch (ResendAll) and waits again.
func (r *remote) sendRouted(m ariel.Outbound, node string, epoch uint64, local bool, p place) error {
	if local {
		return r.sched.DeliverRouted(m)
	}
	return r.sendTo(node, epoch, m, p)
}

// fail reports buffered mail that could not be delivered to its sender:
// an ask completes with err, a tell comes back as actor.Undelivered (from
// program code nobody is left to tell: it is counted as given up,
// Stats().Retry.GaveUp, whether its wait ended, its queue was full or its
// route failed otherwise).
func (r *remote) fail(m ariel.Outbound, err error) {
	if m.AskID != 0 {
		r.sched.CompleteAsk(m.AskID, nil, err)
		return
	}
	if m.From.IsZero() {
		if r.buf != nil {
			r.buf.gaveUp.Add(1)
		}
		return
	}
	r.notify(m.From, m.To, m.Msg, err)
}

// retryLoop routes waiting mail again when the table changes (changed
// returns the channel closed at the next change), when a head's back-off
// or wait ends, and when mail is queued, until ctx ends.
func (r *remote) retryLoop(ctx context.Context, changed func() <-chan struct{}) {
	clk := r.sched.Clock()
	wake := make(chan struct{}, 1)
	var timer ariel.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := changed()
		next := r.flushBuffered()
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if !next.IsZero() {
			timer = clk.AfterFunc(max(next.Sub(clk.Now()), time.Millisecond), func() {
				select {
				case wake <- struct{}{}:
				default:
				}
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-wake:
		case <-r.buf.kick:
		}
	}
}

// bufferLoop is the cluster's retry loop, woken by its applied table.
func (c *cluster) bufferLoop() {
	defer c.wg.Done()
	c.rem.retryLoop(c.ctx, c.pl.Changed)
}
