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

// A passivation decided while the watchdog has detached an abandoned
// turn's cell and not yet reported it (a window as long as the report
// waits for the supervisor's lock) finds the cell detached. The
// scheduler rang the doorbell for the passivation's envelope on the
// caller's goroutine, and the caller, the supervisor, holds the lock the
// doorbell takes: the supervisor deadlocked, and with it every
// activation on the node.
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

	passivated := make(chan bool, 1)
	go func() { passivated <- sup.Passivate(ref) }()
	select {
	case <-passivated:
	case <-time.After(10 * time.Second):
		t.Fatal("Passivate of an identity whose cell the watchdog detached did not return: the supervisor deadlocked")
	}
	close(faults.gate)
	// The identity serves again (a new value), and the node closes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := sched.Ask(ctx, ref, "get")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the identity never served again: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	unblock()
	if err := sup.Close(ctx); err != nil {
		t.Errorf("supervisor Close: %v", err)
	}
	if err := sched.Close(ctx); err != nil {
		t.Errorf("scheduler Close: %v", err)
	}
}
