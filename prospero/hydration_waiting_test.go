package prospero_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// heldStore is a MemStore whose reads wait until release is closed.
type heldStore struct {
	prospero.StateStore
	release chan struct{}
}

func (s heldStore) Get(ctx context.Context, id prospero.Identity) (prospero.Record, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return prospero.Record{}, ctx.Err()
	}
	return s.StateStore.Get(ctx, id)
}

// TestHydrationWaiting: the activations waiting for the hydration budget
// (what a node reads to refuse mail that would need one more, BUSY) are
// counted without a full snapshot, and agree with Stats.
func TestHydrationWaiting(t *testing.T) {
	store := heldStore{StateStore: prospero.NewMemStore(), release: make(chan struct{})}
	host := newFakeHost()
	sup, err := prospero.NewSupervisor(prospero.Config{Store: store, HydrationBudget: 1, IOWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Register("counter", func(string) actor.Actor { return &counter{} }, persistent); err != nil {
		t.Fatal(err)
	}
	host.sup = sup
	if err := sup.Start(host); err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			close(store.release)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close: %v", err)
		}
		host.close()
	})
	if n := sup.HydrationWaiting(); n != 0 {
		t.Fatalf("%d waiting before any activation", n)
	}
	for i := range 5 {
		if err := sup.Ring(actor.Virtual("counter", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// One in flight (its read held), four waiting for the budget.
	if n, st := sup.HydrationWaiting(), sup.Stats(); n != 4 || st.Waiting != 4 || st.Hydrating != 1 {
		t.Fatalf("HydrationWaiting %d, Stats waiting %d hydrating %d; want 4, 4, 1", n, st.Waiting, st.Hydrating)
	}
	close(store.release)
	released = true
	deadline := time.Now().Add(20 * time.Second)
	for sup.HydrationWaiting() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d still waiting after the reads were released", sup.HydrationWaiting())
		}
		time.Sleep(2 * time.Millisecond)
	}
}
