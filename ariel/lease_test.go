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
		a.s.Load().SetLease(a.s.Load().Mark(), 0)
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

func renew(s *ariel.Scheduler) { s.SetLease(s.Mark(), time.Hour) }

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
	s.SetLease(s.Mark(), 0) // run out
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
	s.SetLease(s.Mark(), 0)
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

// rally is a volley between two leased actors, each hop handed to the
// worker directly (seize); the hop trip runs out the lease.
type rally struct {
	peer actor.Ref
	name string
	log  *leaseLog
	s    *atomic.Pointer[ariel.Scheduler]
	trip int
}

func (r *rally) Receive(ctx actor.Context, msg any) {
	if n, ok := msg.(int); ok {
		r.log.add(fmt.Sprintf("%s:%d", r.name, n))
		if n == r.trip {
			r.s.Load().SetLease(r.s.Load().Mark(), 0)
		}
		if n > 0 {
			_ = ctx.Tell(r.peer, n-1)
		}
	}
}

// A chain of messages handed from turn to turn on one worker (seize)
// reads the lease every clockStride hops: once it ran out, the chain
// stops within that many hops, and goes on once Lapsed renewed it.
func TestLeasedChainOfSeizesStopsWithinAStride(t *testing.T) {
	var log leaseLog
	var sp atomic.Pointer[ariel.Scheduler]
	s := newSched(t, ariel.Config{Workers: 2, Lapsed: func(actor.Ref) {
		log.add("lapsed")
		renew(sp.Load())
	}})
	sp.Store(s)
	const hops, trip = 100, 95 // the lease runs out early in the chain of seizes
	if err := s.Register("rally", func(key string) actor.Actor {
		return &rally{peer: actor.Virtual("rally", map[string]string{"a": "b", "b": "a"}[key]), name: key, log: &log, s: &sp, trip: trip}
	}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLeased("rally"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} { // active and idle: their mail is seized
		if err := s.Tell(actor.Virtual("rally", k), "wake"); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, s)
	if err := s.Tell(actor.Virtual("rally", "a"), hops); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if s.Stats().Seized < hops/2 {
		t.Skipf("only %d of %d hops were seized; nothing to check", s.Stats().Seized, hops)
	}
	got := log.snapshot()
	tripAt, lapsedAt := slices.Index(got, fmt.Sprintf("b:%d", trip)), slices.Index(got, "lapsed")
	if tripAt < 0 || lapsedAt < tripAt || lapsedAt-tripAt-1 > 7 {
		t.Fatalf("log = %q: %d hops ran after the lease ran out, want at most 7", got, lapsedAt-tripAt-1)
	}
	if len(got) != hops+2 || got[len(got)-1] != "a:0" {
		t.Fatalf("log = %q: the chain did not go on to the end once the lease was renewed", got)
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
				s.SetLease(s.Mark(), time.Hour)
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

// volley tells its peer n-1 for each n > 0 it gets, and closes done at 0.
type volley struct {
	peer actor.Ref
	done chan struct{}
}

func (v *volley) Receive(ctx actor.Context, msg any) {
	if n, ok := msg.(int); ok {
		if n == 0 {
			close(v.done)
			return
		}
		_ = ctx.Tell(v.peer, n-1)
	}
}

// BenchmarkLeasedPingPong: ns per hop of a tell volley between two
// virtual actors, each hop handed to the worker directly (seize), where
// a leased kind reads the clock once per hop (x-unleased, same run).
func BenchmarkLeasedPingPong(b *testing.B) {
	var base float64
	for _, leased := range []bool{false, true} {
		name := map[bool]string{false: "unleased", true: "leased"}[leased]
		b.Run(name, func(b *testing.B) {
			s := benchSched(b, ariel.Config{Lapsed: func(actor.Ref) { b.Error("Lapsed called") }})
			done := make(chan struct{})
			if err := s.Register("pp", func(key string) actor.Actor {
				return &volley{peer: actor.Virtual("pp", map[string]string{"a": "b", "b": "a"}[key]), done: done}
			}, 0); err != nil {
				b.Fatal(err)
			}
			if leased {
				if err := s.SetLeased("pp"); err != nil {
					b.Fatal(err)
				}
				s.SetLease(s.Mark(), time.Hour)
			}
			for _, k := range []string{"a", "b"} { // activated before the clock starts
				if err := s.Tell(actor.Virtual("pp", k), "wake"); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.WaitIdle(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			if err := s.Tell(actor.Virtual("pp", "a"), b.N); err != nil {
				b.Fatal(err)
			}
			<-done
			b.StopTimer()
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			st := s.Stats()
			b.ReportMetric(float64(st.Seized)/float64(b.N), "seized/hop")
			if !leased {
				base = ns
			} else if base > 0 {
				b.ReportMetric(ns/base, "x-unleased")
			}
		})
	}
}

// interleaved may run while a NonReentrant actor waits for a reply.
type interleaved struct{}

func (interleaved) AlwaysInterleave() {}

// waiter is a NonReentrant leased actor: "go" runs out the lease and asks
// the peer, so that the mail behind it is taken while the actor waits.
type waiter struct {
	s   *atomic.Pointer[ariel.Scheduler]
	log *leaseLog
}

func (a *waiter) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case string:
		if m == "go" {
			a.s.Load().SetLease(a.s.Load().Mark(), 0)
			ctx.Ask(actor.Virtual("peer", "p"), "q", func(actor.Context, any, error) { a.log.add("cont") })
		}
	case int:
		a.log.add(fmt.Sprint(m))
	case interleaved:
		a.log.add("I")
	}
}

// peer answers the first ask it gets only when told "answer".
type peer struct {
	asked chan struct{}
	r     actor.Replier
}

func (p *peer) Receive(ctx actor.Context, msg any) {
	if m, ok := msg.(string); ok {
		if m == "answer" {
			p.r.Reply(ctx, "ok")
			return
		}
		p.r = ctx.ReplyLater()
		close(p.asked)
	}
}

// A lease that runs out while a NonReentrant actor waits for a reply
// keeps each sender's order: nothing of what waits (set aside or not)
// is taken and put back.
func TestLeasedMailWhileWaitingKeepsSenderOrder(t *testing.T) {
	var log leaseLog
	var sp atomic.Pointer[ariel.Scheduler]
	s := newSched(t, ariel.Config{Workers: 2, Lapsed: func(actor.Ref) { log.add("lapsed"); renew(sp.Load()) }})
	sp.Store(s)
	if err := s.Register("nr", func(string) actor.Actor { return &waiter{s: &sp, log: &log} }, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetReentrancy("nr", actor.NonReentrant); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLeased("nr"); err != nil {
		t.Fatal(err)
	}
	p := &peer{asked: make(chan struct{})}
	if err := s.Register("peer", func(string) actor.Actor { return p }, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("nr", "k")
	msgs := []any{"go"}
	for i := 1; i <= 10; i++ {
		msgs = append(msgs, i)
	}
	for _, m := range append(msgs, interleaved{}) {
		if err := s.Tell(ref, m); err != nil {
			t.Fatal(err)
		}
	}
	<-p.asked
	if err := s.Tell(actor.Virtual("peer", "p"), "answer"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	got := log.snapshot()
	var order []string
	for _, e := range got {
		if e != "lapsed" && e != "cont" {
			order = append(order, e)
		}
	}
	if want := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "I"}; !slices.Equal(order, want) {
		t.Fatalf("log = %q: the sender's order is %q, want %q", got, order, want)
	}
	if !slices.Contains(got, "lapsed") {
		t.Fatalf("log = %q: the lease never ran out for the actor", got)
	}
}

// A Lapsed hook that neither renews the lease nor passivates leaves the
// actor parked, its mail kept, not spinning: the scheduler goes idle.
// More mail wakes it once each; renewing the lease runs everything, in
// order. Register again keeps the kind leased.
func TestLeasedMailParksUntilTheLeaseIsRenewed(t *testing.T) {
	var log leaseLog
	s := leasedSched(t, &log, 0, nil, func(*ariel.Scheduler, actor.Ref, int) {})
	if err := s.Register("leased", func(string) actor.Actor { return &lessee{act: 1, log: &log} }, 0); err != nil {
		t.Fatal(err) // a new factory, still leased
	}
	s.SetLease(s.Mark(), 0)
	ref := actor.Virtual("leased", "k")
	for i := 1; i <= 3; i++ {
		if err := s.Tell(ref, i); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, s) // would not return while the cell spins
	}
	got := log.snapshot()
	if calls := len(got); calls < 1 || calls > 3 || slices.ContainsFunc(got, func(e string) bool { return e != "lapsed" }) {
		t.Fatalf("log = %q: want one to three Lapsed calls (one per wake) and nothing run", got)
	}
	if s.Queued(ref) < 3 {
		t.Fatalf("%d messages queued, want the 3 held back", s.Queued(ref))
	}
	renew(s)
	waitIdle(t, s)
	if got := log.snapshot()[len(got):]; !slices.Equal(got, []string{"a1:1", "a1:2", "a1:3"}) {
		t.Fatalf("after the renewal: %q", got)
	}
}

// hub runs out the lease and then tells n idle leased leaves in one turn.
type hub struct {
	s *atomic.Pointer[ariel.Scheduler]
	n int
}

func (h *hub) Receive(ctx actor.Context, msg any) {
	if m, ok := msg.(string); ok && m == "fan" {
		h.s.Load().SetLease(h.s.Load().Mark(), 0)
		for i := range h.n {
			_ = ctx.Tell(actor.Virtual("leaf", fmt.Sprint(i)), i)
		}
	}
}

// A turn that hands one message each to many idle leased actors (a
// fan-out of seizes): once a read found the lease run out, every later
// one reads it too, so at most clockStride-1 of them run.
func TestLeasedFanOutOfSeizesStopsWithinAStride(t *testing.T) {
	var log leaseLog
	var sp atomic.Pointer[ariel.Scheduler]
	var lapses atomic.Int32
	s := newSched(t, ariel.Config{Workers: 2, Lapsed: func(actor.Ref) { lapses.Add(1) }})
	sp.Store(s)
	const n = 32
	if err := s.Register("hub", func(string) actor.Actor { return &hub{s: &sp, n: n} }, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Register("leaf", func(string) actor.Actor { return &lessee{act: 1, log: &log} }, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLeased("leaf"); err != nil {
		t.Fatal(err)
	}
	for i := range n { // active and idle: their mail is seized
		if err := s.Tell(actor.Virtual("leaf", fmt.Sprint(i)), "wake"); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, s)
	before := s.Stats().Seized
	if err := s.Tell(actor.Virtual("hub", "h"), "fan"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s) // the leaves that did not run are parked
	if seized := s.Stats().Seized - before; seized < n/2 {
		t.Skipf("only %d of %d messages were seized; nothing to check", seized, n)
	}
	if ran := log.snapshot(); len(ran) > 7 || int(lapses.Load()) != n-len(ran) {
		t.Fatalf("%d of %d ran after the lease ran out (%q), %d held back: want at most 7 run, the rest held back",
			len(ran), n, ran, lapses.Load())
	}
	renew(s)
	waitIdle(t, s)
	if ran := log.snapshot(); len(ran) != n {
		t.Fatalf("%d of %d ran once the lease was renewed", len(ran), n)
	}
}
