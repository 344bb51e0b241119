package placement_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/placement"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeMembership is one shared, test-controlled view of the cluster.
type fakeMembership struct {
	mu    sync.Mutex
	peers map[string]placement.Peer
	ch    chan struct{}
	// syncOf, if set, supplies each peer's published sync nonce, as gossip
	// metadata would.
	syncOf func(name string) string
	// inCluster, if set, supplies each peer's published InCluster flag.
	inCluster func(name string) bool
	// dataIDs are the peers' published data IDs.
	dataIDs map[string]string
}

func newFakeMembership() *fakeMembership {
	return &fakeMembership{peers: map[string]placement.Peer{}, ch: make(chan struct{}), dataIDs: map[string]string{}}
}

func (f *fakeMembership) Members() []placement.Peer {
	f.mu.Lock()
	ps := slices.Collect(maps.Values(f.peers))
	syncOf, inCluster := f.syncOf, f.inCluster
	dataIDs := maps.Clone(f.dataIDs)
	f.mu.Unlock()
	for i := range ps {
		if syncOf != nil {
			// Without a Forwarder, gossip is also how a follower's
			// kinds reach the leader.
			ps[i].Sync = syncOf(ps[i].Name)
			ps[i].Kinds = testKinds
		}
		if inCluster != nil {
			ps[i].InCluster = inCluster(ps[i].Name)
		}
		ps[i].DataID = dataIDs[ps[i].Name]
	}
	return ps
}

func (f *fakeMembership) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}

func (f *fakeMembership) set(name string, st placement.PeerState) {
	f.mu.Lock()
	f.peers[name] = placement.Peer{Name: name, Addr: name + ":7947", State: st, Manifest: mf()}
	close(f.ch)
	f.ch = make(chan struct{})
	f.mu.Unlock()
}

// forget drops name from the view, as gossip does a member dead long
// enough.
func (f *fakeMembership) forget(name string) {
	f.mu.Lock()
	delete(f.peers, name)
	close(f.ch)
	f.ch = make(chan struct{})
	f.mu.Unlock()
}

// testCluster runs placement nodes over raft's in-memory transport.
type testCluster struct {
	t      testing.TB
	mem    *fakeMembership
	mu     sync.Mutex
	dirs   map[string]string
	trans  map[string]*raft.InmemTransport
	nodes  map[string]*placement.Node
	cut    map[string]bool
	expect int
	voters int
	// noForward runs followers without a Forwarder: sync barriers travel
	// through membership metadata instead.
	noForward bool
	// defaults runs nodes with DefaultConfig timing (except shards).
	defaults bool
	handoff  bool
	// tcp runs raft over loopback TCP with split heartbeats (a
	// LeaseWitness) and gives nodes Witnesses, as production does;
	// partitions then only mark a node cut (use it for crashes).
	tcp bool
	// dataIDs (with tcp) gives nodes data IDs, gossiped and guarding raft
	// streams, as production does.
	dataIDs bool
	addrs   map[string]string
	// tune, if set, changes each node's config before it starts.
	tune func(*placement.Config)
}

func newTestCluster(t testing.TB, expect int) *testCluster {
	c := &testCluster{
		t: t, mem: newFakeMembership(), expect: expect,
		dirs: map[string]string{}, trans: map[string]*raft.InmemTransport{},
		nodes: map[string]*placement.Node{}, cut: map[string]bool{}, addrs: map[string]string{},
	}
	c.mem.inCluster = func(name string) bool {
		n := c.node(name)
		return n != nil && n.InCluster()
	}
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := slices.Collect(maps.Values(c.nodes))
		c.mu.Unlock()
		for _, n := range nodes {
			_ = n.Close(context.Background())
		}
	})
	return c
}

// testKinds are the kinds every test node hosts: the core tests' kind,
// whose shards ref(i) names.
var testKinds = []placement.KindSpec{{Name: tk, Digest: "v1"}}

func testConfig() placement.Config {
	cfg := placement.DefaultConfig()
	cfg.Shards = 64
	cfg.HeartbeatTimeout = 500 * time.Millisecond
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.LeaderLeaseTimeout = 250 * time.Millisecond
	cfg.CommitTimeout = 10 * time.Millisecond
	cfg.Lease = time.Second
	cfg.LeaseMargin = 300 * time.Millisecond
	cfg.DownAfter = 700 * time.Millisecond
	cfg.DeadVoterGrace = 2 * time.Second
	cfg.ReconcileInterval = 100 * time.Millisecond
	cfg.ApplyTimeout = time.Second
	cfg.MaxMoving = 16
	cfg.WALSegmentSize = 1 << 20
	cfg.Kinds = testKinds
	return cfg
}

func fence(cfg placement.Config) time.Duration {
	return placement.FenceDelay(cfg.Lease, cfg.ClockDrift, cfg.LeaseMargin)
}

// start creates (or restarts, reusing its data dir) node name.
func (c *testCluster) start(name string) *placement.Node {
	c.t.Helper()
	c.mu.Lock()
	dir, ok := c.dirs[name]
	if !ok {
		dir = c.t.TempDir()
		c.dirs[name] = dir
	}
	var tr raft.Transport
	if c.tcp {
		tr = c.tcpTransport(name, dir)
	} else {
		it := c.inmemTransport(name)
		tr = it
	}
	c.cut[name] = false
	c.mu.Unlock()

	cfg := testConfig()
	if c.defaults {
		cfg = placement.DefaultConfig()
		cfg.Shards = 64
		cfg.WALSegmentSize = 1 << 20
		cfg.Kinds = testKinds
	}
	cfg.Name = name
	cfg.DataDir = dir
	cfg.Transport = tr
	cfg.Membership = c.mem
	cfg.BootstrapExpect = c.expect
	if c.voters > 0 {
		cfg.MaxVoters = c.voters
	}
	if !c.noForward {
		cfg.Forwarder = &testForwarder{c: c, from: name}
	}
	if c.handoff {
		cfg.Handoff = (*testHandoff)(c)
	}
	if c.tcp {
		cfg.Witnesses = (*testWitnesses)(c)
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	n, err := placement.New(cfg)
	if err != nil {
		c.t.Fatalf("new %s: %v", name, err)
	}
	if err := n.Start(context.Background()); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[name] = n
	c.mu.Unlock()
	c.mem.set(name, placement.PeerAlive)
	return n
}

// stop closes node name and cuts it off (a crash, from the others' view).
func (c *testCluster) stop(name string, st placement.PeerState) {
	c.t.Helper()
	c.partition(name)
	c.mu.Lock()
	n := c.nodes[name]
	delete(c.nodes, name)
	c.mu.Unlock()
	if err := n.Close(context.Background()); err != nil {
		c.t.Errorf("close %s: %v", name, err)
	}
	c.mem.set(name, st)
}

// inmemTransport connects a new in-memory transport for name to the
// others not cut off. Called with c.mu held.
func (c *testCluster) inmemTransport(name string) *raft.InmemTransport {
	_, tr := raft.NewInmemTransport(raft.ServerAddress(name))
	for other, ot := range c.trans {
		if other != name && !c.cut[other] {
			tr.Connect(raft.ServerAddress(other), ot)
			ot.Connect(raft.ServerAddress(name), tr)
		}
	}
	c.trans[name] = tr
	return tr
}

// tcpTransport is a split-heartbeat transport for name on a new loopback
// port; raft addresses are node names, resolved through c.addrs. Called
// with c.mu held.
func (c *testCluster) tcpTransport(name, dir string) raft.Transport {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	c.addrs[name] = ln.Addr().String()
	d := nameDialer{c}
	cfg := testConfig()
	guard := func(sl raft.StreamLayer) raft.StreamLayer { return sl }
	if c.dataIDs {
		id, err := placement.LoadDataID(dir)
		if err != nil {
			c.t.Fatal(err)
		}
		c.mem.mu.Lock()
		c.mem.dataIDs[name] = id
		c.mem.mu.Unlock()
		// The node this transport is for: the one named so when the
		// transport first dials (it goes on while the node closes).
		var self atomic.Pointer[placement.Node]
		expect := func(peer string) string {
			n := self.Load()
			if n == nil {
				if n = c.node(name); n == nil {
					return ""
				}
				self.Store(n)
			}
			return n.DataIDOf(peer)
		}
		guard = func(sl raft.StreamLayer) raft.StreamLayer { return placement.GuardStreamLayer(sl, id, expect, nil) }
	}
	return placement.SplitHeartbeats(
		raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: guard(placement.NewStreamLayer(d, ln, "")), MaxPool: 2, Timeout: 10 * time.Second}),
		raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: guard(placement.HeartbeatStreamLayer(d, ln.Addr(), "")), MaxPool: 2, Timeout: cfg.HeartbeatRPCTimeout()}))
}

// nameDialer dials a node by name at its current loopback address.
type nameDialer struct{ c *testCluster }

func (d nameDialer) Dial(ctx context.Context, peer, _ string) (net.Conn, error) {
	d.c.mu.Lock()
	addr, ok := d.c.addrs[peer]
	d.c.mu.Unlock()
	if !ok {
		addr = peer
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

// testWitnesses asks a live node that is not cut off for its witness.
type testWitnesses testCluster

func (w *testWitnesses) LeaseWitness(_ context.Context, peer string, term uint64) (time.Duration, error) {
	c := (*testCluster)(w)
	c.mu.Lock()
	n, cut := c.nodes[peer], c.cut[peer]
	c.mu.Unlock()
	if n == nil || cut {
		return 0, errors.New("unreachable")
	}
	return n.Witness(term)
}

func (c *testCluster) partition(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut[name] = true
	tr := c.trans[name]
	if tr == nil {
		return // tcp: closing the node closes its transport
	}
	for other, ot := range c.trans {
		if other != name {
			tr.Disconnect(raft.ServerAddress(other))
			ot.Disconnect(raft.ServerAddress(name))
		}
	}
}

func (c *testCluster) heal(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut[name] = false
	tr := c.trans[name]
	if tr == nil {
		return
	}
	for other, ot := range c.trans {
		if other != name && !c.cut[other] {
			tr.Connect(raft.ServerAddress(other), ot)
			ot.Connect(raft.ServerAddress(name), tr)
		}
	}
}

func (c *testCluster) node(name string) *placement.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

func (c *testCluster) live() map[string]*placement.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.nodes)
}

func (c *testCluster) reachable(a, b string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.cut[a] && !c.cut[b] && c.nodes[b] != nil
}

// testForwarder delivers node from's proposals to the leader
// in-process, respecting partitions.
type testForwarder struct {
	c    *testCluster
	from string
}

func (f *testForwarder) Forward(ctx context.Context, leader string, cmd []byte) error {
	for name, n := range f.c.live() {
		if n.IsLeader() && name == leader {
			return n.ApplyForwarded(ctx, f.from, cmd)
		}
	}
	return placement.ErrNotLeader
}

// testHandoff confirms a move once the old owner has applied it (and so
// stopped admitting), like a real state transfer would.
type testHandoff testCluster

func (h *testHandoff) Transfer(ctx context.Context, m placement.Move) error {
	c := (*testCluster)(h)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if from := c.node(m.From); from != nil {
			if s, _ := from.Owner(m.Shard); s.MovingTo == m.To && s.Epoch == m.Epoch {
				return nil
			}
		} else {
			return errors.New("old owner gone")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

// leaders returns the live nodes that believe they lead.
func (c *testCluster) leaders() []string {
	var out []string
	for name, n := range c.live() {
		if n.IsLeader() && !c.isCut(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (c *testCluster) isCut(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[name]
}

// settled reports whether every reachable node has the same fully
// assigned table in which each of want is up and no move is in flight.
func (c *testCluster) settled(want ...string) bool {
	var ref []byte
	for name, n := range c.live() {
		if c.isCut(name) {
			continue
		}
		tb := n.Table()
		if tb.ShardCount == 0 || len(tb.Nodes) != len(want) {
			return false
		}
		for _, w := range want {
			if ni, ok := tb.Nodes[w]; !ok || ni.Status != placement.StatusUp || len(ni.Kinds) == 0 {
				return false // not up, or its kinds are not published yet
			}
		}
		for _, gn := range tb.GroupNames() {
			for i, s := range tb.Groups[gn].Shards {
				if s.Owner == "" || s.MovingTo != "" || s.Owner != placement.Rendezvous(gn, i, want) {
					return false
				}
			}
		}
		b := snapshotBytes(c.t, tb)
		if ref == nil {
			ref = b
		} else if string(ref) != string(b) {
			return false
		}
	}
	return ref != nil
}

// termSampler records which node led in which term, from every node's
// own view, and reports two leaders in one term.
type termSampler struct {
	mu      sync.Mutex
	leaders map[uint64]map[string]bool
	stop    chan struct{}
	done    chan struct{}
}

func sampleTerms(c *testCluster) *termSampler {
	s := &termSampler{leaders: map[uint64]map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			for name, n := range c.live() {
				if n.IsLeader() {
					term := n.Term()
					s.mu.Lock()
					if s.leaders[term] == nil {
						s.leaders[term] = map[string]bool{}
					}
					s.leaders[term][name] = true
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *termSampler) check(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	for term, ls := range s.leaders {
		if len(ls) > 1 {
			t.Errorf("term %d had leaders %v", term, slices.Collect(maps.Keys(ls)))
		}
	}
}

// fenceSampler checks, continuously, that no shard passes the fence on
// two nodes within one sample (a few milliseconds).
type fenceSampler struct {
	mu         sync.Mutex
	violations []string
	okAt       map[string]map[placement.ShardRef]time.Time // last time each node passed
	samples    int
	stop       chan struct{}
	done       chan struct{}
}

func sampleFence(c *testCluster, shards int) *fenceSampler {
	s := &fenceSampler{okAt: map[string]map[placement.ShardRef]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			nodes := c.live()
			for i := 0; i < shards; i++ {
				r := ref(i)
				var ok []string
				for name, n := range nodes {
					now := time.Now()
					if n.Check(r, 0, now) == nil {
						ok = append(ok, name)
						s.mu.Lock()
						if s.okAt[name] == nil {
							s.okAt[name] = map[placement.ShardRef]time.Time{}
						}
						s.okAt[name][r] = now
						s.mu.Unlock()
					}
				}
				if len(ok) > 1 {
					s.mu.Lock()
					s.violations = append(s.violations, fmt.Sprintf("%s served by %v", r, ok))
					s.mu.Unlock()
				}
			}
			s.mu.Lock()
			s.samples++
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *fenceSampler) finish(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	if len(s.violations) > 0 {
		t.Errorf("%d double-ownership samples, first: %v", len(s.violations), s.violations[:min(5, len(s.violations))])
	}
	if s.samples < 10 {
		t.Errorf("only %d fence samples: the check did not run", s.samples)
	}
}

func (s *fenceSampler) lastOK(name string, r placement.ShardRef) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.okAt[name][r]
}

func startAll(c *testCluster, names ...string) {
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() { defer wg.Done(); c.start(n) }()
	}
	wg.Wait()
}

func raftServers(t *testing.T, n *placement.Node) (voters, nonvoters []string) {
	t.Helper()
	f := n.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		} else {
			nonvoters = append(nonvoters, string(s.ID))
		}
	}
	slices.Sort(voters)
	slices.Sort(nonvoters)
	return voters, nonvoters
}

func raftInmem(name string) (raft.ServerAddress, *raft.InmemTransport) {
	return raft.NewInmemTransport(raft.ServerAddress(name))
}

// split cuts every link between group and the other nodes; nodes within
// each side still talk.
func (c *testCluster) split(group ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := map[string]bool{}
	for _, g := range group {
		in[g] = true
	}
	for a, ta := range c.trans {
		for b := range c.trans {
			if in[a] != in[b] {
				ta.Disconnect(raft.ServerAddress(b))
			}
		}
	}
}

// healAll reconnects every pair of live transports.
func (c *testCluster) healAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, ta := range c.trans {
		c.cut[a] = false
		for b, tb := range c.trans {
			if a != b {
				ta.Connect(raft.ServerAddress(b), tb)
			}
		}
	}
}
