package tempest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire"
)

// TestFailoverAsksWaitOnLoopback is the failover tests of
// failover_sim_test.go on real QUIC links and gossip: asks sent to a
// counter through a survivor, from when it saw the link to the killed
// owner go down until the shard has moved, are answered by the new owner
// within their deadline, none ends as of unknown outcome, and each is
// applied once. On QUIC a send to a peer whose
// link went down would start a dial and queue behind it; the dial to a
// dead node fails only after its handshake timeout, and the asks queued
// behind it with it, so the routing layer keeps such mail itself
// (wire.LinkWatch) until the link is up or the table moves the shard.
func TestFailoverAsksWaitOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	nodes := c.Nodes()
	ref := nodes[0].Ref(demo.Counter, "failover")
	owner, _, err := nodes[0].Locate(ref)
	if err != nil {
		t.Fatal(err)
	}
	via := nodes[0]
	if via.Name() == owner {
		via = nodes[1]
	}
	if _, err := via.Ask(ctxT(t), ref, demo.Get{}); err != nil {
		t.Fatalf("first ask: %v", err)
	}
	const asks = 20
	errs := make([]error, asks)
	var wg sync.WaitGroup
	down := via.Stats().Transport.LinksDown
	c.Kill(owner)
	killed := time.Now()
	// From when via saw the link go down: an ask sent before that could
	// have gone to the link and be of unknown outcome.
	waitFor(t, 10*time.Second, "the link to the killed owner down", func() bool { return via.Stats().Transport.LinksDown > down })
	for i := range asks {
		wg.Go(func() {
			// Spread over the failover: gossip's detection and the move.
			time.Sleep(time.Duration(i) * 150 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_, errs[i] = via.Ask(ctx, ref, demo.Add{N: 1})
		})
	}
	wg.Wait()
	acked, lost := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			acked++
		case errors.Is(err, wire.ErrLinkLost):
			lost++ // handed to a link that went down: may have run
			t.Logf("ask %d: %v", i, err)
		default:
			t.Errorf("ask %d, sent %v after the kill: %v", i, time.Duration(i)*150*time.Millisecond, err)
		}
	}
	if lost > 0 {
		t.Errorf("%d asks ended as their link's (outcome unknown), though none was sent before it went down", lost)
	}
	v, err := via.Ask(ctxT(t), ref, demo.Get{})
	if err != nil {
		t.Fatalf("read after the failover: %v", err)
	}
	got := int(v.(demo.CounterValue).N)
	if got < acked || got > acked+lost {
		t.Errorf("counter %d after %d acknowledged Adds and %d of unknown outcome", got, acked, lost)
	}
	t.Logf("%d asks over %v from the kill: %d answered, %d of unknown outcome; counter %d", asks, time.Since(killed).Round(time.Millisecond), acked, lost, got)
}
