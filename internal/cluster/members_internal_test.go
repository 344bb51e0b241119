package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/tempest-actors/tempest/membership"
)

type noConnector struct{}

func (noConnector) Connect(context.Context, string) error { return errors.New("no links here") }

// TestUndecodableMemberCountsAsUnproven: a live gossip member whose
// metadata does not decode is listed as not proven, and the gauge of
// unproven members counts it like any other unproven member.
func TestUndecodableMemberCountsAsUnproven(t *testing.T) {
	c := New(Config{Name: "n1"}, nil)
	c.prove = membership.NewProver(membership.ProverConfig{Self: "n1", Connector: noConnector{}})
	bad := errors.New("metadata does not decode")
	ms := []membership.Member{
		{Name: "n1", Status: membership.StatusAlive, Meta: membership.Meta{QUICAddr: "127.0.0.1:1"}},
		{Name: "n2", Status: membership.StatusAlive, Meta: membership.Meta{QUICAddr: "127.0.0.1:2"}},
		{Name: "garbage", Status: membership.StatusAlive, MetaErr: bad},
		{Name: "empty", Status: membership.StatusAlive, MetaErr: bad},
		{Name: "gone", Status: membership.StatusDead, MetaErr: bad},
	}
	for _, m := range ms[2:4] {
		if c.Proven(m) {
			t.Fatalf("%s is proven", m.Name)
		}
	}
	live, unproven := c.countMembers(ms)
	if live != 4 || unproven != 3 {
		t.Errorf("live %d, unproven %d; want 4 and 3 (n2 and both undecodable members)", live, unproven)
	}
}

// listGossip is a gossip view that lists ms (other methods unused).
type listGossip struct {
	gossip
	ms []membership.Member
}

func (g listGossip) Members() []membership.Member { return g.ms }

// namedConn is a stream from the peer it names.
type namedConn struct {
	net.Conn
	peer   string
	closed bool
}

func (c *namedConn) RemoteAddr() net.Addr { return nodeAddr(c.peer) }
func (c *namedConn) Close() error         { c.closed = true; return nil }

type nodeAddr string

func (a nodeAddr) Network() string { return "tempest" }
func (a nodeAddr) String() string  { return string(a) }

// A link or stream is admitted from a name live in gossip (proven or
// not: the link is the certificate holder's) and refused from one dead,
// left or unknown, and from anyone before gossip runs; a refused stream
// is closed and counted.
func TestAdmitLinkAndStream(t *testing.T) {
	c := New(Config{Name: "n1", Log: slog.New(slog.DiscardHandler)}, nil)
	if err := c.admitLink("n2"); err == nil {
		t.Fatal("a link admitted before gossip runs")
	}
	alive := membership.Member{Name: "n2", Status: membership.StatusAlive, Meta: membership.Meta{QUICAddr: "127.0.0.1:2"}}
	members := []membership.Member{
		{Name: "n1", Status: membership.StatusAlive},
		alive,
		{Name: "dead", Status: membership.StatusDead},
		{Name: "left", Status: membership.StatusLeft},
	}
	c.ml = listGossip{ms: members}
	c.prove = membership.NewProver(membership.ProverConfig{Self: "n1", Connector: noConnector{}})
	c.gossiping.Store(true)
	for peer, admitted := range map[string]bool{"n2": true, "dead": false, "left": false, "mallory": false} {
		if err := c.admitLink(peer); (err == nil) != admitted {
			t.Errorf("link from %s: %v, want admitted %v", peer, err, admitted)
		}
	}
	if conn := (&namedConn{peer: "n2"}); !c.admitStream(conn) || conn.closed {
		t.Fatal("a stream from a live member refused")
	}
	// n2 leaves after its link was made: its next stream is refused.
	c.ml = listGossip{ms: append(members[:1:1], membership.Member{Name: "n2", Status: membership.StatusLeft})}
	conn := &namedConn{peer: "n2"}
	if c.admitStream(conn) || !conn.closed || c.streamsRefused.Load() != 1 {
		t.Fatalf("a stream from a node that left: admitted or not counted (closed %v, refused %d)", conn.closed, c.streamsRefused.Load())
	}
	if conn := (&namedConn{peer: "mallory"}); c.admitStream(conn) || c.streamsRefused.Load() != 2 {
		t.Fatal("a stream from a non-member admitted")
	}
}
