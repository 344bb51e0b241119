package demo_test

import (
	"context"
	"errors"
	"math"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
)

func TestCounterDoesNotWrap(t *testing.T) {
	n, err := tempest.New(tempest.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	ctx := t.Context()
	ref := n.Ref(demo.Counter, "c")
	if _, err := n.Ask(ctx, ref, demo.Add{N: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Ask(ctx, ref, demo.Add{N: 1}); !errors.Is(err, demo.ErrOverflow) {
		t.Fatalf("add past MaxInt64: got %v, want ErrOverflow", err)
	}
	if _, err := n.Ask(ctx, ref, &demo.Add{N: math.MinInt64}); err != nil {
		t.Fatalf("add MinInt64 to MaxInt64: %v", err)
	}
	if _, err := n.Ask(ctx, ref, demo.Add{N: math.MinInt64}); !errors.Is(err, demo.ErrOverflow) {
		t.Fatalf("add past MinInt64: got %v, want ErrOverflow", err)
	}
	got, err := n.Ask(ctx, ref, demo.Get{})
	if err != nil || got.(demo.CounterValue).N != -1 {
		t.Fatalf("value %v, %v; want -1", got, err)
	}
}
