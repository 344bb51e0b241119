package httpapi

import (
	"container/list"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what one node's HTTP API spends on its clients. Zero
// fields mean the defaults of DefaultLimits.
//
// Connections are counted on the listener (Server.Listener): per node
// and per client IP address. A connection over either limit first takes
// the place of the oldest connection that is not serving a request (an
// idle keep-alive connection, or one that has sent no request yet) of the
// same client, or of anyone for the node limit; only when every
// connection is busy with a request is the new one closed at once. So
// idle connections, however many, never lock clients out, and a request
// in progress is never cut for a newcomer: a connection counts as idle
// only while the server waits in a read for its next request, and a read
// that returns bytes takes it out of the count before the server sees
// them (a read that fails because its connection was chosen meanwhile
// returns a read error, on which the server answers nothing), so a
// request whose bytes arrived as its connection was chosen is never run (the client sees the connection close, as at an idle
// timeout, and its request did not happen). This holds for HTTP/1.x, which
// the agent serves; a server speaking HTTP/2 reads its connections all
// the time, so an idle HTTP/2 connection becomes evictable only once the
// server reads from it again after its last request.
type Limits struct {
	// MaxConns bounds the open connections of the node (default 4096,
	// well below the file descriptors a node gets: Go raises the soft
	// RLIMIT_NOFILE to the hard limit, and QUIC, gossip, raft and the
	// state store need only a few).
	MaxConns int
	// MaxConnsPerClient bounds the open connections of one client IP
	// address (default 256).
	MaxConnsPerClient int
	// ReadHeaderTimeout bounds reading a request line and its headers,
	// TLS handshake included (default 10 s).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request body, from the end of its
	// headers (default 10 s): a body that trickles in slower is answered
	// 408 and the connection closed.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sent no request for
	// this long (default 60 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers (default 64 KiB).
	MaxHeaderBytes int
}

// DefaultLimits returns the limits a node's API has by default.
func DefaultLimits() Limits {
	return Limits{
		MaxConns:          4096,
		MaxConnsPerClient: 256,
		ReadHeaderTimeout: 10 * time.Second,
		BodyTimeout:       10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// Validate reports a negative field.
func (l Limits) Validate() error {
	if l.MaxConns < 0 || l.MaxConnsPerClient < 0 || l.ReadHeaderTimeout < 0 || l.BodyTimeout < 0 ||
		l.IdleTimeout < 0 || l.MaxHeaderBytes < 0 {
		return errors.New("httpapi: negative limit")
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxConns == 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = d.MaxConnsPerClient
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.BodyTimeout == 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// ConnStats are the connection counters of a Server's listener.
type ConnStats struct {
	Open          int    // connections open now
	RefusedNode   uint64 // closed at once: the node limit was reached and every connection was busy
	RefusedClient uint64 // closed at once: the client's limit was reached and all its connections were busy
	Evicted       uint64 // idle connections closed to make room for a new one
}

// connLimiter enforces Limits.MaxConns and MaxConnsPerClient. Its lists
// hold the connections that may be evicted (not serving a request),
// oldest first; the http.Server's ConnState hook moves connections in
// and out of them.
type connLimiter struct {
	max, perClient int

	mu      sync.Mutex
	open    int
	clients map[string]*clientConns
	idle    list.List // of *trackedConn, every client
	stats   ConnStats
}

type clientConns struct {
	open int
	idle list.List // of *trackedConn
}

func newConnLimiter(l Limits) *connLimiter {
	return &connLimiter{max: l.MaxConns, perClient: l.MaxConnsPerClient, clients: map[string]*clientConns{}}
}

// trackedConn is an admitted connection. Its elements are non-nil while
// it may be evicted: while the server waits in a read for a request on
// it. Fields other than the atomics are guarded by the limiter's lock.
type trackedConn struct {
	net.Conn
	lim    *connLimiter
	client *clientConns
	ip     string
	all    *list.Element
	mine   *list.Element
	// released is set once its place is free.
	released bool
	// evicted is set when it was chosen to make room: its reads fail
	// from then on, whatever they return.
	evicted bool
	// waiting: the server has no request in progress on it (new, or
	// idle after a request); its next read waits for one.
	waiting atomic.Bool
	// exposed: it was put in the idle lists and no read has returned
	// bytes since; a read that returns bytes must take it out (claim).
	exposed atomic.Bool
	once    sync.Once
}

// errEvicted is what a read of an evicted connection returns.
var errEvicted = errors.New("httpapi: connection closed to make room for another")

// Read reads from the connection. A read the server makes while it waits
// for a request makes the connection evictable until the read returns
// bytes; those bytes are handed on only if it was not evicted meanwhile,
// so a request never starts on a connection chosen to make room.
func (c *trackedConn) Read(p []byte) (int, error) {
	if c.waiting.Load() {
		c.lim.expose(c)
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.exposed.Load() && !c.lim.claim(c) {
		// Closed here too (admit closes it just after choosing it): the
		// server, which takes a read error of this kind for a connection
		// gone, answers nothing on it.
		_ = c.Conn.Close()
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errEvicted}
	}
	return n, err
}

// Close closes the connection and frees its place (once).
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.lim.release(c) })
	return err
}

type limitedListener struct {
	net.Listener
	lim *connLimiter
}

// Accept returns the next connection within the limits; connections
// refused are closed here and never returned.
func (l limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.lim.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit counts c in, evicting an idle connection when a limit is reached;
// it returns nil (and closes c) when there is none to evict.
func (m *connLimiter) admit(c net.Conn) *trackedConn {
	ip := clientIP(c.RemoteAddr())
	for {
		m.mu.Lock()
		cl := m.clients[ip]
		var victim *list.Element
		switch {
		case cl != nil && cl.open >= m.perClient:
			if victim = cl.idle.Front(); victim == nil {
				m.stats.RefusedClient++
			}
		case m.open >= m.max:
			if victim = m.idle.Front(); victim == nil {
				m.stats.RefusedNode++
			}
		default:
			if cl == nil {
				cl = &clientConns{}
				m.clients[ip] = cl
			}
			cl.open++
			m.open++
			tc := &trackedConn{Conn: c, lim: m, client: cl, ip: ip}
			tc.waiting.Store(true)
			m.markIdleLocked(tc) // a new connection has no request yet
			m.mu.Unlock()
			return tc
		}
		if victim == nil {
			m.mu.Unlock()
			_ = c.Close()
			return nil
		}
		v := victim.Value.(*trackedConn)
		m.unmarkLocked(v)
		v.evicted = true
		m.stats.Evicted++
		m.mu.Unlock()
		_ = v.Close() // frees its place; its server goroutine sees the close
	}
}

func (m *connLimiter) release(c *trackedConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unmarkLocked(c)
	c.released = true
	m.open--
	c.client.open--
	if c.client.open == 0 {
		delete(m.clients, c.ip)
	}
}

func (m *connLimiter) markIdleLocked(c *trackedConn) {
	if c.all == nil && !c.released && !c.evicted {
		c.all = m.idle.PushBack(c)
		c.mine = c.client.idle.PushBack(c)
		c.exposed.Store(true)
	}
}

// expose makes c evictable: the server is about to wait in a read for a
// request on it.
func (m *connLimiter) expose(c *trackedConn) {
	m.mu.Lock()
	if c.waiting.Load() {
		m.markIdleLocked(c)
	}
	m.mu.Unlock()
}

// claim takes c out of the idle lists as a read returned bytes on it; it
// reports false if c was evicted first (its bytes must not be served).
func (m *connLimiter) claim(c *trackedConn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.evicted {
		return false
	}
	m.unmarkLocked(c)
	c.exposed.Store(false)
	return true
}

func (m *connLimiter) unmarkLocked(c *trackedConn) {
	if c.all != nil {
		m.idle.Remove(c.all)
		c.client.idle.Remove(c.mine)
		c.all, c.mine = nil, nil
	}
}

// connState is the http.Server's ConnState hook: a connection serving a
// request may not be evicted; one waiting for a request may, once the
// server reads from it again (a request pipelined behind the last one
// may be in the server's buffer already, and then it reads nothing
// before serving it).
func (m *connLimiter) connState(c net.Conn, st http.ConnState) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateNew, http.StateIdle:
		tc.waiting.Store(true)
	default: // active, hijacked, closed
		m.mu.Lock()
		tc.waiting.Store(false)
		if !tc.evicted {
			m.unmarkLocked(tc)
			tc.exposed.Store(false)
		}
		m.mu.Unlock()
	}
}

func (m *connLimiter) snapshot() ConnStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Open = m.open
	return s
}

// clientIP is the address a client is counted by: its IP without port.
func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
