package wire

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// joinIgnoring joins name to n, dropping the frames it receives; it is
// closed when the test ends (Close is idempotent).
func joinIgnoring(t *testing.T, n *MemNetwork, name string) *Mem {
	t.Helper()
	m, err := n.Join(MemConfig{Name: name, Handler: func(string, Lane, []byte) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// A peer that closes while a node is connecting to it (after the network
// said the pair is up, before the node stored its new link) leaves the
// node a link to that closed incarnation; its down event found no link
// to drop. Once the peer is back, the node must reach the new one, not
// keep sending into the closed one.
func TestMemLinkToAPeerThatClosedWhileConnecting(t *testing.T) {
	n := NewMemNetwork(1, nil)
	a, b1 := joinIgnoring(t, n, "a"), joinIgnoring(t, n, "b")
	var once sync.Once
	hook := func(from, to string) {
		if from == "a" && to == "b" {
			once.Do(func() { _ = b1.Close() })
		}
	}
	memLinkConnected.Store(&hook)
	defer memLinkConnected.Store(nil)
	_ = a.Send("b", 1, []byte("to the first b"))

	got := make(chan string, 4)
	b2, err := n.Join(MemConfig{Name: "b", Handler: func(_ string, _ Lane, f []byte) error {
		got <- string(f)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := a.Send("b", 1, []byte("to the second b")); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-got:
		if f != "to the second b" {
			t.Fatalf("the second b got %q", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a's frame never reached the second b: a kept its link to the first")
	}
}

// A stream dialed while its link goes down (between the listener taking
// it and the link recording it) used to outlive the link: the drop had
// closed the streams it knew, and this one was recorded after, on a link
// nobody would drop again. Frames then crossed a link that was down, as
// a QUIC stream never does once its connection is gone.
func TestMemStreamDialedWhileItsLinkDropsGoesWithIt(t *testing.T) {
	n := NewMemNetwork(1, nil)
	a, b := joinIgnoring(t, n, "a"), joinIgnoring(t, n, "b")
	ln, err := b.ListenStream("svc")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	hook := func(from, to string) {
		if from == "a" && to == "b" {
			a.Disconnect("b")
		}
	}
	memStreamOffered.Store(&hook)
	defer memStreamOffered.Store(nil)
	c, err := a.DialStream(context.Background(), "b", "svc")
	if err == nil {
		c.Close()
		t.Fatal("DialStream returned a stream on a link that went down while it was dialed")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("DialStream: %v, want ErrUnavailable", err)
	}
	select {
	case bc := <-accepted:
		if _, err := bc.Read(make([]byte, 1)); err == nil {
			t.Fatal("the listener's end of the refused stream still reads")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the listener never took the stream")
	}
}

// A link forgets the streams closed on it (they were kept until the link
// went down, growing without bound on a long-lived link), and still
// closes the open ones when it goes down.
func TestMemLinkForgetsClosedStreams(t *testing.T) {
	n := NewMemNetwork(1, nil)
	a, b := joinIgnoring(t, n, "a"), joinIgnoring(t, n, "b")
	ln, err := b.ListenStream("svc")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	held := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		if l := a.links["b"]; l != nil {
			return len(l.conns)
		}
		return -1
	}
	for range 10 {
		c, err := a.DialStream(context.Background(), "b", "svc")
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		(<-accepted).Close()
	}
	if got := held(); got != 0 {
		t.Fatalf("the link holds %d closed streams, want 0", got)
	}
	open, err := a.DialStream(context.Background(), "b", "svc")
	if err != nil {
		t.Fatal(err)
	}
	other := <-accepted
	if got := held(); got != 2 {
		t.Fatalf("the link holds %d ends of one open stream, want 2", got)
	}
	a.Disconnect("b")
	if _, err := other.Read(make([]byte, 1)); err == nil {
		t.Fatal("an open stream outlived its link")
	}
	open.Close()
}
