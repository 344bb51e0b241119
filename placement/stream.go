package placement

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// StreamDialer opens a byte stream to a named peer for a service. The
// QUIC transport implements it with one QUIC stream per connection;
// tests use TCP. Dial may be called concurrently.
type StreamDialer interface {
	Dial(ctx context.Context, peer, service string) (net.Conn, error)
}

// RaftService is the service name raft streams are opened for.
const RaftService = "raft"

// streamLayer adapts a StreamDialer and a net.Listener to
// raft.StreamLayer. Raft server addresses are stable node names; the
// dialer resolves a name to the peer's current network address, so a
// cluster whose nodes all come back on new IPs recovers by itself.
type streamLayer struct {
	net.Listener
	dialer  StreamDialer
	service string

	mu     sync.Mutex
	dialed map[*abortingConn]struct{} // open, abortable (abortDialed)
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// NewStreamLayer returns a raft.StreamLayer that dials through d (for
// service, RaftService if empty) and accepts from l. Addr reports l's
// address. Closing the layer closes l. Use it with
// raft.NewNetworkTransportWithConfig.
func NewStreamLayer(d StreamDialer, l net.Listener, service string) raft.StreamLayer {
	if service == "" {
		service = RaftService
	}
	return &streamLayer{Listener: l, dialer: d, service: service}
}

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c, err := s.dialer.Dial(ctx, string(address), s.service)
	if err != nil {
		return nil, err
	}
	a, ok := c.(Aborter)
	if !ok {
		return c, nil
	}
	ac := &abortingConn{Conn: c, a: a, l: s}
	s.mu.Lock()
	if s.dialed == nil {
		s.dialed = map[*abortingConn]struct{}{}
	}
	s.dialed[ac] = struct{}{}
	s.mu.Unlock()
	return ac, nil
}

// Accept implements raft.StreamLayer.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if a, ok := c.(Aborter); ok {
		return &abortingConn{Conn: c, a: a}, nil
	}
	return c, nil
}

// abortDialed aborts every stream this layer dialed that waits for an
// answer (written since it last read): those RPCs fail at once, and what
// they still buffer is dropped. A node that stops leading calls it
// (through its transport, requestAborter): its appends in flight (an
// append waits up to the transport's timeout, seconds, for its answer)
// are stale, and each one delivered late would count as contact with a
// leader on its follower, putting off the election of the next one.
// Idle streams raft keeps in its pool stay: aborted, the next RPC raft
// made on one would fail (a vote request of its own next campaign).
func (s *streamLayer) abortDialed() {
	s.mu.Lock()
	var waiting []*abortingConn
	for c := range s.dialed {
		if c.waiting.Load() {
			waiting = append(waiting, c)
		}
	}
	s.mu.Unlock()
	for _, c := range waiting {
		_ = c.Close()
	}
}

// dialAborter is a stream layer that can abort the streams it dialed.
type dialAborter interface{ abortDialed() }

// Aborter is implemented by a stream that can be ended without
// delivering what it still buffers (a QUIC stream reset, where Close
// would go on sending it).
type Aborter interface{ Abort() }

// abortingConn makes closing a raft stream abort it. Raft closes a
// connection when an RPC on it failed (or timed out), when it has more
// idle ones than it pools, and at shutdown: never with a request or an
// answer it still wants delivered. A request whose RPC timed out is
// stale, and a stream that goes on delivering it (its peer's
// acknowledgements are lost, so its data trickles out under congestion
// control) would hand a peer heartbeats and appends of a leader seconds
// after they were sent, each counted as contact with a leader.
type abortingConn struct {
	net.Conn
	a       Aborter
	l       *streamLayer // that dialed it; nil: accepted
	once    sync.Once
	waiting atomic.Bool // written since it last read: an RPC waits for its answer
}

func (c *abortingConn) Write(b []byte) (int, error) {
	// Before the write: a write blocked (no acknowledgement, no window
	// from the peer) is the one most worth aborting.
	c.waiting.Store(true)
	return c.Conn.Write(b)
}

func (c *abortingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.waiting.Store(false)
	}
	return n, err
}

func (c *abortingConn) Close() error {
	c.once.Do(func() {
		c.a.Abort()
		if c.l != nil {
			c.l.mu.Lock()
			delete(c.l.dialed, c)
			c.l.mu.Unlock()
		}
	})
	return nil
}
