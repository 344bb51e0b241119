package ariel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// effectFunc is an ariel.Effect.
type effectFunc func(h ariel.Hold)

func (f effectFunc) Settle(h ariel.Hold) { f(h) }

// An effect a turn stages settles when the turn ends, with the turn's
// outputs in hand: each Wait holds them until its own release, the
// outputs leave once every release was called, failing with the first
// error, and Released reports that outcome. A turn that panics settles
// nothing; a kind whose outputs are not held cannot stage (CanStage
// says so beforehand).
func TestStagedEffectsHoldTheTurn(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 1})
	rels := make(chan [2]func(error), 1)
	outcome := make(chan error, 1)
	settled := make(chan string, 4)
	staged := make(chan error, 4)
	actorOf := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			m, _ := msg.(string)
			switch m {
			case "hold":
				staged <- ariel.Stage(ctx, effectFunc(func(h ariel.Hold) {
					settled <- m
					rels <- [2]func(error){h.Wait(), h.Wait()}
					h.Released(func(err error) { outcome <- err })
				}))
				ctx.Reply("held")
			case "panic":
				staged <- ariel.Stage(ctx, effectFunc(func(ariel.Hold) { settled <- m }))
				panic("after staging")
			case "ping":
				ctx.Reply("pong")
			case "can":
				ctx.Reply(ariel.CanStage(ctx))
			}
		})
	}
	for _, kind := range []string{"held", "plain"} {
		if err := s.Register(kind, actorOf, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetHoldOutputs("held"); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	type res struct {
		v   any
		err error
	}
	done := make(chan res, 1)
	go func() {
		v, err := s.Ask(ctx, actor.Virtual("held", "a"), "hold")
		done <- res{v, err}
	}()
	if err := <-staged; err != nil {
		t.Fatal(err)
	}
	r := <-rels
	if got := <-settled; got != "hold" {
		t.Fatalf("settled %q", got)
	}
	// The worker is free while the outputs are held.
	if v, err := s.Ask(ctx, actor.Virtual("plain", "b"), "ping"); err != nil || v != "pong" {
		t.Fatalf("another actor while a turn is held: %v, %v", v, err)
	}
	r[0](nil)
	select {
	case got := <-done:
		t.Fatalf("answered (%v, %v) with one of two releases still to come", got.v, got.err)
	default:
	}
	errWrite := errors.New("write failed")
	r[1](errWrite)
	if got := <-done; !errors.Is(got.err, errWrite) {
		t.Fatalf("held turn after its releases: %v, %v; want %v", got.v, got.err, errWrite)
	}
	if err := <-outcome; !errors.Is(err, errWrite) {
		t.Fatalf("Released reported %v, want %v", err, errWrite)
	}

	if _, err := s.Ask(ctx, actor.Virtual("held", "c"), "panic"); err == nil {
		t.Fatal("a panicking turn answered without an error")
	}
	if err := <-staged; err != nil {
		t.Fatal(err)
	}
	if v, err := s.Ask(ctx, actor.Virtual("held", "c"), "ping"); err != nil || v != "pong" {
		t.Fatalf("after the panic: %v, %v", v, err)
	}
	select {
	case got := <-settled:
		t.Fatalf("the effect of a turn that panicked settled (%q)", got)
	default:
	}

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = s.Ask(pctx, actor.Virtual("plain", "d"), "panic") }()
	if err := <-staged; !errors.Is(err, ariel.ErrNotHeld) {
		t.Fatalf("Stage in a kind whose outputs are not held: %v, want ErrNotHeld", err)
	}
	// CanStage tells beforehand, staging nothing.
	if v, err := s.Ask(ctx, actor.Virtual("held", "e"), "can"); err != nil || v != nil {
		t.Fatalf("CanStage in a kind whose outputs are held: %v, %v; want nil", v, err)
	}
	if v, err := s.Ask(ctx, actor.Virtual("plain", "e"), "can"); err != nil || !isErr(v, ariel.ErrNotHeld) {
		t.Fatalf("CanStage in a kind whose outputs are not held: %v, %v; want ErrNotHeld", v, err)
	}
}

// isErr reports whether v is an error that is target.
func isErr(v any, target error) bool {
	err, ok := v.(error)
	return ok && errors.Is(err, target)
}

// A turn abandoned past its budget while its effects settle keeps what an
// earlier Wait held, and a later effect's Wait still adds to it: the
// outputs wait for every release and fail with the first error given,
// as for a turn that was not abandoned.
func TestWaitAfterAbandonmentStillHolds(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2, TurnBudget: 5 * time.Second})
	rels := make(chan [2]func(error), 1)
	outcome := make(chan error, 1)
	if err := s.Register("held", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if msg != "hold" {
				return
			}
			var r1 func(error)
			_ = ariel.Stage(ctx, effectFunc(func(h ariel.Hold) {
				r1 = h.Wait()
				waitFor(t, h.Abandoned) // the watchdog gives up on the turn
			}))
			_ = ariel.Stage(ctx, effectFunc(func(h ariel.Hold) {
				r2 := h.Wait()
				h.Released(func(err error) { outcome <- err })
				rels <- [2]func(error){r1, r2}
			}))
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHoldOutputs("held"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTurnBudget("held", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(actor.Virtual("held", "a"), "hold"); err != nil {
		t.Fatal(err)
	}
	r := <-rels
	r[0](nil)
	errWrite := errors.New("write failed")
	r[1](errWrite)
	select {
	case err := <-outcome:
		if !errors.Is(err, errWrite) {
			t.Fatalf("outputs finished with %v, want the second effect's %v", err, errWrite)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the outputs never finished")
	}
}
