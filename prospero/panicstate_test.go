package prospero_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// panicky is a counter whose MarshalState or UnmarshalState panics while
// its switch is on.
type panicky struct {
	counter
	marshal, unmarshal *atomic.Bool
}

func (p *panicky) MarshalState() ([]byte, error) {
	if p.marshal.Load() {
		panic("boom in MarshalState")
	}
	return p.counter.MarshalState()
}

func (p *panicky) UnmarshalState(b []byte) error {
	if p.unmarshal.Load() {
		panic("boom in UnmarshalState")
	}
	return p.counter.UnmarshalState(b)
}

// A panic in an actor's MarshalState or UnmarshalState is a failure of
// that actor, like an error returned from them, not the end of the
// process (they run on the supervisor's goroutines and a worker's) nor a
// passivation that never ends.
func TestPanicInStateMethodsIsTheActorsFailure(t *testing.T) {
	var marshal, unmarshal atomic.Bool
	factory := func(string) actor.Actor { return &panicky{marshal: &marshal, unmarshal: &unmarshal} }
	every := persistent
	every.Persistence = prospero.Persistence{Mode: prospero.PersistEveryTurn}
	n := newNode(t, nodeOpts{factory: factory, kinds: map[string]prospero.KindOptions{"counter": persistent, "every": every}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// Passivation whose MarshalState panics: it ends (the state at rest
	// stays the last one written), and the actor serves again.
	ref := actor.Virtual("counter", "p")
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.ask(t, ref, "get")
	marshal.Store(true)
	if err := n.sup.PassivateWait(ctx, ref); err != nil {
		t.Fatalf("passivation with a panicking MarshalState: %v", err)
	}
	marshal.Store(false)
	if got := n.ask(t, ref, "get"); got != uint64(0) {
		t.Fatalf("after the failed write at rest: %v, want the state at rest (0)", got)
	}

	// A load whose UnmarshalState panics fails the mail waiting for it.
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.ask(t, ref, "get")
	if err := n.sup.PassivateWait(ctx, ref); err != nil {
		t.Fatal(err)
	}
	unmarshal.Store(true)
	if _, err := n.host.Ask(ref, "get", time.Second); err == nil {
		t.Fatal("an ask served by an activation whose UnmarshalState panicked")
	}
	n.events.waitFor(t, prospero.EventStoreError, prospero.IdentityOf(ref), 2)
	unmarshal.Store(false)

	// A turn of a kind persisted every turn whose MarshalState panics is
	// not committed: the activation goes back to its state at rest.
	eref := actor.Virtual("every", "e")
	n.ask(t, eref, "get")
	marshal.Store(true)
	if err := n.host.Tell(eref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventFault, prospero.IdentityOf(eref), 1)
	marshal.Store(false)
	if got := n.ask(t, eref, "get"); got != uint64(0) {
		t.Fatalf("after a turn whose state could not be marshalled: %v, want the state at rest (0)", got)
	}
}
