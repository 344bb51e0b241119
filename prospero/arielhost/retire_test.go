package arielhost_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
)

// tombstoneStore writes asynchronously and closes written once the
// tombstone of incarnation mint has been written and the supervisor was
// told (its done callback returned).
type tombstoneStore struct {
	prospero.StateStore
	mint    uint64
	written chan struct{}
	once    sync.Once
}

func (s *tombstoneStore) PutAsync(id prospero.Identity, expected uint64, rec prospero.Record, done func(uint64, error)) {
	go func() {
		v, err := s.StateStore.Put(context.Background(), id, expected, rec)
		done(v, err)
		if rec.State == nil && rec.Incarnation == s.mint {
			s.once.Do(func() { close(s.written) })
		}
	}()
}

// slowStop is the persistent counter whose first Stopping turn waits
// for hold to close.
type slowStop struct {
	counter
	stopping chan struct{}
	hold     chan struct{}
}

func (a *slowStop) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(actor.Stopping); ok && a.hold != nil {
		close(a.stopping)
		<-a.hold
	}
	a.counter.Receive(ctx, msg)
}

// retiredSink records, at each Retired event, whether the scheduler
// still held a cell for the identity.
type retiredSink struct {
	*eventLog
	sched    func() *ariel.Scheduler
	mu       sync.Mutex
	resident []bool
}

func (r *retiredSink) Emit(e prospero.Event) {
	if e.Type == prospero.EventRetired {
		res := r.sched().Resident(e.ID.Ref())
		r.mu.Lock()
		r.resident = append(r.resident, res)
		r.mu.Unlock()
	}
	r.eventLog.Emit(e)
}

// A retirement is reported (Retired) only once the retired actor is out
// of the scheduler: a message sent after it starts the next incarnation.
// Reported when the tombstone was written but the Stopping turn had not
// run yet, a message sent then landed in the retiring cell and was
// answered ErrActorTerminated.
func TestRetiredOnlyAfterTheActorStopped(t *testing.T) {
	store := &tombstoneStore{StateStore: prospero.NewMemStore(), mint: 2, written: make(chan struct{})}
	var sched *ariel.Scheduler
	sink := &retiredSink{eventLog: &eventLog{signal: make(chan struct{}, 1)},
		sched: func() *ariel.Scheduler { return sched }}
	sup, err := prospero.NewSupervisor(prospero.Config{Store: store, Clock: &manualClock{now: t0}, Events: sink})
	if err != nil {
		t.Fatal(err)
	}
	kind := persistent
	kind.Remedy = prospero.Retire
	first := &slowStop{stopping: make(chan struct{}), hold: make(chan struct{})}
	var made int
	var mu sync.Mutex
	factory := func(string) actor.Actor {
		mu.Lock()
		defer mu.Unlock()
		made++
		if made == 1 {
			return first
		}
		return &slowStop{}
	}
	if _, err := sup.Register("counter", factory, kind); err != nil {
		t.Fatal(err)
	}
	sched, err = ariel.New(ariel.Config{Workers: 2, Activator: arielhost.Activator(sup), Faults: arielhost.Faults(sup)})
	if err != nil {
		t.Fatal(err)
	}
	if err := arielhost.Start(sup, sched); err != nil {
		t.Fatal(err)
	}
	n := &node{sup: sup, sched: sched, store: store, events: sink.eventLog}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close: %v", err)
		}
		if err := sched.Close(ctx); err != nil {
			t.Errorf("scheduler Close: %v", err)
		}
	})
	ref := actor.Virtual("counter", "r")
	id := prospero.IdentityOf(ref)
	if got := selfInc(t, n, ref); got != 1 {
		t.Fatalf("first incarnation %d", got)
	}
	if err := sched.Tell(ref, "boom"); err != nil { // Retire at once
		t.Fatal(err)
	}
	waitClosed(t, first.stopping, "the Stopping turn")
	waitClosed(t, store.written, "the tombstone") // at rest; the Stopping turn still runs
	close(first.hold)
	n.events.waitFor(t, prospero.EventRetired, id, 1)
	sink.mu.Lock()
	resident := sink.resident[0]
	sink.mu.Unlock()
	if resident {
		t.Fatal("Retired was reported while the retired actor's cell was still in the scheduler")
	}
	if got := selfInc(t, n, ref); got != 2 {
		t.Fatalf("incarnation after retire %d, want 2", got)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
