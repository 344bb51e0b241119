package ariel_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// ping asks its peer back (B → A) while A waits on its ask to B.
type ping struct{ back bool }

// readQ is a read-only query that may always interleave.
type readQ struct{}

func (readQ) AlwaysInterleave() {}

// aba spawns A (policy pol) and B (reentrant): A asks B, B asks A back,
// and A answers its caller with what B said. It returns the outcome of the
// caller's ask and what A handled, in order.
func aba(t *testing.T, pol actor.Reentrancy) (any, error, []string) {
	return abaIn(t, ariel.Config{Workers: 2}, pol)
}

func abaIn(t *testing.T, cfg ariel.Config, pol actor.Reentrancy) (any, error, []string) {
	t.Helper()
	s := newSched(t, cfg)
	var seen record
	var a actor.Ref
	b, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(ping); ok {
			r := ctx.ReplyLater()
			ctx.Ask(a, ping{back: true}, func(ctx actor.Context, v any, err error) {
				if err != nil {
					_ = r.ReplyError(ctx, err)
					return
				}
				_ = r.Reply(ctx, fmt.Sprint("b saw ", v))
			})
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	a, err = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case ping:
			if m.back {
				seen.add("back")
				ctx.Reply("a")
				return
			}
			seen.add("start")
			r := ctx.ReplyLater()
			ctx.Ask(b, ping{}, func(ctx actor.Context, v any, err error) {
				seen.add("continued")
				if err != nil {
					_ = r.ReplyError(ctx, err)
					return
				}
				_ = r.Reply(ctx, v)
			})
		}
	}), actor.WithReentrancy(pol))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Simulated {
		v, err := s.Ask(askCtx(t), a, ping{})
		waitIdle(t, s)
		return v, err, seen.take()
	}
	// Simulated: the caller is an actor too, so every step is the
	// simulation's (a program-code ask would race its virtual clock).
	var v any
	err = nil
	caller, serr := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "go" {
			ctx.Ask(a, ping{}, func(_ actor.Context, rv any, rerr error) { v, err = rv, rerr })
		}
	}))
	if serr != nil {
		t.Fatal(serr)
	}
	if serr := s.Tell(caller, "go"); serr != nil {
		t.Fatal(serr)
	}
	waitIdle(t, s)
	return v, err, seen.take()
}

// A → B → A completes under Reentrant and CallChainReentrant and fails at
// once with ErrDeadlock naming A → B → A under NonReentrant.
func TestAskCycleOnOneNode(t *testing.T) {
	for _, pol := range []actor.Reentrancy{actor.Reentrant, actor.CallChainReentrant} {
		v, err, seen := aba(t, pol)
		if err != nil || v != "b saw a" {
			t.Fatalf("%v: %v, %v; want b saw a", pol, v, err)
		}
		if want := []string{"start", "back", "continued"}; !slices.Equal(seen, want) {
			t.Fatalf("%v: A handled %v, want %v", pol, seen, want)
		}
	}
	_, err, seen := aba(t, actor.NonReentrant)
	var de *actor.DeadlockError
	if !errors.Is(err, actor.ErrDeadlock) || !errors.As(err, &de) {
		t.Fatalf("NonReentrant: %v, want ErrDeadlock", err)
	}
	if len(de.Cycle) != 3 || de.Cycle[0] != de.Cycle[2] || de.Cycle[0] == de.Cycle[1] {
		t.Fatalf("cycle %v, want A -> B -> A", de.Cycle)
	}
	if want := []string{"start", "continued"}; !slices.Equal(seen, want) {
		t.Fatalf("NonReentrant: A handled %v, want %v", seen, want)
	}
}

// While a NonReentrant actor waits, other mail waits too, except an
// Interleaving query, which runs; a query keeps its sender's order (the
// sender's earlier tell runs before it). When the reply arrives, the
// set-aside mail runs in arrival order.
func TestNonReentrantSetsMailAsideUntilTheReply(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	var seen record
	var held actor.Replier // slow's, touched only in its turns
	slow, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch msg {
		case "work":
			held = ctx.ReplyLater()
		case "go":
			_ = held.Reply(ctx, "done")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case string:
			seen.add(m)
			if m == "begin" {
				ctx.Ask(slow, "work", func(ctx actor.Context, v any, err error) {
					seen.add(fmt.Sprintf("reply %v %v", v, err))
				})
			}
		case readQ:
			seen.add("query")
			ctx.Reply("ok")
		}
	}), actor.WithReentrancy(actor.NonReentrant))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(a, "begin"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	// Two other senders' tells, then from program code a tell and a query.
	other, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if m, ok := msg.(string); ok {
			_ = ctx.Tell(a, m)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(other, "from-other"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if err := s.Tell(a, "from-program"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Ask(askCtx(t), a, readQ{}); err != nil || v != "ok" {
		t.Fatalf("query while waiting: %v, %v", v, err)
	}
	waitIdle(t, s)
	if got, want := seen.take(), []string{"begin", "from-program", "query"}; !slices.Equal(got, want) {
		t.Fatalf("while waiting A handled %v, want %v", got, want)
	}
	// Answer slow's ask from one of its turns.
	if err := s.Tell(slow, "go"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if got, want := seen.take(), []string{"reply done <nil>", "from-other"}; !slices.Equal(got, want) {
		t.Fatalf("after the reply A handled %v, want %v", got, want)
	}
}

// A three-actor cycle A → B → C → A, with A NonReentrant, fails at once
// with the cycle named in order.
func TestThreeActorCycleNamed(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	refs := make([]actor.Ref, 3)
	relay := func(i int) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(ping); !ok {
				return
			}
			r := ctx.ReplyLater()
			ctx.Ask(refs[(i+1)%3], ping{}, func(ctx actor.Context, v any, err error) {
				if err != nil {
					_ = r.ReplyError(ctx, err)
					return
				}
				_ = r.Reply(ctx, v)
			})
		})
	}
	var err error
	for i := 2; i >= 0; i-- {
		pol := actor.Reentrant
		if i == 0 {
			pol = actor.NonReentrant
		}
		if refs[i], err = s.Spawn(relay(i), actor.WithReentrancy(pol)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Ask(askCtx(t), refs[0], ping{})
	var de *actor.DeadlockError
	if !errors.As(err, &de) {
		t.Fatalf("ask: %v, want a DeadlockError", err)
	}
	if want := []actor.Ref{refs[0], refs[1], refs[2], refs[0]}; !slices.Equal(de.Cycle, want) {
		t.Fatalf("cycle %v, want %v", de.Cycle, want)
	}
	if st := s.Stats(); st.Deadlocks != 1 {
		t.Fatalf("Deadlocks = %d, want 1", st.Deadlocks)
	}
}

// An ask that would carry a chain longer than actor.MaxCallChain fails
// with ErrCallChainTooLong instead of being sent.
func TestCallChainBounded(t *testing.T) {
	s := newSched(t, ariel.Config{})
	var self actor.Ref
	self, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		n, ok := msg.(int)
		if !ok {
			return
		}
		if n == 0 {
			ctx.Reply(0)
			return
		}
		r := ctx.ReplyLater()
		ctx.Ask(self, n-1, func(ctx actor.Context, v any, err error) {
			if err != nil {
				_ = r.ReplyError(ctx, err)
				return
			}
			_ = r.Reply(ctx, v.(int)+1)
		})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Ask(askCtx(t), self, actor.MaxCallChain); err != nil || v != actor.MaxCallChain {
		t.Fatalf("%d deep: %v, %v", actor.MaxCallChain, v, err)
	}
	if _, err := s.Ask(askCtx(t), self, actor.MaxCallChain+1); !errors.Is(err, actor.ErrCallChainTooLong) {
		t.Fatalf("%d deep: %v, want ErrCallChainTooLong", actor.MaxCallChain+1, err)
	}
}

// A NonReentrant actor whose ask times out gets ErrDeadlineExceeded in its
// continuation and then takes the mail set aside meanwhile.
func TestNonReentrantResumesAfterDeadline(t *testing.T) {
	s := newSched(t, ariel.Config{})
	silent, err := s.Spawn(mute())
	if err != nil {
		t.Fatal(err)
	}
	var seen record
	a, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		m, ok := msg.(string)
		if !ok {
			return
		}
		seen.add(m)
		if m == "begin" {
			ctx.Ask(silent, "hello?", func(ctx actor.Context, _ any, err error) {
				seen.add(fmt.Sprint("continued: ", errors.Is(err, actor.ErrDeadlineExceeded)))
			}, actor.WithTimeout(20*time.Millisecond))
		}
		if m == "after" {
			ctx.Reply("done")
		}
	}), actor.WithReentrancy(actor.NonReentrant))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(a, "begin"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Ask(askCtx(t), a, "after"); err != nil || v != "done" {
		t.Fatalf("ask after the wait: %v, %v", v, err)
	}
	if got, want := seen.take(), []string{"begin", "continued: true", "after"}; !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
}

// The same A → B → A outcomes in the deterministic simulated scheduler,
// over many seeds (every interleaving it picks).
func TestAskCycleSimulated(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		cfg := ariel.Config{Simulated: true, Seed: seed}
		for _, pol := range []actor.Reentrancy{actor.Reentrant, actor.CallChainReentrant} {
			if v, err, _ := abaIn(t, cfg, pol); err != nil || v != "b saw a" {
				t.Fatalf("seed %d %v: %v, %v", seed, pol, v, err)
			}
		}
		if _, err, seen := abaIn(t, cfg, actor.NonReentrant); !errors.Is(err, actor.ErrDeadlock) ||
			!slices.Equal(seen, []string{"start", "continued"}) {
			t.Fatalf("seed %d NonReentrant: %v, handled %v", seed, err, seen)
		}
	}
}

// seqQ is an interleaving query carrying a sequence number.
type seqQ int

func (seqQ) AlwaysInterleave() {}

// Per-sender FIFO under NonReentrant: a sender's tells and interleaving
// queries, sent while the recipient waits, are handled in send order,
// the queries pulling the tells before them ahead.
func TestNonReentrantKeepsPerSenderOrder(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	var held actor.Replier
	slow, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch msg {
		case "work":
			held = ctx.ReplyLater()
		case "go":
			_ = held.Reply(ctx, "done")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	var seen record
	a, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case string:
			if m == "begin" {
				ctx.Ask(slow, "work", func(actor.Context, any, error) {})
			}
		case int:
			seen.add(fmt.Sprint(m))
		case seqQ:
			seen.add(fmt.Sprint(int(m)))
		}
	}), actor.WithReentrancy(actor.NonReentrant))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(a, "begin"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	sender, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg != "send" {
			return
		}
		for i := range 200 {
			if i%7 == 3 {
				ctx.Ask(a, seqQ(i), nil)
			} else {
				_ = ctx.Tell(a, i)
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(sender, "send"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if err := s.Tell(slow, "go"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	got := seen.take()
	if len(got) != 200 {
		t.Fatalf("handled %d messages, want 200", len(got))
	}
	for i, g := range got {
		if g != fmt.Sprint(i) {
			t.Fatalf("message %d was %s: order broken (%v)", i, g, got[:i+1])
		}
	}
}
