package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/reminders"
)

// The receiving side of a handoff, as a state machine: HandoffDone's
// verdict for each state a transfer can be in.
func TestTransferVerdict(t *testing.T) {
	for _, tc := range []struct {
		name   string
		t      transfer
		count  uint64
		done   bool
		wantIs error
	}{
		{"records still to come", transfer{got: 1}, 3, false, nil},
		{"all stored, stream still open", transfer{got: 3}, 3, false, nil},
		{"all stored, stream ended", transfer{got: 3, closed: true}, 3, true, nil},
		{"none announced", transfer{}, 0, true, nil},
		{"more than announced", transfer{got: 4}, 3, true, errCountMismatch},
		{"stream ended short", transfer{got: 2, closed: true}, 3, true, errCountMismatch},
		{"refused or aborted", transfer{got: 3, closed: true, err: errStaleTransfer}, 3, true, errStaleTransfer},
	} {
		done, err := tc.t.verdict(tc.count)
		if done != tc.done || (tc.wantIs == nil) != (err == nil) || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) {
			t.Errorf("%s: done %v, %v; want %v, %v", tc.name, done, err, tc.done, tc.wantIs)
		}
	}
}

// A transfer is begun, superseded by a second begin of the same key
// (the first one's waiter learns it), bounded in number, expired at its
// deadline and aborted; its records are counted in order.
func TestTransfersTable(t *testing.T) {
	now := time.Unix(1000, 0)
	ts := transfers{}
	k := transferKey{from: "a", shard: placement.ShardRef{Index: 1}, epoch: 5}
	if err := ts.begin(k, now, time.Second); err != nil {
		t.Fatal(err)
	}
	first := ts.lookup(k, now)
	changed := first.changed
	if err := ts.begin(k, now, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("the superseded transfer's waiter was not woken")
	}
	if done, err := first.verdict(0); !done || !errors.Is(err, errUnknownTransfer) {
		t.Fatalf("superseded: %v %v", done, err)
	}
	cur := ts.lookup(k, now)
	if cur == first {
		t.Fatal("the second begin did not replace the first")
	}

	// Records: in order from 1, reminders kept apart from actors.
	if err := cur.next(k, k, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := cur.next(k, k, 3, 1); !errors.Is(err, errStaleTransfer) {
		t.Fatalf("a record out of order: %v", err)
	}
	other := k
	other.epoch = 6
	if err := cur.next(k, other, 1, 0); !errors.Is(err, errStaleTransfer) {
		t.Fatalf("a record of another handoff: %v", err)
	}
	cur.storedBatch([]prospero.Replicated{{ID: prospero.Identity{Kind: "counter", Key: "x"}},
		{ID: prospero.Identity{Kind: reminders.RecordKind, Key: "r"}}})
	cur.end()
	if cur.got != 2 || len(cur.stored) != 1 || !cur.reminders["r"] {
		t.Fatalf("stored %+v", cur)
	}
	if done, err := cur.verdict(2); !done || err != nil {
		t.Fatalf("complete: %v %v", done, err)
	}

	// Bounded: a new key beyond maxTransfers is refused, busy.
	for i := range maxTransfers - 1 {
		if err := ts.begin(transferKey{from: "b", epoch: uint64(i)}, now, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.begin(transferKey{from: "c"}, now, time.Second); !errors.Is(err, federation.ErrBusy) {
		t.Fatalf("one too many: %v", err)
	}
	// Expired at the deadline: gone, and told so.
	later := now.Add(2 * time.Second)
	if ts.lookup(k, later) != nil || len(ts) != 0 {
		t.Fatalf("after the deadline: %d transfers left", len(ts))
	}
	if done, err := cur.verdict(2); !done || !errors.Is(err, errUnknownTransfer) {
		t.Fatalf("expired: %v %v", done, err)
	}
	// Aborted.
	if err := ts.begin(k, later, time.Second); err != nil {
		t.Fatal(err)
	}
	ab := ts.lookup(k, later)
	if !ts.abort(k, federation.CodeStaleMove) || ts.abort(k, federation.CodeStaleMove) {
		t.Fatal("abort: want true once, then false")
	}
	if done, err := ab.verdict(0); !done || !errors.Is(err, errUnknownTransfer) {
		t.Fatalf("aborted: %v %v", done, err)
	}
}
