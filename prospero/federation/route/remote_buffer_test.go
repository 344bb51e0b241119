package route

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// bufLog records the sequence numbers it is told, in order; "get"
// answers them as text.
func bufLog(string) actor.Actor {
	var got []uint64
	return actor.Func(func(ctx actor.Context, msg any) {
		m, ok := msg.(rtSeq)
		if !ok {
			return
		}
		switch m.Kind {
		case "seq":
			got = append(got, m.DefaultDeadlineNs)
		case "get":
			ctx.Reply(rtPayload{State: fmt.Append(nil, got)})
		}
	})
}

// bufPump tells log/x the numbers [from, from+n) when told "go", and
// counts the Undelivered notices it gets back by cause.
type bufPump struct {
	mu      sync.Mutex
	refused atomic.Int64
	unavail atomic.Int64
}

func (p *bufPump) factory(string) actor.Actor {
	return actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case rtSeq:
			if m.Kind != "go" {
				return
			}
			for i := range m.TurnBudgetNs {
				_ = ctx.Tell(actor.Virtual("log", "x"), rtSeq{Kind: "seq", DefaultDeadlineNs: m.DefaultDeadlineNs + i})
			}
		case actor.Undelivered:
			switch {
			case errors.Is(m.Err, actor.ErrRefused):
				p.refused.Add(1)
			case errors.Is(m.Err, actor.ErrProcessUnavailable):
				p.unavail.Add(1)
			}
		}
	})
}

func seqText(from, to uint64) string {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return string(fmt.Append(nil, s))
}

// TestRemoteHandoffBuffersActorMail: mail from an actor to a shard being
// handed off waits (not refused), is delivered in order at the new owner
// once the move completes, ahead of mail sent after it; a full buffer
// refuses with ErrRefused, and mail that waits too long comes back
// Undelivered.
func TestRemoteHandoffBuffersActorMail(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("log", "b")
	c.place("pump", "a")
	pump := &bufPump{}
	for _, n := range []*rtNode{a, b} {
		if err := n.s.Register("log", bufLog, 0); err != nil {
			t.Fatal(err)
		}
		if err := n.s.Register("pump", pump.factory, 0); err != nil {
			t.Fatal(err)
		}
	}
	logRef, pumpRef := actor.Virtual("log", "x"), actor.Virtual("pump", "p")
	askRetry(t, a.s, logRef, rtSeq{Kind: "get"}) // the link is up
	moving := func(on bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if on {
			c.fail["a/log"] = &Hint{Err: fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff),
				Owner: "a", Shard: "log-shard"}
		} else {
			delete(c.fail, "a/log")
		}
	}
	buffered := func() int64 { return a.r.buf.Waiting() }

	// log/x moves from b to a; mail from the pump waits meanwhile.
	moving(true)
	if err := a.s.Tell(pumpRef, rtSeq{Kind: "go", DefaultDeadlineNs: 1, TurnBudgetNs: 20}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "20 buffered tells", func() bool { return buffered() == 20 })
	a.r.flushBuffered() // still moving: nothing leaves
	if buffered() != 20 || pump.refused.Load()+pump.unavail.Load() != 0 {
		t.Fatalf("while moving: %d buffered, %d refused, %d unavailable", buffered(), pump.refused.Load(), pump.unavail.Load())
	}
	// The move completes at a, and more mail is sent meanwhile: it
	// queues behind the buffered mail, or follows it once it has left.
	c.place("log", "a")
	moving(false)
	if err := a.s.Tell(pumpRef, rtSeq{Kind: "go", DefaultDeadlineNs: 21, TurnBudgetNs: 5}); err != nil {
		t.Fatal(err)
	}
	c.changed() // the table shows the move done
	if err := a.s.Tell(pumpRef, rtSeq{Kind: "go", DefaultDeadlineNs: 26, TurnBudgetNs: 5}); err != nil {
		t.Fatal(err)
	}
	want := seqText(1, 30)
	waitFor(t, "log/x at a got 1..30 in order", func() bool {
		got := askRetry(t, a.s, logRef, rtSeq{Kind: "get"}).(rtPayload)
		return string(got.State) == want
	})
	if n := b.r.MailStats().TellsReceived; n != 0 {
		t.Fatalf("the old owner received %d tells", n)
	}

	// A full buffer refuses with ErrRefused.
	a.r.buf.SetLimit(4)
	moving(true)
	if err := a.s.Tell(pumpRef, rtSeq{Kind: "go", DefaultDeadlineNs: 100, TurnBudgetNs: 10}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "4 buffered, 6 refused", func() bool { return buffered() == 4 && pump.refused.Load() == 6 })

	// Mail that waits longer than the buffer's wait comes back Undelivered.
	a.r.buf.SetWait(0)
	c.changed()
	waitFor(t, "4 undelivered", func() bool { return pump.unavail.Load() == 4 })
	if buffered() != 0 {
		t.Fatalf("%d still buffered after expiry", buffered())
	}
}

// TestRemoteNotOwnerTellRetried: an actor's tell refused NOT_OWNER is sent
// again at once when the sender's table has meanwhile moved the recipient
// away from the refusing node; when it has not, it waits for the table to
// change, is never sent to the refuser again, and comes back Undelivered
// at the end of the wait.
func TestRemoteNotOwnerTellRetried(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("log", "b")
	c.place("pump", "a")
	pump := &bufPump{}
	for _, n := range []*rtNode{a, b} {
		if err := n.s.Register("log", bufLog, 0); err != nil {
			t.Fatal(err)
		}
		if err := n.s.Register("pump", pump.factory, 0); err != nil {
			t.Fatal(err)
		}
	}
	logRef, pumpRef := actor.Virtual("log", "x"), actor.Virtual("pump", "p")
	askRetry(t, a.s, logRef, rtSeq{Kind: "get"}) // the link is up
	// log/x moved to a; a routes the tell by its old view (b: one locate,
	// Resolve's, which Forward uses) and has caught up when b's refusal
	// arrives.
	c.place("log", "a")
	c.mu.Lock()
	c.seq["a/log"] = []string{"b"}
	c.mu.Unlock()
	if err := a.s.Tell(pumpRef, rtSeq{Kind: "go", DefaultDeadlineNs: 1, TurnBudgetNs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's refusal", func() bool { return b.r.MailStats().RefusedOut[wire.RefusedReasonNotOwner] == 1 })
	waitFor(t, "the retried tell at a", func() bool {
		return string(askRetry(t, a.s, logRef, rtSeq{Kind: "get"}).(rtPayload).State) == "[1]"
	})
	// Still the old view when the refusal arrives: no retry, Undelivered.
	a.r.buf.SetWait(200 * time.Millisecond)
	c.mu.Lock()
	c.seq["a/log"] = make([]string, 1000)
	for i := range c.seq["a/log"] {
		c.seq["a/log"][i] = "b"
	}
	c.mu.Unlock()
	if err := a.s.Tell(pumpRef, rtSeq{Kind: "go", DefaultDeadlineNs: 2, TurnBudgetNs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an Undelivered notice", func() bool { return pump.unavail.Load() == 1 })
	c.mu.Lock()
	delete(c.seq, "a/log")
	c.mu.Unlock()
	if got := string(askRetry(t, a.s, logRef, rtSeq{Kind: "get"}).(rtPayload).State); got != "[1]" {
		t.Fatalf("log/x at a has %s, want [1]", got)
	}
	if st := b.r.MailStats(); st.RefusedOut[wire.RefusedReasonNotOwner] != 2 || st.TellsReceived != 2 {
		t.Fatalf("b received %d tells and refused %d NOT_OWNER, want 2 and 2", st.TellsReceived, st.RefusedOut[wire.RefusedReasonNotOwner])
	}
}
