package ariel_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newSched starts a scheduler and closes it at the end of the test.
func newSched(t testing.TB, cfg ariel.Config) *ariel.Scheduler {
	t.Helper()
	s, err := ariel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func waitIdle(t testing.TB, s *ariel.Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
}

func askCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type echo struct{}

func (echo) Receive(ctx actor.Context, msg any) {
	switch msg.(type) {
	case actor.Started, actor.Stopping:
	default:
		ctx.Reply(msg)
	}
}

func TestTellAskSpawn(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	ref, err := s.Spawn(echo{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Ask(askCtx(t), ref, "hi")
	if err != nil || got != "hi" {
		t.Fatalf("Ask = %v, %v; want hi", got, err)
	}
	if err := s.Tell(ref, 1); err != nil {
		t.Fatal(err)
	}
	if st := s.State(ref); st != actor.Valid {
		t.Fatalf("State = %v, want Valid", st)
	}
	if ref.Node() != "local" || ref.Incarnation() != 1 {
		t.Fatalf("ref = %v", ref)
	}
}

func TestInTurnAskContinuation(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	callee, _ := s.Spawn(echo{})
	done := make(chan string, 1)
	var others atomic.Int32
	caller, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case string:
			ctx.Ask(callee, m+"!", func(ctx actor.Context, reply any, err error) {
				if err != nil {
					done <- "error: " + err.Error()
					return
				}
				done <- reply.(string) + " @" + ctx.Self().String()
			})
		case int:
			others.Add(1)
		}
	}))
	if err := s.Tell(caller, "x"); err != nil {
		t.Fatal(err)
	}
	if got, want := <-done, "x! @"+caller.String(); got != want {
		t.Fatalf("continuation got %q, want %q", got, want)
	}
}

// overlapChecker fails if two turns of one actor ever overlap.
type overlapChecker struct {
	in      atomic.Int32
	overlap atomic.Bool
	n       atomic.Int64
}

func (o *overlapChecker) Receive(ctx actor.Context, msg any) {
	if o.in.Add(1) != 1 {
		o.overlap.Store(true)
	}
	for i := 0; i < 50; i++ { // widen the window
		_ = i
	}
	o.n.Add(1)
	o.in.Add(-1)
}

func TestSingleThreadedTurnsUnderContention(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 4, MailboxCapacity: 1 << 16})
	const targets, senders, per = 4, 8, 2000
	checkers := make([]*overlapChecker, targets)
	refs := make([]actor.Ref, targets)
	for i := range checkers {
		checkers[i] = &overlapChecker{}
		refs[i], _ = s.Spawn(checkers[i])
	}
	// Actor senders and goroutine senders at once.
	relay, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if k, ok := msg.(int); ok {
			for _, r := range refs {
				_ = ctx.Tell(r, k)
			}
		}
	}))
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				for s.Tell(refs[(g+i)%targets], i) != nil {
				}
				if i%16 == 0 {
					for s.Tell(relay, i) != nil {
					}
				}
			}
		}()
	}
	wg.Wait()
	waitIdle(t, s)
	var total int64
	for i, c := range checkers {
		if c.overlap.Load() {
			t.Fatalf("actor %d ran two turns at once", i)
		}
		total += c.n.Load() - 1 // Started
	}
	if want := int64(senders*per + senders*((per+15)/16)*targets); total != want {
		t.Fatalf("handled %d messages, want %d", total, want)
	}
}

type seqMsg struct {
	from int
	seq  int
}

func TestPerSenderFIFO(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 4, MailboxCapacity: 1 << 16})
	const senders, per = 16, 1000
	last := make([]int, senders)
	for i := range last {
		last[i] = -1
	}
	var bad atomic.Value
	recv, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if m, ok := msg.(seqMsg); ok {
			if m.seq != last[m.from]+1 {
				bad.CompareAndSwap(nil, m)
			}
			last[m.from] = m.seq
		}
	}))
	// Half the senders are actors (batched sends), half program goroutines.
	var wg sync.WaitGroup
	for i := 0; i < senders; i++ {
		if i%2 == 0 {
			a, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
				if _, ok := msg.(string); ok {
					for k := 0; k < per; k++ {
						if err := ctx.Tell(recv, seqMsg{i, k}); err != nil {
							bad.CompareAndSwap(nil, err)
						}
					}
				}
			}))
			if err := s.Tell(a, "go"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < per; k++ {
				if err := s.Tell(recv, seqMsg{i, k}); err != nil {
					bad.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	waitIdle(t, s)
	if v := bad.Load(); v != nil {
		t.Fatalf("out of order or refused: %v", v)
	}
	for i, l := range last {
		if l != per-1 {
			t.Fatalf("sender %d: last seq %d, want %d", i, l, per-1)
		}
	}
}

func TestExactlyOnceStress(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 4, MailboxCapacity: 64})
	const actors, senders, per = 32, 8, 1500
	seen := make([][]uint8, actors)
	refs := make([]actor.Ref, actors)
	for i := range refs {
		seen[i] = make([]uint8, senders*per)
		refs[i], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if id, ok := msg.(int); ok {
				seen[i][id]++
			}
		}))
	}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				id := g*per + i
				for {
					err := s.Tell(refs[id%actors], id)
					if err == nil {
						break
					}
					if !errors.Is(err, actor.ErrRefused) {
						t.Errorf("Tell: %v", err)
						return
					}
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	waitIdle(t, s)
	for a := range seen {
		for id, n := range seen[a] {
			want := uint8(0)
			if id%actors == a {
				want = 1
			}
			if n != want {
				t.Fatalf("actor %d saw message %d %d times, want %d", a, id, n, want)
			}
		}
	}
	if got := s.Stats().Refused; got != uint64(refused.Load()) {
		t.Fatalf("Stats.Refused = %d, want %d", got, refused.Load())
	}
}

// blocker blocks its turn on a "block" message until release is closed.
type blocker struct {
	entered chan struct{}
	release chan struct{}
	handled []any
	mu      sync.Mutex
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (b *blocker) Receive(ctx actor.Context, msg any) {
	if msg == "block" {
		b.entered <- struct{}{}
		<-b.release
		return
	}
	b.mu.Lock()
	b.handled = append(b.handled, msg)
	b.mu.Unlock()
	ctx.Reply(msg)
}

func TestRefusalOnFullMailbox(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	b := newBlocker()
	ref, _ := s.Spawn(b, actor.WithMailbox(4))
	if err := s.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	<-b.entered
	for i := 0; i < 4; i++ {
		if err := s.Tell(ref, i); err != nil {
			t.Fatalf("Tell %d: %v", i, err)
		}
	}
	if err := s.Tell(ref, 4); !errors.Is(err, actor.ErrRefused) {
		t.Fatalf("Tell to a full mailbox = %v, want ErrRefused", err)
	}
	if _, err := s.Ask(askCtx(t), ref, 5); !errors.Is(err, actor.ErrRefused) {
		t.Fatalf("Ask to a full mailbox = %v, want ErrRefused", err)
	}
	if got := s.Stats().Refused; got != 2 {
		t.Fatalf("Stats.Refused = %d, want 2", got)
	}
	close(b.release)
	waitIdle(t, s)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.handled) != 5 { // Started + 0..3
		t.Fatalf("handled %v", b.handled)
	}
}

func TestRefusedTellFromActorIsUndelivered(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	b := newBlocker()
	full, _ := s.Spawn(b, actor.WithMailbox(1))
	_ = s.Tell(full, "block")
	<-b.entered
	_ = s.Tell(full, 0) // fills it
	got := make(chan actor.Undelivered, 1)
	var tellErr error
	sender, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case string:
			tellErr = ctx.Tell(full, m)
		case actor.Undelivered:
			got <- m
		}
	}))
	_ = s.Tell(sender, "x")
	u := <-got
	if !errors.Is(u.Err, actor.ErrRefused) || u.To != full || u.Message != "x" {
		t.Fatalf("Undelivered = %+v", u)
	}
	if !errors.Is(tellErr, actor.ErrRefused) {
		t.Fatalf("ctx.Tell = %v, want ErrRefused", tellErr)
	}
	close(b.release)
}

// busy re-sends itself a message every turn until stop is set, and closes
// reached after its 1000th turn.
type busy struct {
	turns   int
	stop    *atomic.Bool
	reached chan struct{}
}

func (b *busy) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(int); !ok {
		return
	}
	if b.turns++; b.turns == 1000 {
		close(b.reached)
	}
	if !b.stop.Load() {
		_ = ctx.Tell(ctx.Self(), msg)
	}
}

func TestNoStarvationOfSecondBusyActor(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 1})
	var stop atomic.Bool
	a := &busy{stop: &stop, reached: make(chan struct{})}
	b := &busy{stop: &stop, reached: make(chan struct{})}
	ra, _ := s.Spawn(a)
	_ = s.Tell(ra, 0)
	// a is already spinning on the only worker when b starts.
	<-a.reached
	rb, _ := s.Spawn(b)
	_ = s.Tell(rb, 0)
	// Program code still gets answers while both are busy.
	e, _ := s.Spawn(echo{})
	if _, err := s.Ask(askCtx(t), e, "ping"); err != nil {
		t.Fatalf("Ask while two actors are busy: %v", err)
	}
	select {
	case <-b.reached:
	case <-time.After(20 * time.Second):
		t.Fatal("the second busy actor starved")
	}
	stop.Store(true)
	waitIdle(t, s)
	if s.Stats().BudgetYields == 0 {
		t.Fatal("no budget yields recorded")
	}
}

func TestLostWakeupHammer(t *testing.T) {
	// SpinIterations 1 makes workers park almost at once, so nearly every
	// message races a worker going to sleep.
	s := newSched(t, ariel.Config{Workers: 2, SpinIterations: 1})
	var got atomic.Int64
	ref, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(int); ok {
			got.Add(1)
			ctx.Reply(msg)
		}
	}))
	const goroutines, rounds = 4, 2000
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := s.Ask(ctx, ref, i)
				cancel()
				if err != nil {
					t.Errorf("round %d: %v (a wake-up was lost?)", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got.Load() != goroutines*rounds {
		t.Fatalf("handled %d, want %d", got.Load(), goroutines*rounds)
	}
	if s.Stats().Parks == 0 {
		t.Fatal("workers never parked: the hammer did not exercise parking")
	}
}

// faultRecorder is a FaultHook that hands faults to the test.
type faultRecorder struct{ ch chan ariel.Fault }

func (f *faultRecorder) Fault(x ariel.Fault) { f.ch <- x }

func TestPanicRecovery(t *testing.T) {
	h := &faultRecorder{ch: make(chan ariel.Fault, 4)}
	s := newSched(t, ariel.Config{Workers: 2, Faults: h})
	errBoom := errors.New("boom error")
	ref, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch msg {
		case "boom":
			panic("kaboom")
		case "boom error":
			panic(errBoom)
		}
		ctx.Reply(msg)
	}))
	_, err := s.Ask(askCtx(t), ref, "boom")
	if !errors.Is(err, actor.ErrPanicked) || err.Error() != "tempest: actor panicked: kaboom" {
		t.Fatalf("Ask of a panicking turn = %v, want ErrPanicked naming the panic", err)
	}
	f := <-h.ch
	if f.Outcome != ariel.Panicked || f.Panic != "kaboom" || f.Ref.Unpinned() != ref.Unpinned() || len(f.Stack) == 0 {
		t.Fatalf("fault = %+v", f)
	}
	if _, err := s.Ask(askCtx(t), ref, "boom error"); !errors.Is(err, actor.ErrPanicked) || !errors.Is(err, errBoom) {
		t.Fatalf("Ask of a turn panicking with an error = %v, want ErrPanicked and the error", err)
	}
	<-h.ch
	if got, err := s.Ask(askCtx(t), ref, "after"); err != nil || got != "after" {
		t.Fatalf("actor did not survive its panic: %v, %v", got, err)
	}
	if s.Stats().Panics != 2 {
		t.Fatalf("Stats.Panics = %d, want 2", s.Stats().Panics)
	}
}

func TestWatchdogReplacesStuckWorker(t *testing.T) {
	h := &faultRecorder{ch: make(chan ariel.Fault, 64)}
	s := newSched(t, ariel.Config{Workers: 1, TurnBudget: 200 * time.Millisecond, Faults: h})
	b := newBlocker()
	stuck, _ := s.Spawn(b)
	_ = s.Tell(stuck, "block")
	<-b.entered
	f := <-h.ch
	for f.Ref.Unpinned() != stuck.Unpinned() {
		f = <-h.ch // a busy test machine may stall some other turn past the budget
	}
	if f.Outcome != ariel.BudgetExhausted || !errors.Is(f.Err, ariel.ErrBudgetExhausted) || !f.Abandoned {
		t.Fatalf("fault = %+v", f)
	}
	// The only worker is stuck; its replacement must serve the rest.
	e, _ := s.Spawn(echo{})
	if got, err := s.Ask(askCtx(t), e, "alive"); err != nil || got != "alive" {
		t.Fatalf("pool lost its capacity: %v, %v", got, err)
	}
	if st := s.Stats(); st.Exhausted < 1 || st.Workers != 1 || st.Stuck != 1 || st.Degraded {
		t.Fatalf("stats = %+v", st)
	}
	// A spawned actor whose turn was abandoned is stopped: its value is
	// still in use by the stuck goroutine.
	if _, err := s.Ask(askCtx(t), stuck, "later"); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("ask to the abandoned actor: %v, want ErrActorTerminated", err)
	}
	close(b.release)
	waitStuck(t, s, 0)
	waitIdle(t, s)
}

// waitStuck waits until n abandoned goroutines are still running.
func waitStuck(t testing.TB, s *ariel.Scheduler, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Stuck != n {
		if time.Now().After(deadline) {
			t.Fatalf("stuck goroutines: %d, want %d", s.Stats().Stuck, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAskDeadlineAndExpiryAtDequeue(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	b := newBlocker()
	ref, _ := s.Spawn(b)
	_ = s.Tell(ref, "block")
	<-b.entered
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := s.Ask(ctx, ref, "late"); !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("Ask = %v, want ErrDeadlineExceeded", err)
	}
	close(b.release)
	waitIdle(t, s)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.handled {
		if m == "late" {
			t.Fatal("an expired ask ran its handler")
		}
	}
	if got := s.Stats().Expired; got != 1 {
		t.Fatalf("Expired = %d, want 1: the ask dropped at dequeue, once (its caller's timer is no drop)", got)
	}
}

// latency records observations.
type latency struct{ queued, handler atomic.Int64 }

func (l *latency) ObserveQueued(time.Duration)  { l.queued.Add(1) }
func (l *latency) ObserveHandler(time.Duration) { l.handler.Add(1) }

func TestLatencyObserverAndStats(t *testing.T) {
	l := &latency{}
	s := newSched(t, ariel.Config{Workers: 2, Latency: l})
	ref, _ := s.Spawn(echo{})
	for i := 0; i < 10; i++ {
		if _, err := s.Ask(askCtx(t), ref, i); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, s)
	if l.queued.Load() != 10 || l.handler.Load() != 11 { // Started has no queue time
		t.Fatalf("observed queued=%d handler=%d, want 10 and 11", l.queued.Load(), l.handler.Load())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []ariel.Config{{Workers: -1}, {MailboxCapacity: -5}, {TurnBudget: -time.Second},
		{Simulated: true, Clock: ariel.RealClock{}}} {
		if _, err := ariel.New(c); err == nil {
			t.Fatalf("New(%+v) accepted an invalid config", c)
		}
	}
	if err := ariel.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseRefusesNewWork(t *testing.T) {
	s, err := ariel.New(ariel.Config{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := s.Spawn(echo{})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Tell(ref, 1); !errors.Is(err, actor.ErrProcessUnavailable) {
		t.Fatalf("Tell after Close = %v", err)
	}
}

func TestFairnessTimeBudgetYields(t *testing.T) {
	// A huge message budget leaves only the time budget to end cycles.
	s := newSched(t, ariel.Config{Workers: 1, FairnessMessages: 1 << 30, FairnessTime: 50 * time.Microsecond,
		MailboxCapacity: 1 << 12})
	var stop atomic.Bool
	a := &busy{stop: &stop, reached: make(chan struct{})}
	ra, _ := s.Spawn(a)
	// Keep a backlog so cycles take full batches.
	for i := 0; i < 64; i++ {
		_ = s.Tell(ra, i)
	}
	<-a.reached
	e, _ := s.Spawn(echo{})
	if _, err := s.Ask(askCtx(t), e, "ping"); err != nil {
		t.Fatalf("Ask next to an always-busy actor: %v", err)
	}
	stop.Store(true)
	waitIdle(t, s)
	if s.Stats().BudgetYields == 0 {
		t.Fatal("the time budget never ended a cycle")
	}
}

func TestPanicInABatchOfTellsResumesWithTheNextMessage(t *testing.T) {
	h := &faultRecorder{ch: make(chan ariel.Fault, 4)}
	s := newSched(t, ariel.Config{Workers: 2, Faults: h})
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var seen []any
	ref, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch msg {
		case "block":
			close(entered)
			<-release
		case "boom":
			panic("boom")
		}
		mu.Lock()
		seen = append(seen, msg)
		mu.Unlock()
	}))
	_ = s.Tell(ref, "block")
	<-entered
	for _, m := range []any{1, "boom", 2, 3} { // queued: one batch
		if err := s.Tell(ref, m); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	waitIdle(t, s)
	if f := <-h.ch; f.Outcome != ariel.Panicked {
		t.Fatalf("fault = %+v", f)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []any{actor.Started{}, "block", 1, 2, 3}
	if !slices.Equal(seen, want) {
		t.Fatalf("handled %v, want %v", seen, want)
	}
}

func TestActorPingPongHopsAreAllDelivered(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	const hops = 20000
	done := make(chan int, 1)
	var pong actor.Ref
	n := 0
	ping, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if k, ok := msg.(int); ok {
			if n++; k != n-1 {
				done <- -k
				return
			}
			if n == hops {
				done <- n
				return
			}
			_ = ctx.Tell(pong, k+1)
		}
	}))
	pong, _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if k, ok := msg.(int); ok {
			_ = ctx.Tell(ctx.Sender(), k)
		}
	}))
	_ = s.Tell(ping, 0)
	select {
	case got := <-done:
		if got != hops {
			t.Fatalf("ping-pong ended at %d, want %d", got, hops)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ping-pong stalled")
	}
}

func TestManyActorPairsHammer(t *testing.T) {
	// Pairs of actors bounce a counter while workers park at once between
	// bursts: exercises seized hops, stealing and parking together.
	s := newSched(t, ariel.Config{Workers: 2, SpinIterations: 1})
	const pairs, hops = 16, 2000
	done := make(chan int, pairs)
	for p := 0; p < pairs; p++ {
		var b actor.Ref
		a, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if k, ok := msg.(int); ok {
				if k >= hops {
					done <- k
					return
				}
				_ = ctx.Tell(b, k+1)
			}
		}))
		b, _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if k, ok := msg.(int); ok {
				_ = ctx.Tell(ctx.Sender(), k+1)
			}
		}))
		if err := s.Tell(a, 0); err != nil {
			t.Fatal(err)
		}
	}
	for p := 0; p < pairs; p++ {
		select {
		case k := <-done:
			if k != hops {
				t.Fatalf("pair ended at %d, want %d", k, hops)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d pairs still bouncing: a wake-up was lost", pairs-p)
		}
	}
	waitIdle(t, s)
}

// nodeRefusal is what Config.Refuse gives: a refusal in a form of its
// own that matches its sentinel.
type nodeRefusal struct{ sentinel error }

func (r nodeRefusal) Error() string { return "refused by n1: " + r.sentinel.Error() }
func (r nodeRefusal) Unwrap() error { return r.sentinel }

func refuseAsNode(sentinel error) error { return nodeRefusal{sentinel} }

// A full mailbox refuses with what Config.Refuse gives whoever sends:
// program code's Tell and Ask, an actor's tell (its error and its
// Undelivered notice) and an actor's ask (its continuation); so does a
// reference pinned to another incarnation. A Refuse whose refusal does
// not match its sentinel is refused.
func TestRefusalIsTheConfiguredOne(t *testing.T) {
	if _, err := ariel.New(ariel.Config{Refuse: func(error) error { return errors.New("full") }}); err == nil {
		t.Fatal("a Refuse that does not keep its sentinel was accepted")
	}
	s := newSched(t, ariel.Config{Workers: 2, Refuse: refuseAsNode})
	b := newBlocker()
	full, _ := s.Spawn(b, actor.WithMailbox(1))
	_ = s.Tell(full, "block")
	<-b.entered
	_ = s.Tell(full, 0) // fills it
	want := func(what string, err error) {
		t.Helper()
		if !errors.As(err, new(nodeRefusal)) || !errors.Is(err, actor.ErrRefused) {
			t.Errorf("%s: %v, want the configured refusal", what, err)
		}
	}
	want("Tell", s.Tell(full, 1))
	if err := s.Tell(full.WithIncarnation(full.Incarnation()+5), 1); !errors.As(err, new(nodeRefusal)) || !errors.Is(err, actor.ErrActorTerminated) {
		t.Errorf("Tell to another incarnation: %v, want the configured refusal of ErrActorTerminated", err)
	}
	_, err := s.Ask(askCtx(t), full, 2)
	want("Ask", err)
	type outcome struct {
		tellErr, undelivered, askErr error
	}
	got := make(chan outcome, 1)
	var o outcome
	sender, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case string:
			o.tellErr = ctx.Tell(full, m)
			ctx.Ask(full, m, func(ctx actor.Context, _ any, err error) {
				o.askErr = err
				if o.undelivered != nil {
					got <- o
				}
			})
		case actor.Undelivered:
			o.undelivered = m.Err
			if o.askErr != nil {
				got <- o
			}
		}
	}))
	_ = s.Tell(sender, "x")
	r := <-got
	want("an actor's tell", r.tellErr)
	want("an actor's Undelivered", r.undelivered)
	want("an actor's ask", r.askErr)
	close(b.release)
}
