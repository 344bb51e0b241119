package tempest

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// TestRemoteStaleEpochNeverRuns: mail routed by a table whose epoch for
// the shard is older (the shard moved away and back) or newer than the
// owner's is refused NOT_OWNER and never handled; once the sender's table
// has caught up, the same mail runs.
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

	for _, stale := range []uint64{3, 9} {
		setEpoch("a", stale)
		if err := a.s.Tell(ref, rtSeq{Kind: "add", DefaultDeadlineNs: 10}); err != nil {
			t.Fatal(err)
		}
		_, err := a.s.Ask(rtCtx(t, rtWait), ref, rtSeq{Kind: "add", DefaultDeadlineNs: 100})
		var re *wire.RefusedError
		if !errors.As(err, &re) || re.Reason != wire.RefusedReasonNotOwner || !errors.Is(err, wire.ErrNotOwner) {
			t.Fatalf("epoch %d: ask = %v, want a NOT_OWNER refusal", stale, err)
		}
		if want := map[uint64]string{3: "b", 9: ""}[stale]; re.OwnerHint != want {
			t.Fatalf("epoch %d: owner hint %q, want %q", stale, re.OwnerHint, want)
		}
	}
	setEpoch("a", 5)
	if got := askRetry(t, a.s, ref, rtSeq{Kind: "get"}); got != any(rtCount{Count: 0}) {
		t.Fatalf("after stale mail the counter is %#v, want 0: stale mail ran", got)
	}
	if n := turns.Load() - base; n != 1 {
		t.Fatalf("%d turns since the link was up, want 1 (only the fresh get)", n)
	}
	if st := b.r.stats(); st.RefusedOut[wire.RefusedReasonNotOwner] != 4 {
		t.Fatalf("b refused %d NOT_OWNER, want 4", st.RefusedOut[wire.RefusedReasonNotOwner])
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
	c.fail["b"] = &remoteHint{err: placement.ErrHandoff, owner: "c"}
	c.mu.Unlock()
	_, err := a.s.Ask(rtCtx(t, rtWait), ref, rtSeq{Kind: "get"})
	var re *wire.RefusedError
	if !errors.As(err, &re) || re.Reason != wire.RefusedReasonNotOwner || re.OwnerHint != "c" {
		t.Fatalf("ask during a handoff = %v, want NOT_OWNER naming c", err)
	}
}
