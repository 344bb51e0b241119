package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// cluster builds nodes of one Transport implementation for the contract
// suite.
type cluster interface {
	add(t *testing.T, name string, s *sink, ev *events) Transport
}

// quicCluster runs real QUIC transports on 127.0.0.1 with ephemeral ports.
type quicCluster struct {
	pki   *testPKI
	res   *resolver
	tweak func(*Config)
}

func newQUICCluster(t testing.TB) *quicCluster {
	return &quicCluster{pki: newPKI(t), res: newResolver()}
}

func (c *quicCluster) config(t testing.TB, name string, s *sink, ev *events) Config {
	cfg := Config{
		Name:        name,
		ListenAddr:  "127.0.0.1:0",
		Certificate: c.pki.cert(t, name),
		CAs:         c.pki.pool,
		Resolve:     c.res.resolve,
		Handler:     s.handle,
		BackoffMin:  10 * time.Millisecond,
		BackoffMax:  100 * time.Millisecond,
	}
	if ev != nil {
		cfg.Events = ev.record
	}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	return cfg
}

func (c *quicCluster) start(t testing.TB, cfg Config) *QUIC {
	t.Helper()
	tr, err := NewQUIC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.res.set(cfg.Name, tr.Addr().String())
	t.Cleanup(func() { tr.Close() })
	return tr
}

func (c *quicCluster) add(t *testing.T, name string, s *sink, ev *events) Transport {
	return c.start(t, c.config(t, name, s, ev))
}

// memCluster runs the in-memory fake.
type memCluster struct{ net *MemNetwork }

func (c *memCluster) add(t *testing.T, name string, s *sink, ev *events) Transport {
	t.Helper()
	cfg := MemConfig{Name: name, Handler: s.handle}
	if ev != nil {
		cfg.Events = ev.record
	}
	m, err := c.net.Join(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestContractQUIC(t *testing.T) {
	runContract(t, func(t *testing.T) cluster { return newQUICCluster(t) })
}

// TestContractQUICRuns runs the contract with the lane readers handing
// runs of frames to a BatchHandler. The handler looks at a run's frames
// only once it has all of them, so a frame overwritten while its run was
// read would arrive damaged.
func TestContractQUICRuns(t *testing.T) {
	runContract(t, func(t *testing.T) cluster {
		c := newQUICCluster(t)
		c.tweak = func(cfg *Config) {
			h := cfg.Handler
			cfg.HandleBatch = func(from string, lane Lane, frames [][]byte) error {
				for _, f := range frames {
					if err := h(from, lane, f); err != nil {
						return err
					}
				}
				return nil
			}
		}
		return c
	})
}

func TestContractMem(t *testing.T) {
	runContract(t, func(t *testing.T) cluster { return &memCluster{net: NewMemNetwork(1, nil)} })
}

// runContract is the behaviour every Transport must show.
func runContract(t *testing.T, newCluster func(t *testing.T) cluster) {
	t.Run("SendReceive", func(t *testing.T) {
		c := newCluster(t)
		sa, sb := newSink(), newSink()
		a := c.add(t, "a", sa, nil)
		c.add(t, "b", sb, nil)
		if err := a.Send("b", 7, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if err := a.SendControl("b", []byte("policy")); err != nil {
			t.Fatal(err)
		}
		got := sb.waitN(t, 2)
		byData := map[string]received{}
		for _, r := range got {
			byData[string(r.frame)] = r
		}
		if r := byData["hello"]; r.from != "a" || r.lane != MailLane(7, DefaultMailLanes) {
			t.Errorf("mail frame: got from=%q lane=%d, want from=a lane=%d", r.from, r.lane, MailLane(7, DefaultMailLanes))
		}
		if r := byData["policy"]; r.from != "a" || r.lane != ControlLane {
			t.Errorf("control frame: got from=%q lane=%d, want from=a lane=0", r.from, r.lane)
		}
		if len(sa.snapshot()) != 0 {
			t.Errorf("sender received frames")
		}
	})

	t.Run("FIFOPerLaneUnderLoad", func(t *testing.T) {
		c := newCluster(t)
		sb := newSink()
		a := c.add(t, "a", newSink(), nil)
		c.add(t, "b", sb, nil)
		const keys, perKey = 8, 2000
		payload := make([]byte, 100)
		for i := range perKey {
			for k := range keys {
				binary.LittleEndian.PutUint32(payload[0:], uint32(k))
				binary.LittleEndian.PutUint32(payload[4:], uint32(i))
				sendRetry(t, a, "b", uint64(k), payload)
			}
		}
		got := sb.waitN(t, keys*perKey)
		next := make([]uint32, keys)
		for _, r := range got {
			k := binary.LittleEndian.Uint32(r.frame[0:])
			i := binary.LittleEndian.Uint32(r.frame[4:])
			if r.lane != MailLane(uint64(k), DefaultMailLanes) {
				t.Fatalf("key %d arrived on lane %d", k, r.lane)
			}
			if i != next[k] {
				t.Fatalf("key %d: got seq %d, want %d", k, i, next[k])
			}
			next[k]++
		}
	})

	t.Run("LargeFrames", func(t *testing.T) {
		c := newCluster(t)
		sb := newSink()
		a := c.add(t, "a", newSink(), nil)
		c.add(t, "b", sb, nil)
		sizes := []int{0, 1, 70 << 10, 1 << 20, DefaultMaxFrameSize}
		for i, n := range sizes {
			f := bytes.Repeat([]byte{byte(i + 1)}, n)
			if err := a.(WaitSender).SendControlWait(t.Context(), "b", f); err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
		}
		got := sb.waitN(t, len(sizes))
		for i, n := range sizes {
			if len(got[i].frame) != n || (n > 0 && got[i].frame[n-1] != byte(i+1)) {
				t.Errorf("frame %d: %d bytes, want %d", i, len(got[i].frame), n)
			}
		}
	})

	t.Run("BothDirections", func(t *testing.T) {
		c := newCluster(t)
		sa, sb := newSink(), newSink()
		a := c.add(t, "a", sa, nil)
		b := c.add(t, "b", sb, nil)
		// Both start sending at once: simultaneous link set-up.
		var wg sync.WaitGroup
		for _, p := range []struct {
			from Transport
			to   string
		}{{a, "b"}, {b, "a"}} {
			wg.Go(func() {
				for i := range 100 {
					sendRetry(t, p.from, p.to, 1, fmt.Appendf(nil, "%s-%d", p.from.Name(), i))
				}
			})
		}
		wg.Wait()
		for _, s := range []*sink{sa, sb} {
			got := s.waitN(t, 100)
			for i, r := range got {
				if want := fmt.Sprintf("%s-%d", r.from, i); string(r.frame) != want {
					t.Fatalf("frame %d: got %q, want %q", i, r.frame, want)
				}
			}
		}
	})

	t.Run("Errors", func(t *testing.T) {
		c := newCluster(t)
		a := c.add(t, "a", newSink(), nil)
		if !errors.Is(ErrQueueFull, actor.ErrRefused) || !errors.Is(ErrUnavailable, actor.ErrProcessUnavailable) {
			t.Error("transport errors do not match the actor sentinels")
		}
		if err := a.Send("a", 1, []byte("x")); !errors.Is(err, ErrSelf) {
			t.Errorf("send to self: got %v, want ErrSelf", err)
		}
		if err := a.Send("b", 1, make([]byte, DefaultMaxFrameSize+1)); !errors.Is(err, ErrFrameTooLarge) {
			t.Errorf("oversized send: got %v, want ErrFrameTooLarge", err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := a.Send("b", 1, []byte("x")); !errors.Is(err, ErrClosed) {
			t.Errorf("send after close: got %v, want ErrClosed", err)
		}
		if _, err := a.ListenStream("raft"); !errors.Is(err, ErrClosed) {
			t.Errorf("listen after close: got %v, want ErrClosed", err)
		}
	})

	t.Run("LinkDownWhenPeerCloses", func(t *testing.T) {
		c := newCluster(t)
		ea := newEvents()
		sb := newSink()
		a := c.add(t, "a", newSink(), ea)
		b := c.add(t, "b", sb, nil)
		if err := a.Send("b", 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		sb.waitN(t, 1)
		ea.waitEvent(t, "b", true)
		b.Close()
		ev := ea.waitEvent(t, "b", false)
		if !errors.Is(ev.Err, ErrUnavailable) || !errors.Is(ev.Err, actor.ErrProcessUnavailable) {
			t.Errorf("down event error: got %v, want ErrUnavailable (process unavailable)", ev.Err)
		}
	})

	t.Run("Disconnect", func(t *testing.T) {
		c := newCluster(t)
		ea, eb := newEvents(), newEvents()
		sb := newSink()
		a := c.add(t, "a", newSink(), ea)
		c.add(t, "b", sb, eb)
		a.Disconnect("b") // no link yet: nothing happens
		if err := a.Send("b", 1, []byte("1")); err != nil {
			t.Fatal(err)
		}
		sb.waitN(t, 1)
		ea.waitEvent(t, "b", true)
		eb.waitEvent(t, "a", true)
		a.Disconnect("b")
		ea.waitEvent(t, "b", false)
		eb.waitEvent(t, "a", false)
		deadline := time.After(waitTimeout)
		for len(sb.snapshot()) < 2 {
			err := a.Send("b", 1, []byte("2"))
			if err != nil && !errors.Is(err, ErrUnavailable) {
				t.Fatal(err)
			}
			select {
			case <-sb.notify:
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				t.Fatal("no delivery after Disconnect")
			}
		}
	})

	t.Run("ControlNotBehindMail", func(t *testing.T) {
		c := newCluster(t)
		sb := newSink()
		release := make(chan struct{})
		var once sync.Once
		stalled := make(chan struct{})
		mail := MailLane(3, DefaultMailLanes)
		sb.block = func(l Lane) {
			if l == mail {
				once.Do(func() { close(stalled) })
				<-release
			}
		}
		a := c.add(t, "a", newSink(), nil)
		c.add(t, "b", sb, nil)
		defer close(release)
		// Saturate one mail lane: its handler is stuck, and more mail
		// keeps coming behind it.
		for range 200 {
			if err := a.Send("b", 3, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
		}
		<-stalled
		if err := a.SendControl("b", []byte("handoff")); err != nil {
			t.Fatal(err)
		}
		if err := a.Send("b", 4, []byte("other recipient")); err != nil {
			t.Fatal(err)
		}
		sb.waitFor(t, "control and other-lane frames", func(r []received) bool {
			var ctl, other bool
			for _, x := range r {
				ctl = ctl || x.lane == ControlLane && string(x.frame) == "handoff"
				other = other || string(x.frame) == "other recipient"
			}
			return ctl && other
		})
	})

	t.Run("BackpressureRefusesThenWaits", func(t *testing.T) {
		c := newCluster(t)
		sb := newSink()
		release := make(chan struct{})
		sb.block = func(Lane) { <-release }
		a := c.add(t, "a", newSink(), nil)
		c.add(t, "b", sb, nil)
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		// b's handler is stuck: the network's buffers and then the
		// bounded queue fill, and Send refuses instead of blocking.
		frame := make([]byte, 1000)
		sent := 0
		for {
			err := a.Send("b", 1, frame)
			if errors.Is(err, ErrQueueFull) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if sent++; sent > 100_000 {
				t.Fatal("queue never filled")
			}
		}
		ws, ok := a.(WaitSender)
		if !ok {
			t.Fatal("transport is not a WaitSender")
		}
		waited := make(chan error, 1)
		go func() { waited <- ws.SendWait(t.Context(), "b", 1, []byte("last")) }()
		close(release)
		released = true
		if err := <-waited; err != nil {
			t.Fatalf("SendWait: %v", err)
		}
		got := sb.waitN(t, sent+1)
		if string(got[len(got)-1].frame) != "last" {
			t.Errorf("last frame: got %q", got[len(got)-1].frame)
		}
	})

	t.Run("HandlerErrorKeepsLink", func(t *testing.T) {
		c := newCluster(t)
		sb := newSink()
		sb.reject = func(f []byte) bool { return string(f) == "bad" }
		a := c.add(t, "a", newSink(), nil)
		c.add(t, "b", sb, nil)
		if err := a.Send("b", 1, []byte("bad")); err != nil {
			t.Fatal(err)
		}
		// Frames behind a rejected one on its stream may be lost with the
		// stream; later ones must arrive.
		deadline := time.After(waitTimeout)
		for i := 0; ; i++ {
			if err := a.Send("b", 1, fmt.Appendf(nil, "good-%d", i)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-sb.notify:
			case <-time.After(50 * time.Millisecond):
			case <-deadline:
				t.Fatal("no frame delivered after a rejected one")
			}
			if len(sb.snapshot()) > 0 {
				break
			}
		}
	})

	t.Run("Streams", func(t *testing.T) {
		c := newCluster(t)
		a := c.add(t, "a", newSink(), nil)
		b := c.add(t, "b", newSink(), nil)
		ln, err := b.ListenStream("raft")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if _, err := b.ListenStream("raft"); err == nil {
			t.Error("second listener for one service accepted")
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			conn, err := ln.Accept()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			if got := conn.RemoteAddr().String(); got != "a" {
				t.Errorf("server side remote addr: got %q, want a", got)
			}
			buf := make([]byte, 5)
			if _, err := io.ReadFull(conn, buf); err != nil {
				t.Error(err)
				return
			}
			if _, err := conn.Write(bytes.ToUpper(buf)); err != nil {
				t.Error(err)
			}
		})
		conn, err := a.DialStream(t.Context(), "b", "raft")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got := conn.RemoteAddr().String(); got != "b" {
			t.Errorf("client side remote addr: got %q, want b", got)
		}
		if _, err := conn.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		conn.SetReadDeadline(time.Now().Add(waitTimeout))
		if _, err := io.ReadFull(conn, buf); err != nil {
			t.Fatal(err)
		}
		if string(buf) != "HELLO" {
			t.Errorf("echo: got %q, want HELLO", buf)
		}
	})
}
