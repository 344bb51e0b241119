package arielhost_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
)

// heldLoad holds the reads of the state store until the test lets them
// go (all at once, for good): an activation whose load is in flight.
// Each read is announced on reading, whose slots outnumber the test's
// reads (its Status reads the store too), so that none waits there.
type heldLoad struct {
	prospero.StateStore
	reading chan struct{}
	release chan struct{}
}

func (s heldLoad) Get(ctx context.Context, id prospero.Identity) (prospero.Record, error) {
	s.reading <- struct{}{}
	<-s.release
	return s.StateStore.Get(ctx, id)
}

var errMovedAway = errors.New("the shard moved away")

// The doorbell's fence admits an activation, and while its state loads
// the node stops serving the identity (its shard begins to move: a
// handoff's quiesce cannot wait for a load of an identity nothing here
// recorded yet, and the new owner may activate it as soon as the move
// completes). The fence is asked again just before the attach: the
// activation is refused there, nothing is attached or announced, and
// the waiting mail gets the fence's refusal, as at the doorbell. Before,
// the load attached and announced the activation after the move, while
// the new owner could hold its own: two activations of one identity.
func TestFenceIsAskedAgainBeforeTheAttach(t *testing.T) {
	events := &eventLog{signal: make(chan struct{}, 1)}
	store := heldLoad{prospero.NewMemStore(), make(chan struct{}, 8), make(chan struct{})}
	sup, err := prospero.NewSupervisor(prospero.Config{Store: store, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Register("counter", func(string) actor.Actor { return &counter{} }, persistent); err != nil {
		t.Fatal(err)
	}
	var moved atomic.Bool
	fence := func(actor.Ref) error {
		if moved.Load() {
			return errMovedAway
		}
		return nil
	}
	sched, err := ariel.New(ariel.Config{Workers: 2, Activator: arielhost.FencedActivator(sup, fence),
		Faults: arielhost.Faults(sup)})
	if err != nil {
		t.Fatal(err)
	}
	if err := arielhost.Start(sup, sched); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close: %v", err)
		}
		if err := sched.Close(ctx); err != nil {
			t.Errorf("scheduler Close: %v", err)
		}
	}()
	ref := actor.Virtual("counter", "m")
	id := prospero.IdentityOf(ref)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	asked := make(chan error, 1)
	go func() {
		_, err := sched.Ask(ctx, ref, "get")
		asked <- err
	}()
	<-store.reading // admitted by the doorbell's fence, loading
	// Not attached, not announced, but in memory: a handoff's quiesce
	// reads this list (Supervisor.InMemory).
	if got := sup.InMemory(); !slices.Equal(got, []prospero.Identity{id}) {
		t.Errorf("in memory while loading: %v, want %v", got, id)
	}
	moved.Store(true)
	close(store.release)
	if err := <-asked; !errors.Is(err, errMovedAway) {
		t.Fatalf("ask whose activation the fence refused at the attach: %v, want the fence's error", err)
	}
	events.waitFor(t, prospero.EventRejected, id, 1)
	for _, typ := range []prospero.EventType{prospero.EventActivated, prospero.EventHydrated, prospero.EventFault} {
		if n := events.count(typ, id); n != 0 {
			t.Errorf("%d %v events for an activation the fence refused", n, typ)
		}
	}
	if st, err := sup.Status(ctx, ref); err != nil || st.Active || len(sup.InMemory()) != 0 {
		t.Fatalf("supervisor %+v, %v, %v: want nothing of the identity in memory", st, err, sup.InMemory())
	}
	// Served again once the fence admits it.
	moved.Store(false)
	if got, err := sched.Ask(ctx, ref, "get"); err != nil || got != uint64(0) {
		t.Fatalf("after the fence admits it again: %v, %v", got, err)
	}
}
