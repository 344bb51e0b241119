package prospero_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// gate holds one store call while armed: the next call shows up on
// entered and waits until the test opens the gate.
type gate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	done    chan struct{} // closed at the end of the test: nothing waits any more
}

func newGate(done chan struct{}) *gate {
	return &gate{entered: make(chan struct{}, 1), release: make(chan struct{}), done: done}
}

func (g *gate) arm() { g.armed.Store(true) }

func (g *gate) pass(ctx context.Context) error {
	if !g.armed.CompareAndSwap(true, false) {
		return nil
	}
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-g.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reached waits until the held call is in the gate.
func (g *gate) reached(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never reached the store", what)
	}
}

func (g *gate) open() { g.release <- struct{}{} }

// gatedStore holds the reads and the writes of one identity while their
// gate is armed.
type gatedStore struct {
	prospero.StateStore
	id       prospero.Identity
	get, put *gate
	done     chan struct{}
}

func newGatedStore(id prospero.Identity) *gatedStore {
	done := make(chan struct{})
	return &gatedStore{StateStore: prospero.NewMemStore(), id: id, get: newGate(done), put: newGate(done), done: done}
}

// newGatedNode starts a node on store whose gates open for good when the
// test ends (a failed test leaves no call held for the node's Close).
func newGatedNode(t *testing.T, store *gatedStore, o nodeOpts) *node {
	t.Helper()
	o.kinds, o.store = map[string]prospero.KindOptions{"counter": persistent}, store
	n := newNode(t, o)
	t.Cleanup(func() { close(store.done) })
	return n
}

func (s *gatedStore) Get(ctx context.Context, id prospero.Identity) (prospero.Record, error) {
	if id == s.id {
		if err := s.get.pass(ctx); err != nil {
			return prospero.Record{}, err
		}
	}
	return s.StateStore.Get(ctx, id)
}

func (s *gatedStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	if id == s.id {
		if err := s.put.pass(ctx); err != nil {
			return 0, err
		}
	}
	return s.StateStore.Put(ctx, id, expected, rec)
}

// wantInMemory checks that Status reports ref in memory: until its
// activation is attached it is answered from the store (Dormant, the
// incarnation at rest), but a handoff must not take it for dormant.
func wantInMemory(t *testing.T, n *node, ref actor.Ref, phase string, inc uint64) {
	t.Helper()
	st := n.status(t, ref)
	if !st.Active || st.State != actor.Dormant || st.Incarnation != inc {
		t.Fatalf("status while %s: %+v, want Dormant, incarnation %d, Active", phase, st, inc)
	}
}

// An identity whose activation is being loaded is in memory: its load
// runs the mail waiting for it, which may change its state at rest, so
// Status must not answer Active false (a handoff's quiesce takes that to
// mean its state at rest is final, and reads it for shipping).
func TestStatusActiveWhileLoading(t *testing.T) {
	ref := actor.Virtual("counter", "x")
	store := newGatedStore(prospero.IdentityOf(ref))
	if _, err := store.StateStore.Put(context.Background(), store.id, 0, prospero.Record{Incarnation: 3}); err != nil {
		t.Fatal(err)
	}
	n := newGatedNode(t, store, nodeOpts{})
	store.get.arm()
	reply := make(chan fresult, 1)
	if err := n.host.send(ref, "get", reply); err != nil {
		t.Fatal(err)
	}
	store.get.reached(t, "the load")
	wantInMemory(t, n, ref, "loading", 3)
	if n.sup.Passivate(ref) {
		t.Fatal("Passivate took an activation still loading for an active one")
	}
	store.get.open()
	if r := <-reply; r.err != nil || r.v != uint64(0) {
		t.Fatalf("get after the load: %v %v", r.v, r.err)
	}
	if st := n.status(t, ref); !st.Active || st.State != actor.Valid || st.Incarnation != 3 {
		t.Fatalf("status once attached: %+v", st)
	}
}

// An identity waiting for the hydration budget is in memory too.
func TestStatusActiveWhileQueuedForHydration(t *testing.T) {
	ahead, ref := actor.Virtual("counter", "ahead"), actor.Virtual("counter", "x")
	store := newGatedStore(prospero.IdentityOf(ahead))
	n := newGatedNode(t, store, nodeOpts{budget: 1})
	store.get.arm()
	if err := n.host.Tell(ahead, "inc"); err != nil {
		t.Fatal(err)
	}
	store.get.reached(t, "the load of the activation ahead")
	reply := make(chan fresult, 1)
	if err := n.host.send(ref, "get", reply); err != nil {
		t.Fatal(err)
	}
	if st := n.sup.Stats(); st.Waiting != 1 || st.Hydrating != 1 {
		t.Fatalf("stats %+v, want one activation loading and one waiting for the budget", st)
	}
	wantInMemory(t, n, ref, "queued for hydration", 1)
	if st := n.status(t, actor.Virtual("counter", "other")); st.Active {
		t.Fatalf("an identity nobody sent to is in memory: %+v", st)
	}
	store.get.open()
	if r := <-reply; r.err != nil || r.v != uint64(0) {
		t.Fatalf("get after the queue: %v %v", r.v, r.err)
	}
}

// A passivation that finds mail waiting admits the identity again at
// once, as a fresh entry whose incarnation is known only from its
// record: from the end of the passivation to the attachment of the new
// activation, the identity is in memory all along.
func TestStatusActiveWhileReadmittedAfterPassivation(t *testing.T) {
	ref := actor.Virtual("counter", "x")
	id := prospero.IdentityOf(ref)
	store := newGatedStore(id)
	n := newGatedNode(t, store, nodeOpts{})
	rang := make(chan struct{}, 4)
	n.host.rang = func(r prospero.Identity) {
		if r == id {
			rang <- struct{}{}
		}
	}
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	<-rang
	if got := n.ask(t, ref, "get"); got != uint64(1) {
		t.Fatalf("count %v, want 1", got)
	}
	store.put.arm()
	if !n.sup.Passivate(ref) {
		t.Fatal("passivate refused")
	}
	store.put.reached(t, "the passivation's write")
	wantActive := func(phase string) {
		t.Helper()
		if st := n.status(t, ref); !st.Active {
			t.Fatalf("status while %s: %+v, want Active", phase, st)
		}
	}
	wantActive("passivating")
	// Mail arrives while the state is being written: the doorbell finds
	// the passivation in progress.
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	<-rang
	store.get.arm()
	store.put.open()
	store.get.reached(t, "the load of the re-admitted activation")
	if got := n.events.count(prospero.EventPassivated, id); got != 1 {
		t.Fatalf("%d Passivated events before the re-admission's load, want 1", got)
	}
	wantInMemory(t, n, ref, "re-admitted after a passivation that found mail", 1)
	store.get.open()
	if got := n.ask(t, ref, "get"); got != uint64(2) {
		t.Fatalf("count after the re-admission %v, want 2", got)
	}
}
