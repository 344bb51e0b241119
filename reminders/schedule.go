package reminders

import (
	"container/heap"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// Key names one reminder: its identity and its name.
type Key struct {
	ID   prospero.Identity
	Name string
}

// entry is one reminder in a Schedule.
type entry struct {
	Key
	shard string
	first time.Time
	per   time.Duration
	pol   Catchup
	maxN  int
	ptype string    // payload message name ("" none)
	pdata []byte    // payload bytes as stored
	pval  any       // payload decoded (what ticks carry)
	gen   uint64    // registration generation: a re-registration gets a new one
	rec   *recState // the writes of its record (the engine's; nil in a bare Schedule)
	// committing: its record is being committed (Engine.Commit), it is
	// not armed yet; failed: that commit failed. gone: it is no
	// registration but the tombstone of a removal being committed. pred:
	// what its name held before the change (see Commit.settle). Guarded by
	// Engine.mu.
	committing, failed, gone bool
	pred                     *entry

	fired uint64 // seq of the last tick delivered (0: none)
	next  uint64 // seq of the next occurrence to fire

	outSeq uint64    // seq in flight (0: none)
	outN   uint64    // the flight's number (Schedule.flights when it left)
	outAt  time.Time // when it was dispatched
	burst  int       // further catch-up ticks owed by a FireUpTo run

	due time.Time // heap key: next fire, or the delivery deadline while in flight
	idx int       // heap index, -1 when not queued
}

// ended reports whether e is a one-shot reminder that fired.
func (e *entry) ended() bool { return e.per == 0 && e.fired > 0 }

func (e *entry) scheduled(seq uint64) time.Time {
	return e.first.Add(time.Duration(seq-1) * e.per)
}

// lastDue is the sequence number of the newest occurrence due at now.
func (e *entry) lastDue(now time.Time) uint64 {
	if now.Before(e.first) {
		return 0
	}
	if e.per == 0 {
		return 1
	}
	return uint64(now.Sub(e.first)/e.per) + 1
}

// Fire is a tick the Schedule wants delivered now.
type Fire struct {
	Key
	Shard     string
	Gen       uint64
	Seq       uint64
	Flight    uint64 // numbers the dispatch: a tick fired again is a new flight
	Scheduled time.Time
	Late      time.Duration // now − Scheduled
	payload   any
}

// Counts are the Schedule's tick counters.
type Counts struct {
	Fired   uint64 // ticks dispatched for delivery
	Skipped uint64 // occurrences not delivered by a catch-up policy
	Failed  uint64 // dispatched ticks not delivered within the delivery timeout, or refused
}

// Schedule is the deterministic core of the reminder engine: every
// reminder of the shards this node holds, in one timer heap ordered by
// next due time. It has no goroutines, no clock and no I/O; callers pass
// time in. It is not safe for concurrent use.
//
// A reminder has at most one tick in flight: Due dispatches it and
// moves the reminder's heap slot to the delivery deadline; Delivered (at
// the actor's turn) or Failed (delivery refused) ends the flight, and a
// flight that reaches its deadline counts as failed and is retried.
//
// A shard can be paused (Pause) while its node may not serve it for a
// moment: its reminders stay held but leave the heap, so nothing of it
// fires, and a tick of it in flight is refused at its turn while the
// pause lasts. Resume puts them back, each due at its next occurrence
// (the catch-up policy applies to what the pause missed), a flight the
// pause cut off counted failed and fired again (if the cut-off tick
// still reaches its turn after that, it may be the one accepted: the
// same Seq, delivered once).
type Schedule struct {
	byKey   map[Key]*entry
	byID    map[prospero.Identity]map[string]*entry
	byShard map[string]map[*entry]struct{}
	paused  map[string]bool
	h       entryHeap
	timeout time.Duration
	counts  Counts
	flights uint64 // ticks dispatched so far: each flight's number
}

// NewSchedule returns an empty schedule whose ticks count as failed when
// not delivered within deliveryTimeout.
func NewSchedule(deliveryTimeout time.Duration) *Schedule {
	return &Schedule{byKey: map[Key]*entry{}, byID: map[prospero.Identity]map[string]*entry{},
		byShard: map[string]map[*entry]struct{}{}, paused: map[string]bool{}, timeout: deliveryTimeout}
}

// Len is the number of reminders held.
func (s *Schedule) Len() int { return len(s.byKey) }

// Counts returns the tick counters.
func (s *Schedule) Counts() Counts { return s.counts }

// put adds e (replacing a reminder of the same key) and queues it.
func (s *Schedule) put(e *entry) {
	s.remove(e.Key)
	if e.next == 0 {
		e.next = e.fired + 1
	}
	e.due = e.scheduled(e.next)
	s.byKey[e.Key] = e
	m := s.byID[e.ID]
	if m == nil {
		m = map[string]*entry{}
		s.byID[e.ID] = m
	}
	m[e.Name] = e
	sh := s.byShard[e.shard]
	if sh == nil {
		sh = map[*entry]struct{}{}
		s.byShard[e.shard] = sh
	}
	sh[e] = struct{}{}
	if s.paused[e.shard] {
		e.idx = -1 // queued by Resume
		return
	}
	heap.Push(&s.h, e)
}

// remove drops the reminder k; it reports whether it was held.
func (s *Schedule) remove(k Key) bool {
	e, ok := s.byKey[k]
	if !ok {
		return false
	}
	delete(s.byKey, k)
	if m := s.byID[k.ID]; m != nil {
		delete(m, k.Name)
		if len(m) == 0 {
			delete(s.byID, k.ID)
		}
	}
	if sh := s.byShard[e.shard]; sh != nil {
		delete(sh, e)
		if len(sh) == 0 {
			delete(s.byShard, e.shard)
		}
	}
	if e.idx >= 0 {
		heap.Remove(&s.h, e.idx)
	}
	return true
}

// dropShard forgets every reminder of shard (and that it was paused).
func (s *Schedule) dropShard(shard string) int {
	sh := s.byShard[shard]
	n := len(sh)
	for e := range sh {
		s.remove(e.Key)
	}
	delete(s.paused, shard)
	return n
}

// Pause stops shard's reminders from firing until Resume; it reports
// whether the shard was running. The reminders stay held.
func (s *Schedule) Pause(shard string) bool {
	if s.paused[shard] {
		return false
	}
	s.paused[shard] = true
	for e := range s.byShard[shard] {
		if e.idx >= 0 {
			heap.Remove(&s.h, e.idx)
		}
	}
	return true
}

// Resume lets a paused shard's reminders fire again from now: each is
// due at its next occurrence (or at once, if that is past: the catch-up
// policy decides what fires). A tick that was in flight when the pause
// began was refused or is refused at its turn (Delivered): it counts as
// failed and its occurrence fires again. Resume reports whether the
// shard was paused.
func (s *Schedule) Resume(shard string) bool {
	if !s.paused[shard] {
		return false
	}
	delete(s.paused, shard)
	for e := range s.byShard[shard] {
		if e.outSeq != 0 {
			s.counts.Failed++
			e.outSeq, e.burst = 0, 0
		}
		e.due = e.scheduled(e.next)
		heap.Push(&s.h, e)
	}
	return true
}

// Paused reports whether shard is paused.
func (s *Schedule) Paused(shard string) bool { return s.paused[shard] }

// of returns the reminders of id (nil if none).
func (s *Schedule) of(id prospero.Identity) map[string]*entry { return s.byID[id] }

// Next returns when Due next has work, and false when nothing is held.
func (s *Schedule) Next() (time.Time, bool) {
	if len(s.h) == 0 {
		return time.Time{}, false
	}
	return s.h[0].due, true
}

// Due appends to dst the ticks to deliver at now and returns dst. Each
// dispatched reminder is in flight until Delivered or Failed.
func (s *Schedule) Due(now time.Time, dst []Fire) []Fire {
	for len(s.h) > 0 && !s.h[0].due.After(now) {
		e := s.h[0]
		if e.outSeq != 0 {
			// The flight reached its deadline undelivered: count it and
			// let the reminder fire again.
			s.counts.Failed++
			e.outSeq, e.burst = 0, 0
		}
		seq, ok := s.pick(e, now)
		if !ok {
			heap.Fix(&s.h, e.idx)
			continue
		}
		s.flights++
		e.outSeq, e.outN, e.outAt = seq, s.flights, now
		e.due = now.Add(s.timeout)
		heap.Fix(&s.h, e.idx)
		s.counts.Fired++
		at := e.scheduled(seq)
		dst = append(dst, Fire{Key: e.Key, Shard: e.shard, Gen: e.gen, Seq: seq, Flight: s.flights, Scheduled: at,
			Late: now.Sub(at), payload: e.pval})
	}
	return dst
}

// pick applies the catch-up policy to e at now and returns the seq to
// fire; false means nothing fires now (e.due was moved on).
func (s *Schedule) pick(e *entry, now time.Time) (uint64, bool) {
	last := e.lastDue(now)
	if e.per == 0 || last <= e.next || e.burst > 0 {
		if e.burst > 0 {
			e.burst--
		}
		return e.next, true
	}
	k := last - e.next + 1 // pending occurrences, k >= 2: some were missed
	switch e.pol {
	case Skip:
		s.counts.Skipped += k
		e.next = last + 1
		e.due = e.scheduled(e.next)
		return 0, false
	case FireUpTo:
		m := min(k, uint64(e.maxN))
		s.counts.Skipped += k - m
		e.next = last - m + 1
		e.burst = int(m - 1)
		return e.next, true
	default: // FireOnce
		s.counts.Skipped += k - 1
		e.next = last
		return e.next, true
	}
}

// Delivered reports that the tick f is about to run in a turn of its
// actor. It reports whether that tick is still wanted: the reminder
// exists under the same registration, its shard is not paused, and f
// carries the occurrence in flight. Any flight of that occurrence will
// do (one re-fired after its deadline, or by Resume, may reach its turn
// after an earlier one): the first to reach a turn wins, the others are
// refused, so a slow mailbox still delivers it.
// A false answer means the tick must be dropped (unregistered,
// re-registered, or superseded after its deadline). removed reports that
// a one-shot reminder is done and was removed.
func (s *Schedule) Delivered(f Fire, now time.Time) (ok, removed bool) {
	e, held := s.byKey[f.Key]
	if !held || e.gen != f.Gen || e.outSeq == 0 || e.outSeq != f.Seq || s.paused[e.shard] {
		return false, false
	}
	seq := f.Seq
	e.fired, e.outSeq = seq, 0
	if e.per == 0 {
		s.remove(f.Key)
		return true, true
	}
	e.next = seq + 1
	e.due = e.scheduled(e.next)
	if e.burst > 0 && e.due.After(now) {
		e.due = now // the catch-up run goes on at once
	}
	heap.Fix(&s.h, e.idx)
	return true, false
}

// Current reports whether the tick f is still wanted, as Delivered
// would, without counting it delivered.
func (s *Schedule) Current(f Fire) bool {
	e, held := s.byKey[f.Key]
	return held && e.gen == f.Gen && e.outSeq != 0 && e.outSeq == f.Seq && !s.paused[e.shard]
}

// Failed reports that the tick f could not be handed to its actor
// (refused, or its activation failed). The reminder fires again after
// retry. A flight that is no longer the reminder's (a paused shard's,
// counted by Resume, or one past its deadline, counted by Due) changes
// nothing.
func (s *Schedule) Failed(f Fire, now time.Time, retry time.Duration) {
	e, held := s.byKey[f.Key]
	if !held || e.gen != f.Gen || e.outSeq == 0 || e.outN != f.Flight || s.paused[e.shard] {
		return
	}
	s.counts.Failed++
	e.outSeq, e.burst = 0, 0
	e.due = now.Add(retry)
	heap.Fix(&s.h, e.idx)
}

type entryHeap []*entry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	a, b := h[i], h[j]
	if a.ID.Kind != b.ID.Kind {
		return a.ID.Kind < b.ID.Kind
	}
	if a.ID.Key != b.ID.Key {
		return a.ID.Key < b.ID.Key
	}
	return a.Name < b.Name
}
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.idx = -1
	*h = old[:len(old)-1]
	return e
}
