package arielhost_test

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
)

// seamNode is a supervisor on a real scheduler whose shutdown the test
// controls (close runs both in the order asked; Cleanup closes what is
// left).
type seamNode struct {
	*node
	passivating *atomic.Int64
}

func newSeamNode(t *testing.T, store prospero.StateStore, kind prospero.KindOptions, clock *manualClock) *seamNode {
	t.Helper()
	if clock == nil {
		clock = &manualClock{now: t0}
	}
	n := &seamNode{node: &node{clock: clock, events: &eventLog{signal: make(chan struct{}, 1)}, store: store},
		passivating: new(atomic.Int64)}
	sup, err := prospero.NewSupervisor(prospero.Config{Store: store, Clock: n.clock, Events: n.events})
	if err != nil {
		t.Fatal(err)
	}
	pv := n.passivating
	factory := func(string) actor.Actor { return &watched{passivating: pv} }
	if _, err := sup.Register("counter", factory, kind); err != nil {
		t.Fatal(err)
	}
	sched, err := ariel.New(ariel.Config{Workers: 2, Activator: arielhost.Activator(sup), Faults: arielhost.Faults(sup)})
	if err != nil {
		t.Fatal(err)
	}
	if err := arielhost.Start(sup, sched); err != nil {
		t.Fatal(err)
	}
	n.sup, n.sched = sup, sched
	t.Cleanup(func() { n.close(t, true) })
	return n
}

// close shuts the node down: supervisor first (the documented order) or
// scheduler first.
func (n *seamNode) close(t *testing.T, supFirst bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if supFirst {
		if err := n.sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close: %v", err)
		}
	}
	if err := n.sched.Close(ctx); err != nil {
		t.Errorf("scheduler Close: %v", err)
	}
	if !supFirst {
		if err := n.sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close after the scheduler's: %v", err)
		}
	}
}

// watched is the persistent counter that also counts its Passivating
// turns.
type watched struct {
	counter
	passivating *atomic.Int64
}

func (w *watched) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(actor.Passivating); ok {
		w.passivating.Add(1)
	}
	w.counter.Receive(ctx, msg)
}

func openBolt(t *testing.T, path string) prospero.StateStore {
	t.Helper()
	s, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func selfInc(t *testing.T, n *node, ref actor.Ref) uint64 {
	t.Helper()
	return n.ask(t, ref, "self").(actor.Ref).Incarnation()
}

// Incarnations stay monotonic on the real scheduler: a restart re-mints
// to 2, passivation and hydration keep 2, a restart (3) then a fault that
// escalates to Retire make the next activation 4, and a node restart on
// the same bbolt file keeps 4.
func TestIncarnationsAcrossPassivationRetireAndNodeRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	store := openBolt(t, path)
	kind := persistent
	kind.MaxRestarts = 1
	kind.RestartPeriod = time.Hour
	n := newSeamNode(t, store, kind, nil)
	ref := actor.Virtual("counter", "i")
	id := prospero.IdentityOf(ref)
	if got := selfInc(t, n.node, ref); got != 1 {
		t.Fatalf("first incarnation %d", got)
	}
	if err := n.sched.Tell(ref, "boom"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRestarted, id, 1)
	if got := selfInc(t, n.node, ref); got != 2 {
		t.Fatalf("incarnation after restart %d, want 2", got)
	}
	if !n.sup.Passivate(ref) {
		t.Fatal("not active")
	}
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	if got := selfInc(t, n.node, ref); got != 2 {
		t.Fatalf("incarnation after hydration %d, want 2", got)
	}
	if err := n.sched.Tell(ref, "boom"); err != nil { // restart history starts again after passivation
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRestarted, id, 2)
	if got := selfInc(t, n.node, ref); got != 3 {
		t.Fatalf("incarnation after the second restart %d, want 3", got)
	}
	if err := n.sched.Tell(ref, "boom"); err != nil { // over the intensity: escalates to Retire
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRetired, id, 1)
	if got := selfInc(t, n.node, ref); got != 4 {
		t.Fatalf("incarnation after retire %d, want 4", got)
	}
	if err := n.sched.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	if got := n.ask(t, ref, "get"); got != uint64(1) {
		t.Fatalf("count after retire %v, want 1", got)
	}
	n.close(t, true)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store2 := openBolt(t, path)
	t.Cleanup(func() { _ = store2.Close() })
	n2 := newSeamNode(t, store2, kind, nil)
	if got := selfInc(t, n2.node, ref); got != 4 {
		t.Fatalf("incarnation after a node restart %d, want 4", got)
	}
	if got := n2.ask(t, ref, "get"); got != uint64(1) {
		t.Fatalf("count after a node restart %v, want 1", got)
	}
	if st := n2.status(t, ref.WithIncarnation(3)); st.State != actor.ActorTerminated {
		t.Fatalf("status of incarnation 3 = %+v", st)
	}
}

// PersistEveryTurn writes the state after each turn on ariel, without a
// passivation.
func TestPersistEveryTurnOnAriel(t *testing.T) {
	store := prospero.NewMemStore()
	kind := prospero.KindOptions{IdleTimeout: prospero.NeverIdle,
		Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}}
	n := newSeamNode(t, store, kind, nil)
	ref := actor.Virtual("counter", "e")
	id := prospero.IdentityOf(ref)
	for i := uint64(1); i <= 3; i++ {
		if err := n.sched.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
		// The ask runs after the inc turn and its hook: the write is done.
		if got := n.ask(t, ref, "get"); got != i {
			t.Fatalf("count %v, want %d", got, i)
		}
		rec, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("after turn %d: %v", i, err)
		}
		if v, _ := binary.Uvarint(rec.State); v != i {
			t.Fatalf("state at rest after turn %d = %d", i, v)
		}
	}
	if n.events.count(prospero.EventPersisted, id) < 3 {
		t.Fatal("no Persisted events")
	}
	if n.events.count(prospero.EventPassivated, id) != 0 {
		t.Fatal("passivated")
	}
}

// The Hydrate remedy replaces the faulted value in place: it sees no
// Passivating turn, no attach fails, and the reloaded value runs under the
// same incarnation from the last state at rest.
func TestHydrateRemedyReplacesInPlace(t *testing.T) {
	kind := persistent
	kind.Remedy = prospero.Hydrate
	n := newSeamNode(t, prospero.NewMemStore(), kind, nil)
	ref := actor.Virtual("counter", "h")
	id := prospero.IdentityOf(ref)
	for range 2 {
		if err := n.sched.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.ask(t, ref, "get"); got != uint64(2) {
		t.Fatalf("count %v", got)
	}
	if !n.sup.Passivate(ref) {
		t.Fatal("not active")
	}
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	before := n.passivating.Load()
	if err := n.sched.Tell(ref, "inc"); err != nil { // hydrates at 2, counts 3 in memory
		t.Fatal(err)
	}
	if got := n.ask(t, ref, "get"); got != uint64(3) {
		t.Fatalf("count after hydration %v, want 3", got)
	}
	if err := n.sched.Tell(ref, "boom"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRehydrated, id, 1)
	if got := n.ask(t, ref, "get"); got != uint64(2) {
		t.Fatalf("count after the Hydrate remedy %v, want 2 (the state at rest); %v", got, n.events.events)
	}
	if got := selfInc(t, n.node, ref); got != 1 {
		t.Fatalf("incarnation after Hydrate %d, want 1", got)
	}
	if got := n.passivating.Load() - before; got != 0 {
		t.Fatalf("the faulted value saw %d Passivating turns", got)
	}
	if got := n.events.count(prospero.EventStoreError, id); got != 0 {
		t.Fatalf("%d failed activations", got)
	}
	if got := n.events.count(prospero.EventFault, id); got != 1 {
		t.Fatalf("%d faults, want 1", got)
	}
}

// failingStore fails every read.
type failingStore struct{ prospero.StateStore }

var errDisk = errors.New("disk on fire")

func (failingStore) Get(context.Context, prospero.Identity) (prospero.Record, error) {
	return prospero.Record{}, errDisk
}

// Mail for an activation that is rejected is answered at once: after
// load failures escalate (ErrActorTerminated), during shutdown
// (ErrProcessUnavailable).
func TestRejectedActivationsAnswerWaitingMail(t *testing.T) {
	kind := persistent
	kind.MaxRestarts = 1
	kind.RestartPeriod = time.Hour
	n := newSeamNode(t, failingStore{prospero.NewMemStore()}, kind, nil)
	ref := actor.Virtual("counter", "x")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.sched.Ask(ctx, ref, "get"); !errors.Is(err, actor.ErrActorTerminated) || !errors.Is(err, errDisk) {
		t.Fatalf("ask to an identity that cannot load: %v, want ErrActorTerminated wrapping the cause", err)
	}
	n.events.waitFor(t, prospero.EventEscalated, prospero.IdentityOf(ref), 1)

	n2 := newSeamNode(t, prospero.NewMemStore(), persistent, nil)
	closeCtx, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if err := n2.sup.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.sched.Ask(ctx, actor.Virtual("counter", "late"), "get"); !errors.Is(err, actor.ErrProcessUnavailable) {
		t.Fatalf("ask during shutdown: %v, want ErrProcessUnavailable", err)
	}
}

// Shutting down the scheduler first, then the supervisor, still writes
// every state at rest and does not wait out the context.
func TestCloseSchedulerFirst(t *testing.T) {
	store := prospero.NewMemStore()
	n := newSeamNode(t, store, persistent, nil)
	ref := actor.Virtual("counter", "s")
	for range 4 {
		if err := n.sched.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.ask(t, ref, "get"); got != uint64(4) {
		t.Fatalf("count %v", got)
	}
	n.close(t, false)
	rec, err := store.Get(context.Background(), prospero.IdentityOf(ref))
	if err != nil {
		t.Fatalf("state at rest after closing the scheduler first: %v", err)
	}
	if v, _ := binary.Uvarint(rec.State); v != 4 {
		t.Fatalf("state at rest %d, want 4", v)
	}
}

// slowStore advances the supervisor's clock on each read, standing for
// the time a read takes.
type slowStore struct {
	prospero.StateStore
	clock *manualClock
	d     time.Duration
}

func (s slowStore) Get(ctx context.Context, id prospero.Identity) (prospero.Record, error) {
	s.clock.Advance(s.d)
	return s.StateStore.Get(ctx, id)
}

// Activation events carry the hydration time (doorbell → attached) on the
// supervisor's clock.
func TestHydrationTimeOnEvents(t *testing.T) {
	clock := &manualClock{now: t0}
	store := slowStore{prospero.NewMemStore(), clock, 7 * time.Millisecond}
	n := newSeamNode(t, store, persistent, clock)
	ref := actor.Virtual("counter", "t")
	id := prospero.IdentityOf(ref)
	if err := n.sched.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventActivated, id, 1)
	n.events.mu.Lock()
	defer n.events.mu.Unlock()
	for _, e := range n.events.events {
		if e.Type == prospero.EventActivated && e.ID == id {
			if e.Hydration != 7*time.Millisecond {
				t.Fatalf("hydration time %v, want 7ms", e.Hydration)
			}
			return
		}
	}
}
