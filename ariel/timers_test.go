package ariel_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

type tick struct{}

// ticker counts the ticks of its periodic timer; the first tick's turn
// runs slow for slowFor.
type ticker struct {
	ticks   *atomic.Int64
	slowFor time.Duration
	arm     bool
}

func (k *ticker) Receive(ctx actor.Context, msg any) {
	switch msg.(type) {
	case actor.Started:
		if k.arm {
			ctx.Every(time.Second, tick{})
		}
	case tick:
		if ctx.Sender() != ctx.Self() {
			panic("a tick comes from the actor itself")
		}
		if k.ticks.Add(1) == 1 && k.slowFor > 0 {
			time.Sleep(k.slowFor)
		}
	}
}

// Every ticks at a fixed rate and keeps at most one tick queued: while a
// slow turn runs, the periods that pass leave one tick waiting and skip
// the rest, so no backlog builds up behind the actor.
func TestEveryKeepsOneTickOutstanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSched(t, ariel.Config{Workers: 2})
		var ticks atomic.Int64
		if _, err := s.Spawn(&ticker{ticks: &ticks, slowFor: 3500 * time.Millisecond, arm: true}); err != nil {
			t.Fatal(err)
		}
		// Ticks due at 1 (slow until 4.5), 2 (queued), 3 and 4 (skipped),
		// then 5..10.
		time.Sleep(10*time.Second + 500*time.Millisecond)
		synctest.Wait()
		if got := ticks.Load(); got != 8 {
			t.Fatalf("ticks = %d, want 8", got)
		}
		if got := s.Stats().TimerSkipped; got != 2 {
			t.Fatalf("TimerSkipped = %d, want 2", got)
		}
	})
}

// canceller arms a one-shot timer, then in a turn that runs past its due
// time (so the tick is already queued) cancels it.
type canceller struct {
	cancel  actor.Cancel
	ticks   *atomic.Int64
	stopped chan bool
}

func (c *canceller) Receive(ctx actor.Context, msg any) {
	switch msg {
	case "arm":
		c.cancel = ctx.After(time.Second, tick{})
	case "slow-cancel":
		time.Sleep(2 * time.Second)
		c.stopped <- c.cancel()
		c.stopped <- c.cancel()
	}
	if _, ok := msg.(tick); ok {
		c.ticks.Add(1)
	}
}

// Cancel that returns true guarantees the tick is not delivered, also
// when it was already queued behind the cancelling turn.
func TestCancelDropsAQueuedTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSched(t, ariel.Config{Workers: 2})
		var ticks atomic.Int64
		c := &canceller{ticks: &ticks, stopped: make(chan bool, 2)}
		ref, err := s.Spawn(c)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Tell(ref, "arm")
		_ = s.Tell(ref, "slow-cancel")
		if first, second := <-c.stopped, <-c.stopped; !first || second {
			t.Fatalf("Cancel = %v then %v, want true then false", first, second)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := ticks.Load(); got != 0 {
			t.Fatalf("a cancelled tick was delivered %d times", got)
		}
	})
}

// Restart and passivation end the timers of the activation: the new
// actor value never sees a tick armed by the old one, and a passivated
// virtual actor is not woken by one.
func TestTimersEndWithTheActivation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSched(t, ariel.Config{Workers: 2})
		var oldTicks, newTicks atomic.Int64
		var armed atomic.Bool
		if err := s.Register("t", func(string) actor.Actor {
			// The first activation arms a periodic timer; later ones do not.
			return &ticker{ticks: &oldTicks, arm: armed.CompareAndSwap(false, true)}
		}, 0); err != nil {
			t.Fatal(err)
		}
		ref := actor.Virtual("t", "1")
		if err := s.Tell(ref, "hello"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if got := oldTicks.Load(); got != 2 {
			t.Fatalf("ticks before restart = %d, want 2", got)
		}
		if err := s.Restart(ref, &ticker{ticks: &newTicks}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if old, nw := oldTicks.Load(), newTicks.Load(); old != 2 || nw != 0 {
			t.Fatalf("after restart: old activation ticks %d (want 2), new %d (want 0)", old, nw)
		}

		// A fresh activation with a timer, then passivation: nothing wakes it.
		armed.Store(false)
		oldTicks.Store(0)
		ref2 := actor.Virtual("t", "2")
		if err := s.Tell(ref2, "hello"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if err := s.Passivate(ref2, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := oldTicks.Load(); got != 1 {
			t.Fatalf("ticks = %d, want 1 (none after passivation)", got)
		}
		if st := s.State(ref2); st != actor.Dormant {
			t.Fatalf("State after passivation = %v, want Dormant (a tick woke it?)", st)
		}
	})
}
