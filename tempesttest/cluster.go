// Package tempesttest runs a Tempest cluster inside one test process: N
// real nodes on loopback (QUIC with mutual TLS under a generated CA,
// encrypted memberlist gossip, raft on disk in temporary directories),
// with timing tuned for tests, and helpers to wait for the cluster to
// settle, find the owner of a key, kill, pause, partition and restart
// nodes, and check the activation history every node recorded.
//
//	c := tempesttest.New(t, tempesttest.Options{
//		Nodes:    3,
//		Register: func(n *tempest.Node) error { return bank.Register(n) },
//	})
//	owner := c.Owner(ref)       // the node that owns ref
//	other := c.NotOwner(ref)    // a node that must route to the owner
//	reply, err := other.Ask(ctx, ref, msg)
//
//	c.Kill(owner.Name())  // a crash: gone from gossip and raft, nothing handed off
//	c.Start(owner.Name()) // back on its data directory
//	c.WaitSettled()
//	if err := c.SingleActivation(); err != nil { // from every node's recorded events
//		t.Error(err)
//	}
//
// Everything a Cluster starts stops when the test ends. The project's own
// cluster tests use this package.
package tempesttest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire"
)

// Options configure a Cluster. Zero fields take defaults.
type Options struct {
	// Nodes is the number of nodes started by New (default 3). They are
	// called n1, n2, ...
	Nodes int
	// BootstrapExpect is the Cluster.BootstrapExpect of the nodes New
	// starts (default Nodes). A node started later under another name
	// joins the running cluster (BootstrapExpect 0).
	BootstrapExpect int
	// Register registers the application's kinds on a node before it
	// starts. Every node runs it, also on restart.
	Register func(n *tempest.Node) error
	// Configure, if set, edits a node's configuration before New (after
	// the cluster's own settings are filled in).
	Configure func(name string, cfg *tempest.Config)
	// Logger receives every node's logs. By default the cluster keeps
	// them (info and above) in memory: Logs returns them, and they are
	// written to the test's log if the test fails.
	Logger *slog.Logger
	// SettleTimeout bounds New's and WaitSettled's wait (default 60s).
	SettleTimeout time.Duration
	// NoWait makes New return once its nodes have started, without
	// waiting for the cluster to settle.
	NoWait bool
	// Unpausable gives the nodes the UDP socket a production node has
	// (with the batch and offload features quic-go uses) instead of the
	// gated one Pause needs; Pause then fails the test. Benchmarks of
	// the mail path use it.
	Unpausable bool
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

	logs *logBuffer // nil with Options.Logger

	mu      sync.Mutex
	nodes   map[string]*tempest.Node // running and reachable
	cut     map[string]*tempest.Node // running, partitioned off
	addrs   map[string]string        // gossip address of each running node
	dirs    map[string]string
	initial map[string]bool // the names New started
	events  []Event
}

// Event is a supervisor event (tempest.Config.Events) of one node, as
// the cluster recorded it: Events lists them in the order the nodes
// emitted them, across restarts.
type Event struct {
	Node string
	prospero.Event
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
	p.LeaseMargin = 500 * time.Millisecond
	p.DownAfter = 1500 * time.Millisecond
	p.DeadVoterGrace = 2 * time.Second
	p.ReconcileInterval = 100 * time.Millisecond
	p.ApplyTimeout = time.Second
	p.MaxMoving = 16
	p.WALSegmentSize = 1 << 20
	return g, p
}

// New starts opts.Nodes nodes, waits until the cluster is settled (see
// WaitSettled; not with Options.NoWait) and returns it. The nodes are
// crashed (Kill) when the test ends.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.BootstrapExpect == 0 {
		opts.BootstrapExpect = opts.Nodes
	}
	if opts.SettleTimeout == 0 {
		opts.SettleTimeout = 60 * time.Second
	}
	var logs *logBuffer
	if opts.Logger == nil {
		logs = &logBuffer{}
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("tempesttest: the cluster's logs:\n%s", logs.String())
			}
		})
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
	c := &Cluster{t: t, opts: opts, ca: ca, pool: pool, key: key, logs: logs,
		nodes: map[string]*tempest.Node{}, cut: map[string]*tempest.Node{},
		addrs: map[string]string{}, dirs: map[string]string{}, initial: map[string]bool{}}
	t.Cleanup(c.KillAll)
	for i := range opts.Nodes {
		c.initial[fmt.Sprintf("n%d", i+1)] = true
	}
	for i := range opts.Nodes {
		c.Start(fmt.Sprintf("n%d", i+1))
	}
	if !opts.NoWait {
		c.WaitSettled()
	}
	return c
}

// Start starts the node name (on its old data directory if it ran
// before) and returns it once started; it does not wait for it to be
// ready (see WaitSettled, Node.WaitReady). It seeds gossip with every
// running node, so a cluster whose nodes were all killed starts again
// from the first node started.
func (c *Cluster) Start(name string) *tempest.Node {
	t := c.t
	t.Helper()
	c.mu.Lock()
	if c.nodes[name] != nil || c.cut[name] != nil {
		c.mu.Unlock()
		t.Fatalf("tempesttest: node %s is running", name)
	}
	if _, ok := c.dirs[name]; !ok {
		c.dirs[name] = t.TempDir()
	}
	c.mu.Unlock()
	cfg := c.Config(name)
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !c.opts.Unpausable {
		if err := testhooks.Pausable(n); err != nil {
			t.Fatal(err)
		}
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
	for _, m := range n.Members() {
		if m.Name == name {
			c.addrs[name] = m.Addr.String()
		}
	}
	c.mu.Unlock()
	return n
}

// Config returns the configuration Start gives the node name: a fresh
// certificate for name from the cluster's CA, the cluster's gossip key,
// the running nodes as seeds, test timing (FastTiming), name's data
// directory (a new temporary one if name never ran), the cluster's
// logger, an event hook that records into Events, and then
// Options.Configure's edits. A test that builds a node of its own (an
// impostor, a node with a damaged disk) starts from it.
func (c *Cluster) Config(name string) tempest.Config {
	t := c.t
	t.Helper()
	certPEM, keyPEM, err := c.ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	dir, ok := c.dirs[name]
	seeds := make([]string, 0, len(c.addrs))
	for _, a := range c.addrs {
		seeds = append(seeds, a)
	}
	expect := 0
	if c.initial[name] {
		expect = c.opts.BootstrapExpect
	}
	c.mu.Unlock()
	if !ok {
		dir = t.TempDir()
	}
	slices.Sort(seeds)
	gossip, place := FastTiming()
	cc := &tempest.ClusterConfig{
		GossipAddr: "127.0.0.1:0", QUICAddr: "127.0.0.1:0", Seeds: seeds,
		BootstrapExpect: expect, GossipKeys: [][]byte{slices.Clone(c.key)},
		Certificate: cert, CAs: c.pool, Version: "tempesttest",
		GossipTiming: gossip, Placement: place,
		LeaveTimeout: 20 * time.Second,
	}
	cfg := tempest.Config{Name: name, DataDir: dir, Cluster: cc, Logger: c.opts.Logger}
	cfg.Scheduler.Workers = 2
	if c.opts.Configure != nil {
		c.opts.Configure(name, &cfg)
	}
	user := cfg.Events
	cfg.Events = func(e prospero.Event) {
		c.mu.Lock()
		c.events = append(c.events, Event{Node: name, Event: e})
		c.mu.Unlock()
		if user != nil {
			user(e)
		}
	}
	return cfg
}

// Node returns the running node name, partitioned or not; the test fails
// if there is none.
func (c *Cluster) Node(name string) *tempest.Node {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[name]
	if n == nil {
		n = c.cut[name]
	}
	c.mu.Unlock()
	if n == nil {
		c.t.Fatalf("tempesttest: no running node %s", name)
	}
	return n
}

// Nodes returns the running nodes that are not partitioned off, sorted
// by name.
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

// WaitSettled waits until every running node is ready, every node's
// table lists each node's kinds as it registered them, and has each shard
// owned by a running node, with no move in progress, on the node the
// planner targets (placement.Table.Unsettled), and with every shard's
// in-sync replica set whole (placement.Table.UnderReplicated), so that a
// test may crash any one node without losing state; the test fails after
// Options.SettleTimeout, saying why.
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
		why := c.Unsettled()
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

// Unsettled says why the cluster is not settled now (see WaitSettled),
// or "" when it is.
func (c *Cluster) Unsettled() string { return Unsettled(c.Nodes()) }

// Unsettled is Cluster.Unsettled for nodes, the running and reachable
// nodes of a cluster made elsewhere (a simulated one).
func Unsettled(nodes []*tempest.Node) string {
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
		for _, m := range nodes {
			ni, ok := tab.Nodes[m.Name()]
			if !ok {
				return fmt.Sprintf("%s does not list %s", n.Name(), m.Name())
			}
			if ni.Status != placement.StatusUp {
				// A restarted node may still be marked down: it gets no
				// shards until the leader marks it up again.
				return fmt.Sprintf("%s sees %s %s", n.Name(), m.Name(), ni.Status)
			}
			var got []string
			for _, k := range ni.Kinds {
				got = append(got, k.Name)
			}
			if want := m.Kinds(); !slices.Equal(got, want) {
				return fmt.Sprintf("%s sees %s hosting %v, not %v", n.Name(), m.Name(), got, want)
			}
		}
		for gn, g := range tab.Groups {
			for i, s := range g.Shards {
				if !names[s.Owner] || s.MovingTo != "" {
					return fmt.Sprintf("%s sees shard %q/%d at %q moving to %q", n.Name(), gn, i, s.Owner, s.MovingTo)
				}
			}
		}
		// Every kind published by every node, and every shard where the
		// planner wants it: kinds' shards move when a host publishes.
		if why := tab.Unsettled(); why != "" {
			return n.Name() + " sees " + why
		}
		if u := tab.UnderReplicated(); len(u) > 0 {
			return fmt.Sprintf("%s sees %d shards under-replicated (%s first)", n.Name(), len(u), u[0])
		}
	}
	return ""
}

// Kill stops the node name as a crash would, as far as the cluster can
// tell: it vanishes from gossip and raft without handing anything off
// (its state at rest is still written to its data directory, which a
// Start reuses). A partitioned node may be killed.
func (c *Cluster) Kill(name string) {
	c.t.Helper()
	n := c.remove(name)
	if err := testhooks.Halt(context.Background(), n); err != nil {
		c.t.Logf("tempesttest: kill %s: %v", name, err)
	}
}

// Stop closes the node name gracefully (it hands its shards off and
// leaves the cluster); the test fails if Close does.
func (c *Cluster) Stop(name string) {
	c.t.Helper()
	if err := c.Close(name); err != nil {
		c.t.Fatalf("tempesttest: stop %s: %v", name, err)
	}
}

// Close closes the node name gracefully, as Stop does, and returns
// Node.Close's error (tempest.ErrHandoffIncomplete, for one) for the
// test to judge. The node is gone from the cluster either way.
func (c *Cluster) Close(name string) error {
	c.t.Helper()
	return c.remove(name).Close(context.Background())
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
// does not heal: it is no longer among Nodes (nor waited for by
// WaitSettled), Node still returns it, and Kill or Restart ends it.
func (c *Cluster) Partition(name string) *tempest.Node {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[name]
	if n != nil {
		delete(c.nodes, name)
		delete(c.addrs, name)
		c.cut[name] = n
	}
	c.mu.Unlock()
	if n == nil {
		c.t.Fatalf("tempesttest: no reachable node %s", name)
	}
	testhooks.Isolate(n)
	return n
}

// Pause freezes the node name's network, as the rest of the cluster sees
// a paused process (SIGSTOP, a frozen VM, a long GC pause): nothing it
// sends arrives and nothing sent to it is read, gossip and QUIC alike,
// while its sockets and connections stay open. The others see it fail
// and re-place its shards once its lease must have run out; asks to it
// meanwhile end at their deadline. Resume lets its traffic flow again:
// it then meets a cluster that moved on, which is the case to test a
// kind against (an owner that wakes with stale ownership must be fenced,
// not serve). Unlike a real pause, the node's own goroutines keep
// running, so it notices its lease lapse while paused rather than on
// waking, and calls made on the paused node itself still run.
//
// The nodes of a Cluster use a plain UDP socket for QUIC so that they can
// be paused (without the batch and offload features quic-go uses on a
// real one): their mail path is slower than a production node's. With
// Options.Unpausable they get the production socket and cannot be
// paused.
func (c *Cluster) Pause(name string) {
	c.t.Helper()
	if c.opts.Unpausable {
		c.t.Fatalf("tempesttest: pause %s: the cluster's nodes are Unpausable", name)
	}
	if err := testhooks.Pause(c.Node(name), true); err != nil {
		c.t.Fatalf("tempesttest: pause %s: %v", name, err)
	}
}

// Resume ends a Pause of the node name.
func (c *Cluster) Resume(name string) {
	c.t.Helper()
	if err := testhooks.Pause(c.Node(name), false); err != nil {
		c.t.Fatalf("tempesttest: resume %s: %v", name, err)
	}
}

func (c *Cluster) remove(name string) *tempest.Node {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	if n == nil {
		n = c.cut[name]
	}
	if n == nil {
		c.t.Fatalf("tempesttest: no running node %s", name)
	}
	delete(c.nodes, name)
	delete(c.cut, name)
	delete(c.addrs, name)
	return n
}

// KillAll crashes every running node at once, as a power cut would (each
// node still writes what it has at rest on the way down). Start brings
// them back on their data directories. It runs when the test ends.
func (c *Cluster) KillAll() {
	c.mu.Lock()
	var nodes []*tempest.Node
	for _, m := range []map[string]*tempest.Node{c.nodes, c.cut} {
		for _, n := range m {
			nodes = append(nodes, n)
		}
	}
	c.nodes, c.cut, c.addrs = map[string]*tempest.Node{}, map[string]*tempest.Node{}, map[string]string{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = testhooks.Halt(context.Background(), n) })
	}
	wg.Wait()
}

// Logs returns what the nodes logged so far, when the cluster keeps the
// logs (no Options.Logger).
func (c *Cluster) Logs() string {
	if c.logs == nil {
		return ""
	}
	return c.logs.String()
}

// Events returns every supervisor event the cluster's nodes emitted so
// far, in order, across restarts.
func (c *Cluster) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// SingleActivation checks the safety invariant of virtual actors on the
// recorded events: no identity was ever active on two nodes at once. An
// identity is active on a node from its activation (Activated, Hydrated,
// Rehydrated or Restarted) until its deactivation there (Passivated or
// Retired), or until the host refused it there (Rejected: its reload
// kept failing; nothing of it, a faulted value included, is attached
// any more). Every node of the cluster shares the process's clock and
// the one history, so the order is the order things happened. The error
// names each overlap; with no activation recorded at all it is an error
// too, as a check that saw nothing proves nothing.
func (c *Cluster) SingleActivation() error { return SingleActivation(c.Events()) }

// SingleActivation is Cluster.SingleActivation on a history recorded
// elsewhere (a simulated cluster's): events in the order they happened.
func SingleActivation(events []Event) error {
	type span struct {
		node string
		from time.Time
	}
	active := map[prospero.Identity]span{}
	seen := false
	var errs []error
	for _, e := range events {
		switch e.Type {
		case prospero.EventActivated, prospero.EventHydrated, prospero.EventRehydrated, prospero.EventRestarted:
			seen = true
			if cur, ok := active[e.ID]; ok && cur.node != e.Node {
				errs = append(errs, fmt.Errorf("%s activated on %s at %s while active on %s since %s",
					e.ID, e.Node, e.At.Format(time.StampMicro), cur.node, cur.from.Format(time.StampMicro)))
			}
			active[e.ID] = span{e.Node, e.At}
		case prospero.EventPassivated, prospero.EventRetired, prospero.EventRejected:
			if cur, ok := active[e.ID]; ok && cur.node == e.Node {
				delete(active, e.ID)
			}
		}
	}
	if !seen {
		errs = append(errs, errors.New("tempesttest: no activation recorded"))
	}
	return errors.Join(errs...)
}

// logBuffer keeps the cluster's logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
