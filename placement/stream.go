package placement

import (
	"context"
	"net"
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
	return s.dialer.Dial(ctx, string(address), s.service)
}
