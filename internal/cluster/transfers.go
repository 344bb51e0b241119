package cluster

import (
	"fmt"
	"time"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/reminders"
)

// maxTransfers bounds the handoffs a node receives at once.
const maxTransfers = 64

type transferKey struct {
	from  string
	shard placement.ShardRef
	epoch uint64
}

// transfers is the new owner's side of the handoffs it receives, from
// HandoffBegin to HandoffDone or HandoffAbort: a state machine with no
// goroutine, lock or clock of its own. Its caller holds Engine.xmu and
// gives the time; the handlers (HandoffBegin, serveState, HandoffDone,
// HandoffAbort) are the shell that stores records and waits on a
// transfer's changed channel.
type transfers map[transferKey]*transfer

// transfer is one handoff being received.
type transfer struct {
	deadline time.Time
	got      uint64              // records stored
	stored   []prospero.Identity // of them, actors (not the shard's reminders)
	// reminders are the keys of the shard's reminder records stored.
	reminders map[string]bool
	closed    bool          // the records' stream ended cleanly
	err       error         // a record was refused, or the transfer was aborted
	changed   chan struct{} // closed and replaced on every change
}

func (t *transfer) signal() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// begin opens the transfer of k, to end by now+budget. One already open
// under k (the old owner tries again) is superseded; a new one beyond
// maxTransfers is refused (ErrBusy).
func (ts transfers) begin(k transferKey, now time.Time, budget time.Duration) error {
	ts.expire(now)
	if old, ok := ts[k]; ok {
		old.fail(fmt.Errorf("%w: superseded by a new begin", errUnknownTransfer))
	} else if len(ts) >= maxTransfers {
		return fmt.Errorf("%w: %d handoffs in progress", federation.ErrBusy, len(ts))
	}
	ts[k] = &transfer{deadline: now.Add(budget), changed: make(chan struct{})}
	return nil
}

// lookup returns the open transfer of k (nil if none), after dropping
// the expired ones.
func (ts transfers) lookup(k transferKey, now time.Time) *transfer {
	ts.expire(now)
	return ts[k]
}

// expire fails and drops the transfers past their deadline.
func (ts transfers) expire(now time.Time) {
	for k, t := range ts {
		if now.After(t.deadline) {
			t.fail(fmt.Errorf("%w: expired", errUnknownTransfer))
			delete(ts, k)
		}
	}
}

// abort fails and drops the transfer of k; it reports whether one was
// open.
func (ts transfers) abort(k transferKey, code federation.Code) bool {
	t, ok := ts[k]
	if ok {
		t.fail(fmt.Errorf("%w: aborted by the old owner (%s)", errUnknownTransfer, code))
		delete(ts, k)
	}
	return ok
}

// drop forgets t, if it is still the transfer of k.
func (ts transfers) drop(k transferKey, t *transfer) {
	if ts[k] == t {
		delete(ts, k)
	}
}

// fail records err as the transfer's end, unless it ended already.
func (t *transfer) fail(err error) {
	if t.err == nil {
		t.err = err
		t.signal()
	}
}

// next checks that a record of key with seq may be stored next, batched
// being those read and not stored yet.
func (t *transfer) next(k, key transferKey, seq uint64, batched int) error {
	if key != k || seq != t.got+uint64(batched)+1 {
		return fmt.Errorf("%w: record of %s epoch %d seq %d out of its handoff", errStaleTransfer, key.shard, key.epoch, seq)
	}
	return nil
}

// storedBatch counts a batch of records as stored.
func (t *transfer) storedBatch(batch []prospero.Replicated) {
	t.got += uint64(len(batch))
	for _, r := range batch {
		switch {
		case r.ID.Kind == reminders.RecordKind:
			if t.reminders == nil {
				t.reminders = map[string]bool{}
			}
			t.reminders[r.ID.Key] = true
		case !isReserved(r.ID):
			t.stored = append(t.stored, r.ID)
		}
	}
	t.signal()
}

// end records that the records' stream ended cleanly.
func (t *transfer) end() {
	t.closed = true
	t.signal()
}

// verdict is HandoffDone's decision for a transfer that announced count
// records: done with nil once all of them arrived and were stored (and
// the stream ended, or there were none); done with an error once that
// can no longer happen; not done while records may still arrive.
func (t *transfer) verdict(count uint64) (done bool, err error) {
	switch {
	case t.err != nil:
		return true, t.err
	case t.got > count:
		return true, fmt.Errorf("%w: %d announced, more arrived", errCountMismatch, count)
	case t.got == count && (t.closed || count == 0):
		return true, nil
	case t.closed && t.got != count:
		return true, fmt.Errorf("%w: %d announced, %d arrived", errCountMismatch, count, t.got)
	}
	return false, nil
}
