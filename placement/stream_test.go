package placement_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tempest-actors/tempest/placement"
)

// tcpDialer resolves node names to loopback TCP addresses, as the QUIC
// transport resolves them to current peer addresses.
type tcpDialer struct {
	mu    sync.Mutex
	addrs map[string]string
}

func (d *tcpDialer) Dial(ctx context.Context, peer, service string) (net.Conn, error) {
	if service != placement.RaftService {
		return nil, fmt.Errorf("unexpected service %q", service)
	}
	d.mu.Lock()
	addr, ok := d.addrs[peer]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown peer %q", peer)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

func TestRaftOverStreamLayerTCP(t *testing.T) {
	mem := newFakeMembership()
	d := &tcpDialer{addrs: map[string]string{}}
	names := []string{"t1", "t2", "t3"}
	dirs := map[string]string{}
	for _, name := range names {
		dirs[name] = t.TempDir()
	}
	var nodes []*placement.Node
	start := func(name string) *placement.Node {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		d.addrs[name] = l.Addr().String()
		d.mu.Unlock()
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  placement.NewStreamLayer(d, l, ""),
			MaxPool: 2,
			Timeout: time.Second,
		})
		cfg := testConfig()
		cfg.Name, cfg.DataDir, cfg.Transport, cfg.Membership = name, dirs[name], tr, mem
		cfg.BootstrapExpect = 3
		n, err := placement.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close(context.Background()) })
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		mem.set(name, placement.PeerAlive)
		return n
	}
	for _, name := range names {
		nodes = append(nodes, start(name))
	}
	// Server addresses in the raft configuration are names, not IPs.
	waitFor(t, 30*time.Second, "a leader with a full table", func() bool {
		for _, n := range nodes {
			if n.IsLeader() {
				tb := n.Table()
				return tb.ShardCount == 64 && len(tb.Owned("t1"))+len(tb.Owned("t2"))+len(tb.Owned("t3")) == 64
			}
		}
		return false
	})
	for _, n := range nodes {
		if !n.IsLeader() {
			continue
		}
		f := n.Raft().GetConfiguration()
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		for _, s := range f.Configuration().Servers {
			if string(s.Address) != string(s.ID) {
				t.Errorf("server %s has address %s, want its name", s.ID, s.Address)
			}
		}
	}
	// Replication reached every follower.
	waitFor(t, 10*time.Second, "replicated tables", func() bool {
		v := nodes[0].Table().Version
		for _, n := range nodes[1:] {
			if n.Table().Version != v {
				return false
			}
		}
		return v > 0
	})

	// Full restart on new ports: raft addresses are names, so the
	// cluster recovers once the dialer knows the new addresses.
	version := nodes[0].Table().Version
	for _, n := range nodes {
		if err := n.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	nodes = nodes[:0]
	for _, name := range names {
		nodes = append(nodes, start(name))
	}
	waitFor(t, 30*time.Second, "a leader after restart on new ports", func() bool {
		for _, n := range nodes {
			if n.IsLeader() {
				return n.Table().Version >= version
			}
		}
		return false
	})
}
