package placement

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// abortableConn is a stream that records whether it was aborted or
// closed gracefully.
type abortableConn struct {
	net.Conn
	aborted, closed atomic.Bool
}

func (c *abortableConn) Abort()                      { c.aborted.Store(true) }
func (c *abortableConn) Close() error                { c.closed.Store(true); return nil }
func (c *abortableConn) Write(b []byte) (int, error) { return len(b), nil }
func (c *abortableConn) Read(b []byte) (int, error)  { return copy(b, "answer"), nil }

type connDialer struct{ dialed []*abortableConn }

func (d *connDialer) Dial(context.Context, string, string) (net.Conn, error) {
	c := &abortableConn{}
	d.dialed = append(d.dialed, c)
	return c, nil
}

// Raft's streams are aborted, never closed gracefully: a request whose
// RPC failed must not reach its peer later. A node that stops leading
// aborts every stream its raft dialed and has not closed, through the
// transport the layers were named to, guarded layers included.
func TestRaftStreamsAbortAndAbortOnStepDown(t *testing.T) {
	d := &connDialer{}
	main := GuardStreamLayer(NewStreamLayer(d, &silentListener{done: make(chan struct{})}, ""), "", func(string) string { return "" }, nil)
	hb := HeartbeatStreamLayer(d, nil, "")
	first, err := main.Dial("n2", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if c := d.dialed[0]; !c.aborted.Load() || c.closed.Load() {
		t.Fatalf("a raft stream closed: aborted %v, closed gracefully %v; want aborted only", c.aborted.Load(), c.closed.Load())
	}
	// One stream of each layer waits for an answer; one idle stream, its
	// answer read, stays in raft's pool.
	for _, l := range []raft.StreamLayer{main, hb} {
		c, err := l.Dial("n3", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
	}
	idle, err := main.Dial("n3", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = idle.Write([]byte("request"))
	_, _ = idle.Read(make([]byte, 8))
	pooled := d.dialed[len(d.dialed)-1]
	d.dialed = d.dialed[:len(d.dialed)-1]
	tr := &SplitTransport{}
	tr.AbortOnStepDown(main, hb)
	n := &Node{cfg: Config{Name: "n1", Transport: tr}, clock: SystemClock{}, failing: map[string]time.Time{}}
	inConfig := func(raft.ServerID) bool { return true }
	leader := func(id raft.ServerID) {
		n.noteContact(raft.Observation{Data: raft.LeaderObservation{LeaderID: id, LeaderAddr: raft.ServerAddress(id)}}, inConfig, time.Now)
	}
	leader("n1")
	for i, c := range d.dialed[1:] {
		if c.aborted.Load() {
			t.Fatalf("stream %d aborted while its node leads", i+1)
		}
	}
	leader("") // steps down
	for i, c := range d.dialed[1:] {
		if !c.aborted.Load() {
			t.Fatalf("stream %d still open after its node stepped down", i+1)
		}
	}
	if pooled.aborted.Load() {
		t.Fatal("an idle pooled stream was aborted: raft's next RPC on it would fail")
	}
	// Aborted streams leave the layer; the idle one stays.
	if l := main.(*guardLayer).StreamLayer.(*streamLayer); len(l.dialed) != 1 {
		t.Fatalf("%d streams tracked, want the idle one", len(l.dialed))
	}
}

// blockingConn's Write blocks until it is aborted, as a QUIC stream's
// does with no acknowledgement or window from the peer.
type blockingConn struct {
	abortableConn
	entered chan struct{}
	abort   chan struct{}
}

func (c *blockingConn) Write(b []byte) (int, error) {
	close(c.entered)
	<-c.abort
	return 0, net.ErrClosed
}

func (c *blockingConn) Abort() { c.aborted.Store(true); close(c.abort) }

type blockingDialer struct{ c *blockingConn }

func (d blockingDialer) Dial(context.Context, string, string) (net.Conn, error) { return d.c, nil }

// A request whose write is blocked (the peer acknowledges nothing) is
// the one a step-down must abort most: it counts as waiting from the
// start of the write.
func TestStepDownAbortsABlockedWrite(t *testing.T) {
	bc := &blockingConn{entered: make(chan struct{}), abort: make(chan struct{})}
	l := NewStreamLayer(blockingDialer{bc}, &silentListener{done: make(chan struct{})}, "").(*streamLayer)
	c, err := l.Dial("n2", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Write([]byte("append")); done <- err }()
	<-bc.entered
	l.abortDialed()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the blocked write returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stream blocked in its write was not aborted: its write still blocks")
	}
	if !bc.aborted.Load() {
		t.Fatal("a stream blocked in its write was not aborted")
	}
}
