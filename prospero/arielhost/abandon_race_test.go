package arielhost_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
)

// The supervisor calls its host under its own lock, and the scheduler's
// watchdog may take an actor value out of service (abandon a turn that
// never returns) at any moment between two of those calls. These tests
// hold the scheduler in the windows that opens.

// gatedFaults holds the report of an abandoned turn until the test opens
// its gate: the cell is detached already, the supervisor not told yet.
type gatedFaults struct {
	next ariel.FaultHook
	in   chan struct{}
	gate chan struct{}
}

func (g gatedFaults) Fault(f ariel.Fault) {
	if f.Abandoned {
		g.in <- struct{}{}
		<-g.gate
	}
	g.next.Fault(f)
}

// A passivation decided after the watchdog detached an abandoned turn's
// cell, and before its report reached the supervisor (a window as long as
// the report waits for the supervisor's lock), finds no actor to
// passivate. The scheduler used to queue it anyway and ring the doorbell
// for it on the caller's goroutine, and the caller, the supervisor, holds
// the lock the doorbell takes: the supervisor deadlocked, and with it
// every activation on the node. Mail that rang in that window, while the
// supervisor still counted the value active, must not be left behind.
func TestPassivationOfADetachedCellDoesNotDeadlock(t *testing.T) {
	sup, err := prospero.NewSupervisor(prospero.Config{Store: prospero.NewMemStore()})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	factory := func(string) actor.Actor { return &wedge{entered: entered, release: release} }
	if _, err := sup.Register("wedge", factory, prospero.KindOptions{TurnBudget: 40 * time.Millisecond,
		IdleTimeout: prospero.NeverIdle}); err != nil {
		t.Fatal(err)
	}
	faults := gatedFaults{next: arielhost.Faults(sup), in: make(chan struct{}, 1), gate: make(chan struct{})}
	sched, err := ariel.New(ariel.Config{Workers: 2, Activator: arielhost.Activator(sup), Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	if err := arielhost.Start(sup, sched); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("wedge", "p")
	if err := sched.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	if got, err := sched.Ask(context.Background(), ref, "get"); err != nil || got != uint64(1) {
		t.Fatalf("count %v, %v", got, err)
	}
	if err := sched.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	<-entered
	<-faults.in // abandoned: the cell is detached, the fault not reported
	// Mail rings the doorbell of the detached cell, and the supervisor,
	// which still counts the value active, lets it pass.
	if err := sched.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}

	passivated := make(chan bool, 1)
	go func() { passivated <- sup.Passivate(ref) }()
	select {
	case <-passivated:
	case <-time.After(10 * time.Second):
		t.Fatal("Passivate of an identity whose cell the watchdog detached did not return: the supervisor deadlocked")
	}
	close(faults.gate)
	// The identity serves again, the mail that waited first (the kind
	// keeps no state: a fresh value counts from 0), and the node closes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if got, err := sched.Ask(ctx, ref, "get"); err != nil || got != uint64(1) {
			t.Fatalf("the identity does not serve again, its waiting mail first: %v, %v", got, err)
		}
	}
	unblock()
	if err := sup.Close(ctx); err != nil {
		t.Errorf("supervisor Close: %v", err)
	}
	if err := sched.Close(ctx); err != nil {
		t.Errorf("scheduler Close: %v", err)
	}
}

// askWithin asks ref in the bubble and fails the test when no answer
// comes within a minute of the bubble's clock: an identity whose mail
// nobody will run any more.
func askWithin(t *testing.T, w *wedgeNode, ref actor.Ref, msg any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := w.sched.Ask(ctx, ref, msg)
	if err != nil {
		t.Fatalf("ask %v of %v: %v", msg, ref, err)
	}
	return v
}

// A passivation decided while a turn runs waits behind it. When the
// watchdog abandons that turn, the activation the passivation was for is
// gone, and so is the passivation: it used to stay queued and run as the
// first thing the next activation did after its waiting mail, putting to
// rest an activation the supervisor had just made and believed active.
// The identity's mail then rang a doorbell the supervisor ignored, and
// nothing answered it again.
func TestPassivationQueuedBehindAnAbandonedTurnEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := startWedgeNode(t, prospero.KindOptions{TurnBudget: 40 * time.Millisecond, IdleTimeout: prospero.NeverIdle})
		defer w.close(t)
		ref := actor.Virtual("wedge", "q")
		if err := w.sched.Tell(ref, "block"); err != nil {
			t.Fatal(err)
		}
		<-w.entered
		passivated := make(chan error, 1)
		go func() { passivated <- w.sup.PassivateWait(context.Background(), ref) }()
		synctest.Wait()                                  // the passivation waits behind the stuck turn
		if err := w.sched.Tell(ref, "inc"); err != nil { // waits behind the stuck turn
			t.Fatal(err)
		}
		// Its turn abandoned, the passivation ends without writing the
		// state: the wait says so (it returned nil, as for a state written).
		if err := <-passivated; !errors.Is(err, actor.ErrNotCommitted) {
			t.Fatalf("PassivateWait over an abandoned final turn: %v, want ErrNotCommitted", err)
		}
		for i := range 3 {
			if got := askWithin(t, w, ref, "get"); got != uint64(1) {
				t.Fatalf("ask %d: count %v, want 1 (the mail that waited, on a fresh activation)", i, got)
			}
		}
		synctest.Wait()
		st, err := w.sup.Status(context.Background(), ref)
		if err != nil || !st.Active || w.sched.State(ref) != actor.Valid {
			t.Fatalf("supervisor %+v (%v), scheduler %v: they disagree on whether the identity is active",
				st, err, w.sched.State(ref))
		}
		// The next passivation is the supervisor's own, and it works.
		if !w.sup.Passivate(ref) {
			t.Fatal("Passivate refused")
		}
		synctest.Wait()
		if st, _ := w.sup.Status(context.Background(), ref); st.Active {
			t.Fatalf("still active after Passivate: %+v", st)
		}
		if got := askWithin(t, w, ref, "get"); got != uint64(0) {
			t.Fatalf("count %v after a passivation of a kind without state, want 0", got)
		}
	})
}

// A restart the supervisor decided after a panic replaces the actor value
// between two turns. When the turn it waits behind is abandoned instead,
// the new value is what the supervisor made active: the cell takes it
// then, rather than keeping it queued behind a doorbell the supervisor
// ignores (it believes the new value attached), which left the identity's
// mail unanswered for good.
func TestRestartQueuedBehindAnAbandonedTurnTakesEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := startWedgeNode(t, prospero.KindOptions{TurnBudget: 40 * time.Millisecond, IdleTimeout: prospero.NeverIdle})
		defer w.close(t)
		ref := actor.Virtual("wedge", "r")
		for _, m := range []string{"inc", "boom", "block"} {
			if err := w.sched.Tell(ref, m); err != nil {
				t.Fatal(err)
			}
		}
		<-w.entered
		for i := range 3 {
			self := askWithin(t, w, ref, "self").(actor.Ref)
			if self.Incarnation() < 2 {
				t.Fatalf("ask %d: answered by incarnation %d, want a restarted one", i, self.Incarnation())
			}
		}
		if n := w.events.count(prospero.EventRestarted, prospero.IdentityOf(ref)); n < 1 {
			t.Fatalf("%d restarts", n)
		}
	})
}

// A passivation the supervisor decides for a restarted value queues
// behind the restart, both behind a turn of the old value that is then
// abandoned: the restart's value takes the cell, and the passivation,
// which is for it, runs. Dropping it with the old value left the
// supervisor waiting for a passivation that never came.
func TestPassivationOfARestartQueuedBehindAnAbandonedTurnRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := startWedgeNode(t, prospero.KindOptions{TurnBudget: 40 * time.Millisecond, IdleTimeout: prospero.NeverIdle})
		defer w.close(t)
		ref := actor.Virtual("wedge", "s")
		id := prospero.IdentityOf(ref)
		for _, m := range []string{"boom", "block"} {
			if err := w.sched.Tell(ref, m); err != nil {
				t.Fatal(err)
			}
		}
		<-w.entered
		synctest.Wait() // the restart after the panic is decided and queued
		if !w.sup.Passivate(ref) {
			t.Fatal("Passivate of the restarted identity refused")
		}
		synctest.Wait()
		time.Sleep(time.Second) // the watchdog abandons the stuck turn
		synctest.Wait()
		if st, err := w.sup.Status(context.Background(), ref); err != nil || st.Active {
			t.Fatalf("supervisor %+v (%v) after a passivation: want the identity at rest", st, err)
		}
		if n := w.events.count(prospero.EventPassivated, id); n != 1 {
			t.Fatalf("%d Passivated events, want 1", n)
		}
		if self := askWithin(t, w, ref, "self").(actor.Ref); self.Incarnation() < 2 {
			t.Fatalf("answered by incarnation %d, want a restarted one", self.Incarnation())
		}
	})
}
