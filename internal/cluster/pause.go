package cluster

import (
	"errors"
	"net"
	"sync/atomic"

	"github.com/tempest-actors/tempest/membership"
)

// Pausing a node, for tests (tempesttest's Pause and Resume). A node
// made pausable before Start puts its QUIC socket and its gossip
// transport behind gates; pausing holds both: nothing the node sends
// arrives and nothing sent to it is read, as the rest of the cluster sees
// a stopped process, a frozen VM or a long GC pause. Resuming lets its
// traffic flow again, and the node meets a cluster that may have moved
// on (its shards re-placed, its epochs stale). The node's own goroutines
// keep running meanwhile, so it notices its lease lapse while paused
// rather than on waking. Production nodes are never pausable: the gate
// hides the UDP socket's batch and offload features from quic-go.

// pauseGates are a pausable node's gates.
type pauseGates struct {
	quic   atomic.Bool // held: QUIC datagrams dropped both ways
	gossip membership.Gate
}

func (g *pauseGates) hold() {
	g.quic.Store(true)
	g.gossip.Hold()
}

func (g *pauseGates) release() {
	g.quic.Store(false)
	g.gossip.Release()
}

// gatedPacketConn drops datagrams both ways while its gate is held.
type gatedPacketConn struct {
	net.PacketConn
	held *atomic.Bool
}

// ReadFrom returns the next datagram that arrives while the gate is
// open; those that arrive while it is held are dropped.
func (c *gatedPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil || !c.held.Load() {
			return n, addr, err
		}
	}
}

// WriteTo drops p while the gate is held (as far as the sender can
// tell, it was sent).
func (c *gatedPacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.held.Load() {
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

// SetReadBuffer and SetWriteBuffer pass quic-go's socket buffer sizing
// through to the UDP socket.
func (c *gatedPacketConn) SetReadBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return nil
}

func (c *gatedPacketConn) SetWriteBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return nil
}

// MakePausable lets Pause freeze this engine's network: its QUIC
// datagrams and gossip. Only before Start (testhooks.Pausable).
func (c *Engine) MakePausable() { c.pause = &pauseGates{} }

// Pause freezes (paused) or releases the network of an engine made
// pausable (testhooks.Pause).
func (c *Engine) Pause(paused bool) error {
	if c.pause == nil {
		return errors.New("tempest: node is not pausable")
	}
	if paused {
		c.pause.hold()
	} else {
		c.pause.release()
	}
	return nil
}
