package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire"
)

// TestGaveUpIsTheCallersReason: an ask that waited out its deadline on
// refusals (the owner not serving) fails as a deadline, not with the
// last refusal, and a cancelled one with its context's error.
func TestGaveUpIsTheCallersReason(t *testing.T) {
	refusal := wire.NotServing(errors.New("lease not fresh"))
	expired, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-expired.Done()
	err := gaveUp(expired, refusal)
	if !errors.Is(err, actor.ErrDeadlineExceeded) || errors.Is(err, actor.ErrProcessUnavailable) {
		t.Fatalf("expired: %v, want ErrDeadlineExceeded only", err)
	}
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := gaveUp(cancelled, refusal); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if err := gaveUp(context.Background(), refusal); err != refusal {
		t.Fatalf("still running: %v", err)
	}
}

// TestTransportClosedIsTheNodeClosing: a call cut off by this node's own
// transport closing (the node shutting down) fails as ErrClosed, which
// matches actor.ErrProcessUnavailable, not as the transport's bare
// error (which an HTTP caller got as a 500 internal).
func TestTransportClosedIsTheNodeClosing(t *testing.T) {
	var c Engine
	err := c.whyUnanswered(wire.ErrClosed)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, actor.ErrProcessUnavailable) || !errors.Is(err, wire.ErrClosed) {
		t.Fatalf("transport closed: %v", err)
	}
	if err := c.whyUnanswered(ErrClosed); err != ErrClosed {
		t.Fatalf("the node's own ErrClosed was wrapped again: %v", err)
	}
}
