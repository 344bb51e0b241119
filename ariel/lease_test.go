package ariel_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// leaseLog is what a test of leased kinds saw, in order: the messages
// each activation handled ("a1:7") and the calls of Config.Lapsed
// ("lapsed").
type leaseLog struct {
	mu  sync.Mutex
	log []string
}

func (l *leaseLog) add(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

func (l *leaseLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}

// lessee logs each int it gets with its activation's number and answers
// asks with it. The message trip runs out the scheduler's lease inside
// its turn; block waits on hold first.
type lessee struct {
	act  int
	log  *leaseLog
	s    *atomic.Pointer[ariel.Scheduler]
	trip int
	hold chan struct{}
}

const block = -1

func (a *lessee) Receive(ctx actor.Context, msg any) {
	n, ok := msg.(int)
	if !ok {
		return
	}
	if n == block {
		a.hold <- struct{}{} // running
		<-a.hold
		return
	}
	a.log.add(fmt.Sprintf("a%d:%d", a.act, n))
	if n == a.trip {
		a.s.Load().SetLease(time.Now().Add(-time.Second))
	}
	ctx.Reply(a.act)
}

// leasedSched starts a scheduler whose kind "leased" is SetLeased and
// whose Lapsed hook logs each call and then runs onLapse (the n-th
// call, from 1).
func leasedSched(t *testing.T, log *leaseLog, trip int, hold chan struct{}, onLapse func(s *ariel.Scheduler, ref actor.Ref, n int)) *ariel.Scheduler {
	t.Helper()
	var sp atomic.Pointer[ariel.Scheduler]
	var calls atomic.Int32
	s := newSched(t, ariel.Config{Workers: 2, Lapsed: func(ref actor.Ref) {
		log.add("lapsed")
		onLapse(sp.Load(), ref, int(calls.Add(1)))
	}})
	sp.Store(s)
	var acts atomic.Int32
	if err := s.Register("leased", func(string) actor.Actor {
		return &lessee{act: int(acts.Add(1)), log: log, s: &sp, trip: trip, hold: hold}
	}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLeased("leased"); err != nil {
		t.Fatal(err)
	}
	return s
}

func renew(s *ariel.Scheduler) { s.SetLease(time.Now().Add(time.Hour)) }

// A lease that runs out in the middle of a batch of tells (the fast
// path) or of asks stops the actor's mail at the end of that batch (the
// lease is read once per batch a worker takes, clockStride = 8
// messages): none of the rest runs until Lapsed renewed the lease, and
// then all of it runs, in order.
func TestLeasedMailStopsAtTheEndOfTheBatch(t *testing.T) {
	for _, asks := range []bool{false, true} {
		t.Run(fmt.Sprintf("asks=%v", asks), func(t *testing.T) {
			var log leaseLog
			hold := make(chan struct{})
			s := leasedSched(t, &log, 5, hold, func(s *ariel.Scheduler, _ actor.Ref, _ int) { renew(s) })
			ref := actor.Virtual("leased", "k")
			if err := s.Tell(ref, block); err != nil { // the rest queues behind it, to be taken as one batch
				t.Fatal(err)
			}
			<-hold // the actor runs block: the mailbox is empty
			var wg sync.WaitGroup
			for i := 1; i <= 20; i++ {
				if !asks {
					if err := s.Tell(ref, i); err != nil {
						t.Fatal(err)
					}
					continue
				}
				// One asker at a time into the mailbox, so the order is known.
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := s.Ask(askCtx(t), ref, i); err != nil {
						t.Errorf("ask %d: %v", i, err)
					}
				}()
				waitQueued(t, s, ref, i)
			}
			close(hold)
			wg.Wait()
			waitIdle(t, s)
			got := log.snapshot()
			at := slices.Index(got, "lapsed")
			if at < 5 || at > 8 { // the first batch is messages 1 to 8
				t.Fatalf("log = %q: the lapse took effect after %d messages, want 5 to 8", got, at)
			}
			var want []string
			for i := 1; i <= 20; i++ {
				want = append(want, fmt.Sprintf("a1:%d", i))
				if i == at {
					want = append(want, "lapsed")
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("log = %q\nwant %q", got, want)
			}
			if st := s.Stats(); st.Lapsed != 1 {
				t.Fatalf("Stats().Lapsed = %d, want 1", st.Lapsed)
			}
		})
	}
}

// waitQueued waits until ref's mailbox holds n messages.
func waitQueued(t *testing.T, s *ariel.Scheduler, ref actor.Ref, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Queued(ref) < n {
		if time.Now().After(deadline) {
			t.Fatalf("mailbox of %v holds %d messages, want %d", ref, s.Queued(ref), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Mail held back past the lease lets a passivation go first, even the
// mail that waited for the activation (which otherwise runs before a
// passivation): what Lapsed asks for takes effect before any of it runs.
// Once at rest, the mail rings the Activator as any mail for an actor at
// rest does, and runs in the activation that follows, in order.
func TestLeasedMailLetsThePassivationGoFirst(t *testing.T) {
	var log leaseLog
	hold := make(chan struct{})
	s := leasedSched(t, &log, 0, hold, func(s *ariel.Scheduler, ref actor.Ref, n int) {
		if n < 3 {
			// The first call, in activation 1, and the second, in
			// activation 2 before any mail that waited for it ran.
			if err := s.Passivate(ref, nil); err != nil {
				t.Errorf("Passivate: %v", err)
			}
			return
		}
		renew(s)
	})
	ref := actor.Virtual("leased", "k")
	if err := s.Tell(ref, block); err != nil {
		t.Fatal(err)
	}
	<-hold
	for i := 1; i < 20; i++ { // more than one batch
		if err := s.Tell(ref, i); err != nil {
			t.Fatal(err)
		}
	}
	last := make(chan any, 1)
	go func() {
		got, err := s.Ask(askCtx(t), ref, 20)
		if err != nil {
			t.Errorf("ask: %v", err)
		}
		last <- got
	}()
	waitQueued(t, s, ref, 20)
	s.SetLease(time.Time{}) // run out
	hold <- struct{}{}
	if got := <-last; got != 3 {
		t.Errorf("the last message ran in activation %v, want 3", got)
	}
	want := []string{"lapsed", "lapsed", "lapsed"}
	for i := 1; i <= 20; i++ {
		want = append(want, fmt.Sprintf("a3:%d", i))
	}
	if got := log.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("log = %q\nwant %q", got, want)
	}
}

// A kind that is not leased runs whatever the lease; SetLeased needs the
// Lapsed hook.
func TestUnleasedKindIgnoresTheLease(t *testing.T) {
	var log leaseLog
	s := leasedSched(t, &log, 0, nil, func(*ariel.Scheduler, actor.Ref, int) { t.Error("Lapsed called") })
	if err := s.Register("free", func(string) actor.Actor { return &lessee{act: 1, log: &log} }, 0); err != nil {
		t.Fatal(err)
	}
	s.SetLease(time.Time{})
	if got, err := s.Ask(askCtx(t), actor.Virtual("free", "k"), 1); err != nil || got != 1 {
		t.Fatalf("Ask = %v, %v", got, err)
	}
	if got := log.snapshot(); !slices.Equal(got, []string{"a1:1"}) {
		t.Fatalf("log = %q", got)
	}
	plain := newSched(t, ariel.Config{})
	if err := plain.Register("k", func(string) actor.Actor { return &lessee{} }, 0); err != nil {
		t.Fatal(err)
	}
	if err := plain.SetLeased("k"); err == nil {
		t.Fatal("SetLeased without Config.Lapsed succeeded")
	}
}

// lapser runs out the lease and then tells to, an idle leased actor,
// in the same turn: the flush hands to its mail to this worker (seize),
// which must not run it either.
type lapser struct {
	s  *atomic.Pointer[ariel.Scheduler]
	to actor.Ref
}

func (r *lapser) Receive(ctx actor.Context, msg any) {
	if n, ok := msg.(int); ok {
		r.s.Load().SetLease(time.Now().Add(-time.Second))
		ctx.Tell(r.to, n)
	}
}

func TestLeasedMailSeizedByAFlushWaitsForTheLease(t *testing.T) {
	var log leaseLog
	s := leasedSched(t, &log, -2, nil, func(s *ariel.Scheduler, _ actor.Ref, _ int) { renew(s) })
	var sp atomic.Pointer[ariel.Scheduler]
	sp.Store(s)
	to := actor.Virtual("leased", "k")
	if err := s.Register("relay", func(string) actor.Actor { return &lapser{s: &sp, to: to} }, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ask(askCtx(t), to, 0); err != nil { // active, idle, its mailbox empty
		t.Fatal(err)
	}
	before := s.Stats().Seized
	if err := s.Tell(actor.Virtual("relay", "r"), 1); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if s.Stats().Seized == before {
		t.Skip("the flush did not seize the recipient; nothing to check")
	}
	if got, want := log.snapshot(), []string{"a1:0", "lapsed", "a1:1"}; !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
}

// BenchmarkLeasedFanIn is BenchmarkFanIn's ariel case with the receiver
// a virtual actor: of a kind that is not leased (the baseline), and of a
// leased one, whose every message first reads the clock against the
// lease (x-unleased: the ratio of the two, from the same run).
func BenchmarkLeasedFanIn(b *testing.B) {
	var base float64
	for _, leased := range []bool{false, true} {
		name := map[bool]string{false: "unleased", true: "leased"}[leased]
		b.Run(name, func(b *testing.B) {
			s := benchSched(b, ariel.Config{Lapsed: func(actor.Ref) { b.Error("Lapsed called") }})
			k := &sink{want: b.N, done: make(chan struct{})}
			if err := s.Register("sink", func(string) actor.Actor { return k }, 0); err != nil {
				b.Fatal(err)
			}
			if leased {
				if err := s.SetLeased("sink"); err != nil {
					b.Fatal(err)
				}
				s.SetLease(time.Now().Add(time.Hour))
			}
			if b.N == 0 {
				return
			}
			to := actor.Virtual("sink", "k")
			refs := make([]actor.Ref, fanInSenders)
			for i := range refs {
				share := b.N / fanInSenders
				if i == 0 {
					share += b.N % fanInSenders
				}
				refs[i], _ = s.Spawn(&burstSender{to: to, left: share, m: &item{from: i}})
			}
			k.senders = refs
			if err := s.Tell(to, struct{}{}); err != nil { // activated before the clock starts
				b.Fatal(err)
			}
			if err := s.WaitIdle(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for _, r := range refs {
				for w := 0; w < fanInWindow; w++ {
					_ = s.Tell(r, more{})
				}
			}
			<-k.done
			b.StopTimer()
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			if !leased {
				base = ns
			} else if base > 0 {
				b.ReportMetric(ns/base, "x-unleased")
			}
		})
	}
}
