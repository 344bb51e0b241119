package route

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// TestRemoteStaleEpochNeverRuns: mail routed by a table whose epoch for
// the shard is older than the owner's (the shard moved away and back) is
// refused NOT_OWNER naming the owner and never handled; mail stamped with
// a newer epoch (the owner's table is behind) is refused NOT_SERVING, sent
// again after a back-off (the sender's table, ahead already, may never
// change), and runs once the owner's table has caught up.
func TestRemoteStaleEpochNeverRuns(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("counter", "b")
	var turns atomic.Int64
	counting := func(key string) actor.Actor {
		inner := counterActor(key)
		return actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(rtSeq); ok {
				turns.Add(1)
			}
			inner.Receive(ctx, msg)
		})
	}
	for _, n := range []*rtNode{a, b} {
		if err := n.s.Register("counter", counting, 0); err != nil {
			t.Fatal(err)
		}
	}
	setEpoch := func(node string, e uint64) {
		c.mu.Lock()
		c.epoch[node] = e
		c.mu.Unlock()
	}
	setEpoch("b", 5)
	setEpoch("a", 5)
	ref := actor.Virtual("counter", "x")
	askRetry(t, a.s, ref, rtSeq{Kind: "get"}) // the link is up
	base := turns.Load()

	// A program tell refused by a table that never catches up gives up
	// after the wait; an ask at its deadline.
	a.r.buf.SetWait(100 * time.Millisecond)
	refused := func() uint64 { return b.r.MailStats().RefusedOut[wire.RefusedReasonNotOwner] }
	const stale = 3
	setEpoch("a", stale)
	before := refused()
	if err := a.s.Tell(ref, rtSeq{Kind: "add", DefaultDeadlineNs: 10}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stale tell refused and given up", func() bool { return refused() == before+1 && a.r.buf.Waiting() == 0 })
	_, err := a.s.Ask(rtCtx(t, 300*time.Millisecond), ref, rtSeq{Kind: "add", DefaultDeadlineNs: 100})
	if !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("epoch %d: ask = %v, want its deadline (refused NOT_OWNER, the table never caught up)", stale, err)
	}
	waitFor(t, "the stale ask refused and dropped", func() bool { return refused() == before+2 && a.r.buf.Waiting() == 0 })
	// The refusal of an older stamp names the owner the refuser knows.
	ferr := delivery{b.r}.Fence(ref, stale)
	var re *wire.RefusedError
	if !errors.As(ferr, &re) || re.Reason != wire.RefusedReasonNotOwner || !errors.Is(ferr, wire.ErrNotOwner) || re.OwnerHint != "b" {
		t.Fatalf("epoch %d: fence = %v, want a NOT_OWNER refusal naming b", stale, ferr)
	}
	if n := a.r.buf.Stats().GaveUp; n != 1 {
		t.Fatalf("a gave up %d tells, want 1", n)
	}

	// A newer stamp: b is behind. It refuses NOT_SERVING; a sends again
	// after a back-off (its table, ahead already, may never change again),
	// and the ask runs once b's table caught up.
	ferr = delivery{b.r}.Fence(ref, 9)
	if !errors.As(ferr, &re) || re.Reason != wire.RefusedReasonNotServing || !errors.Is(ferr, wire.ErrNotServing) {
		t.Fatalf("epoch 9: fence = %v, want a NOT_SERVING refusal", ferr)
	}
	a.r.buf.SetWait(5 * time.Second)
	setEpoch("a", 9)
	notServing := func() uint64 { return b.r.MailStats().RefusedOut[wire.RefusedReasonNotServing] }
	if err := a.s.Tell(ref, rtSeq{Kind: "add", DefaultDeadlineNs: 1}); err != nil {
		t.Fatal(err)
	}
	caughtUp := make(chan struct{})
	go func() {
		defer close(caughtUp)
		deadline := time.Now().Add(5 * time.Second)
		for notServing() < 3 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // polling a counter, not synchronising
		}
		setEpoch("b", 9)
	}()
	got, err := a.s.Ask(rtCtx(t, 10*time.Second), ref, rtSeq{Kind: "get"})
	<-caughtUp
	if err != nil {
		t.Fatalf("ask stamped ahead of the owner's table: %v, want it answered once the owner caught up", err)
	}
	if got != any(rtCount{Count: 1}) {
		t.Fatalf("ask stamped ahead of the owner's table = %#v, want the count 1 (the tell sent before it, resent, ran once)", got)
	}
	if n := turns.Load() - base; n != 2 {
		t.Fatalf("%d turns since the link was up, want 2 (the caught-up tell and ask)", n)
	}
	if n := refused(); n != 2 {
		t.Fatalf("b refused %d NOT_OWNER, want the 2 stale ones", n)
	}
	if notServing() == 0 {
		t.Fatal("b refused nothing NOT_SERVING: the newer stamp was not refused")
	}
}

// TestRemoteHandoffRefusalNamesTarget: a node handing a shard off refuses
// mail for it NOT_OWNER, naming the handoff's target.
func TestRemoteHandoffRefusalNamesTarget(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("counter", "b")
	for _, n := range []*rtNode{a, b} {
		if err := n.s.Register("counter", counterActor, 0); err != nil {
			t.Fatal(err)
		}
	}
	ref := actor.Virtual("counter", "x")
	askRetry(t, a.s, ref, rtSeq{Kind: "get"})
	c.mu.Lock()
	c.fail["b"] = &Hint{Err: placement.ErrHandoff, Owner: "c"}
	c.mu.Unlock()
	if _, err := a.s.Ask(rtCtx(t, 300*time.Millisecond), ref, rtSeq{Kind: "get"}); !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("ask during a handoff that never completes = %v, want its deadline", err)
	}
	if n := b.r.MailStats().RefusedOut[wire.RefusedReasonNotOwner]; n != 1 {
		t.Fatalf("b refused %d NOT_OWNER, want 1 (a's table never changed: never sent again)", n)
	}
	err := delivery{b.r}.Fence(ref, 0)
	var re *wire.RefusedError
	if !errors.As(err, &re) || re.Reason != wire.RefusedReasonNotOwner || re.OwnerHint != "c" {
		t.Fatalf("b's refusal during a handoff = %v, want NOT_OWNER naming c", err)
	}
}
