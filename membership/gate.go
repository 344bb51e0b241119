package membership

import (
	"errors"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Gate holds a node's gossip traffic while it is closed, as the rest of
// the cluster sees a paused process (stopped, frozen VM, long GC pause):
// nothing it sends arrives, nothing sent to it is read. It exists for
// fault injection in tests (tempesttest's Pause). The zero Gate is open;
// it is safe for concurrent use.
type Gate struct{ held atomic.Bool }

// Hold closes the gate: from now on packets are dropped both ways,
// inbound streams are closed unread and dials fail.
func (g *Gate) Hold() { g.held.Store(true) }

// Release opens the gate again.
func (g *Gate) Release() { g.held.Store(false) }

// Held reports whether the gate is closed.
func (g *Gate) Held() bool { return g.held.Load() }

// errGateHeld is the error of a dial while the gate is held.
var errGateHeld = errors.New("membership: gossip held (paused)")

// gatedTransport is memberlist's network transport behind a Gate. Its
// two goroutines (packets, streams) stop on Shutdown.
type gatedTransport struct {
	nt      *memberlist.NetTransport
	gate    *Gate
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*gatedTransport)(nil)

// newGatedTransport binds memberlist's NetTransport on host:port (port 0
// picks one) and puts it behind g.
func newGatedTransport(host string, port int, g *Gate, logger *log.Logger) (*gatedTransport, error) {
	var nt *memberlist.NetTransport
	var err error
	for range 10 { // a port picked for TCP may be taken for UDP; try again
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: logger})
		if err == nil || port != 0 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	t := &gatedTransport{nt: nt, gate: g, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), done: make(chan struct{})}
	t.wg.Add(2)
	go t.forwardPackets()
	go t.forwardStreams()
	return t, nil
}

func (t *gatedTransport) forwardPackets() {
	defer t.wg.Done()
	for {
		select {
		case <-t.done:
			return
		case p := <-t.nt.PacketCh():
			if t.gate.Held() {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.done:
				return
			}
		}
	}
}

func (t *gatedTransport) forwardStreams() {
	defer t.wg.Done()
	for {
		select {
		case <-t.done:
			return
		case c := <-t.nt.StreamCh():
			if t.gate.Held() {
				_ = c.Close()
				continue
			}
			select {
			case t.streams <- c:
			case <-t.done:
				_ = c.Close()
				return
			}
		}
	}
}

func (t *gatedTransport) bindPort() int { return t.nt.GetAutoBindPort() }

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *gatedTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.nt.FinalAdvertiseAddr(ip, port)
}

// WriteTo implements memberlist.Transport.
func (t *gatedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.gate.Held() {
		return time.Now(), nil // sent, as far as the sender knows; lost
	}
	return t.nt.WriteTo(b, addr)
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *gatedTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, addr.Addr)
}

// PacketCh implements memberlist.Transport.
func (t *gatedTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport.
func (t *gatedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.gate.Held() {
		return nil, errGateHeld
	}
	return t.nt.DialTimeout(addr, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *gatedTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(addr.Addr, timeout)
}

// StreamCh implements memberlist.Transport.
func (t *gatedTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport.
func (t *gatedTransport) Shutdown() error {
	err := t.nt.Shutdown()
	t.once.Do(func() { close(t.done) })
	t.wg.Wait()
	return err
}
