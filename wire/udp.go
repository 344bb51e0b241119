package wire

import (
	"errors"
	"net"
	"syscall"
)

// A datagram the kernel refuses to send with EPERM was dropped by a
// firewall rule on its way out (an iptables OUTPUT drop, a network policy).
// To QUIC that is a lost packet, as one dropped anywhere else on the path
// would be, but quic-go ends a connection on any error of a send after its
// first, so one refused datagram took down the link, and with it the raft
// streams and mail to that peer, where loss would have been retransmitted.
// The transport's socket sends such a datagram once more at once (as
// quic-go does for a connection's first: the kernel may refuse one
// spuriously), and if it is refused again reports it as sent and calls
// refused (Stats.SendsRefused, a rate-limited warning per destination);
// any other error still reaches quic-go. A peer that the firewall blocks
// for good is then found as one silently unreachable is: a dial fails at
// its handshake timeout, a link at its idle timeout.

// refusedUDP is the transport's own UDP socket, with every method quic-go
// uses for its optimisations (batch reads, GSO, ECN) kept.
type refusedUDP struct {
	*net.UDPConn
	refused func(to net.Addr)
}

func (c refusedUDP) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	n, oobn, err := c.UDPConn.WriteMsgUDP(b, oob, addr)
	if sendRefused(err) {
		if n, oobn, err = c.UDPConn.WriteMsgUDP(b, oob, addr); sendRefused(err) {
			c.refused(addr)
			return len(b), len(oob), nil
		}
	}
	return n, oobn, err
}

func (c refusedUDP) WriteTo(b []byte, addr net.Addr) (int, error) {
	return writeRefused(c.UDPConn, b, addr, c.refused)
}

// refusedPacketConn is the same for a PacketConn the caller passed in
// (Config.PacketConn) that quic-go would use through WriteTo alone.
type refusedPacketConn struct {
	net.PacketConn
	refused func(to net.Addr)
}

func (c refusedPacketConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	return writeRefused(c.PacketConn, b, addr, c.refused)
}

func writeRefused(pc net.PacketConn, b []byte, addr net.Addr, refused func(net.Addr)) (int, error) {
	n, err := pc.WriteTo(b, addr)
	if sendRefused(err) {
		if n, err = pc.WriteTo(b, addr); sendRefused(err) {
			refused(addr)
			return len(b), nil
		}
	}
	return n, err
}

func sendRefused(err error) bool { return err != nil && errors.Is(err, syscall.EPERM) }

// dropRefusedSends wraps pc so that sends the kernel refuses with EPERM
// count as lost datagrams. A PacketConn with capabilities of its own
// beyond a *net.UDPConn's (quic-go's OOBCapablePacketConn, other than a
// *net.UDPConn) is left as it is: wrapping would hide them.
func dropRefusedSends(pc net.PacketConn, refused func(to net.Addr)) net.PacketConn {
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
