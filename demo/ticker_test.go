package demo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/reminders"
)

// tickerNode starts a node with the demo kinds on dir, with reminders
// allowed down to 20 ms so the test need not wait seconds.
func tickerNode(t *testing.T, dir string) *tempest.Node {
	t.Helper()
	cfg := tempest.Config{DataDir: dir}
	cfg.Reminders.MinPeriod = 20 * time.Millisecond
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return n
}

func tickerStatus(t *testing.T, n *tempest.Node, key string, msg any) demo.TickerStatus {
	t.Helper()
	got, err := n.Ask(t.Context(), n.Ref(demo.Ticker, key), msg)
	if err != nil {
		t.Fatalf("ask %T: %v", msg, err)
	}
	return got.(demo.TickerStatus)
}

// waitTicks waits until the ticker has counted more than n ticks.
func waitTicks(t *testing.T, node *tempest.Node, key string, n uint64) demo.TickerStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := tickerStatus(t, node, key, demo.Get{})
		if s.Ticks > n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticker %s: %d ticks after 20 s, want more than %d: %+v", key, s.Ticks, n, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTickerTicksWhileDormantAndAfterARestart: the ticker's reminder
// wakes it after a passivation, counts each tick once, goes on after the
// node restarts on its data directory, and stops with Stop.
func TestTickerTicksWhileDormantAndAfterARestart(t *testing.T) {
	dir := t.TempDir()
	n := tickerNode(t, dir)
	s := tickerStatus(t, n, "a", demo.Start{PeriodMs: 50})
	if !s.Running || s.PeriodMs != 50 || s.Ticks != 0 || s.NextMs == 0 {
		t.Fatalf("after Start: %+v", s)
	}
	s = waitTicks(t, n, "a", 1)
	if s.LastSeq < s.Ticks || s.LastScheduledMs == 0 {
		t.Fatalf("after ticks: %+v", s)
	}
	ref := n.Ref(demo.Ticker, "a")
	if err := n.Passivate(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
	// A tick hydrates it; its count went on from its state at rest.
	waitFor(t, "the ticker active again", func() bool {
		st, err := n.Status(t.Context(), ref)
		return err == nil && st.Active
	})
	s = waitTicks(t, n, "a", s.Ticks)
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	n = tickerNode(t, dir)
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	after := waitTicks(t, n, "a", s.Ticks)
	if after.LastSeq <= s.LastSeq || !after.Running {
		t.Fatalf("after the restart: %+v, before %+v", after, s)
	}
	stopped := tickerStatus(t, n, "a", demo.Stop{})
	if stopped.Running || stopped.Ticks < after.Ticks {
		t.Fatalf("after Stop: %+v", stopped)
	}
	// Stop of a stopped ticker changes nothing.
	if again := tickerStatus(t, n, "a", demo.Stop{}); again.Running || again.Ticks != stopped.Ticks {
		t.Fatalf("second Stop: %+v, first %+v", again, stopped)
	}
	time.Sleep(200 * time.Millisecond) // four periods: none may tick
	if s := tickerStatus(t, n, "a", demo.Get{}); s.Ticks != stopped.Ticks {
		t.Fatalf("ticked after Stop returned: %+v, at Stop %+v", s, stopped)
	}
}

// TestTickerRefusesBadStarts: what the node refuses at registration is
// the ask's error, and the ticker keeps what it had.
func TestTickerRefusesBadStarts(t *testing.T) {
	n := tickerNode(t, t.TempDir())
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	ref := n.Ref(demo.Ticker, "b")
	for _, tc := range []struct {
		start demo.Start
		want  error
	}{
		{demo.Start{}, reminders.ErrPeriodTooShort},
		{demo.Start{PeriodMs: 5}, reminders.ErrPeriodTooShort},
		{demo.Start{PeriodMs: 1000, Catchup: ptr("sometimes")}, reminders.ErrInvalid},
		{demo.Start{PeriodMs: 1000, Catchup: ptr("fire-up-to")}, reminders.ErrInvalid}, // needs maxCatchup
		{demo.Start{PeriodMs: 1000, MaxCatchup: ptr[uint32](3)}, reminders.ErrInvalid}, // only for fire-up-to
		{demo.Start{PeriodMs: 1 << 63}, reminders.ErrTooFar},
		{demo.Start{PeriodMs: uint64(reminders.MaxHorizon/time.Millisecond) + 1}, reminders.ErrTooFar},
	} {
		if _, err := n.Ask(t.Context(), ref, tc.start); !errors.Is(err, tc.want) {
			t.Errorf("Start %+v: %v, want %v", tc.start, err, tc.want)
		}
	}
	if s := tickerStatus(t, n, "b", demo.Get{}); s.Running || s.Ticks != 0 {
		t.Fatalf("after refused Starts: %+v", s)
	}
	if s := tickerStatus(t, n, "b", demo.Start{PeriodMs: 1000, Catchup: ptr("fire-up-to"), MaxCatchup: ptr[uint32](3)}); !s.Running || s.PeriodMs != 1000 {
		t.Fatalf("a valid Start: %+v", s)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// TestTickerStartAgainCountsTheNewReminder: a Start that replaces a
// running reminder counts the new one's ticks from its first, although
// their sequence numbers start at 1 again.
func TestTickerStartAgainCountsTheNewReminder(t *testing.T) {
	n := tickerNode(t, t.TempDir())
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	tickerStatus(t, n, "c", demo.Start{PeriodMs: 30})
	waitTicks(t, n, "c", 5)
	// Every occurrence of the new reminder is delivered, also those a
	// loaded machine runs late: the default policy would fire one tick
	// for several missed (carrying the newest's sequence number), which
	// the ticker rightly counts once.
	again := demo.Start{PeriodMs: 30, Catchup: ptr("fire-up-to"), MaxCatchup: ptr[uint32](100)}
	if s := tickerStatus(t, n, "c", again); s.Ticks != 0 || !s.Running {
		t.Fatalf("after the second Start: %+v", s)
	}
	ref := n.Ref(demo.Ticker, "c")
	waitFor(t, "three ticks of the new reminder delivered", func() bool {
		l, err := n.Reminders().ListOf(t.Context(), ref)
		return err == nil && len(l.Reminders) == 1 && l.Reminders[0].LastSeq >= 3
	})
	if s := tickerStatus(t, n, "c", demo.Get{}); s.Ticks < 3 || s.LastSeq < 3 {
		t.Fatalf("the new reminder delivered 3 ticks, the ticker counted %+v", s)
	}
}
