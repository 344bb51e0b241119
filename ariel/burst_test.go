package ariel_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// TestInterleavedSendsKeepPerSenderOrder: actors whose turns send
// round-robin over many recipients (so every recipient's sends are
// interleaved with others') and program goroutines all send to the same
// recipients; each recipient sees each sender's messages in order and
// exactly once.
func TestInterleavedSendsKeepPerSenderOrder(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 4, MailboxCapacity: 1 << 14})
	const recipients, senders, rounds, turns = 24, 6, 30, 10
	var bad atomic.Value
	var got atomic.Int64
	refs := make([]actor.Ref, recipients)
	for r := range refs {
		last := make([]int, senders)
		for i := range last {
			last[i] = -1
		}
		refs[r], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if m, ok := msg.(seqMsg); ok {
				if m.seq != last[m.from]+1 {
					bad.CompareAndSwap(nil, m)
				}
				last[m.from] = m.seq
				got.Add(1)
			}
		}))
	}
	var wg sync.WaitGroup
	for i := 0; i < senders; i++ {
		if i%2 == 1 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < rounds*turns; k++ {
					for _, r := range refs {
						if err := s.Tell(r, seqMsg{i, k}); err != nil {
							bad.CompareAndSwap(nil, err)
						}
					}
				}
			}()
			continue
		}
		k := 0
		a, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(string); !ok {
				return
			}
			// Rounds over the recipients in a turn; a different starting
			// recipient each turn.
			for j := 0; j < rounds; j++ {
				for x := range refs {
					if err := ctx.Tell(refs[(x+k)%recipients], seqMsg{i, k*rounds + j}); err != nil {
						bad.CompareAndSwap(nil, err)
					}
				}
			}
			k++
		}))
		for range turns {
			if err := s.Tell(a, "go"); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	waitIdle(t, s)
	if v := bad.Load(); v != nil {
		t.Fatalf("out of order or refused: %v", v)
	}
	if want := int64(recipients * senders * rounds * turns); got.Load() != want {
		t.Fatalf("delivered %d, want %d", got.Load(), want)
	}
}

// TestInterleavedSendsRefusedAtTheBound: a turn that alternates sends to a
// full-size and a small mailbox gets exactly the small mailbox's capacity
// admitted there, as the first sends, and its refusals synchronously; the
// credit the turn reserved beyond what it used is returned, so the
// mailbox takes its full capacity again afterwards.
func TestInterleavedSendsRefusedAtTheBound(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	small := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	sref, _ := s.Spawn(small, actor.WithMailbox(5))
	big := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	bref, _ := s.Spawn(big)
	if err := s.Tell(sref, "block"); err != nil {
		t.Fatal(err)
	}
	<-small.entered
	var refusedAt []int
	var other []error
	done := make(chan struct{})
	a, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg != "go" {
			return
		}
		defer close(done)
		for i := 0; i < 12; i++ {
			if err := ctx.Tell(sref, i); err != nil {
				if !errors.Is(err, actor.ErrRefused) {
					other = append(other, err)
				}
				refusedAt = append(refusedAt, i)
			}
			if err := ctx.Tell(bref, i); err != nil {
				other = append(other, err)
			}
		}
	}))
	if err := s.Tell(a, "go"); err != nil {
		t.Fatal(err)
	}
	<-done
	if len(other) > 0 || len(refusedAt) != 7 || refusedAt[0] != 5 {
		t.Fatalf("refused at %v (other errors %v), want 5..11", refusedAt, other)
	}
	small.release <- struct{}{}
	waitIdle(t, s)
	small.mu.Lock()
	if len(small.handled) != 5 {
		t.Fatalf("small mailbox handled %v, want 0..4", small.handled)
	}
	for i, m := range small.handled {
		if m != i {
			t.Fatalf("small mailbox handled %v, want 0..4 in order", small.handled)
		}
	}
	small.mu.Unlock()
	big.mu.Lock()
	if len(big.handled) != 12 {
		t.Fatalf("big mailbox handled %d, want 12", len(big.handled))
	}
	big.mu.Unlock()
	// Credit returned: with the recipient blocked again, its whole
	// capacity is admitted once more.
	if err := s.Tell(sref, "block"); err != nil {
		t.Fatal(err)
	}
	<-small.entered
	for i := 0; i < 5; i++ {
		if err := s.Tell(sref, 100+i); err != nil {
			t.Fatalf("Tell %d after the turn: %v (credit leaked)", i, err)
		}
	}
	if err := s.Tell(sref, 105); !errors.Is(err, actor.ErrRefused) {
		t.Fatalf("Tell past the bound = %v, want ErrRefused", err)
	}
	small.release <- struct{}{}
	waitIdle(t, s)
}

// gate handles "block" by waiting for a token on release (once per
// "block"), and records the ints it handles.
type gate struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	handled []any
}

func (g *gate) Receive(ctx actor.Context, msg any) {
	switch msg.(type) {
	case string:
		g.entered <- struct{}{}
		<-g.release
	case int:
		g.mu.Lock()
		g.handled = append(g.handled, msg)
		g.mu.Unlock()
	}
}

// TestSeizingRelayDoesNotStarveOthers: on one worker, two actors that
// bounce a message back and forth forever hand it over by seizing each
// other; an ask from program code to a third actor is still answered
// (the seize depth bound and the probe of the shared queue).
func TestSeizingRelayDoesNotStarveOthers(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 1})
	var stop atomic.Bool
	var hops atomic.Int64
	var a, b actor.Ref
	relay := func(peer *actor.Ref) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(*ball); ok && !stop.Load() {
				hops.Add(1)
				_ = ctx.Tell(*peer, msg)
			}
		})
	}
	a, _ = s.Spawn(relay(&b))
	b, _ = s.Spawn(relay(&a))
	c, _ := s.Spawn(echo{})
	waitIdle(t, s)
	if err := s.Tell(a, &ball{}); err != nil {
		t.Fatal(err)
	}
	defer stop.Store(true)
	for hops.Load() < 1000 {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := s.Ask(ctx, c, i)
		cancel()
		if err != nil || v != i {
			t.Fatalf("ask %d beside a relay: %v, %v", i, v, err)
		}
	}
}

// TestSeizedGroupLargerThanABatchKeepsOrder: turns that send long runs to
// idle recipients (held groups larger than a drain batch and than the
// fairness budget) deliver them in order, exactly once.
func TestSeizedGroupLargerThanABatchKeepsOrder(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2, FairnessMessages: 5})
	const recipients, per, turns = 4, 300, 5
	var bad atomic.Value
	var got atomic.Int64
	refs := make([]actor.Ref, recipients)
	for r := range refs {
		next := 0
		refs[r], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if m, ok := msg.(seqMsg); ok {
				if m.seq != next {
					bad.CompareAndSwap(nil, m)
				}
				next = m.seq + 1
				got.Add(1)
			}
		}))
	}
	seq := 0
	src, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(string); !ok {
			return
		}
		for _, r := range refs {
			for k := 0; k < per; k++ {
				if err := ctx.Tell(r, seqMsg{0, seq + k}); err != nil {
					bad.CompareAndSwap(nil, err)
				}
			}
		}
		seq += per
	}))
	for i := 0; i < turns; i++ {
		waitIdle(t, s) // the recipients are idle: the flush seizes them
		if err := s.Tell(src, "go"); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, s)
	if v := bad.Load(); v != nil {
		t.Fatalf("out of order or refused: %v", v)
	}
	if want := int64(recipients * per * turns); got.Load() != want {
		t.Fatalf("delivered %d, want %d", got.Load(), want)
	}
}

// TestAbandonedTurnGivesBackHeldMail: a turn seizes idle recipients (their
// mail is held by the worker, to run after the cycle) and the next turn
// of the same cycle never returns; when the watchdog abandons it, the
// held mail goes back to the recipients, which the replacement worker
// runs.
func TestAbandonedTurnGivesBackHeldMail(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 1, TurnBudget: 200 * time.Millisecond, Activator: silent{}})
	const n = 10
	var got atomic.Int64
	refs := make([]actor.Ref, n)
	for i := range refs {
		refs[i], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if msg == "held" {
				got.Add(1)
			}
		}))
	}
	waitIdle(t, s) // the recipients are idle with empty mailboxes
	release := make(chan struct{})
	defer close(release)
	sender := actor.Func(func(ctx actor.Context, msg any) {
		switch msg {
		case "send":
			for _, r := range refs {
				_ = ctx.Tell(r, "held")
			}
		case "block":
			<-release
		}
	})
	if err := s.Register("seizer", func(string) actor.Actor { return sender }, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("seizer", "a")
	if err := s.EnsureCell(ref, 1, 0); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"send", "block"} {
		if err := s.Tell(ref, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AttachAt(ref, 1, sender); err != nil { // both in one batch
		t.Fatal(err)
	}
	waitFor(t, func() bool { return got.Load() == n })
	if st := s.Stats(); st.Exhausted != 1 {
		t.Fatalf("Exhausted %d, want 1", st.Exhausted)
	}
}

// A turn resolves a spawned recipient once for a burst of sends to it;
// the sends after the recipient restarted (a reference pinned to the old
// incarnation) or stopped are refused synchronously all the same, as
// when every send resolved the reference. The recipient's restart and
// stop run on the second worker while the sending turn waits.
func TestBurstToOneRecipientSeesItsRestartAndStop(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	started := make(chan struct{}, 4)
	recv := func() actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(actor.Started); ok {
				started <- struct{}{}
			}
		})
	}
	ref, err := s.Spawn(recv())
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if ref.Incarnation() == 0 {
		t.Fatal("Spawn returned an unpinned reference")
	}
	proceed := make(chan struct{})
	errs := make(chan error, 16)
	sender, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg != "go" {
			return
		}
		for i := 0; i < 3; i++ { // the group holds reserved credit now
			errs <- ctx.Tell(ref, i)
		}
		<-proceed // restarted meanwhile
		errs <- ctx.Tell(ref, "pinned to the old incarnation")
		errs <- ctx.Tell(ref.Unpinned(), "unpinned")
		errs <- ctx.Tell(ref.Unpinned(), "unpinned again")
		<-proceed // stopped meanwhile
		errs <- ctx.Tell(ref.Unpinned(), "after the stop")
	}))
	if err := s.Tell(sender, "go"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := s.Restart(ref, recv()); err != nil {
		t.Fatal(err)
	}
	<-started
	proceed <- struct{}{}
	if err := <-errs; !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("send pinned to the old incarnation: %v, want ErrActorTerminated", err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("unpinned send after the restart: %v", err)
		}
	}
	s.Stop(ref.Unpinned())
	waitFor(t, func() bool { return errors.Is(s.Tell(ref.Unpinned(), "probe"), actor.ErrActorTerminated) })
	proceed <- struct{}{}
	if err := <-errs; !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("send after the stop: %v, want ErrActorTerminated", err)
	}
}

// TestAbandonedHeldRunStillReachesQuiescence: a turn seizes idle
// recipients; the first ones run and go idle while the worker still
// holds mail for the others (it counts them out of the active set only
// when the held run ends), and the last one's turn never returns. Once
// the watchdog abandoned it, the scheduler must still become quiescent:
// the recipients that went idle during the held run are counted out
// too, or WaitIdle would wait for ever.
func TestAbandonedHeldRunStillReachesQuiescence(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 1, TurnBudget: 200 * time.Millisecond, Activator: silent{}})
	const n = 10
	var got atomic.Int64
	release := make(chan struct{})
	defer close(release)
	refs := make([]actor.Ref, n)
	for i := range refs {
		refs[i], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			switch msg {
			case "held":
				got.Add(1)
			case "stuck":
				<-release
			}
		}))
	}
	waitIdle(t, s) // the recipients are idle with empty mailboxes: one worker seizes them all
	sender, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg != "send" {
			return
		}
		for _, r := range refs[:n-1] {
			_ = ctx.Tell(r, "held")
		}
		_ = ctx.Tell(refs[n-1], "stuck")
	}))
	if err := s.Tell(sender, "send"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Stats().Exhausted == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatalf("not quiescent after the abandonment: %v", err)
	}
	if got.Load() != n-1 {
		t.Fatalf("held mail run %d times, want %d", got.Load(), n-1)
	}
}
