package cluster

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
)

// The cluster reaches other nodes through a transport and learns who they
// are from gossip. A production node's network is quicNet: QUIC with
// mutual TLS and memberlist. The simulation tests give a node memNet
// instead (testhooks.Simulate): an in-memory wire.MemNetwork and a gossip
// view the test scripts, so a whole cluster runs in one process under
// fake time. Everything above these two interfaces, raft and the state
// stores included, is the same code either way.

// transport is what the cluster uses of its transport.
type transport interface {
	wire.Transport
	wire.WaitSender
	// Connect returns once a link to peer is up (for QUIC: mutually
	// authenticated, which is what the prover relies on).
	Connect(ctx context.Context, peer string) error
	Stats() wire.Stats
}

// gossip is what the cluster uses of its membership.
type gossip interface {
	Members() []membership.Member
	Subscribe() *membership.Subscription
	Joined() <-chan struct{}
	Start(ctx context.Context) error
	Close(ctx context.Context) error
	Halt()
	Dropped() membership.TrafficStats
	// Meta and UpdateMeta read and change what this node gossips of
	// itself.
	Meta() membership.Meta
	UpdateMeta(ctx context.Context, m membership.Meta) error
}

var (
	_ transport = (*wire.QUIC)(nil)
	_ gossip    = (*membership.Membership)(nil)
)

// network makes a cluster's transport and then its gossip.
type network interface {
	transport(c *Engine, wc wire.Config) (transport, error)
	// gossip completes mc.Meta with what the transport determines
	// (its address) and starts nothing: the cluster calls Start.
	gossip(ctx context.Context, c *Engine, mc membership.Config) (gossip, error)
}

// quicNet is the production network.
type quicNet struct{ tr *wire.QUIC }

func (q *quicNet) transport(c *Engine, wc wire.Config) (transport, error) {
	if g := c.pause; g != nil && wc.PacketConn == nil {
		pc, err := net.ListenPacket("udp", wc.ListenAddr)
		if err != nil {
			return nil, err
		}
		c.pconn = pc
		wc.PacketConn = &gatedPacketConn{PacketConn: pc, held: &g.quic}
	}
	tr, err := wire.NewQUIC(wc)
	if err != nil {
		return nil, err
	}
	q.tr = tr
	return tr, nil
}

func (q *quicNet) gossip(ctx context.Context, c *Engine, mc membership.Config) (gossip, error) {
	if c.pause != nil {
		mc.Gate = &c.pause.gossip
	}
	mc.Meta.QUICAddr = c.quicAdvertise(q.tr.Addr())
	ml, err := membership.New(mc)
	if err != nil {
		return nil, err
	}
	if mc.Meta.QUICAddr == "" {
		// Nothing specific configured: peers dial the IP gossip advertises.
		_, port, _ := net.SplitHostPort(q.tr.Addr().String())
		meta := ml.Meta()
		meta.QUICAddr = net.JoinHostPort(ml.Local().Addr.Addr().String(), port)
		if err := ml.UpdateMeta(ctx, meta); err != nil {
			return nil, err
		}
	}
	return ml, nil
}

// Simulate puts the engine on the in-memory network net, with the
// gossip view view makes and gone told when it leaves gossip (see memNet).
// Only before Start (testhooks.Simulate).
func (c *Engine) Simulate(net *wire.MemNetwork, view func(membership.Member) *membership.Fake, gone func(bool)) {
	c.net = &memNet{net: net, view: view, gone: gone}
}

// memNet is the simulated network: the node joins a wire.MemNetwork and
// sees the members its view lists. The test that made it scripts every
// view (joins, failures, departures), acting as gossip would.
type memNet struct {
	net *wire.MemNetwork
	// view returns the node's gossip view, given the member record the
	// node announces (its metadata; BootID set by the test).
	view func(self membership.Member) *membership.Fake
	// gone is told that the node left gossip: gracefully (Close) or not
	// (a crash, or cut off by Isolate). It may be told more than once.
	gone func(graceful bool)
}

func (m *memNet) transport(c *Engine, wc wire.Config) (transport, error) {
	if c.pause != nil {
		return nil, errors.New("tempest: a simulated node is not pausable")
	}
	tr, err := m.net.Join(wire.MemConfig{Name: wc.Name, Handler: wc.Handler, Events: wc.Events,
		ManifestDigest: wc.ManifestDigest, MailLanes: wc.MailLanes, MaxFrameSize: wc.MaxFrameSize,
		LaneQueueBytes: wc.LaneQueueBytes, Logger: wc.Logger})
	if err != nil {
		return nil, err
	}
	return memTransport{tr}, nil
}

func (m *memNet) gossip(_ context.Context, _ *Engine, mc membership.Config) (gossip, error) {
	self := membership.Member{Name: mc.Name, Meta: mc.Meta}
	view := m.view(self)
	joined := make(chan struct{})
	close(joined)
	return &memGossip{view: view, gone: m.gone, joined: joined, self: self}, nil
}

// memTransport is a wire.Mem as the cluster's transport. It counts
// nothing: Stats, QUIC's link counters, stay zero.
type memTransport struct{ *wire.Mem }

func (memTransport) Stats() wire.Stats { return wire.Stats{} }

// memGossip is a scripted gossip view as the cluster's membership.
type memGossip struct {
	view   *membership.Fake
	gone   func(graceful bool)
	joined chan struct{}

	mu   sync.Mutex
	self membership.Member // as the node announced it (the test's views of it keep that)
}

func (g *memGossip) Members() []membership.Member        { return g.view.Members() }
func (g *memGossip) Subscribe() *membership.Subscription { return g.view.Subscribe() }
func (g *memGossip) Joined() <-chan struct{}             { return g.joined }
func (g *memGossip) Start(context.Context) error         { return nil }
func (g *memGossip) Dropped() membership.TrafficStats    { return membership.TrafficStats{} }

func (g *memGossip) Meta() membership.Meta {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.self.Meta
}

// UpdateMeta changes the node's view of itself (its boot ID kept); the
// simulation scripts the other nodes' views.
func (g *memGossip) UpdateMeta(_ context.Context, m membership.Meta) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	m.Name = g.self.Name
	for _, mem := range g.view.Members() {
		if mem.Name == m.Name {
			m.BootID = mem.Meta.BootID
		}
	}
	if err := g.view.Update(membership.Member{Name: g.self.Name, Meta: m}); err != nil {
		return err
	}
	g.self.Meta = m
	return nil
}

func (g *memGossip) Close(context.Context) error {
	g.gone(true)
	g.view.Close()
	return nil
}

func (g *memGossip) Halt() {
	g.gone(false)
	g.view.Close()
}
