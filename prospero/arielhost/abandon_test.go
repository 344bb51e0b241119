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

// wedge is an actor whose "block" turn waits on a channel nobody closes
// until the end of the test: to the scheduler a turn that never returns.
// When it does return it tries everything a turn can do.
type wedge struct {
	n        uint64
	entered  chan<- struct{}
	release  <-chan struct{}
	holding  chan<- struct{}
	hold     <-chan struct{}
	observer actor.Ref
}

func (w *wedge) Receive(ctx actor.Context, msg any) {
	switch msg {
	case "block":
		w.entered <- struct{}{}
		<-w.release
		ctx.Reply("late reply")
		_ = ctx.Tell(w.observer, "late tell")
		_ = ctx.Tell(ctx.Self(), "inc")
		ctx.After(0, "inc")
	case "inc":
		w.n++
	case "boom":
		panic("boom")
	case "get":
		ctx.Reply(w.n)
	case "self":
		ctx.Reply(ctx.Self())
	case "hold":
		w.holding <- struct{}{}
		<-w.hold
		ctx.Reply(w.n)
	}
}

func (w *wedge) MarshalState() ([]byte, error) { return (&counter{n: w.n}).MarshalState() }

func (w *wedge) UnmarshalState(b []byte) error {
	c := &counter{}
	err := c.UnmarshalState(b)
	w.n = c.n
	return err
}

// observed records what reaches it.
type observed struct {
	mu  sync.Mutex
	got []any
}

func (o *observed) Receive(_ actor.Context, msg any) {
	if _, ok := msg.(actor.Started); ok {
		return
	}
	o.mu.Lock()
	o.got = append(o.got, msg)
	o.mu.Unlock()
}

type wedgeNode struct {
	sup                     *prospero.Supervisor
	sched                   *ariel.Scheduler
	events                  *eventLog
	obs                     *observed
	entered, holding        chan struct{}
	release, hold           chan struct{}
	closeRelease, closeHold func()
	observer                actor.Ref
}

// startWedgeNode runs the real supervisor on the real scheduler (two
// workers) with the kind "wedge" of the given options. It must run
// inside a synctest bubble when the test reads time.
func startWedgeNode(t *testing.T, kind prospero.KindOptions) *wedgeNode {
	t.Helper()
	w := &wedgeNode{events: &eventLog{signal: make(chan struct{}, 1)}, obs: &observed{},
		entered: make(chan struct{}, 1), holding: make(chan struct{}, 1),
		release: make(chan struct{}), hold: make(chan struct{})}
	var r1, r2 sync.Once
	w.closeRelease = func() { r1.Do(func() { close(w.release) }) }
	w.closeHold = func() { r2.Do(func() { close(w.hold) }) }
	sup, err := prospero.NewSupervisor(prospero.Config{Store: prospero.NewMemStore(), Events: w.events})
	if err != nil {
		t.Fatal(err)
	}
	factory := func(string) actor.Actor {
		return &wedge{entered: w.entered, release: w.release, holding: w.holding, hold: w.hold, observer: w.observer}
	}
	if _, err := sup.Register("wedge", factory, kind); err != nil {
		t.Fatal(err)
	}
	sched, err := ariel.New(ariel.Config{Workers: 2, Activator: arielhost.Activator(sup), Faults: arielhost.Faults(sup)})
	if err != nil {
		t.Fatal(err)
	}
	w.observer, _ = sched.Spawn(w.obs)
	if err := arielhost.Start(sup, sched); err != nil {
		t.Fatal(err)
	}
	w.sup, w.sched = sup, sched
	return w
}

func (w *wedgeNode) close(t *testing.T) {
	w.closeRelease()
	w.closeHold()
	// Bounded, so that a test that found an identity nobody serves
	// fails rather than waiting for its passivation at Close.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.sup.Close(ctx); err != nil {
		t.Errorf("supervisor Close: %v", err)
	}
	if err := w.sched.Close(ctx); err != nil {
		t.Errorf("scheduler Close: %v", err)
	}
}

func (w *wedgeNode) event(typ prospero.EventType) (prospero.Event, bool) {
	w.events.mu.Lock()
	defer w.events.mu.Unlock()
	for _, e := range w.events.events {
		if e.Type == typ {
			return e, true
		}
	}
	return prospero.Event{}, false
}

// A turn that never returns is restarted within its kind's budget plus
// one watchdog period; the new incarnation answers, a stale reference
// reads ActorTerminated, and what the abandoned turn does when it wakes
// up reaches nobody: not the new incarnation, not its caller, not a
// third actor. Time is synctest's, so the bound is exact, not a guess.
func TestNeverReturningTurnIsRestartedWithinBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 40 * time.Millisecond
		w := startWedgeNode(t, prospero.KindOptions{TurnBudget: budget, IdleTimeout: prospero.NeverIdle})
		defer w.close(t)
		period := w.sched.WatchdogPeriod()
		if period != budget/4 {
			t.Fatalf("watchdog period %v, want a quarter of the kind's budget", period)
		}
		ref := actor.Virtual("wedge", "a")
		id := prospero.IdentityOf(ref)
		start := time.Now()
		asked := make(chan error, 1)
		go func() {
			_, err := w.sched.Ask(context.Background(), ref, "block")
			asked <- err
		}()
		<-w.entered
		if err := <-asked; !errors.Is(err, actor.ErrActorTerminated) {
			t.Fatalf("ask of the abandoned turn: %v, want ErrActorTerminated", err)
		}
		if took := time.Since(start); took < budget || took > budget+period {
			t.Fatalf("the ask failed after %v, want within [%v, %v]", took, budget, budget+period)
		}
		synctest.Wait()
		restarted, ok := w.event(prospero.EventRestarted)
		if !ok || restarted.Incarnation != 2 || restarted.At.Sub(start) > budget+period {
			t.Fatalf("Restarted event %+v (found %v), want incarnation 2 within %v", restarted, ok, budget+period)
		}
		if ab, ok := w.event(prospero.EventTurnAbandoned); !ok || ab.Incarnation != 1 || ab.At.After(restarted.At) {
			t.Fatalf("TurnAbandoned event %+v (found %v)", ab, ok)
		}
		self, err := w.sched.Ask(context.Background(), ref, "self")
		if err != nil || self.(actor.Ref).Incarnation() != 2 {
			t.Fatalf("new incarnation: %v, %v", self, err)
		}
		stale := ref.WithIncarnation(1)
		if st := w.sched.State(stale); st != actor.ActorTerminated {
			t.Fatalf("scheduler reads the stale reference as %v", st)
		}
		if st, err := w.sup.Status(context.Background(), stale); err != nil || st.State != actor.ActorTerminated {
			t.Fatalf("supervisor reads the stale reference as %+v, %v", st, err)
		}
		if err := w.sched.Tell(stale, "inc"); !errors.Is(err, actor.ErrActorTerminated) {
			t.Fatalf("tell through the stale reference: %v", err)
		}

		// The new incarnation's caller waits in a turn while the
		// abandoned goroutine wakes up and replies, tells and arms a
		// timer.
		held := make(chan any, 1)
		go func() {
			v, err := w.sched.Ask(context.Background(), ref, "hold")
			if err != nil {
				v = err
			}
			held <- v
		}()
		<-w.holding
		w.closeRelease()
		synctest.Wait()
		if st := w.sched.Stats(); st.Stuck != 0 || st.Fenced < 4 {
			t.Fatalf("scheduler stats %+v: want the stuck goroutine gone and its 4 effects fenced", st)
		}
		w.closeHold()
		if v := <-held; v != uint64(0) {
			t.Fatalf("the new incarnation's caller got %v, want its own reply 0", v)
		}
		if got, err := w.sched.Ask(context.Background(), ref, "get"); err != nil || got != uint64(0) {
			t.Fatalf("count %v, %v: a send of the abandoned turn reached the new incarnation", got, err)
		}
		w.obs.mu.Lock()
		got := w.obs.got
		w.obs.mu.Unlock()
		if len(got) != 0 {
			t.Fatalf("the abandoned turn reached a third actor: %v", got)
		}
		if n := w.events.count(prospero.EventRestarted, id); n != 1 {
			t.Fatalf("%d restarts, want 1", n)
		}
	})
}

// Retire answers the mail that waited behind the abandoned turn at once.
func TestAbandonedTurnRetire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 40 * time.Millisecond
		w := startWedgeNode(t, prospero.KindOptions{TurnBudget: budget, Remedy: prospero.Retire, IdleTimeout: prospero.NeverIdle})
		defer w.close(t)
		ref := actor.Virtual("wedge", "r")
		if err := w.sched.Tell(ref, "block"); err != nil {
			t.Fatal(err)
		}
		<-w.entered
		start := time.Now()
		_, err := w.sched.Ask(context.Background(), ref, "get") // waits behind the stuck turn
		if !errors.Is(err, actor.ErrActorTerminated) {
			t.Fatalf("ask behind a retired turn: %v, want ErrActorTerminated", err)
		}
		if took := time.Since(start); took > budget+w.sched.WatchdogPeriod() {
			t.Fatalf("answered after %v", took)
		}
		synctest.Wait()
		if _, ok := w.event(prospero.EventRetired); !ok {
			t.Fatal("no Retired event")
		}
		// The identity comes back empty under a new incarnation.
		if self, err := w.sched.Ask(context.Background(), ref, "self"); err != nil || self.(actor.Ref).Incarnation() != 2 {
			t.Fatalf("after retire: %v, %v", self, err)
		}
	})
}

// Hydrate reloads the state at rest and keeps the identity: references
// pinned to the incarnation stay valid.
func TestAbandonedTurnHydrate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := startWedgeNode(t, prospero.KindOptions{TurnBudget: 40 * time.Millisecond, Remedy: prospero.Hydrate,
			IdleTimeout: prospero.NeverIdle, Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}})
		defer w.close(t)
		ref := actor.Virtual("wedge", "h")
		for range 3 {
			if err := w.sched.Tell(ref, "inc"); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := w.sched.Ask(context.Background(), ref, "get"); err != nil || got != uint64(3) {
			t.Fatalf("count %v, %v", got, err)
		}
		if _, err := w.sched.Ask(context.Background(), ref, "block"); !errors.Is(err, actor.ErrActorTerminated) {
			t.Fatalf("ask of the abandoned turn: %v", err)
		}
		synctest.Wait()
		if _, ok := w.event(prospero.EventRehydrated); !ok {
			t.Fatal("no Rehydrated event")
		}
		pinned := ref.WithIncarnation(1)
		if got, err := w.sched.Ask(context.Background(), pinned, "get"); err != nil || got != uint64(3) {
			t.Fatalf("after hydrate through the pinned reference: %v, %v", got, err)
		}
	})
}
