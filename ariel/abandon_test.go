package ariel_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// restarter is a fault hook that re-mints an abandoned virtual actor with
// a fresh value at once, like the supervisor's Restart remedy.
type restarter struct {
	s     atomic.Pointer[ariel.Scheduler]
	fresh func() actor.Actor
	mu    sync.Mutex
	got   []ariel.Fault
}

func (r *restarter) Fault(f ariel.Fault) {
	r.mu.Lock()
	r.got = append(r.got, f)
	r.mu.Unlock()
	if f.Abandoned && f.Ref.IsVirtual() {
		_ = r.s.Load().RestartAt(f.Ref.Unpinned(), f.Incarnation+1, r.fresh())
	}
}

// mailLog keeps every message it receives.
type mailLog struct {
	mu  sync.Mutex
	got []any
}

func (r *mailLog) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(actor.Started); ok {
		return
	}
	r.mu.Lock()
	r.got = append(r.got, msg)
	r.mu.Unlock()
	ctx.Reply(msg)
}

func (r *mailLog) messages() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// lateActor blocks in its "block" turn until release is closed, then does
// everything a turn can do: reply, tell, ask, set a timer.
type lateActor struct {
	entered  chan struct{}
	release  chan struct{}
	observer actor.Ref
}

func (a *lateActor) Receive(ctx actor.Context, msg any) {
	if msg != "block" {
		return
	}
	a.entered <- struct{}{}
	<-a.release
	ctx.Reply("late reply")
	_ = ctx.Tell(a.observer, "late tell")
	ctx.Ask(a.observer, "late ask", func(actor.Context, any, error) {})
	ctx.After(0, "late timer")
	_ = ctx.Tell(ctx.Self(), "late self")
}

// freshActor answers "fresh" and, asked to "hold", answers only when
// hold is closed.
type freshActor struct{ entered, hold chan struct{} }

func (f freshActor) Receive(ctx actor.Context, msg any) {
	switch msg {
	case "hold":
		f.entered <- struct{}{}
		<-f.hold
		ctx.Reply("fresh")
	case "ping":
		ctx.Reply("fresh")
	}
}

func TestAbandonedTurnIsFenced(t *testing.T) {
	obs := &mailLog{}
	hold, holding := make(chan struct{}), make(chan struct{}, 1)
	hook := &restarter{fresh: func() actor.Actor { return freshActor{entered: holding, hold: hold} }}
	// Only the fault hook attaches after the abandonment (the silent
	// activator attaches nothing): with the factory's activator, an ask
	// arriving between the abandonment and the hook's restart could
	// activate the blocking value again and wait for an answer it never
	// gives.
	s := newSched(t, ariel.Config{Workers: 2, TurnBudget: 5 * time.Second, Faults: hook, Activator: silent{}})
	hook.s.Store(s)
	observer, _ := s.Spawn(obs)
	late := &lateActor{entered: make(chan struct{}, 1), release: make(chan struct{}), observer: observer}
	if err := s.Register("late", func(string) actor.Actor { return late }, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTurnBudget("late", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("late", "a")
	if err := s.EnsureCell(ref, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AttachAt(ref, 1, late); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Ask(askCtx(t), ref, "block")
		done <- err
	}()
	<-late.entered
	stale := ref.WithIncarnation(1)
	// The ask of the abandoned turn fails at once (not at its deadline),
	// with ErrActorTerminated.
	if err := <-done; !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("ask of the abandoned turn: %v, want ErrActorTerminated", err)
	}
	if got, err := s.Ask(askCtx(t), ref, "ping"); err != nil || got != "fresh" {
		t.Fatalf("new incarnation: %v, %v", got, err)
	}
	if st := s.State(stale); st != actor.ActorTerminated {
		t.Fatalf("stale reference reads %v, want ActorTerminated", st)
	}
	// The new incarnation's caller waits while the abandoned goroutine
	// wakes up and replies: the late reply must not reach it.
	held := make(chan any, 1)
	go func() {
		v, err := s.Ask(askCtx(t), ref, "hold")
		if err != nil {
			v = err
		}
		held <- v
	}()
	<-holding
	close(late.release)
	waitStuck(t, s, 0)
	close(hold)
	if v := <-held; v != "fresh" {
		t.Fatalf("the new incarnation's caller got %v", v)
	}
	waitIdle(t, s)
	if got := obs.messages(); len(got) != 0 {
		t.Fatalf("the abandoned turn reached the observer: %v", got)
	}
	st := s.Stats()
	if st.Fenced < 5 || st.Exhausted != 1 || st.Stuck != 0 {
		t.Fatalf("stats = %+v, want 5 fenced effects of one abandoned turn", st)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.got) != 1 || !hook.got[0].Abandoned || hook.got[0].Incarnation != 1 || hook.got[0].Outcome != ariel.BudgetExhausted {
		t.Fatalf("faults = %+v", hook.got)
	}
}

// A burst to one recipient that an abandoned turn goes on with after it
// was abandoned: the next send of the burst (the recipient resolved, its
// mailbox slots reserved) is refused like any effect of an abandoned
// turn, and nothing of the burst reaches the recipient.
func TestAbandonedTurnsBurstIsFenced(t *testing.T) {
	obs := &mailLog{}
	s := newSched(t, ariel.Config{Workers: 2, TurnBudget: 200 * time.Millisecond, Activator: silent{}})
	observer, _ := s.Spawn(obs)
	entered, release := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 8)
	burster, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg != "burst" {
			return
		}
		for i := 0; i < 3; i++ {
			errs <- ctx.Tell(observer, i)
		}
		close(entered)
		<-release // abandoned meanwhile
		errs <- ctx.Tell(observer, 3)
	}))
	if err := s.Tell(burster, "burst"); err != nil {
		t.Fatal(err)
	}
	<-entered
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send %d before the abandonment: %v", i, err)
		}
	}
	waitFor(t, func() bool { return s.Stats().Exhausted == 1 })
	fenced := s.Stats().Fenced
	close(release)
	if err := <-errs; !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("send after the abandonment: %v, want ErrActorTerminated", err)
	}
	waitStuck(t, s, 0)
	waitIdle(t, s)
	if got := obs.messages(); len(got) != 0 {
		t.Fatalf("the abandoned turn's burst reached its recipient: %v", got)
	}
	if st := s.Stats(); st.Fenced <= fenced {
		t.Fatalf("Fenced %d after the abandonment, want more than %d", st.Fenced, fenced)
	}
}

// waitFor polls cond until it holds (at most 20 s).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// silent is an Activator that attaches nothing: the test does.
type silent struct{}

func (silent) Ring(actor.Ref) {}

// The mail an abandoned turn had taken with it (one batch) goes back to
// the mailbox, in order, for the next incarnation.
func TestAbandonedTurnReturnsItsBatch(t *testing.T) {
	msgs := []any{"block", 1, 2, 3, 4, 5}
	_, b, rec := blockInOneBatch(t, msgs)
	defer close(b.release)
	waitFor(t, func() bool { return len(rec.messages()) == len(msgs)-1 })
	if got := rec.messages(); !slices.Equal(got, msgs[1:]) {
		t.Fatalf("the next incarnation got %v, want %v", got, msgs[1:])
	}
}

// blockInOneBatch queues msgs for a virtual actor on a one-worker
// scheduler with a 200 ms turn budget before attaching a blocker to it,
// so that they all wait as one batch, and returns once the blocker's
// turn ("block") has begun. The turn is abandoned past its budget, and
// the fault hook restarts the identity with rec, which records what the
// next incarnation gets.
func blockInOneBatch(t *testing.T, msgs []any) (*ariel.Scheduler, *blocker, *mailLog) {
	t.Helper()
	rec := &mailLog{}
	hook := &restarter{fresh: func() actor.Actor { return rec }}
	s := newSched(t, ariel.Config{Workers: 1, TurnBudget: 200 * time.Millisecond, Faults: hook, Activator: silent{}})
	hook.s.Store(s)
	b := newBlocker()
	if err := s.Register("batch", func(string) actor.Actor { return b }, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("batch", "a")
	if err := s.EnsureCell(ref, 1, 0); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := s.Tell(ref, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AttachAt(ref, 1, b); err != nil {
		t.Fatal(err)
	}
	<-b.entered
	return s, b, rec
}

// A turn that sends nothing is followed by the next plain tell of its
// batch without leaving the call-out (one swap of the turn gate, see
// hop): when a later turn of such a run is abandoned, the mail after it
// goes back to the mailbox and the turns before it stand. Read from the
// wrong turn, the batch would come back from the start of the run, and
// the next incarnation would get 1 and 2 again (or lose 4 and 5).
func TestAbandonedTurnAfterHopsReturnsTheRest(t *testing.T) {
	s, b, rec := blockInOneBatch(t, []any{1, 2, "block", 4, 5})
	defer close(b.release)
	waitFor(t, func() bool { return len(rec.messages()) >= 2 })
	if err := s.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rec.messages(); !slices.Equal(got, []any{4, 5}) {
		t.Fatalf("the next incarnation got %v, want [4 5]", got)
	}
	b.mu.Lock()
	handled := slices.DeleteFunc(slices.Clone(b.handled), func(m any) bool { _, ok := m.(actor.Started); return ok })
	b.mu.Unlock()
	if !slices.Equal(handled, []any{1, 2}) {
		t.Fatalf("the abandoned value handled %v, want [1 2]", handled)
	}
}

// Replacement workers are capped: past MaxReplacements a stuck worker is
// not replaced, the pool runs below its size and reports Degraded, and
// it recovers when stuck goroutines return.
func TestReplacementCap(t *testing.T) {
	const stuckActors = 4
	release := make(chan struct{})
	entered := make(chan struct{}, stuckActors)
	s := newSched(t, ariel.Config{Workers: 1, MaxReplacements: 2, TurnBudget: 100 * time.Millisecond, Faults: &ariel.LogFaults{}})
	before := runtime.NumGoroutine()
	for range stuckActors {
		ref, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if msg == "block" {
				entered <- struct{}{}
				<-release
			}
		}))
		if err := s.Tell(ref, "block"); err != nil {
			t.Fatal(err)
		}
	}
	// One worker, cap two: three turns get stuck (the first two are
	// replaced, the third is not) and the fourth waits for a worker.
	waitFor(t, func() bool { return s.Stats().Stuck == 3 })
	st := s.Stats()
	if st.Workers != 0 || !st.Degraded || st.Unreplaced != 1 {
		t.Fatalf("stats = %+v, want a degraded pool with no live worker", st)
	}
	// The original worker was counted before: two replacements beyond it
	// (timer callbacks come and go, so wait for the count to settle).
	waitFor(t, func() bool { return runtime.NumGoroutine()-before <= 2 })
	close(release)
	waitStuck(t, s, 0)
	waitIdle(t, s) // the fourth actor ran on the worker the pool got back
	if st := s.Stats(); st.Degraded || st.Workers != 1 || len(entered) != stuckActors {
		t.Fatalf("stats after release = %+v, %d turns entered", st, len(entered))
	}
}

// A turn spinning on the CPU is abandoned like a blocked one; the spin
// ends at cleanup so it does not eat a core for the rest of the run.
func TestSpinningTurnIsAbandoned(t *testing.T) {
	var stop atomic.Bool
	s := newSched(t, ariel.Config{Workers: 1, TurnBudget: 100 * time.Millisecond, Faults: &ariel.LogFaults{}})
	t.Cleanup(func() { stop.Store(true); waitStuck(t, s, 0) })
	spin, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "spin" {
			for !stop.Load() {
			}
		}
	}))
	if _, err := s.Ask(askCtx(t), spin, "spin"); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("ask of a spinning turn: %v, want ErrActorTerminated", err)
	}
	e, _ := s.Spawn(echo{})
	if got, err := s.Ask(askCtx(t), e, "alive"); err != nil || got != "alive" {
		t.Fatalf("ask beside a spinning turn: %v, %v", got, err)
	}
}
