package tempest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/tempesttest"
)

// TestStartContextBoundsTheStartOnly: the usual pattern, a Start under a
// context whose cancel is deferred by the helper that starts the node,
// must not stop the node's gossip and placement once Start returned: the
// node joins and becomes ready. A context ended already starts nothing.
func TestStartContextBoundsTheStartOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2})
	n, err := tempest.New(c.Config("n3"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })

	ended, cancelEnded := context.WithCancel(t.Context())
	cancelEnded()
	if err := n.Start(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with an ended context: %v, want context.Canceled", err)
	}
	if err := n.Readiness(); !errors.Is(err, tempest.ErrNotStarted) {
		t.Fatalf("after it: %v, want the node still not started", err)
	}

	func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		t.Fatalf("a node whose Start context was cancelled after Start: %v", err)
	}
}

// Register on a closed node says it is closed, not that it started.
func TestRegisterAfterClose(t *testing.T) {
	n, err := tempest.New(tempest.Config{Name: "solo", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	err = n.Register("k", func(string) actor.Actor { return actor.Func(func(actor.Context, any) {}) }, tempest.KindOptions{})
	if !errors.Is(err, tempest.ErrClosed) {
		t.Fatalf("Register after Close: %v, want ErrClosed", err)
	}
}
