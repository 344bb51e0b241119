package route

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// retryPair is two nodes: log/x is placed on b, and a sends to it.
func retryPair(t *testing.T) (c *rtCluster, a, b *rtNode, pump *bufPump) {
	c = newRTCluster(t)
	a = c.start("a", rtRegistry(t, false), nil)
	b = c.start("b", rtRegistry(t, false), nil)
	c.place("log", "b")
	c.place("pump", "a")
	c.place("asker", "a")
	pump = &bufPump{}
	for _, n := range []*rtNode{a, b} {
		if err := n.s.Register("log", bufLog, 0); err != nil {
			t.Fatal(err)
		}
		if err := n.s.Register("pump", pump.factory, 0); err != nil {
			t.Fatal(err)
		}
		if err := n.s.Register("asker", inTurnAsker, 0); err != nil {
			t.Fatal(err)
		}
	}
	askRetry(t, a.s, actor.Virtual("log", "x"), rtSeq{Kind: "get"}) // the link is up
	return c, a, b, pump
}

// setFail sets (err nil: clears) the error node's locator gives for kind.
func (c *rtCluster) setFail(node, kind string, err error) {
	c.mu.Lock()
	if err == nil {
		delete(c.fail, node+"/"+kind)
	} else {
		c.fail[node+"/"+kind] = err
	}
	c.mu.Unlock()
}

// logOf is what log/x on n was told, as text.
func logOf(t *testing.T, n *rtNode) string {
	return string(askRetry(t, n.s, actor.Virtual("log", "x"), rtSeq{Kind: "get"}).(rtPayload).State)
}

// TestRemoteNotServingTellArrivesAfterMove: a tell that the owner's node
// refused NOT_SERVING (its table was behind: it is taking the shard over)
// was lost; it is sent again and arrives once the owner serves, whether
// program code or an actor sent it. And one refused by an owner that
// never serves again arrives where the table moves the shard.
func TestRemoteNotServingTellArrivesAfterMove(t *testing.T) {
	c, a, b, pump := retryPair(t)
	behind := fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrBehind)
	c.setFail("b", "log", behind)
	if err := a.s.Tell(actor.Virtual("log", "x"), rtSeq{Kind: "seq", DefaultDeadlineNs: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.s.Tell(actor.Virtual("pump", "p"), rtSeq{Kind: "go", DefaultDeadlineNs: 2, TurnBudgetNs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b refused both NOT_SERVING", func() bool { return b.r.MailStats().RefusedOut[wire.RefusedReasonNotServing] >= 2 })
	c.setFail("b", "log", nil) // b's table caught up: the move completed
	waitFor(t, "both tells at b", func() bool { return logOf(t, b) == "[1 2]" || logOf(t, b) == "[2 1]" })
	if n := pump.unavail.Load() + pump.refused.Load(); n != 0 {
		t.Fatalf("the pump got %d Undelivered notices for a tell that arrived", n)
	}

	// b stops serving the shard for good; the table moves it to a.
	c.setFail("b", "log", behind)
	if err := a.s.Tell(actor.Virtual("log", "x"), rtSeq{Kind: "seq", DefaultDeadlineNs: 3}); err != nil {
		t.Fatal(err)
	}
	refused := b.r.MailStats().RefusedOut[wire.RefusedReasonNotServing]
	waitFor(t, "b refused the third", func() bool { return b.r.MailStats().RefusedOut[wire.RefusedReasonNotServing] > refused })
	c.place("log", "a")
	waitFor(t, "the third tell at a", func() bool { return logOf(t, a) == "[3]" })
	c.setFail("b", "log", nil)
	c.place("log", "b")
	if got := logOf(t, b); got != "[1 2]" && got != "[2 1]" {
		t.Fatalf("b's log is %s after the move", got)
	}
	if st := a.r.buf.Stats(); st.Resent == 0 || st.GaveUp != 0 {
		t.Fatalf("a resent %d, gave up %d", st.Resent, st.GaveUp)
	}
}

// inTurnAsker asks log/x for its log inside its turn when told "go", and
// answers "result" with what that ask got.
func inTurnAsker(string) actor.Actor {
	var mu sync.Mutex
	var got string
	var gotErr error
	return actor.Func(func(ctx actor.Context, msg any) {
		m, ok := msg.(rtSeq)
		if !ok {
			return
		}
		switch m.Kind {
		case "go":
			ctx.Ask(actor.Virtual("log", "x"), rtSeq{Kind: "get"}, func(_ actor.Context, v any, err error) {
				mu.Lock()
				defer mu.Unlock()
				gotErr = err
				if p, ok := v.(rtPayload); ok {
					got = string(p.State)
				}
			})
		case "result":
			mu.Lock()
			defer mu.Unlock()
			if gotErr != nil {
				ctx.Reply(rtPayload{State: []byte("error: " + gotErr.Error())})
				return
			}
			ctx.Reply(rtPayload{State: []byte(got)})
		}
	})
}

// TestRemoteInTurnAskDuringMove: an ask made inside a turn that the old
// owner refuses NOT_OWNER (it handed the shard to this node, whose table
// has not applied that yet), or the new owner NOT_SERVING (its own table
// behind), succeeds once the tables catch up, within its deadline; it
// was failed at once.
func TestRemoteInTurnAskDuringMove(t *testing.T) {
	c, a, b, _ := retryPair(t)
	asker := actor.Virtual("asker", "q")
	result := func() string {
		return string(askRetry(t, a.s, asker, rtSeq{Kind: "result"}).(rtPayload).State)
	}
	if err := a.s.Tell(actor.Virtual("log", "x"), rtSeq{Kind: "seq", DefaultDeadlineNs: 7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "log/x on b told", func() bool { return logOf(t, b) == "[7]" })

	// b handed log/x to a; a's table still shows b.
	c.setFail("b", "log", &Hint{Err: fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff), Owner: "a"})
	if err := a.s.Tell(asker, rtSeq{Kind: "go"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b refused NOT_OWNER", func() bool { return b.r.MailStats().RefusedOut[wire.RefusedReasonNotOwner] == 1 })
	if got := result(); got != "" {
		t.Fatalf("the in-turn ask was answered %q before the move completed", got)
	}
	c.place("log", "a") // a's table applies the move
	waitFor(t, "the in-turn ask answered by a", func() bool { return result() == "[]" })

	// The move back: a hands it to b, whose table is behind.
	c.setFail("b", "log", fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrBehind))
	c.place("log", "b")
	if err := a.s.Tell(asker, rtSeq{Kind: "go"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b refused NOT_SERVING", func() bool { return b.r.MailStats().RefusedOut[wire.RefusedReasonNotServing] >= 1 })
	c.setFail("b", "log", nil)
	waitFor(t, "the in-turn ask answered by b", func() bool { return result() == "[7]" })
}

// TestRemoteRefusedAskFailsAtItsDeadline: an ask refused NOT_OWNER by a
// table that never catches up waits for a change until its deadline, and
// then fails as a deadline, not sooner and not as a refusal of something
// it could have done.
func TestRemoteRefusedAskFailsAtItsDeadline(t *testing.T) {
	c, a, b, _ := retryPair(t)
	c.setFail("b", "log", &Hint{Err: fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff), Owner: "a"})
	_, err := a.s.Ask(rtCtx(t, 300*time.Millisecond), actor.Virtual("log", "x"), rtSeq{Kind: "get"})
	if !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("ask = %v, want a deadline", err)
	}
	// Sent once: the table never changed, so it was never sent again.
	if n := b.r.MailStats().RefusedOut[wire.RefusedReasonNotOwner]; n != 1 {
		t.Fatalf("b refused %d NOT_OWNER, want 1", n)
	}
	waitFor(t, "the buffer empty after the deadline", func() bool { return a.r.buf.Waiting() == 0 })
}

// TestRemoteBusyOwnerRetriedAfterItsWait: an owner over its hydration
// backlog refuses mail that would need an activation BUSY, with the wait
// it asks for; every sender (program code's ask and tell, an actor's
// ask inside its turn) sends it again after that wait, within its
// deadline, and it arrives once the owner takes it. An ask whose deadline
// ends first fails as a deadline.
func TestRemoteBusyOwnerRetriedAfterItsWait(t *testing.T) {
	c, a, b, _ := retryPair(t)
	var mu sync.Mutex
	busy := true
	c.mu.Lock()
	c.busy = func(node string, to actor.Ref) (time.Duration, string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return 20 * time.Millisecond, "test backlog", busy && node == "b" && to.Kind() == "log"
	}
	c.mu.Unlock()
	setBusy := func(on bool) {
		mu.Lock()
		busy = on
		mu.Unlock()
	}
	log := actor.Virtual("log", "x")
	if _, err := a.s.Ask(rtCtx(t, time.Second), log, rtSeq{Kind: "get"}); !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("ask to a busy owner past its deadline = %v, want the deadline", err)
	}
	refusals := b.r.MailStats().RefusedOut.Busy()
	if refusals < 2 {
		t.Fatalf("b refused %d BUSY within 1s at 20ms a wait, want the ask sent again", refusals)
	}
	if err := a.s.Tell(log, rtSeq{Kind: "seq", DefaultDeadlineNs: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.s.Tell(actor.Virtual("asker", "q"), rtSeq{Kind: "go"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		v   any
		err error
	}
	got := make(chan answer, 1)
	go func() {
		v, err := a.s.Ask(rtCtx(t, rtWait), log, rtSeq{Kind: "get"})
		got <- answer{v, err}
	}()
	waitFor(t, "b refused the tell and both asks BUSY", func() bool { return b.r.MailStats().RefusedOut.Busy() >= refusals+3 })
	setBusy(false)
	ans := <-got
	if ans.err != nil {
		t.Fatalf("ask once the owner takes it: %v", ans.err)
	}
	waitFor(t, "the tell at b", func() bool { return logOf(t, b) == "[1]" })
	waitFor(t, "the in-turn ask answered", func() bool {
		return string(askRetry(t, a.s, actor.Virtual("asker", "q"), rtSeq{Kind: "result"}).(rtPayload).State) != ""
	})
	if got := string(askRetry(t, a.s, actor.Virtual("asker", "q"), rtSeq{Kind: "result"}).(rtPayload).State); got != "[]" && got != "[1]" {
		t.Fatalf("the in-turn ask got %q", got)
	}
	var re *wire.RefusedError
	if err := b.r.owns(log); err != nil {
		t.Fatalf("b refuses after the backlog drained: %v", err)
	}
	setBusy(true)
	err := b.r.owns(log)
	if !errors.As(err, &re) || re.Reason != wire.RefusedReasonBusy || re.RetryAfter != 20*time.Millisecond ||
		!errors.Is(err, wire.ErrBusy) || !errors.Is(err, actor.ErrRefused) {
		t.Fatalf("b's refusal while busy = %v, want BUSY asking for 20ms", err)
	}
	setBusy(false)
	if d, ok := busyFor(err); !ok || d != 20*time.Millisecond {
		t.Fatalf("the wait of %v = %v, %v", err, d, ok)
	}
	if d, _ := busyFor(wire.Busy(0, "no advice")); d != retryBackoffMin {
		t.Fatalf("a BUSY without advice waits %v, want the first back-off %v", d, retryBackoffMin)
	}
}
