package prospero_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// PassivateWait returns once the identity has nothing in memory, driven
// by its events: at once for a dormant one; after the write at rest for
// an active one; for one whose activation is still loading, once that
// activation is attached and then passivated (Passivate does nothing to
// it).
func TestPassivateWait(t *testing.T) {
	ref := actor.Virtual("counter", "x")
	id := prospero.IdentityOf(ref)
	store := newGatedStore(id)
	n := newGatedNode(t, store, nodeOpts{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	if err := n.sup.PassivateWait(ctx, ref); err != nil {
		t.Fatalf("dormant: %v", err)
	}
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.ask(t, ref, "get")
	store.put.arm()
	done := make(chan error, 1)
	go func() { done <- n.sup.PassivateWait(ctx, ref) }()
	store.put.reached(t, "the write at rest")
	select {
	case err := <-done:
		t.Fatalf("returned before the write at rest: %v", err)
	default:
	}
	store.put.open()
	if err := <-done; err != nil {
		t.Fatalf("active: %v", err)
	}
	if st := n.status(t, ref); st.Active || st.State != actor.Dormant {
		t.Fatalf("after PassivateWait: %+v", st)
	}

	// Loading: the mail that woke it runs, then it is passivated.
	store.get.arm()
	reply := make(chan fresult, 1)
	if err := n.host.send(ref, "get", reply); err != nil {
		t.Fatal(err)
	}
	store.get.reached(t, "the load")
	go func() { done <- n.sup.PassivateWait(ctx, ref) }()
	store.get.open()
	if r := <-reply; r.err != nil || r.v != uint64(1) {
		t.Fatalf("get after the load: %v %v", r.v, r.err)
	}
	if err := <-done; err != nil {
		t.Fatalf("loading: %v", err)
	}
	// (Its mail may have been waiting still when it was passivated: then
	// it is hydrated again for it, as after any passivation.)
	if got := n.events.count(prospero.EventPassivated, id); got != 2 {
		t.Fatalf("%d passivations, want 2", got)
	}

	// A caller that gives up is told so, and forgotten.
	store.put.arm()
	n.ask(t, ref, "get")
	short, stop := context.WithCancel(ctx)
	go func() { done <- n.sup.PassivateWait(short, ref) }()
	store.put.reached(t, "the third write at rest")
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("given up: %v", err)
	}
	store.put.open()
	n.events.waitFor(t, prospero.EventPassivated, id, 3)
}

// A caller that gives up waiting for an identity still loading withdraws
// its request: once attached, the activation stays.
func TestPassivateWaitGivenUpLeavesTheActivation(t *testing.T) {
	ref := actor.Virtual("counter", "y")
	id := prospero.IdentityOf(ref)
	store := newGatedStore(id)
	n := newGatedNode(t, store, nodeOpts{})
	store.get.arm()
	reply := make(chan fresult, 1)
	if err := n.host.send(ref, "get", reply); err != nil {
		t.Fatal(err)
	}
	store.get.reached(t, "the load")
	// Its context ends at once: the request is registered, then
	// withdrawn, as for a caller that gives up later.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := n.sup.PassivateWait(ctx, ref); !errors.Is(err, context.Canceled) {
		t.Fatalf("given up: %v", err)
	}
	store.get.open()
	if r := <-reply; r.err != nil {
		t.Fatal(r.err)
	}
	if st := n.status(t, ref); !st.Active {
		t.Fatalf("the activation was passivated for a caller that gave up: %+v", st)
	}
	if got := n.events.count(prospero.EventPassivating, id); got != 0 {
		t.Fatalf("%d passivations started, want none", got)
	}
}
