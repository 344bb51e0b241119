package ariel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/wire"
)

// tally counts, per message id, how often an actor handled it.
type tally struct {
	seen  []atomic.Int32
	total atomic.Int64
	want  int64
	done  chan struct{}
}

func newTally(n int) *tally {
	return &tally{seen: make([]atomic.Int32, n), want: int64(n), done: make(chan struct{})}
}

type tallied struct{ t *tally }

func (a tallied) Receive(_ actor.Context, msg any) {
	if id, ok := msg.(int); ok {
		a.t.seen[id].Add(1)
		if a.t.total.Add(1) == a.t.want {
			close(a.t.done)
		}
	}
}

// relay forwards [2]any{ref, msg} from inside a turn, so the send is
// resolved in the turn and flushed after it (the batched path).
type relay struct{}

func (relay) Receive(ctx actor.Context, msg any) {
	if m, ok := msg.([2]any); ok {
		_ = ctx.Tell(m[0].(actor.Ref), m[1])
	}
}

// Sends (from program code and from inside turns) racing passivation:
// every message is handled exactly once.
func TestSendsRacingCellRemovalHammer(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2, MailboxCapacity: 1 << 16})
	const keys, senders, perSender = 8, 4, 1500
	tl := newTally(senders * perSender)
	if err := s.Register("h", func(string) actor.Actor { return tallied{tl} }, 0); err != nil {
		t.Fatal(err)
	}
	relays := make([]actor.Ref, senders)
	for i := range relays {
		r, err := s.Spawn(relay{}, actor.WithMailbox(1<<16))
		if err != nil {
			t.Fatal(err)
		}
		relays[i] = r
	}
	ref := func(k int) actor.Ref { return actor.Virtual("h", fmt.Sprint(k)) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the passivator
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = s.Passivate(ref(i%keys), nil)
		}
	}()
	var senderWG sync.WaitGroup
	var failed atomic.Int64
	for g := range senders {
		senderWG.Add(1)
		go func() {
			defer senderWG.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range perSender {
				id := g*perSender + i
				to := ref(rng.IntN(keys))
				var err error
				if i%2 == 0 {
					err = s.Tell(to, id)
				} else {
					err = s.Tell(relays[g], [2]any{to, id})
				}
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	senderWG.Wait()
	if n := failed.Load(); n != 0 {
		close(stop)
		wg.Wait()
		t.Fatalf("%d sends failed", n)
	}
	select {
	case <-tl.done:
	case <-time.After(30 * time.Second):
	}
	close(stop)
	wg.Wait()
	if got := tl.total.Load(); got != tl.want {
		states := make([]actor.ReferenceState, keys)
		for k := range keys {
			states[k] = s.State(ref(k))
		}
		even, odd := 0, 0
		for id := range tl.seen {
			if tl.seen[id].Load() == 0 {
				if (id%perSender)%2 == 0 {
					even++
				} else {
					odd++
				}
			}
		}
		t.Fatalf("handled %d of %d messages (missing: %d direct, %d relayed); states %v; stats %+v", got, tl.want, even, odd, states, s.Stats())
	}
	for id := range tl.seen {
		if n := tl.seen[id].Load(); n != 1 {
			t.Fatalf("message %d handled %d times", id, n)
		}
	}
}

// quiet is a virtual actor that records its incarnation and lifecycle.
type quiet struct {
	mu  *sync.Mutex
	log *[]string
}

func (q quiet) Receive(ctx actor.Context, msg any) {
	q.mu.Lock()
	*q.log = append(*q.log, fmt.Sprintf("%T@%d", msg, ctx.Self().Incarnation()))
	q.mu.Unlock()
	if msg == "self" {
		ctx.Reply(ctx.Self())
	}
}

// AttachAt sets the incarnation of a cell that already holds mail (ariel
// made it at an unknown incarnation); Replace swaps the value without
// re-minting; RestartAt re-mints to the given number.
func TestAttachAtReplaceRestartAt(t *testing.T) {
	bell := &doorbell{}
	s := newSched(t, ariel.Config{Workers: 2, Activator: bell})
	var mu sync.Mutex
	var log []string
	if err := s.Register("q", func(string) actor.Actor { return quiet{&mu, &log} }, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("q", "1")
	if err := s.Tell(ref, 1); err != nil { // makes the cell, rings
		t.Fatal(err)
	}
	if err := s.AttachAt(ref, 7, quiet{&mu, &log}); err != nil {
		t.Fatal(err)
	}
	self, err := s.Ask(askCtx(t), ref, "self")
	if err != nil || self.(actor.Ref).Incarnation() != 7 {
		t.Fatalf("Self after AttachAt(7) = %v, %v", self, err)
	}
	if err := s.Replace(ref, quiet{&mu, &log}); err != nil {
		t.Fatal(err)
	}
	if self, err := s.Ask(askCtx(t), ref.WithIncarnation(7), "self"); err != nil || self.(actor.Ref).Incarnation() != 7 {
		t.Fatalf("Self after Replace = %v, %v (want incarnation 7 kept)", self, err)
	}
	if err := s.RestartAt(ref, 9, quiet{&mu, &log}); err != nil {
		t.Fatal(err)
	}
	if self, err := s.Ask(askCtx(t), ref, "self"); err != nil || self.(actor.Ref).Incarnation() != 9 {
		t.Fatalf("Self after RestartAt(9) = %v, %v", self, err)
	}
	if st := s.State(ref.WithIncarnation(7)); st != actor.ActorTerminated {
		t.Fatalf("State(pinned to 7) after RestartAt(9) = %v", st)
	}
	waitIdle(t, s)
	mu.Lock()
	defer mu.Unlock()
	starts := 0
	for _, l := range log {
		if l == "actor.Passivating@7" {
			t.Fatalf("Replace delivered Passivating: %q", log)
		}
		if len(l) > 13 && l[:13] == "actor.Started" {
			starts++
		}
	}
	if starts != 3 {
		t.Fatalf("Started %d times, want 3: %q", starts, log)
	}
}

// The after-turn hook runs after each normal turn of a kind that asked
// for it, on the turn thread, and not after a turn that panicked.
func TestAfterTurnHook(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2, Faults: &ariel.LogFaults{}})
	var n atomic.Int64
	var incs sync.Map
	if err := s.Register("p", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if msg == "boom" {
				panic("boom")
			}
			if msg == "?" {
				ctx.Reply(n.Load())
			}
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAfterTurn("p", func(ref actor.Ref, inc uint64, a actor.Actor, _ bool, _ ariel.Hold) {
		if a == nil || !ref.IsVirtual() {
			t.Errorf("hook got %v, %v", ref, a)
		}
		incs.Store(inc, true)
		n.Add(1)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAfterTurn("nope", nil); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("SetAfterTurn of an unknown kind: %v", err)
	}
	ref := actor.Virtual("p", "1")
	for range 3 {
		if err := s.Tell(ref, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Tell(ref, "boom"); err != nil {
		t.Fatal(err)
	}
	// The ask's reply is read inside the 5th turn: 3 tells ran their hooks.
	if got, err := s.Ask(askCtx(t), ref, "?"); err != nil || got != int64(3) {
		t.Fatalf("hooks before the ask = %v, %v, want 3 (none after the panic)", got, err)
	}
	waitIdle(t, s)
	if got := n.Load(); got != 4 {
		t.Fatalf("hooks = %d, want 4", got)
	}
	if _, ok := incs.Load(uint64(1)); !ok {
		t.Fatal("hook did not see incarnation 1")
	}
}

// Retire of a cell with no actor answers its waiting mail at once; Reject
// answers with the given error and keeps the identity reachable.
func TestRetireAndRejectCellWithoutActor(t *testing.T) {
	bell := chanBell{make(chan actor.Ref, 16)}
	s := newSched(t, ariel.Config{Workers: 2, Activator: bell})
	if err := s.Register("w", func(string) actor.Actor { return echo{} }, 0); err != nil {
		t.Fatal(err)
	}
	ask := func(ref actor.Ref) chan error {
		ch := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := s.Ask(ctx, ref, "hi")
			ch <- err
		}()
		return ch
	}
	// An actor whose tell will come back as Undelivered.
	undelivered := make(chan actor.Undelivered, 1)
	errA := make(chan error, 1)
	sender, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case actor.Ref:
			// One turn: both land in the mailbox in one push, before the
			// doorbell rings.
			ctx.Ask(m, "hi", func(_ actor.Context, _ any, err error) { errA <- err })
			_ = ctx.Tell(m, "lost")
		case actor.Undelivered:
			undelivered <- m
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	a := actor.Virtual("w", "a")
	if err := s.Tell(sender, a); err != nil {
		t.Fatal(err)
	}
	waitRing(t, bell)
	if st := s.State(a); st != actor.Dormant {
		t.Fatalf("State with mail waiting = %v", st)
	}
	if err := s.Retire(a); err != nil {
		t.Fatal(err)
	}
	if err := <-errA; !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("ask to a retired cell without actor: %v", err)
	}
	select {
	case u := <-undelivered:
		if !errors.Is(u.Err, actor.ErrActorTerminated) || u.Message != "lost" {
			t.Fatalf("Undelivered = %+v", u)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no Undelivered for the tell to the retired cell")
	}

	b := actor.Virtual("w", "b")
	errB := ask(b)
	waitRing(t, bell)
	if err := s.Reject(b, ariel.ErrClosed); err != nil {
		t.Fatal(err)
	}
	if err := <-errB; !errors.Is(err, actor.ErrProcessUnavailable) {
		t.Fatalf("ask to a rejected identity: %v", err)
	}
	// The next mail rings again.
	if err := s.Tell(b, 1); err != nil {
		t.Fatal(err)
	}
	waitRing(t, bell)
}

// chanBell is a doorbell that signals each ring on a channel.
type chanBell struct{ ch chan actor.Ref }

func (b chanBell) Ring(ref actor.Ref) { b.ch <- ref }

func waitRing(t *testing.T, bell chanBell) {
	t.Helper()
	select {
	case <-bell.ch:
	case <-time.After(20 * time.Second):
		t.Fatal("no doorbell")
	}
}

// After Close, Passivate runs the final turn inline (no worker is left)
// instead of leaving its caller waiting.
func TestPassivateAfterClose(t *testing.T) {
	s, err := ariel.New(ariel.Config{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log []string
	if err := s.Register("q", func(string) actor.Actor { return quiet{&mu, &log} }, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("q", "z")
	if _, err := s.Ask(askCtx(t), ref, "self"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan actor.Actor, 1)
	if err := s.Passivate(ref, func(a actor.Actor) { got <- a }); err != nil {
		t.Fatalf("Passivate after Close: %v", err)
	}
	select {
	case a := <-got:
		if a == nil {
			t.Fatal("final got no actor value")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("final did not run")
	}
	if err := s.Passivate(ref, nil); err == nil {
		t.Fatal("second Passivate after Close succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if last := log[len(log)-1]; last != "actor.Passivating@1" {
		t.Fatalf("last turn %q, want the Passivating turn", last)
	}
}

// NotifyUndelivered reaches an actor whose mailbox is full: the notice
// travels in the system lane, which is never refused.
func TestNotifyUndeliveredBypassesAFullMailbox(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	release := make(chan struct{})
	entered := make(chan struct{})
	got := make(chan actor.Undelivered, 1)
	ref, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case string:
			if m == "block" {
				close(entered)
				<-release
			}
		case actor.Undelivered:
			got <- m
		}
	}), actor.WithMailbox(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := s.Tell(ref, "fill"); err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(ref, "over"); !errors.Is(err, actor.ErrRefused) {
		close(release)
		t.Fatalf("Tell to a full mailbox: %v, want ErrRefused", err)
	}
	n := actor.Undelivered{To: actor.Virtual("far", "x"), Message: "m", Err: actor.ErrRefused}
	err = s.NotifyUndelivered(ref, n)
	close(release)
	if err != nil {
		t.Fatalf("NotifyUndelivered to a full mailbox: %v", err)
	}
	select {
	case u := <-got:
		if u.Message != "m" || !errors.Is(u.Err, actor.ErrRefused) {
			t.Fatalf("notice = %+v", u)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("notice not delivered")
	}
	if err := s.NotifyUndelivered(actor.Virtual("far", "y"), n); err == nil {
		t.Fatal("NotifyUndelivered to an identity without actor succeeded")
	}
}

// A burst of Passivate calls while the actor is busy queues one
// passivation: the actor receives Passivating once, every final runs, and
// the mail that waited for the next activation runs before the next
// passivation.
func TestPassivateBurstJoinsOnePassivation(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var passivating, handled atomic.Int64
	if err := s.Register("b", func(string) actor.Actor {
		return actor.Func(func(_ actor.Context, msg any) {
			switch msg.(type) {
			case actor.Passivating:
				passivating.Add(1)
			case string:
				select {
				case entered <- struct{}{}:
					<-release
				default:
				}
			case int:
				handled.Add(1)
			}
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("b", "1")
	if err := s.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	<-entered
	const n = 50
	var finals sync.WaitGroup
	finals.Add(n)
	for range n {
		if err := s.Passivate(ref, func(a actor.Actor) {
			if a == nil {
				t.Error("final got no actor value")
			}
			finals.Done()
		}); err != nil {
			close(release)
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := s.Tell(ref, i); err != nil {
			close(release)
			t.Fatal(err)
		}
	}
	close(release)
	done := make(chan struct{})
	go func() { finals.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("not every final ran")
	}
	// The mail queued behind the passivation re-activates the actor (the
	// Activator attaches a new value after the passivation's turn ends,
	// which the finals above do not wait for: until then Passivate finds
	// no value, ErrNotAttached); a new passivation then waits behind it.
	type seen struct{ handled, passivating int64 }
	last := make(chan seen, 1)
	for deadline := time.Now().Add(20 * time.Second); ; {
		err := s.Passivate(ref, func(actor.Actor) {
			last <- seen{handled.Load(), passivating.Load()}
		})
		if err == nil {
			break
		}
		if !errors.Is(err, ariel.ErrNotAttached) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		runtime.Gosched() // the activation is on its way
	}
	select {
	case got := <-last:
		if got.handled != 10 || got.passivating != 2 {
			t.Fatalf("at the second passivation: handled %d of 10, Passivating %d times (want 2: one per burst)", got.handled, got.passivating)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("second passivation did not run")
	}
}

// RetireThen reports the release only once the retiring cell is out of
// the scheduler (mail sent then gets a fresh cell), for a cell with an
// actor, one without, and after Close.
func TestRetireThenReportsTheRelease(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	if err := s.Register("w", func(string) actor.Actor { return echo{} }, 0); err != nil {
		t.Fatal(err)
	}
	released := func(ref actor.Ref) (func(), chan bool) {
		ch := make(chan bool, 1)
		return func() { ch <- s.Resident(ref) }, ch
	}
	wait := func(ch chan bool) {
		t.Helper()
		select {
		case resident := <-ch:
			if resident {
				t.Fatal("released while the cell was still in the scheduler")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("never released")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	live := actor.Virtual("w", "live")
	if _, err := s.Ask(ctx, live, "hi"); err != nil {
		t.Fatal(err)
	}
	fn, ch := released(live)
	if err := s.RetireThen(live, fn); err != nil {
		t.Fatal(err)
	}
	wait(ch)
	if _, err := s.Ask(ctx, live, "hi"); err != nil {
		t.Fatalf("ask after the release: %v", err)
	}

	empty := actor.Virtual("w", "empty")
	if err := s.EnsureCell(empty, 1, 0); err != nil {
		t.Fatal(err)
	}
	fn, ch = released(empty)
	if err := s.RetireThen(empty, fn); err != nil {
		t.Fatal(err)
	}
	wait(ch)
	if err := s.RetireThen(empty, func() { t.Error("released twice") }); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("RetireThen of a released cell: %v", err)
	}

	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fn, ch = released(live)
	if err := s.RetireThen(live, fn); err != nil {
		t.Fatal(err)
	}
	wait(ch)
}

// A retirement queued behind a turn that is then abandoned (its value
// detached) is carried out at once: its release does not wait for an
// attach that will never come.
func TestRetireThenBehindAnAbandonedTurn(t *testing.T) {
	hold := make(chan struct{})
	entered := make(chan struct{}, 1)
	// No activation comes back (a supervisor whose identity is retiring
	// does not attach one).
	s := newSched(t, ariel.Config{Workers: 2, TurnBudget: 100 * time.Millisecond, Faults: &ariel.LogFaults{},
		Activator: silent{}})
	t.Cleanup(func() { close(hold) }) // before the scheduler's Close
	stuck := actor.Func(func(ctx actor.Context, msg any) {
		if msg == "block" {
			entered <- struct{}{}
			<-hold
		}
	})
	if err := s.Register("stuck", func(string) actor.Actor { return stuck }, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("stuck", "a")
	if err := s.Attach(ref, stuck); err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the blocking turn never ran")
	}
	released := make(chan bool, 1)
	if err := s.RetireThen(ref, func() { released <- s.Resident(ref) }); err != nil {
		t.Fatal(err)
	}
	select {
	case resident := <-released:
		if resident {
			t.Fatal("released while the cell was still in the scheduler")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the retirement behind the abandoned turn was never released")
	}
}

// resendRouter is the local router that, as a Resender, takes back the
// mail Reject offers it while take is set, and records it.
type resendRouter struct {
	ariel.Router
	mu      sync.Mutex
	take    bool
	batches [][]ariel.Outbound
	errs    []error
}

func (r *resendRouter) ResendAll(batch []ariel.Outbound, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, append([]ariel.Outbound(nil), batch...))
	r.errs = append(r.errs, err)
	return r.take
}

func (r *resendRouter) got() ([][]ariel.Outbound, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]ariel.Outbound(nil), r.batches...), append([]error(nil), r.errs...)
}

// resendSender asks and then tells the reference it is sent, from one
// turn, and reports the ask's outcome on inTurn; told a channel, it
// closes it (the sends of its earlier turns have left by then).
func resendSender(inTurn chan<- error) actor.Actor {
	return actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case actor.Ref:
			ctx.Ask(m, "in-turn ask", func(_ actor.Context, v any, err error) {
				if err == nil && v != "answered" {
					err = fmt.Errorf("answered %v", v)
				}
				inTurn <- err
			})
			_ = ctx.Tell(m, "in-turn tell")
		case chan struct{}:
			close(m)
		}
	})
}

// sendsLeft tells sender a channel and waits until it closes it.
func sendsLeft(t *testing.T, s *ariel.Scheduler, sender actor.Ref) {
	t.Helper()
	ch := make(chan struct{})
	if err := s.Tell(sender, ch); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("the sender's next turn never ran")
	}
}

// Reject hands a Resender the messages that waited for the refused
// activation in one batch, in mailbox order, as they would be forwarded
// (an ask with an id its outcome completes, a tell with its sender),
// but for mail that arrived from another node: an ask is answered by its
// reply function, a tell is failed. What the Resender takes is its own;
// what it declines fails as before, and a local asker gets the error
// without the mark that only another node's reply function may see.
func TestRejectHandsWaitingMailToResender(t *testing.T) {
	bell := chanBell{make(chan actor.Ref, 16)}
	s := newSched(t, ariel.Config{Workers: 2, Activator: bell})
	if err := s.Register("w", func(string) actor.Actor { return echo{} }, 0); err != nil {
		t.Fatal(err)
	}
	rr := &resendRouter{Router: s.LocalRouter(), take: true}
	s.SetRouter(rr)
	refusal := errors.New("fenced off")
	fenced := wire.NotRun(refusal)
	a := actor.Virtual("w", "a")
	inTurn := make(chan error, 1)
	sender, err := s.Spawn(resendSender(inTurn))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(sender, a); err != nil {
		t.Fatal(err)
	}
	waitRing(t, bell)
	sendsLeft(t, s, sender)
	if err := s.Tell(a, "program tell"); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(a, actor.Ref{}, "remote tell", time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	remote := make(chan error, 1)
	if err := s.Deliver(a, actor.Ref{}, "remote ask", time.Now().Add(20*time.Second), func(_ any, err error) { remote <- err }); err != nil {
		t.Fatal(err)
	}
	if n := s.Queued(a); n != 5 {
		t.Fatalf("%d queued for %v, want 5", n, a)
	}
	if err := s.Reject(a, fenced); err != nil {
		t.Fatal(err)
	}
	if err := <-remote; err != fenced {
		t.Fatalf("the ask from another node = %v, want the rejection itself", err)
	}
	batches, errs := rr.got()
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("handed %d batches (%+v), want one of 3 messages", len(batches), batches)
	}
	if errs[0] != fenced {
		t.Fatalf("batch handed with %v, want the rejection", errs[0])
	}
	offered := batches[0]
	for i, want := range []string{"in-turn ask", "in-turn tell", "program tell"} {
		if m := offered[i]; m.Msg != want || m.To != a {
			t.Fatalf("offered #%d = %+v, want %q to %v", i, m, want, a)
		}
	}
	if ask := offered[0]; ask.AskID == 0 || ask.Deadline.IsZero() || ask.From.ID() != sender.ID() || !s.AskPending(ask.AskID) {
		t.Fatalf("the in-turn ask offered as %+v, want its id, deadline and sender", ask)
	}
	if tell := offered[1]; tell.AskID != 0 || tell.From.ID() != sender.ID() {
		t.Fatalf("the in-turn tell offered as %+v, want its sender", tell)
	}
	if !s.CompleteAsk(offered[0].AskID, "answered", nil) {
		t.Fatal("the offered ask's id completes nothing")
	}
	if err := <-inTurn; err != nil {
		t.Fatalf("the in-turn ask, answered by its id: %v", err)
	}

	// Declined, the mail fails with the rejection, and the in-turn asker
	// gets it unmarked.
	rr.mu.Lock()
	rr.take = false
	rr.mu.Unlock()
	if err := s.Tell(sender, a); err != nil {
		t.Fatal(err)
	}
	waitRing(t, bell)
	sendsLeft(t, s, sender)
	if err := s.Reject(a, fenced); err != nil {
		t.Fatal(err)
	}
	if err := <-inTurn; err != refusal {
		t.Fatalf("a declined in-turn ask = %v (%T), want the rejection without its mark", err, err)
	}
}

// splitBell activates every kind but one at once (FactoryActivator); the
// rings of that kind go to ch.
type splitBell struct {
	s    *ariel.Scheduler
	kind string
	ch   chan actor.Ref
}

func (b *splitBell) Ring(ref actor.Ref) {
	if ref.Kind() == b.kind {
		b.ch <- ref
		return
	}
	ariel.FactoryActivator{S: b.s}.Ring(ref)
}

// An actor that replies, to an ask from another node, the error its own
// ask got from a Reject marked for other nodes (wire.NotRun) replies an
// error, not that mark: its caller's node must not take an ask that ran
// for one refused unrun and send it again.
func TestRelayedRejectionIsNotMarked(t *testing.T) {
	bell := &splitBell{kind: "w", ch: make(chan actor.Ref, 4)}
	s := newSched(t, ariel.Config{Workers: 2, Activator: bell})
	bell.s = s
	if err := s.Register("w", func(string) actor.Actor { return echo{} }, 0); err != nil {
		t.Fatal(err)
	}
	w := actor.Virtual("w", "a")
	relay := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if msg != "relay" {
				return
			}
			r := ctx.ReplyLater()
			ctx.Ask(w, "x", func(ctx actor.Context, _ any, err error) { _ = r.ReplyError(ctx, err) })
		})
	}
	if err := s.Register("relay", relay, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	if err := s.Deliver(actor.Virtual("relay", "r"), actor.Ref{}, "relay", time.Now().Add(20*time.Second), func(_ any, err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	var rung actor.Ref
	select {
	case rung = <-bell.ch:
	case <-time.After(20 * time.Second):
		t.Fatal("no doorbell for the relayed ask")
	}
	refusal := errors.New("not served here")
	if err := s.Reject(rung, wire.NotRun(refusal)); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay never replied")
	}
	if !errors.Is(err, refusal) || wire.IsNotRun(err) {
		t.Fatalf("the relay replied %v (%T), want the refusal as a plain error", err, err)
	}
}
