package ariel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// TestCancelledQueuedAskIsDropped: an ask waiting behind a running turn
// whose caller cancels its context never gets a turn, and is counted;
// one withdrawn through its QueuedAsk (an ask from another node) alike,
// and its reply function is never called.
func TestCancelledQueuedAskIsDropped(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	b := newBlocker()
	ref, _ := s.Spawn(b)
	if err := s.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	<-b.entered
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Ask(ctx, ref, "cancelled")
		done <- err
	}()
	for s.Queued(ref) != 1 {
		time.Sleep(time.Millisecond) // polling a gauge, not timing
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ask = %v", err)
	}
	replied := make(chan error, 1)
	q, err := s.DeliverAsk(ref, actor.Ref{}, "withdrawn", time.Now().Add(time.Minute), nil, nil, func(_ any, err error) { replied <- err })
	if err != nil {
		t.Fatal(err)
	}
	if !q.Withdraw() {
		t.Fatal("a queued ask could not be withdrawn")
	}
	if q.Withdraw() {
		t.Fatal("an ask was withdrawn twice")
	}
	close(b.release)
	if got, err := s.Ask(askCtx(t), ref, "after"); err != nil || got != "after" {
		t.Fatalf("later ask = %v, %v", got, err)
	}
	b.mu.Lock()
	var handled []any
	for _, m := range b.handled {
		if _, ok := m.(string); ok {
			handled = append(handled, m)
		}
	}
	b.mu.Unlock()
	if len(handled) != 1 || handled[0] != "after" {
		t.Fatalf("handled %v, want only the later ask", handled)
	}
	select {
	case err := <-replied:
		t.Fatalf("a withdrawn ask was answered: %v", err)
	default:
	}
	if got := s.Stats().Cancelled; got != 2 {
		t.Fatalf("Stats.Cancelled = %d, want 2", got)
	}
}

// TestStartedAskIsNotWithdrawn: once its turn started, an ask runs to
// completion and is answered; Withdraw reports false.
func TestStartedAskIsNotWithdrawn(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	b := newBlocker()
	ref, _ := s.Spawn(b)
	replied := make(chan any, 1)
	q, err := s.DeliverAsk(ref, actor.Ref{}, "block", time.Now().Add(time.Minute), nil, nil, func(v any, _ error) { replied <- v })
	if err != nil {
		t.Fatal(err)
	}
	<-b.entered
	if q.Withdraw() {
		t.Fatal("a running ask was withdrawn")
	}
	close(b.release)
	waitIdle(t, s)
	if s.Stats().Cancelled != 0 {
		t.Fatal("a started ask was counted cancelled")
	}
}

// TestAskDeadlineClampedByKind: a kind's maximum ask timeout clamps a
// longer deadline, its default applies when none is set, for asks made
// here and asks delivered from elsewhere.
func TestAskDeadlineClampedByKind(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	if err := s.Register("k", func(string) actor.Actor { return echo{} }, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAskTimeouts("k", 2*time.Second, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAskTimeouts("k", 4*time.Second, 3*time.Second); err == nil {
		t.Fatal("a default over the maximum was accepted")
	}
	now := time.Unix(1000, 0)
	ref := actor.Virtual("k", "x")
	for _, tc := range []struct{ set, want time.Time }{
		{time.Time{}, now.Add(2 * time.Second)},
		{now.Add(time.Second), now.Add(time.Second)},
		{now.Add(time.Hour), now.Add(3 * time.Second)},
	} {
		if got := s.AskDeadline(ref, now, tc.set); !got.Equal(tc.want) {
			t.Errorf("AskDeadline(%v) = %v, want %v", tc.set, got, tc.want)
		}
	}
	if got := s.AskDeadline(actor.Virtual("other", "x"), now, time.Time{}); !got.Equal(now.Add(actor.DefaultAskTimeout)) {
		t.Errorf("unknown kind: %v", got)
	}
	if got := s.AskDeadline(actor.Virtual("other", "x"), now, now.Add(time.Hour)); !got.Equal(now.Add(time.Hour)) {
		t.Errorf("unknown kind clamped: %v", got)
	}
}

// TestAskDeadlineOfAForeignKind: a kind not registered here gets the
// policy Config.ForeignAskTimeouts gives for it (what its hosts publish),
// a registered kind its own, and a kind nobody publishes the defaults.
func TestAskDeadlineOfAForeignKind(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 1, ForeignAskTimeouts: func(kind string) (time.Duration, time.Duration, bool) {
		switch kind {
		case "remote", "k":
			return 2 * time.Second, 3 * time.Second, true
		case "max-only":
			return 0, 3 * time.Second, true
		}
		return 0, 0, false
	}})
	if err := s.Register("k", func(string) actor.Actor { return echo{} }, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		kind      string
		set, want time.Time
	}{
		{"remote", time.Time{}, now.Add(2 * time.Second)},
		{"remote", now.Add(time.Second), now.Add(time.Second)},
		{"remote", now.Add(time.Hour), now.Add(3 * time.Second)},
		{"max-only", time.Time{}, now.Add(3 * time.Second)},
		{"max-only", now.Add(time.Hour), now.Add(3 * time.Second)},
		{"k", time.Time{}, now.Add(actor.DefaultAskTimeout)}, // registered here: its own policy
		{"k", now.Add(time.Hour), now.Add(time.Hour)},
		{"unknown", time.Time{}, now.Add(actor.DefaultAskTimeout)},
		{"unknown", now.Add(time.Hour), now.Add(time.Hour)},
	} {
		if got := s.AskDeadline(actor.Virtual(tc.kind, "x"), now, tc.set); !got.Equal(tc.want) {
			t.Errorf("AskDeadline(%s, %v) = %v, want %v", tc.kind, tc.set, got, tc.want)
		}
	}
}

// TestAskFromElsewhereClampedOnArrival: an ask delivered from another
// node whose caller did not know the kind's maximum (its deadline later
// than now plus the maximum) is clamped on arrival: it fails at the
// maximum, not at its caller's deadline.
func TestAskFromElsewhereClampedOnArrival(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 1})
	var held []actor.Replier
	var mu sync.Mutex
	if err := s.Register("k", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if msg == "hold" {
				mu.Lock()
				held = append(held, ctx.ReplyLater()) // never answered
				mu.Unlock()
			}
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAskTimeouts("k", 20*time.Millisecond, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	if _, err := s.DeliverAsk(actor.Virtual("k", "x"), actor.Ref{}, "hold", time.Now().Add(time.Hour), nil, nil,
		func(_ any, err error) { res <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, actor.ErrDeadlineExceeded) {
			t.Fatalf("clamped ask: %v, want ErrDeadlineExceeded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an ask whose caller set an hour was not clamped to the kind's 50 ms maximum")
	}
}
