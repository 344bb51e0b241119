package reminders_test

import (
	"context"
	"fmt"
	"github.com/tempest-actors/tempest/clock"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// simClock gives an engine ariel's virtual clock. The engines of the
// simulation are never started (their caller drives them with RunDue),
// so NewTimer is never called on it.
type simClock struct {
	clock.Real // the methods the engine does not call
	c          *ariel.SimClock
}

func (s simClock) Now() time.Time { return s.c.Now() }
func (s simClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	ch := make(chan time.Time, 1)
	t := s.c.AfterFunc(d, func() { ch <- s.c.Now() })
	return ch, t.Stop
}

// simNode is one owner of the simulated shard: its engine delivers
// through the simulated scheduler until the node dies, after which none
// of its ticks is accepted any more (they die with it, queued or not).
type simNode struct {
	s    *ariel.Scheduler
	dead atomic.Bool
}

func (n *simNode) Deliver(ref actor.Ref, t reminders.Tick, accept func() bool, failed func(error)) error {
	return n.s.Notify(ref, t, func() bool { return !n.dead.Load() && accept() }, failed)
}

// simEvent is one tick handled by an actor, or a cancel it made.
type simEvent struct {
	at   time.Duration // virtual time since the start
	key  string
	what string // "tick" or "cancel"
	seq  uint64
	late time.Duration
}

func (e simEvent) String() string {
	return fmt.Sprintf("%v %s %s %d", e.at, e.key, e.what, e.seq)
}

// runRemindersSim runs reminders in virtual time on ariel's simulated
// scheduler (one goroutine, seeded choice of the next ready actor,
// SimClock): six actors, each with a reminder due every minute from the
// first minute, two per catch-up policy, all due at the same instants so
// that the seed orders their turns. At 5 min k0's turn cancels k1's
// reminder, whose tick of that instant may already be queued. At 20 min
// 30 s the shard's owner crashes (its engine stops, nothing it still had
// queued is accepted); at 30 min 30 s another owner loads the shard from
// the store and the reminders resume by their catch-up policies. The run
// ends at 40 min. It returns what the actors saw, in order.
func runRemindersSim(t *testing.T, seed uint64) []simEvent {
	t.Helper()
	start := time.Unix(1_800_000_000, 0)
	clock := ariel.NewSimClock(start)
	s, err := ariel.New(ariel.Config{Simulated: true, Seed: seed, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	store := prospero.NewMemStore()
	var (
		mu     sync.Mutex
		events []simEvent
		eng    atomic.Pointer[reminders.Engine] // the live owner's
	)
	k1 := prospero.Identity{Kind: "acct", Key: "k1"}
	if err := s.Register("acct", func(key string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			tick, ok := msg.(reminders.Tick)
			if !ok {
				return
			}
			mu.Lock()
			events = append(events, simEvent{at: ctx.Now().Sub(start), key: key, what: "tick", seq: tick.Seq,
				late: ctx.Now().Sub(tick.Scheduled)})
			mu.Unlock()
			if key == "k0" && tick.Seq == 5 {
				if err := eng.Load().Cancel(context.Background(), k1, "r"); err != nil {
					t.Errorf("cancel: %v", err)
				}
				mu.Lock()
				events = append(events, simEvent{at: ctx.Now().Sub(start), key: "k1", what: "cancel"})
				mu.Unlock()
			}
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	boot := func() (*reminders.Engine, *simNode) {
		n := &simNode{s: s}
		e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: n,
			ShardOf: func(prospero.Identity) string { return "s0" }, Clock: simClock{c: clock}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Acquire(context.Background(), "s0"); err != nil {
			t.Fatal(err)
		}
		eng.Store(e)
		return e, n
	}
	e1, n1 := boot()
	pols := []reminders.Reminder{
		{Catchup: reminders.FireOnce}, {Catchup: reminders.FireOnce},
		{Catchup: reminders.Skip}, {Catchup: reminders.Skip},
		{Catchup: reminders.FireUpTo, MaxCatchup: 3}, {Catchup: reminders.FireUpTo, MaxCatchup: 3},
	}
	for i, r := range pols {
		r.Name, r.Period, r.Due = "r", time.Minute, start.Add(time.Minute)
		if err := e1.RegisterFor(context.Background(), prospero.Identity{Kind: "acct", Key: fmt.Sprintf("k%d", i)}, r); err != nil {
			t.Fatal(err)
		}
	}
	// drive runs e in virtual time until it dies or the run ends: RunDue
	// when it has work (at least every step, so that a reminder whose
	// tick was just handled is picked up again on time), Flush every 10 s
	// as a started engine's FlushInterval would.
	end := start.Add(40 * time.Minute)
	const step = 100 * time.Millisecond
	drive := func(e *reminders.Engine, n *simNode) {
		var fire, flush func()
		fire = func() {
			if n.dead.Load() {
				return
			}
			now := clock.Now()
			next, ok := e.RunDue(now)
			d := step
			if ok && next.Sub(now) < d {
				d = max(next.Sub(now), 0)
			}
			if now.Add(d).Before(end) {
				clock.AfterFunc(d, fire)
			}
		}
		flush = func() {
			if n.dead.Load() {
				return
			}
			if err := e.Flush(context.Background()); err != nil {
				t.Errorf("flush: %v", err)
			}
			if clock.Now().Add(10 * time.Second).Before(end) {
				clock.AfterFunc(10*time.Second, flush)
			}
		}
		fire()
		flush()
	}
	// Every timer of the run is armed from inside the simulation, by the
	// first turn of the driver on the runner's goroutine. The runner
	// moves virtual time whenever nothing is ready and a timer is
	// pending, from the moment the scheduler was made, and the test
	// goroutine does not know whether it has gone to sleep yet: a timer
	// armed from here could be set while the runner is already moving
	// time, relative to an instant that depends on goroutine scheduling.
	// Nothing is pending until the driver's mail is in, so the run starts
	// at that mail, at the start, whenever the runner gets to it.
	if err := s.Register("driver", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if msg != "start" {
				return
			}
			drive(e1, n1)
			clock.AfterFunc(20*time.Minute+30*time.Second, func() { n1.dead.Store(true) }) // kill -9: no Close, no flush
			clock.AfterFunc(30*time.Minute+30*time.Second, func() { drive(boot()) })
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d timers pending on the virtual clock before the first mail: the runner may already be moving time", n)
	}
	if err := s.Tell(actor.Virtual("driver", "d"), "start"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatalf("the simulation did not finish: %v", err)
	}
	if now := clock.Now(); now.Before(end.Add(-time.Second)) {
		t.Fatalf("the simulation stopped at %v, before its end", now.Sub(start))
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(events)
}

// TestRemindersInSimulatedTime: reminders on ariel's deterministic
// scheduler and virtual clock, the shard's owner crashing and another
// taking over. Forty minutes of schedule run in milliseconds, and the
// same seed replays the same history. Checked from the history: ticks on
// time while the owner lives, strictly increasing sequence numbers, no
// tick of the cancelled reminder handled after its cancel, and after the
// failover each catch-up policy's ticks for the ten occurrences missed.
func TestRemindersInSimulatedTime(t *testing.T) {
	got := runRemindersSim(t, 7)
	if again := runRemindersSim(t, 7); !slices.Equal(got, again) {
		t.Fatalf("seed 7 did not replay:\n%v\n%v", got, again)
	}
	byKey := map[string][]simEvent{}
	cancelled := false
	for _, ev := range got {
		if ev.what == "cancel" {
			cancelled = true
			continue
		}
		if ev.key == "k1" && cancelled {
			t.Errorf("k1 ticked after its reminder was cancelled: %v", ev)
		}
		if ev.at < 20*time.Minute+30*time.Second && ev.late != 0 {
			t.Errorf("tick late by %v while its owner lived: %v", ev.late, ev)
		}
		byKey[ev.key] = append(byKey[ev.key], ev)
	}
	if !cancelled {
		t.Fatal("the cancel never ran")
	}
	seqsOf := func(key string, from, to time.Duration) []uint64 {
		var out []uint64
		for _, ev := range byKey[key] {
			if ev.at >= from && ev.at < to {
				out = append(out, ev.seq)
			}
		}
		return out
	}
	for key, evs := range byKey {
		for i := 1; i < len(evs); i++ {
			if evs[i].seq <= evs[i-1].seq {
				t.Errorf("%s: seq %d after %d", key, evs[i].seq, evs[i-1].seq)
			}
		}
	}
	before := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	restart := 30*time.Minute + 30*time.Second
	for _, tc := range []struct {
		key   string
		after []uint64 // ticks in the second after the new owner loaded the shard
	}{
		{"k0", []uint64{30}},         // fire-once: one tick for occurrences 21..30
		{"k2", nil},                  // skip
		{"k3", nil},                  // skip
		{"k4", []uint64{28, 29, 30}}, // fire-up-to 3: the newest three
		{"k5", []uint64{28, 29, 30}},
	} {
		if s := seqsOf(tc.key, 0, 21*time.Minute); !slices.Equal(s, before) {
			t.Errorf("%s before the crash: %v, want %v", tc.key, s, before)
		}
		if s := seqsOf(tc.key, 21*time.Minute, restart); len(s) != 0 {
			t.Errorf("%s ticked while no owner lived: %v", tc.key, s)
		}
		if s := seqsOf(tc.key, restart, restart+time.Second); !slices.Equal(s, tc.after) {
			t.Errorf("%s on the new owner: %v, want %v", tc.key, s, tc.after)
		}
		if s := seqsOf(tc.key, restart+time.Second, 40*time.Minute); !slices.Equal(s, []uint64{31, 32, 33, 34, 35, 36, 37, 38, 39}) {
			t.Errorf("%s back on schedule: %v, want 31..39", tc.key, s)
		}
	}
	if s := seqsOf("k1", 0, 40*time.Minute); len(s) > 5 || !slices.Equal(s, []uint64{1, 2, 3, 4, 5}[:len(s)]) || len(s) < 4 {
		t.Errorf("k1 (cancelled at its fifth occurrence): %v, want 1..4 and perhaps 5", s)
	}
}
