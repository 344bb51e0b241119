package wire

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// Service streams. A service stream is a bidirectional QUIC stream of the
// peer link whose first bytes name the service: a uvarint length and the
// name (at most maxServiceName bytes). After that the stream is the
// service's own byte stream; raft's RPCs use one such service.

const maxServiceName = 64

// streamBacklog bounds the accepted streams waiting in one listener.
const streamBacklog = 64

func validService(name string) error {
	if name == "" || len(name) > maxServiceName {
		return fmt.Errorf("wire: service name %q must be 1..%d bytes", name, maxServiceName)
	}
	return nil
}

// DialStream implements Transport.
func (t *QUIC) DialStream(ctx context.Context, peer, service string) (net.Conn, error) {
	if err := validService(service); err != nil {
		return nil, err
	}
	l, err := t.link(peer)
	if err != nil {
		return nil, err
	}
	s, err := l.await(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: open stream: %v", ErrUnavailable, peer, err)
	}
	hdr := binary.AppendUvarint(nil, uint64(len(service)))
	hdr = append(hdr, service...)
	if _, err := st.Write(hdr); err != nil {
		st.CancelRead(quic.StreamErrorCode(CodeClosing))
		st.CancelWrite(quic.StreamErrorCode(CodeClosing))
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, peer, err)
	}
	return &streamConn{Stream: st, local: nodeAddr(t.cfg.Name), remote: nodeAddr(peer)}, nil
}

// ListenStream implements Transport.
func (t *QUIC) ListenStream(service string) (net.Listener, error) {
	if err := validService(service); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if t.services[service] != nil {
		return nil, fmt.Errorf("wire: service %q already has a listener", service)
	}
	sl := newStreamListener(nodeAddr(t.cfg.Name), func(sl *streamListener) {
		t.mu.Lock()
		if t.services[service] == sl {
			delete(t.services, service)
		}
		t.mu.Unlock()
	})
	t.services[service] = sl
	return sl, nil
}

// acceptBidi serves the peer's service streams.
func (s *session) acceptBidi() {
	t := s.l.t
	for {
		st, err := s.conn.AcceptStream(t.ctx)
		if err != nil {
			return
		}
		if !t.startGo(func() { s.serveStream(st) }) {
			resetStream(st, CodeClosing)
			return
		}
	}
}

func resetStream(st *quic.Stream, code uint64) {
	st.CancelRead(quic.StreamErrorCode(code))
	st.CancelWrite(quic.StreamErrorCode(code))
}

// serveStream reads a service header and hands the stream to that
// service's listener. A stream that does not name a service within the
// handshake timeout, or names one nobody listens on, is reset.
func (s *session) serveStream(st *quic.Stream) {
	t := s.l.t
	st.SetReadDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	var b [binary.MaxVarintLen64 + maxServiceName]byte
	if _, err := io.ReadFull(st, b[:1]); err != nil {
		resetStream(st, CodeUnknownService)
		return
	}
	n := int(b[0])
	if n == 0 || n > maxServiceName {
		resetStream(st, CodeUnknownService)
		return
	}
	if _, err := io.ReadFull(st, b[1:1+n]); err != nil {
		resetStream(st, CodeUnknownService)
		return
	}
	st.SetReadDeadline(time.Time{})
	service := string(b[1 : 1+n])
	t.mu.Lock()
	sl := t.services[service]
	t.mu.Unlock()
	if sl == nil || !sl.offer(&streamConn{Stream: st, local: nodeAddr(t.cfg.Name), remote: nodeAddr(s.l.peer)}) {
		t.log.LogAttrs(t.ctx, slog.LevelDebug, "wire: stream for unknown or busy service reset",
			slog.String(logPeer, s.l.peer), slog.String("service", service))
		resetStream(st, CodeUnknownService)
	}
}

// streamConn adapts a QUIC stream to net.Conn.
type streamConn struct {
	*quic.Stream
	local, remote net.Addr
}

var _ net.Conn = (*streamConn)(nil)

func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

// Close closes both directions: buffered writes are still delivered, and
// the peer's further writes fail.
func (c *streamConn) Close() error {
	c.Stream.CancelRead(quic.StreamErrorCode(CodeClosing))
	return c.Stream.Close()
}

// Abort resets both directions: what is buffered and not yet
// acknowledged by the peer is dropped, not sent again.
func (c *streamConn) Abort() { resetStream(c.Stream, CodeClosing) }

// streamListener is a net.Listener fed by a transport.
type streamListener struct {
	addr    net.Addr
	ch      chan net.Conn
	done    chan struct{}
	once    sync.Once
	onClose func(*streamListener)

	mu     sync.Mutex // orders offer against shut, so no stream is stranded
	closed bool
}

func newStreamListener(addr net.Addr, onClose func(*streamListener)) *streamListener {
	return &streamListener{addr: addr, ch: make(chan net.Conn, streamBacklog), done: make(chan struct{}), onClose: onClose}
}

// offer queues c for Accept; it reports false if the listener is closed
// or its backlog is full.
func (sl *streamListener) offer(c net.Conn) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.closed {
		return false
	}
	select {
	case sl.ch <- c:
		return true
	default:
		return false
	}
}

// Accept implements net.Listener.
func (sl *streamListener) Accept() (net.Conn, error) {
	select {
	case c := <-sl.ch:
		return c, nil
	case <-sl.done:
		return nil, ErrClosed
	}
}

// shut closes the listener and the streams still waiting in it.
func (sl *streamListener) shut() {
	sl.once.Do(func() {
		sl.mu.Lock()
		sl.closed = true
		sl.mu.Unlock()
		close(sl.done)
		if sl.onClose != nil {
			sl.onClose(sl)
		}
		for {
			select {
			case c := <-sl.ch:
				c.Close()
			default:
				return
			}
		}
	})
}

// Close implements net.Listener.
func (sl *streamListener) Close() error { sl.shut(); return nil }

// Addr implements net.Listener: the node name.
func (sl *streamListener) Addr() net.Addr { return sl.addr }
