package httpapi

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// pipeConn is one end of a pipe with a chosen remote address.
type pipeConn struct {
	net.Conn
	remote net.Addr
}

func (c pipeConn) RemoteAddr() net.Addr { return c.remote }

func newConn(t *testing.T, ip string) net.Conn {
	c, _ := newConnPair(t, ip)
	return c
}

// newConnPair is newConn and the client's end of it.
func newConnPair(t *testing.T, ip string) (server net.Conn, client net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return pipeConn{Conn: a, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}}, b
}

type readResult struct {
	n   int
	err error
}

// reading starts a read of c, as the server's wait for a request, and
// returns once the read is waiting; its result comes on the channel.
func reading(t *testing.T, m *connLimiter, c *trackedConn) <-chan readResult {
	t.Helper()
	res := make(chan readResult, 1)
	go func() {
		n, err := c.Read(make([]byte, 64))
		res <- readResult{n, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		exposed := c.all != nil
		m.mu.Unlock()
		if exposed {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatal("the read did not make the connection evictable")
		}
	}
}

// A connection whose read returned a request's bytes is not evictable
// until the server reads from it again, though the server has not
// reported it active yet (it parses the request first): a newcomer must
// not evict it, or the request would run on a closed connection and its
// reply be lost (a later read, for the rest of the headers, may make it
// evictable again, and then nothing of it runs). And once the server
// is idle on it again, it is evictable only while the server waits in a
// read: a request pipelined behind the last one may be in the server's
// buffer, served without a read.
func TestConnLimiterNeverEvictsARequestThatArrived(t *testing.T) {
	m := newConnLimiter(Limits{MaxConns: 1, MaxConnsPerClient: 1})
	s1, c1 := newConnPair(t, "10.0.0.1")
	a1 := m.admit(s1)
	m.connState(a1, http.StateNew)
	res := reading(t, m, a1)
	if _, err := c1.Write([]byte("POST /v1/actors/counter/x/ask HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r.n == 0 || r.err != nil {
		t.Fatalf("read %+v", r)
	}
	if m.admit(newConn(t, "10.0.0.2")) != nil || a1.released {
		t.Fatal("a connection whose request arrived was evicted before the server reported it active")
	}
	m.connState(a1, http.StateActive)
	m.connState(a1, http.StateIdle)
	if m.admit(newConn(t, "10.0.0.2")) != nil || a1.released {
		t.Fatal("evicted after its request, before the server read from it again")
	}
	res = reading(t, m, a1)
	if m.admit(newConn(t, "10.0.0.2")) == nil || !a1.released {
		t.Fatal("a connection the server waits on for a request did not make room")
	}
	if r := <-res; r.n != 0 || r.err == nil {
		t.Fatalf("the evicted connection's read returned %+v, want an error", r)
	}
}

// A read that returns bytes after its connection was chosen to make
// room fails: the server never sees a request on an evicted connection.
func TestConnLimiterEvictedReadFails(t *testing.T) {
	m := newConnLimiter(Limits{MaxConns: 1, MaxConnsPerClient: 1})
	raw := &heldConn{Conn: newConn(t, "10.0.0.1"), reached: make(chan struct{}), release: make(chan struct{})}
	a1 := m.admit(raw)
	m.connState(a1, http.StateIdle)
	res := make(chan readResult, 1)
	go func() {
		n, err := a1.Read(make([]byte, 64))
		res <- readResult{n, err}
	}()
	<-raw.reached // the read waits, exposed
	if m.admit(newConn(t, "10.0.0.2")) == nil || !a1.released {
		t.Fatal("the waiting connection did not make room")
	}
	close(raw.release) // its bytes arrive as it is closed
	// As a read error of a connection gone: net/http then writes nothing
	// on it (a 400 for any other error).
	var oe *net.OpError
	if r := <-res; r.n != 0 || !errors.Is(r.err, errEvicted) || !errors.As(r.err, &oe) || oe.Op != "read" || !raw.closed {
		t.Fatalf("read of an evicted connection returned %+v (closed %v), want errEvicted as a read error", r, raw.closed)
	}
}

// heldConn's first Read returns a request's bytes once released.
type heldConn struct {
	net.Conn
	reached, release chan struct{}
	closed           bool
}

func (c *heldConn) Read(p []byte) (int, error) {
	close(c.reached)
	<-c.release
	return copy(p, "GET / HTTP/1.1\r\n"), nil
}

func (c *heldConn) Close() error { c.closed = true; return nil }

// TestConnLimiterEvictsIdleFirst walks the admission policy: at a limit
// the oldest connection not serving a request makes room (the client's
// own at the client limit), and only when all are busy is a newcomer
// refused.
func TestConnLimiterEvictsIdleFirst(t *testing.T) {
	m := newConnLimiter(Limits{MaxConns: 3, MaxConnsPerClient: 2})
	admit := func(ip string) *trackedConn {
		t.Helper()
		return m.admit(newConn(t, ip))
	}
	a1, a2 := admit("10.0.0.1"), admit("10.0.0.1")
	if a1 == nil || a2 == nil {
		t.Fatal("two connections of one client within its limit were refused")
	}
	m.connState(a2, http.StateActive)
	a3 := admit("10.0.0.1") // A at its limit: its idle a1 makes room
	if a3 == nil || !a1.released || a2.released {
		t.Fatalf("a3 %v, a1 released %v, a2 released %v: want a1 evicted", a3 != nil, a1.released, a2.released)
	}
	m.connState(a3, http.StateActive)
	if admit("10.0.0.1") != nil {
		t.Fatal("a client whose connections are all busy got another over its limit")
	}
	b1 := admit("10.0.0.2") // 3 open now
	if b1 == nil {
		t.Fatal("b1 refused under the node limit")
	}
	b2 := admit("10.0.0.3") // node limit: the idle b1 makes room
	if b2 == nil || !b1.released {
		t.Fatal("the idle b1 did not make room at the node limit")
	}
	m.connState(b2, http.StateActive)
	if admit("10.0.0.4") != nil {
		t.Fatal("a newcomer got a place while every connection was busy")
	}
	m.connState(b2, http.StateIdle) // the request ended
	reading(t, m, b2)               // the server waits for the next one
	if admit("10.0.0.4") == nil {
		t.Fatal("an idle connection did not make room")
	}
	st := m.snapshot()
	if st.Open != 3 || st.Evicted != 3 || st.RefusedClient != 1 || st.RefusedNode != 1 {
		t.Fatalf("stats %+v, want 3 open, 3 evicted, 1 refused per limit", st)
	}
	for _, c := range []*trackedConn{a2, a3} {
		_ = c.Close()
		_ = c.Close() // idempotent
	}
	if st := m.snapshot(); st.Open != 1 {
		t.Fatalf("%d open after closing, want 1", st.Open)
	}
}
