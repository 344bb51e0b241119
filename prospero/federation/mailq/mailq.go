package mailq

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// Queues is the routing layer's retry queues, keyed by recipient
// identity and bounded per shard. Its methods are safe for concurrent
// use.
type Queues struct {
	n        atomic.Int64 // messages buffered (the fast path reads only this)
	mu       sync.Mutex
	queues   map[string]*queue // by recipient kind/key
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
	// Counters (Stats).
	parked, resent, gaveUp atomic.Uint64
}

// Stats counts what went through the queues.
type Stats struct {
	Parked uint64 // messages that waited
	Resent uint64 // messages sent on from a queue or sent again at once (CountResent)
	GaveUp uint64 // tells of program code that could not be delivered (CountGaveUp)
}

// Stats returns the counters.
func (b *Queues) Stats() Stats {
	return Stats{Parked: b.parked.Load(), Resent: b.resent.Load(), GaveUp: b.gaveUp.Load()}
}

// CountResent counts a message sent again (its outcome the send's).
func (b *Queues) CountResent() { b.resent.Add(1) }

// CountGaveUp counts a tell of program code that could not be delivered.
func (b *Queues) CountGaveUp() { b.gaveUp.Add(1) }

// Waiting is the number of messages waiting (one atomic load: the send
// path's check that nothing waits anywhere).
func (b *Queues) Waiting() int64 { return b.n.Load() }

// SetLimit changes the bound per shard from now on; mail waiting above
// it keeps its place.
func (b *Queues) SetLimit(limit int) {
	b.mu.Lock()
	b.limit = limit
	b.mu.Unlock()
}

// SetWait changes how long a tell may wait from now on.
func (b *Queues) SetWait(wait time.Duration) {
	b.mu.Lock()
	b.wait = wait
	b.mu.Unlock()
}

// Items returns a copy of the messages waiting in key's queue, in queue
// order.
func (b *Queues) Items(k string) []Item {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[k]; q != nil {
		return slices.Clone(q.items)
	}
	return nil
}

// ResentNotes is the number of tells noted as sent again (NoteResent)
// and not forgotten yet.
func (b *Queues) ResentNotes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.resentTells {
		n += len(l)
	}
	return n
}

// Kicked returns the channel that receives when mail is queued (or Kick
// is called): the retry loop sets its timer then.
func (b *Queues) Kicked() <-chan struct{} { return b.kick }

// Kick wakes the retry loop (mail may go now).
func (b *Queues) Kick() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

type queue struct {
	to    actor.Ref
	shard string
	items []Item
}

// Item is one waiting message M. A NOT_OWNER refusal by Avoid while
// this node's table showed Avoid at AvoidEpoch waits until the table
// shows something else; any other cause waits until Due (zero: the next
// table change). Attempt counts the attempts that were refused (at
// once, or by the node they were sent to), which the back-off grows with.
type Item struct {
	M          ariel.Outbound
	Since      time.Time // a tell's start of the wait
	Due        time.Time
	Attempt    int
	Avoid      string
	AvoidEpoch uint64
	// Unrun marks mail this node admitted and then fenced off
	// (AddUnrun): it waits ahead of the mail queued for its recipient.
	Unrun bool
	// Seq is the message's place in its recipient's queue, given when it
	// first waits and kept while it is sent again: a resent message that
	// is refused once more goes back ahead of what was queued behind it.
	// It also names the item while it waits (Remove, Update).
	Seq uint64
}

// before reports whether a waits ahead of b in their recipient's queue:
// fenced-off mail first, then each by the place it got when it first
// waited.
func (a Item) before(b Item) bool {
	if a.Unrun != b.Unrun {
		return a.Unrun
	}
	return a.Seq < b.Seq
}

// Place is where a message sent on from a queue waits if it is refused
// again: kept with the record of its resend.
type Place struct {
	Seq   uint64
	Unrun bool
	// Attempt is the item's Attempt: refused again, the message waits
	// a back-off that goes on growing.
	Attempt int
}

// Place is where it waits.
func (it Item) Place() Place { return Place{Seq: it.Seq, Unrun: it.Unrun, Attempt: it.Attempt} }

// resentTell is a tell sent again: its sender, its message in the form
// a refusal echoes it, and the start of its wait.
type resentTell struct {
	from  actor.Ref
	msg   any
	since time.Time
	id    uint64 // the number the tell had when it was resent
	place Place  // where it waits if refused; zero once a direct send made it unreliable (SentDirect)
}

// New returns empty queues that hold at most limit messages per shard,
// and tells for at most wait from their first refusal.
func New(limit int, wait time.Duration) *Queues {
	return &Queues{queues: map[string]*queue{}, perShard: map[string]int{}, resentTells: map[string][]resentTell{},
		limit: limit, wait: wait, kick: make(chan struct{}, 1)}
}

// Key names the queue of mail for to.
func Key(to actor.Ref) string { return to.Kind() + "/" + to.Key() }

// Queued reports whether mail for to waits.
func (b *Queues) Queued(to actor.Ref) bool {
	if b.n.Load() == 0 {
		return false
	}
	b.mu.Lock()
	_, ok := b.queues[Key(to)]
	b.mu.Unlock()
	return ok
}

// Add queues it behind mail already waiting for its recipient, or, when
// it is a message sent again from the queue and refused once more (it.Seq
// set), back at its place: ahead of the mail that was queued behind it.
// shard names the recipient's shard for the bound; it is taken from the
// existing queue when there is one. With mustExist, it is queued only if
// a queue exists (ok false otherwise). A tell waits from it.Since, or from
// now when that is zero.
func (b *Queues) Add(it Item, shard string, now time.Time, mustExist bool) (ok bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := Key(it.M.To)
	q := b.queues[k]
	if q == nil {
		if mustExist {
			return false, nil
		}
		q = &queue{to: it.M.To.WithIncarnation(0), shard: shard}
		b.queues[k] = q
	}
	if b.perShard[q.shard] >= b.limit {
		if len(q.items) == 0 {
			delete(b.queues, k)
		}
		return true, fmt.Errorf("%w: handoff buffer of %s full", actor.ErrRefused, q.shard)
	}
	if it.Since.IsZero() {
		it.Since = now
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

// insertLocked puts it in q at its place (Item.before), giving it one
// if it has none yet: behind everything when it first waits.
func (b *Queues) insertLocked(q *queue, it Item) {
	if it.Seq == 0 {
		b.seq++
		it.Seq = b.seq
	}
	at := len(q.items)
	for at > 0 && it.before(q.items[at-1]) {
		at--
	}
	q.items = slices.Insert(q.items, at, it)
}

// NextSeq gives a place to a message refused after it was sent directly
// and sent again at once, before it waits (its resend record names it by
// that).
func (b *Queues) NextSeq() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	return b.seq
}

// AddUnrun queues items, mail for one recipient that this node admitted
// and then fenced off, in their mailbox order, ahead of every message
// waiting for that recipient but behind mail fenced off before them (the
// leading run of unrun items, which left the mailbox earlier): mail sent
// after a fenced-off message, whether it waits here already or comes
// later, stays behind it. Nothing of it is sent from here; the retry loop
// routes it. All of items is queued, or none when the shard's queues are
// full (false).
func (b *Queues) AddUnrun(items []Item, shard string, now time.Time) bool {
	if len(items) == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := Key(items[0].M.To)
	q := b.queues[k]
	if q != nil {
		shard = q.shard
	}
	if b.perShard[shard]+len(items) > b.limit {
		return false
	}
	if q == nil {
		q = &queue{to: items[0].M.To.WithIncarnation(0), shard: shard}
		b.queues[k] = q
	}
	for _, it := range items {
		it.Unrun = true
		if it.Since.IsZero() {
			it.Since = now
		}
		it.Seq = 0 // behind mail fenced off before it, ahead of the rest
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

// Requeue puts it back at its place in its recipient's queue (making the
// queue again if it went), after the retry loop took it and its send was
// refused at once, so that it goes before what was queued behind it. It
// was counted out of the bound when it was taken; it is counted in again
// even if that exceeds the bound, as it held its place already.
func (b *Queues) Requeue(it Item, shard string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := Key(it.M.To)
	q := b.queues[k]
	if q == nil {
		q = &queue{to: it.M.To.WithIncarnation(0), shard: shard}
		b.queues[k] = q
	}
	b.insertLocked(q, it)
	b.perShard[q.shard]++
	b.n.Add(1)
}

// Head returns the first waiting message for key.
func (b *Queues) Head(k string) (Item, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil || len(q.items) == 0 {
		return Item{}, false
	}
	return q.items[0], true
}

// indexLocked is where the message numbered seq waits in q, or -1. A
// refusal may have put another message ahead of it since the retry loop
// read it as the head, so the loop names the message it took.
func indexLocked(q *queue, seq uint64) int {
	return slices.IndexFunc(q.items, func(it Item) bool { return it.Seq == seq })
}

// Update replaces the waiting message it.Seq names for key (its
// back-off).
func (b *Queues) Update(k string, it Item) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[k]; q != nil {
		if i := indexLocked(q, it.Seq); i >= 0 {
			q.items[i] = it
		}
	}
}

// Remove takes the waiting message numbered seq out of key's queue, and
// the queue when it is empty then.
func (b *Queues) Remove(k string, seq uint64) {
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

// Keys returns the keys of the queues that hold mail, in no order.
func (b *Queues) Keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Collect(maps.Keys(b.queues))
}

// NoteResent records that this node is sending the tell it (waiting
// since it.Since, at its place) again, to another node, in the form msg a
// refusal of it echoes. It is noted before the send: the refusal can come
// back before the send returns. At most the bound's worth are kept per
// recipient, the oldest forgotten first.
func (b *Queues) NoteResent(k string, it Item, msg any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.resentTells[k]
	if len(l) >= b.limit {
		l = append(l[:0], l[1:]...)
		b.resentN.Add(-1)
	}
	b.resentTells[k] = append(l, resentTell{from: it.M.From, msg: msg, since: it.Since, id: it.Seq, place: it.Place()})
	b.resentN.Add(1)
}

// ForgetResent drops the record of the resend of the tell numbered seq
// to key's recipient (its send failed: nothing left).
func (b *Queues) ForgetResent(k string, seq uint64) {
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

func (b *Queues) dropResentLocked(k string, l []resentTell, i int) {
	copy(l[i:], l[i+1:])
	l[len(l)-1] = resentTell{}
	if l = l[:len(l)-1]; len(l) == 0 {
		delete(b.resentTells, k)
	} else {
		b.resentTells[k] = l
	}
	b.resentN.Add(-1)
}

// PlaceOf returns when the refused tell m began to wait and where it
// waits: if it is one this node sent again (the same sender and a message
// same finds equal), that tell's start and place, and the record is
// forgotten; else now, the tell's own first refusal, and no place yet.
// A refusal echoes only the message, so of several equal tells resent
// it cannot tell which one it is for; it takes the newest record. Equal
// tells may trade places among themselves unseen, while the record of an
// older resend that ran (no refusal comes for it) is never taken for a
// newer one's refusal, which would put that one ahead of mail sent
// before it.
func (b *Queues) PlaceOf(m ariel.Outbound, now time.Time, same func(a, b any) bool) (time.Time, Place) {
	if b.resentN.Load() == 0 {
		return now, Place{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := Key(m.To)
	l := b.resentTells[k]
	for i := len(l) - 1; i >= 0; i-- {
		if rt := l[i]; rt.from == m.From && same(rt.msg, m.Msg) {
			b.dropResentLocked(k, l, i)
			return rt.since, rt.place
		}
	}
	return now, Place{}
}

// SentDirect is told of a tell from `from` to `to` sent straight to its
// owner, not from a queue. A record of an earlier resend of an equal tell
// that was not refused would otherwise give this one's refusal the
// earlier one's place, ahead of mail queued after that; refusals of
// both, if any, come back in the order they were sent, so from now on
// arrival order places them. The records keep their start (the wait is
// counted from it as before).
func (b *Queues) SentDirect(to, from actor.Ref) {
	if b.resentN.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.resentTells[Key(to)]
	for i := range l {
		if l[i].from == from {
			l[i].place = Place{}
		}
	}
}

// Sweep forgets the resent tells whose wait ended a wait ago (a refusal
// of one comes a round trip after it was sent, and it is sent no later
// than the end of its wait). A pass of the retry loop calls it once, not
// once per recipient: it walks every recipient resent to lately, under
// the lock every send takes. It returns when the next of those kept is to
// be forgotten (zero: none is kept).
func (b *Queues) Sweep(now time.Time) (next time.Time) {
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

// Expire removes the messages of key that waited too long: tells older
// than the wait, asks past their deadline. It returns them.
func (b *Queues) Expire(k string, now time.Time) []Item {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil {
		return nil
	}
	var gone []Item
	kept := q.items[:0]
	for _, it := range q.items {
		if (it.M.AskID != 0 && !now.Before(it.M.Deadline)) || (it.M.AskID == 0 && now.Sub(it.Since) >= b.wait) {
			gone = append(gone, it)
			continue
		}
		kept = append(kept, it)
	}
	for i := len(kept); i < len(q.items); i++ {
		q.items[i] = Item{}
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

// Expiry is when it leaves its queue unsent.
func (b *Queues) Expiry(it Item) time.Time {
	if it.M.AskID != 0 {
		return it.M.Deadline
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return it.Since.Add(b.wait)
}
