package tempesttest

import (
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// TestSingleActivationFindsOverlaps: the check passes a history in which
// an identity moves from node to node, each activation after the last
// one's deactivation, and fails, naming both nodes, one in which an
// identity is activated on a node while still active on another, or
// in which nothing was activated at all.
func TestSingleActivationFindsOverlaps(t *testing.T) {
	a := prospero.Identity{Kind: "counter", Key: "a"}
	b := prospero.Identity{Kind: "counter", Key: "b"}
	at := time.Now()
	ev := func(node string, typ prospero.EventType, id prospero.Identity) Event {
		at = at.Add(time.Millisecond)
		return Event{Node: node, Event: prospero.Event{Type: typ, ID: id, At: at}}
	}
	good := []Event{
		ev("n1", prospero.EventActivated, a),
		ev("n2", prospero.EventActivated, b),
		ev("n1", prospero.EventRestarted, a), // the same node: no overlap
		ev("n1", prospero.EventPassivated, a),
		ev("n3", prospero.EventHydrated, a),
		ev("n3", prospero.EventRetired, a),
		ev("n1", prospero.EventRehydrated, a),
		ev("n2", prospero.EventPassivated, b),
		ev("n3", prospero.EventActivated, b),
		// a's reload on n1 after a fault kept failing, and n1's host
		// refused it: n1 holds nothing of a.
		ev("n1", prospero.EventFault, a).withCause(prospero.FaultHydration),
		ev("n1", prospero.EventRejected, a),
		ev("n2", prospero.EventHydrated, a),
	}
	if err := SingleActivation(good); err != nil {
		t.Fatalf("a history without overlap: %v", err)
	}
	bad := append(good[:len(good):len(good)],
		ev("n1", prospero.EventPassivated, a),                               // n1 never had a since: it does not end n2's activation
		ev("n2", prospero.EventFault, a).withCause(prospero.FaultHydration), // a failed reload does not end it: the faulted value may be attached
		ev("n1", prospero.EventHydrated, a))
	err := SingleActivation(bad)
	if err == nil || !strings.Contains(err.Error(), "counter/a activated on n1") || !strings.Contains(err.Error(), "active on n2") {
		t.Fatalf("an overlap of n1 and n2: %v", err)
	}
	if err := SingleActivation(nil); err == nil {
		t.Fatal("an empty history passed")
	}
}

func (e Event) withCause(c prospero.FaultCause) Event {
	e.Cause = c
	return e
}
