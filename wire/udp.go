package wire

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
)

// A datagram the kernel refuses to send with EPERM was dropped by a
// firewall rule on its way out (an iptables OUTPUT drop, a network policy).
// To QUIC that is a lost packet, as one dropped anywhere else on the path
// would be, but quic-go ends a connection on any error of a send after its
// first, so one refused datagram took down the link, and with it the raft
// streams and mail to that peer, where loss would have been retransmitted.
// The transport's socket reports such a send as done (and counts it:
// Stats.SendsRefused); any other error still reaches quic-go.

// refusedUDP is the transport's own UDP socket, with every method quic-go
// uses for its optimisations (batch reads, GSO, ECN) kept.
type refusedUDP struct {
	*net.UDPConn
	refused *atomic.Uint64
}

func (c refusedUDP) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	n, oobn, err := c.UDPConn.WriteMsgUDP(b, oob, addr)
	if sendRefused(err) {
		c.refused.Add(1)
		return len(b), len(oob), nil
	}
	return n, oobn, err
}

func (c refusedUDP) WriteTo(b []byte, addr net.Addr) (int, error) {
	n, err := c.UDPConn.WriteTo(b, addr)
	if sendRefused(err) {
		c.refused.Add(1)
		return len(b), nil
	}
	return n, err
}

// refusedPacketConn is the same for a PacketConn the caller passed in
// (Config.PacketConn) that quic-go would use through WriteTo alone.
type refusedPacketConn struct {
	net.PacketConn
	refused *atomic.Uint64
}

func (c refusedPacketConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(b, addr)
	if sendRefused(err) {
		c.refused.Add(1)
		return len(b), nil
	}
	return n, err
}

func sendRefused(err error) bool { return err != nil && errors.Is(err, syscall.EPERM) }

// dropRefusedSends wraps pc so that sends the kernel refuses with EPERM
// count as lost datagrams. A PacketConn with capabilities of its own
// beyond a *net.UDPConn's (quic-go's OOBCapablePacketConn, other than a
// *net.UDPConn) is left as it is: wrapping would hide them.
func dropRefusedSends(pc net.PacketConn, refused *atomic.Uint64) net.PacketConn {
	switch c := pc.(type) {
	case *net.UDPConn:
		return refusedUDP{UDPConn: c, refused: refused}
	case interface {
		WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error)
	}:
		return pc
	default:
		return refusedPacketConn{PacketConn: pc, refused: refused}
	}
}
