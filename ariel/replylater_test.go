package ariel_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// transfer asks two accounts in turn and answers its own caller from the
// second continuation, through the Replier taken in the first turn.
type withdraw struct{ n int }

type transferMsg struct {
	from, to actor.Ref
	n        int
}

func TestReplyLaterAnswersFromAContinuation(t *testing.T) {
	s := newSched(t, ariel.Config{})
	balance := 10
	acct, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if w, ok := msg.(withdraw); ok {
			if balance < w.n {
				ctx.ReplyError(errInsufficient)
				return
			}
			balance -= w.n
			ctx.Reply(balance)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		m, ok := msg.(transferMsg)
		if !ok {
			return
		}
		r := ctx.ReplyLater()
		ctx.Ask(m.from, withdraw{m.n}, func(ctx actor.Context, reply any, err error) {
			if err != nil {
				_ = r.ReplyError(ctx, err)
				return
			}
			ctx.Reply("stray") // a continuation has no ask of its own
			ctx.Ask(m.from, withdraw{0}, func(ctx actor.Context, reply any, err error) {
				if err := r.Reply(ctx, reply); err != nil {
					t.Errorf("first answer: %v", err)
				}
				if err := r.Reply(ctx, "again"); !errors.Is(err, actor.ErrAlreadyAnswered) {
					t.Errorf("second answer: %v, want ErrAlreadyAnswered", err)
				}
			})
		})
	}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Ask(t.Context(), tr, transferMsg{from: acct, n: 4})
	if err != nil || got != 6 {
		t.Fatalf("transfer: %v, %v; want 6", got, err)
	}
	_, err = s.Ask(t.Context(), tr, transferMsg{from: acct, n: 100})
	if !errors.Is(err, errInsufficient) {
		t.Fatalf("overdraft: %v, want errInsufficient", err)
	}
	if st := s.Stats(); st.StrayReplies != 1 {
		t.Fatalf("StrayReplies = %d, want 1", st.StrayReplies)
	}
}

var errInsufficient = errors.New("insufficient funds")

// A Replier dropped without an answer fails its ask with ErrNoReply long
// before the ask's deadline.
func TestReplyLaterDroppedFailsAsk(t *testing.T) {
	s := newSched(t, ariel.Config{})
	ref, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(string); ok {
			_ = ctx.ReplyLater() // dropped at once
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Ask(ctx, ref, "x")
		done <- err
	}()
	for {
		runtime.GC()
		select {
		case err := <-done:
			if !errors.Is(err, actor.ErrNoReply) {
				t.Fatalf("ask: %v, want ErrNoReply", err)
			}
			if st := s.Stats(); st.NoReply != 1 {
				t.Fatalf("NoReply = %d, want 1", st.NoReply)
			}
			return
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the dropped Replier never failed its ask")
		}
	}
}

// A tell has nothing to answer.
func TestReplyLaterOnATell(t *testing.T) {
	s := newSched(t, ariel.Config{})
	got := make(chan error, 1)
	ref, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(string); ok {
			got <- ctx.ReplyLater().Reply(ctx, 1)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(ref, "x"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, actor.ErrNotAsk) {
		t.Fatalf("Reply on a tell: %v, want ErrNotAsk", err)
	}
}

// A blocking ask from inside a turn is refused at once, sends nothing, and
// is counted; the same ask from program code works.
func TestBlockingAskInTurnRefused(t *testing.T) {
	s := newSched(t, ariel.Config{})
	var target actor.Ref
	delivered := make(chan struct{}, 1)
	target, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(int); ok {
			delivered <- struct{}{}
			ctx.Reply("pong")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	caller, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(string); ok {
			_, err := s.Ask(context.Background(), target, 1)
			res <- err
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(caller, "go"); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.Is(err, actor.ErrAskInTurn) {
		t.Fatalf("ask in a turn: %v, want ErrAskInTurn", err)
	}
	select {
	case <-delivered:
		t.Fatal("the refused ask was delivered")
	default:
	}
	if got, err := s.Ask(t.Context(), target, 2); err != nil || got != "pong" {
		t.Fatalf("program ask: %v, %v", got, err)
	}
	if st := s.Stats(); st.AsksInTurn != 1 {
		t.Fatalf("AsksInTurn = %d, want 1", st.AsksInTurn)
	}
}

// A Replier's answer is an output of the turn that gives it: for a kind
// whose hook holds a turn's outputs until its state is committed, the
// answer given in a continuation that changed state waits for that
// release, like the turn's own reply would.
func TestReplyLaterWaitsForTheAnsweringTurnsCommit(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	echo, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(int); ok {
			ctx.Reply(msg)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	type acc struct{ n int }
	if err := s.Register("acc", func(string) actor.Actor {
		a := &acc{}
		return actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(string); !ok {
				return
			}
			r := ctx.ReplyLater()
			ctx.Ask(echo, 5, func(ctx actor.Context, v any, err error) {
				a.n += v.(int) // the continuation changes state
				_ = r.Reply(ctx, a.n)
			})
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	rels := make(chan func(error), 4)
	var turns atomic.Int32
	if err := s.SetAfterTurn("acc", func(_ actor.Ref, _ uint64, _ actor.Actor, _ bool, h ariel.Hold) {
		if turns.Add(1) == 2 { // the continuation's turn
			rels <- h.Wait()
		}
	}); err != nil {
		t.Fatal(err)
	}
	var replies record
	asker, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "go" {
			ctx.Ask(actor.Virtual("acc", "a"), "deposit", func(_ actor.Context, v any, err error) {
				replies.add(fmt.Sprint(v, err))
			})
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(asker, "go"); err != nil {
		t.Fatal(err)
	}
	release := <-rels
	waitIdle(t, s)
	if got := replies.take(); len(got) != 0 {
		t.Fatalf("answered %v before the continuation's state was committed", got)
	}
	release(nil)
	waitIdle(t, s)
	if got := replies.take(); !slices.Equal(got, []string{"5 <nil>"}) {
		t.Fatalf("answers = %v, want [5 <nil>]", got)
	}
}

// An ask whose turn ends without answering it or taking its Replier fails
// with ErrNoReply when the turn ends, not at its deadline; a later turn's
// Reply does not answer it.
func TestTurnWithoutAnswerFailsAsk(t *testing.T) {
	s := newSched(t, ariel.Config{})
	ref, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "answer" {
			ctx.Reply("yes")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.Ask(ctx, ref, "ignore"); !errors.Is(err, actor.ErrNoReply) {
		t.Fatalf("unanswered ask: %v, want ErrNoReply", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the unanswered ask waited for its deadline")
	}
	if v, err := s.Ask(ctx, ref, "answer"); err != nil || v != "yes" {
		t.Fatalf("answered ask: %v, %v", v, err)
	}
	if err := s.Tell(ref, "ignore"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Ask(ctx, ref, "answer"); err != nil || v != "yes" {
		t.Fatalf("answered ask after a tell: %v, %v", v, err)
	}
	if st := s.Stats(); st.NoReply != 1 {
		t.Fatalf("NoReply = %d, want 1 (a tell is not counted)", st.NoReply)
	}
}

// mute answers no ask and keeps each one open until its deadline by
// holding its Replier.
func mute() actor.Actor {
	var held []actor.Replier
	return actor.Func(func(ctx actor.Context, _ any) { held = append(held, ctx.ReplyLater()) })
}
