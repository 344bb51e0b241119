package wire

import (
	"context"
	"errors"
	"fmt"
	"github.com/tempest-actors/tempest/clock"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// fakeClock is a Clock moved by hand.
type fakeClock struct {
	clock.Real // the methods this package does not call
	mu         sync.Mutex
	now        time.Time
	waiters    []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

// newFakeClock starts at the wall time, since certificate validity is
// checked against the clock too.
func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			keep = append(keep, w)
		}
	}
	c.waiters = keep
}

func TestDialBackoffUsesClock(t *testing.T) {
	c := newQUICCluster(t)
	clk := newFakeClock()
	ev := newEvents()
	cfg := c.config(t, "a", newSink(), ev)
	cfg.Clock = clk
	cfg.BackoffMin, cfg.BackoffMax = time.Second, 4*time.Second
	// "b" cannot be resolved yet: the first send starts a dial that fails.
	// The first resolution waits until that send has queued its frame, or
	// a fast failure could close the link before the frame is queued.
	queued := make(chan struct{})
	var first sync.Once
	resolve := cfg.Resolve
	cfg.Resolve = func(ctx context.Context, name string) (string, error) {
		first.Do(func() {
			select {
			case <-queued:
			case <-ctx.Done():
			}
		})
		return resolve(ctx, name)
	}
	a := c.start(t, cfg)
	if err := a.Send("b", 1, []byte("x")); err != nil {
		t.Fatalf("first send: %v", err)
	}
	close(queued)
	ev.waitEvent(t, "b", false)
	if err := a.Send("b", 1, []byte("x")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("send during back-off: got %v, want ErrUnavailable", err)
	}
	if a.Stats().Dropped != 1 {
		t.Errorf("Dropped: got %d, want 1 (the frame queued while dialing)", a.Stats().Dropped)
	}
	// b appears; the back-off still holds until the clock moves.
	sb := newSink()
	c.start(t, c.config(t, "b", sb, nil))
	if err := a.Send("b", 1, []byte("x")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("send before back-off ends: got %v, want ErrUnavailable", err)
	}
	clk.Advance(time.Second)
	if err := a.Send("b", 1, []byte("after back-off")); err != nil {
		t.Fatalf("send after back-off: %v", err)
	}
	if got := sb.waitN(t, 1); string(got[0].frame) != "after back-off" {
		t.Errorf("got %q", got[0].frame)
	}
}

func TestCARotation(t *testing.T) {
	c, a, _, _, _ := newTwo(t)
	next := newPKI(t)
	both := c.pki.pool.Clone()
	both.AddCert(next.ca.Cert)

	// A node with a certificate from the next CA, trusting both.
	sn := newSink()
	ev := newEvents()
	cfg := c.config(t, "n", sn, ev)
	cfg.Certificate, cfg.CAs = next.cert(t, "n"), both
	n := c.start(t, cfg)
	if err := n.Send("a", 1, []byte("too early")); err != nil {
		t.Fatal(err)
	}
	ev.waitEvent(t, "a", false) // a does not trust the next CA yet

	// Step 1 of a rotation: every node trusts both CAs.
	if err := a.SetCredentials(c.pki.cert(t, "a"), both); err != nil {
		t.Fatal(err)
	}
	if err := a.SetCredentials(c.pki.cert(t, "b"), both); err == nil {
		t.Error("SetCredentials accepted a certificate for another node")
	}
	deadline := time.After(waitTimeout)
	for delivered := false; !delivered; {
		err := a.Send("n", 1, []byte("rotated"))
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
		select {
		case <-sn.notify:
			delivered = true
		case <-time.After(20 * time.Millisecond): // n's back-off towards a is 10..100ms
		case <-deadline:
			t.Fatal("no delivery after trusting the new CA")
		}
	}
}

// blackhole is a PacketConn that can silently stop sending and receiving,
// as a crashed host does.
type blackhole struct {
	net.PacketConn
	dead atomic.Bool
}

func (b *blackhole) WriteTo(p []byte, addr net.Addr) (int, error) {
	if b.dead.Load() {
		return len(p), nil
	}
	return b.PacketConn.WriteTo(p, addr)
}

func TestRestartedPeerResetsStaleLinkAtOnce(t *testing.T) {
	c := newQUICCluster(t)
	// Idle detection alone would take longer than the test waits.
	c.tweak = func(cfg *Config) { cfg.IdleTimeout = time.Minute; cfg.KeepAlivePeriod = 200 * time.Millisecond }
	ea := newEvents()
	a := c.start(t, c.config(t, "a", newSink(), ea))
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := udp.LocalAddr().String()
	bh := &blackhole{PacketConn: udp}
	sb := newSink()
	cfgB := c.config(t, "b", sb, nil)
	var key [32]byte
	copy(key[:], "a stable stateless reset key....")
	cfgB.PacketConn, cfgB.StatelessResetKey = bh, &key
	b := c.start(t, cfgB)
	if err := a.Send("b", 1, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	sb.waitN(t, 1)
	ea.waitEvent(t, "b", true)

	// b crashes: nothing it sends on the way down reaches a.
	bh.dead.Store(true)
	b.Close()
	udp.Close()
	// b restarts on the same address with the same reset key.
	udp2, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Skipf("cannot rebind %s: %v", addr, err)
	}
	t.Cleanup(func() { udp2.Close() })
	sb2 := newSink()
	cfgB2 := c.config(t, "b", sb2, nil)
	cfgB2.PacketConn, cfgB2.StatelessResetKey = udp2, &key
	c.start(t, cfgB2)
	// a's next packet on the stale link draws a stateless reset.
	if err := a.Send("b", 1, []byte("to the old b")); err != nil {
		t.Fatal(err)
	}
	down := ea.waitEvent(t, "b", false)
	t.Logf("link down: %v", down.Err)
	deadline := time.After(waitTimeout)
	for len(sb2.snapshot()) == 0 {
		err := a.Send("b", 1, []byte("to the new b"))
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
		select {
		case <-sb2.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatal("no delivery to the restarted node")
		}
	}
}

func TestThreeNodesAllPairs(t *testing.T) {
	c := newQUICCluster(t)
	names := []string{"n1", "n2", "n3"}
	sinks := map[string]*sink{}
	nodes := map[string]*QUIC{}
	for _, n := range names {
		sinks[n] = newSink()
		nodes[n] = c.start(t, c.config(t, n, sinks[n], nil))
	}
	var wg sync.WaitGroup
	for _, from := range names {
		wg.Go(func() {
			for i := range 200 {
				for _, to := range names {
					if to != from {
						sendRetry(t, nodes[from], to, uint64(i%3), fmt.Appendf(nil, "%s>%s:%d", from, to, i))
					}
				}
			}
		})
	}
	wg.Wait()
	for _, to := range names {
		got := sinks[to].waitN(t, 400)
		seen := map[string]int{}
		for _, r := range got {
			seen[r.from]++
		}
		for _, from := range names {
			if from != to && seen[from] != 200 {
				t.Errorf("%s got %d frames from %s, want 200", to, seen[from], from)
			}
		}
	}
}

func TestMemFaults(t *testing.T) {
	clk := newFakeClock()
	net := NewMemNetwork(42, clk)
	ea, eb := newEvents(), newEvents()
	sa, sb := newSink(), newSink()
	a, err := net.Join(MemConfig{Name: "a", Handler: sa.handle, Events: ea.record})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := net.Join(MemConfig{Name: "b", Handler: sb.handle, Events: eb.record})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Send("b", 1, []byte("1")); err != nil {
		t.Fatal(err)
	}
	sb.waitN(t, 1)
	ea.waitEvent(t, "b", true)
	eb.waitEvent(t, "a", true)

	net.Partition("a", "b")
	ea.waitEvent(t, "b", false)
	eb.waitEvent(t, "a", false)
	if err := a.Send("b", 1, []byte("x")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("send across a partition: got %v, want ErrUnavailable", err)
	}
	if _, err := b.DialStream(t.Context(), "a", "svc"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dial across a partition: got %v, want ErrUnavailable", err)
	}
	net.Heal("a", "b")

	// Delay: frames wait for the clock, in order.
	net.SetDelay(time.Second)
	for i := range 3 {
		if err := a.Send("b", 1, []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		giveUp := time.After(waitTimeout)
		for clk.pending() == 0 {
			select {
			case <-time.After(time.Millisecond): // the lane goroutine is about to wait
			case <-giveUp:
				t.Fatal("lane never waited on the clock")
			}
		}
		if n := len(sb.snapshot()); n != 1+i {
			t.Fatalf("delivered %d frames before the clock moved, want %d", n, 1+i)
		}
		clk.Advance(time.Second)
		sb.waitN(t, 2+i)
	}
	got := sb.snapshot()
	if string(got[1].frame)+string(got[2].frame)+string(got[3].frame) != "abc" {
		t.Errorf("delayed frames out of order: %q %q %q", got[1].frame, got[2].frame, got[3].frame)
	}
	net.SetDelay(0)

	// Drops: every frame lost, silently.
	net.SetDropRate(1)
	for range 10 {
		if err := a.Send("b", 1, []byte("lost")); err != nil {
			t.Fatal(err)
		}
	}
	net.SetDropRate(0)
	if err := a.Send("b", 1, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	got = sb.waitN(t, 5)
	if len(got) != 5 || string(got[4].frame) != "kept" {
		t.Errorf("after drops: %d frames, last %q; want 5 ending in kept", len(got), got[len(got)-1].frame)
	}
}

func TestSimultaneousDialsConvergeOnOneLink(t *testing.T) {
	for round := range 5 {
		c := newQUICCluster(t)
		ea, eb := newEvents(), newEvents()
		sa, sb := newSink(), newSink()
		a := c.start(t, c.config(t, "a", sa, ea))
		b := c.start(t, c.config(t, "b", sb, eb))
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; sendRetry(t, a, "b", 1, []byte("from a")) })
		wg.Go(func() { <-start; sendRetry(t, b, "a", 1, []byte("from b")) })
		close(start)
		wg.Wait()
		sa.waitN(t, 1)
		sb.waitN(t, 1)
		dialer := func(q *QUIC, peer string) string {
			l, _ := q.link(peer)
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.sess == nil {
				return ""
			}
			return l.sess.dialer
		}
		da, db := dialer(a, "b"), dialer(b, "a")
		if da == "" || da != db {
			t.Fatalf("round %d: a uses the link dialed by %q, b the one dialed by %q", round, da, db)
		}
		for _, q := range []*QUIC{a, b} {
			if st := q.Stats(); st.LinksUp != 1 || st.LinksDown != 0 || st.Dropped != 0 {
				t.Fatalf("round %d: %s: %d links up, %d down, %d frames dropped; want 1, 0, 0",
					round, q.Name(), st.LinksUp, st.LinksDown, st.Dropped)
			}
		}
		a.Close()
		b.Close()
	}
}

// A NOT_SERVING refusal keeps its identity on the sender's side: it is the
// owner's transient state, and a caller may retry within its deadline.
func TestNotServingRefusal(t *testing.T) {
	err := NotServing(errors.New("placement: ownership lease not fresh"))
	r := refusalOf(err, ActorID{Kind: "k", Key: "x"}, 7)
	if r.Reason != RefusedReasonNotServing {
		t.Fatalf("reason %v, want NOT_SERVING", r.Reason)
	}
	got := &RefusedError{Node: "n4", Reason: r.Reason, Detail: r.Detail}
	if !errors.Is(got, ErrNotServing) || !errors.Is(got, actor.ErrProcessUnavailable) || errors.Is(got, ErrNotOwner) {
		t.Fatalf("%v: want ErrNotServing and ErrProcessUnavailable, not ErrNotOwner", got)
	}
}

// TestMemConnect: Connect brings a link up (both sides see it) without a
// frame, fails across a partition, and works again once it heals.
func TestMemConnect(t *testing.T) {
	net := NewMemNetwork(1, nil)
	ea, eb := newEvents(), newEvents()
	a, err := net.Join(MemConfig{Name: "a", Handler: newSink().handle, Events: ea.record})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := net.Join(MemConfig{Name: "b", Handler: newSink().handle, Events: eb.record})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Connect(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	ea.waitEvent(t, "b", true)
	eb.waitEvent(t, "a", true)

	net.Partition("a", "b")
	if err := a.Connect(t.Context(), "b"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("connect across a partition: got %v, want ErrUnavailable", err)
	}
	if err := a.Connect(t.Context(), "c"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("connect to no such node: got %v, want ErrUnavailable", err)
	}
	net.Heal("a", "b")
	if err := b.Connect(t.Context(), "a"); err != nil {
		t.Fatalf("connect after the partition healed: %v", err)
	}
	if err := a.Connect(t.Context(), "a"); !errors.Is(err, ErrSelf) {
		t.Fatalf("connect to itself: got %v, want ErrSelf", err)
	}
}
