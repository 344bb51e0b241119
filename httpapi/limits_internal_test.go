package httpapi

import (
	"net"
	"net/http"
	"testing"
)

// pipeConn is one end of a pipe with a chosen remote address.
type pipeConn struct {
	net.Conn
	remote net.Addr
}

func (c pipeConn) RemoteAddr() net.Addr { return c.remote }

func newConn(t *testing.T, ip string) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return pipeConn{Conn: a, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}}
}

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
