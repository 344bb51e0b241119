package tempesttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/examples/bank"
	"github.com/tempest-actors/tempest/tempesttest"
)

func TestReadinessOfAStandaloneNode(t *testing.T) {
	n, err := tempest.New(tempest.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Readiness(); !errors.Is(err, tempest.ErrNotStarted) || n.Ready() {
		t.Fatalf("before Start: %v", err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(t.Context()); err != nil || !n.Ready() {
		t.Fatalf("after Start: %v", err)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(t.Context()); !errors.Is(err, tempest.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestRestartAndQuorumLoss restarts a node on its data directory, then
// kills two of three nodes: the survivor reports ErrNoQuorum in Readiness,
// in WaitReady and to callers.
func TestRestartAndQuorumLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: bank.Register})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ref := actor.Virtual(bank.Account, "alice")
	owner := c.Owner(ref).Name()
	if _, err := bank.DepositTo(ctx, c.NotOwner(ref), "alice", 5); err != nil {
		t.Fatal(err)
	}
	c.Restart(owner)
	c.WaitSettled()
	if got := len(c.Nodes()); got != 3 {
		t.Fatalf("%d nodes after restart", got)
	}

	survivor := c.Nodes()[0]
	for _, n := range c.Nodes()[1:] {
		c.Kill(n.Name())
	}
	short, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	for !errors.Is(survivor.Readiness(), tempest.ErrNoQuorum) {
		if short.Err() != nil {
			t.Fatalf("survivor never reported no quorum: %v", survivor.Readiness())
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if err := survivor.WaitReady(wctx); !errors.Is(err, tempest.ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady without quorum: %v", err)
	}
	// A caller learns why: the survivor cannot confirm any ownership.
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	defer acancel()
	for _, key := range []string{"alice", "bob", "carol", "dave"} {
		_, err := bank.BalanceOf(actx, survivor, key)
		if !errors.Is(err, actor.ErrProcessUnavailable) && !errors.Is(err, actor.ErrDeadlineExceeded) {
			t.Fatalf("ask without quorum: %v", err)
		}
		if errors.Is(err, tempest.ErrNoQuorum) {
			return
		}
		t.Logf("%s: %v", key, err)
	}
	t.Fatal("no ask reported ErrNoQuorum")
}
