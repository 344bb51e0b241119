// Package tempesttest runs a Tempest cluster inside one test process: N
// real nodes on loopback (QUIC with mutual TLS under a generated CA,
// encrypted memberlist gossip, raft on disk in temporary directories),
// with timing tuned for tests, and helpers to wait for the cluster to
// settle, find the owner of a key, and kill, partition and restart
// nodes.
//
//	c := tempesttest.New(t, tempesttest.Options{
//		Nodes:    3,
//		Register: func(n *tempest.Node) error { return bank.Register(n) },
//	})
//	owner := c.Owner(ref)       // the node that owns ref
//	other := c.NotOwner(ref)    // a node that must route to the owner
//	reply, err := other.Ask(ctx, ref, msg)
//
// Everything a Cluster starts stops when the test ends.
package tempesttest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/testhooks"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// Options configure a Cluster. Zero fields take defaults.
type Options struct {
	// Nodes is the number of nodes started by New (default 3). They are
	// called n1, n2, ...
	Nodes int
	// Register registers the application's kinds on a node before it
	// starts. Every node runs it, also on restart.
	Register func(n *tempest.Node) error
	// Configure, if set, edits a node's configuration before New (after
	// the cluster's own settings are filled in).
	Configure func(name string, cfg *tempest.Config)
	// Logger receives every node's logs (default: discarded).
	Logger *slog.Logger
	// SettleTimeout bounds New's and WaitSettled's wait (default 60s).
	SettleTimeout time.Duration
}

// Cluster is a running test cluster. Its methods are safe for concurrent
// use; those that fail the test call t.Fatal and so belong on the test's
// goroutine.
type Cluster struct {
	t    testing.TB
	opts Options
	ca   *wire.CA
	pool *x509.CertPool
	key  []byte

	mu    sync.Mutex
	seed  string
	nodes map[string]*tempest.Node
	dirs  map[string]string
}

// FastTiming returns the gossip and placement timing test clusters use:
// failures are noticed in a second or two, yet a busy two-core machine
// does not flap leadership.
func FastTiming() (membership.Timing, placement.Config) {
	g := membership.FastTiming()
	g.ProbeInterval = 500 * time.Millisecond
	g.ProbeTimeout = 400 * time.Millisecond
	g.TCPTimeout = 2 * time.Second

	p := placement.Config{}
	p.Shards = 64
	p.HeartbeatTimeout = time.Second
	p.ElectionTimeout = time.Second
	p.LeaderLeaseTimeout = 500 * time.Millisecond
	p.CommitTimeout = 10 * time.Millisecond
	p.Lease = 1500 * time.Millisecond
	p.LeaseMargin = 300 * time.Millisecond
	p.DownAfter = 1500 * time.Millisecond
	p.DeadVoterGrace = 2 * time.Second
	p.ReconcileInterval = 100 * time.Millisecond
	p.ApplyTimeout = time.Second
	p.MaxMoving = 16
	p.WALSegmentSize = 1 << 20
	return g, p
}

// New starts opts.Nodes nodes, waits until the cluster is settled (every
// node ready, every shard owned by a live node, nothing moving) and
// returns it. The nodes are crashed (Kill) when the test ends.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.SettleTimeout == 0 {
		opts.SettleTimeout = 60 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ca, err := wire.NewCA("tempesttest CA", time.Now().Add(-time.Minute), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	key, err := membership.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, opts: opts, ca: ca, pool: pool, key: key,
		nodes: map[string]*tempest.Node{}, dirs: map[string]string{}}
	t.Cleanup(c.killAll)
	for i := range opts.Nodes {
		c.Start(fmt.Sprintf("n%d", i+1))
	}
	c.WaitSettled()
	return c
}

// Start starts the node name (on its old data directory if it ran
// before) and returns it once started; it does not wait for it to be
// ready (see WaitSettled, Node.WaitReady).
func (c *Cluster) Start(name string) *tempest.Node {
	t := c.t
	t.Helper()
	c.mu.Lock()
	if c.nodes[name] != nil {
		c.mu.Unlock()
		t.Fatalf("tempesttest: node %s is running", name)
	}
	dir, ok := c.dirs[name]
	if !ok {
		dir = t.TempDir()
		c.dirs[name] = dir
	}
	seed := c.seed
	c.mu.Unlock()

	certPEM, keyPEM, err := c.ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	gossip, place := FastTiming()
	cc := &tempest.ClusterConfig{
		GossipAddr: "127.0.0.1:0", QUICAddr: "127.0.0.1:0",
		BootstrapExpect: c.opts.Nodes, GossipKeys: [][]byte{c.key},
		Certificate: cert, CAs: c.pool, Version: "tempesttest",
		GossipTiming: gossip, Placement: place,
		LeaveTimeout: 20 * time.Second,
	}
	if seed != "" {
		cc.Seeds = []string{seed}
	}
	cfg := tempest.Config{Name: name, DataDir: dir, Cluster: cc, Logger: c.opts.Logger}
	cfg.Scheduler.Workers = 2
	if c.opts.Configure != nil {
		c.opts.Configure(name, &cfg)
	}
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.Register != nil {
		if err := c.opts.Register(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[name] = n
	if c.seed == "" {
		for _, m := range n.Members() {
			if m.Name == name {
				c.seed = m.Addr.String()
			}
		}
	}
	c.mu.Unlock()
	return n
}

// Node returns the running node name; the test fails if there is none.
func (c *Cluster) Node(name string) *tempest.Node {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[name]
	c.mu.Unlock()
	if n == nil {
		c.t.Fatalf("tempesttest: no running node %s", name)
	}
	return n
}

// Nodes returns the running nodes, sorted by name.
func (c *Cluster) Nodes() []*tempest.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*tempest.Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *tempest.Node) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// Owner returns the running node that owns ref in the first node's
// table; the test fails if that is not a running node.
func (c *Cluster) Owner(ref actor.Ref) *tempest.Node {
	c.t.Helper()
	nodes := c.Nodes()
	if len(nodes) == 0 {
		c.t.Fatal("tempesttest: no running node")
	}
	owner, _, err := nodes[0].Locate(ref)
	if err != nil {
		c.t.Fatalf("tempesttest: locate %v: %v", ref, err)
	}
	return c.Node(owner)
}

// NotOwner returns a running node that does not own ref (the first by
// name); the test fails if every running node owns it.
func (c *Cluster) NotOwner(ref actor.Ref) *tempest.Node {
	c.t.Helper()
	owner := c.Owner(ref)
	for _, n := range c.Nodes() {
		if n != owner {
			return n
		}
	}
	c.t.Fatalf("tempesttest: no node other than %s", owner.Name())
	return nil
}

// WaitSettled waits until every running node is ready and every node's
// table has each shard owned by a running node with no move in progress;
// the test fails after Options.SettleTimeout, saying why.
func (c *Cluster) WaitSettled() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.SettleTimeout)
	defer cancel()
	if err := c.Settled(ctx); err != nil {
		c.t.Fatal(err)
	}
}

// Settled waits like WaitSettled and returns an error saying why the
// cluster did not settle before ctx ended.
func (c *Cluster) Settled(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		why := c.unsettled()
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tempesttest: cluster not settled: %w: %s", ctx.Err(), why)
		case <-tick.C:
		}
	}
}

func (c *Cluster) unsettled() string {
	nodes := c.Nodes()
	names := map[string]bool{}
	for _, n := range nodes {
		names[n.Name()] = true
	}
	for _, n := range nodes {
		if err := n.Readiness(); err != nil {
			return err.Error()
		}
		tab := n.Table()
		if tab == nil || tab.ShardCount == 0 {
			return n.Name() + " has no table"
		}
		for gn, g := range tab.Groups {
			for i, s := range g.Shards {
				if !names[s.Owner] || s.MovingTo != "" {
					return fmt.Sprintf("%s sees shard %q/%d at %q moving to %q", n.Name(), gn, i, s.Owner, s.MovingTo)
				}
			}
		}
	}
	return ""
}

// Kill stops the node name as a crash would, as far as the cluster can
// tell: it vanishes from gossip and raft without handing anything off
// (its state at rest is still written to its data directory, which a
// Start reuses).
func (c *Cluster) Kill(name string) {
	c.t.Helper()
	n := c.remove(name)
	if err := testhooks.Halt(context.Background(), n); err != nil {
		c.t.Logf("tempesttest: kill %s: %v", name, err)
	}
}

// Stop closes the node name gracefully: it hands its shards off and
// leaves the cluster.
func (c *Cluster) Stop(name string) {
	c.t.Helper()
	n := c.remove(name)
	if err := n.Close(context.Background()); err != nil {
		c.t.Fatalf("tempesttest: stop %s: %v", name, err)
	}
}

// Restart kills the node name and starts it again on its data directory.
func (c *Cluster) Restart(name string) *tempest.Node {
	c.t.Helper()
	c.Kill(name)
	return c.Start(name)
}

// Partition cuts the node name off the network (its gossip and its QUIC
// transport stop) while it keeps running: the others see it fail, and it
// stops serving once its placement lease runs out. A partitioned node
// does not heal; Kill or Restart it afterwards.
func (c *Cluster) Partition(name string) {
	c.t.Helper()
	testhooks.Isolate(c.Node(name))
}

func (c *Cluster) remove(name string) *tempest.Node {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	if n == nil {
		c.t.Fatalf("tempesttest: no running node %s", name)
	}
	delete(c.nodes, name)
	return n
}

// killAll crashes every node (fast; leaves nothing running).
func (c *Cluster) killAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[string]*tempest.Node{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = testhooks.Halt(context.Background(), n) })
	}
	wg.Wait()
}
