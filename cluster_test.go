package tempest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// testCluster runs real nodes on loopback: QUIC with certificates of a
// test CA, memberlist with a gossip key and fast timing, raft in temp dirs.
type testCluster struct {
	t     testing.TB
	ca    *wire.CA
	pool  *x509.CertPool
	key   []byte
	seed  string
	logs  *syncBuffer
	mu    sync.Mutex
	nodes map[string]*tempest.Node
	dirs  map[string]string

	gossip membership.Timing
	place  placement.Config
	// register, when set, registers more kinds on every node started.
	register func(n *tempest.Node)
}

func newBenchCluster(b *testing.B) *testCluster { return newTestCluster(b) }

func newTestCluster(t testing.TB) *testCluster {
	t.Helper()
	ca, err := wire.NewCA("test CA", time.Now().Add(-time.Minute), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	key, err := membership.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, ca: ca, pool: pool, key: key, logs: &syncBuffer{},
		nodes: map[string]*tempest.Node{}, dirs: map[string]string{},
		gossip: gossipTiming(), place: placementTiming()}
	t.Cleanup(c.haltAll)
	return c
}

// haltAll stops every node as a crash would (fast; leaves nothing running).
func (c *testCluster) haltAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[string]*tempest.Node{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = tempest.Halt(context.Background(), n)
		}()
	}
	wg.Wait()
}

// gossipTiming is membership's fast test timing, with probes relaxed for
// a busy machine.
func gossipTiming() membership.Timing {
	g := membership.FastTiming()
	g.ProbeInterval = 500 * time.Millisecond
	g.ProbeTimeout = 400 * time.Millisecond
	g.TCPTimeout = 2 * time.Second
	return g
}

func placementTiming() placement.Config {
	cfg := placement.Config{}
	cfg.Shards = 64
	// Tight enough for quick tests, loose enough that a starved 2-core
	// machine does not flap leadership.
	cfg.HeartbeatTimeout = time.Second
	cfg.ElectionTimeout = time.Second
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
	cfg.CommitTimeout = 10 * time.Millisecond
	cfg.Lease = 1500 * time.Millisecond
	cfg.LeaseMargin = 300 * time.Millisecond
	cfg.DownAfter = 1500 * time.Millisecond
	cfg.DeadVoterGrace = 2 * time.Second
	cfg.ReconcileInterval = 100 * time.Millisecond
	cfg.ApplyTimeout = time.Second
	cfg.MaxMoving = 16
	cfg.WALSegmentSize = 1 << 20
	return cfg
}

// start starts the node name (on its old data dir if it ran before).
func (c *testCluster) start(name string, expect int) *tempest.Node {
	t := c.t
	t.Helper()
	certPEM, keyPEM, err := c.ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	dir, ok := c.dirs[name]
	if !ok {
		dir = t.TempDir()
		c.dirs[name] = dir
	}
	seed := c.seed
	c.mu.Unlock()
	cc := &tempest.ClusterConfig{
		GossipAddr: "127.0.0.1:0", QUICAddr: "127.0.0.1:0",
		BootstrapExpect: expect, GossipKeys: [][]byte{c.key},
		Certificate: cert, CAs: c.pool, Version: "test",
		GossipTiming: c.gossip, Placement: c.place,
		LeaveTimeout: 20 * time.Second,
	}
	if seed != "" {
		cc.Seeds = []string{seed}
	}
	cfg := tempest.Config{Name: name, DataDir: dir, Cluster: cc,
		Logger: slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	cfg.Scheduler.Workers = 2
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if c.register != nil {
		c.register(n)
	}
	if err := n.Start(t.Context()); err != nil {
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

func (c *testCluster) remove(name string) *tempest.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	delete(c.nodes, name)
	return n
}

// live returns the running nodes sorted by name, so that live()[i] is
// the same node from run to run. A test that needs a given node asks
// node(name): an index says nothing about which node it is.
func (c *testCluster) live() []*tempest.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tempest.Node
	for _, n := range c.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *tempest.Node) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// node returns the running node called name; the test fails if there is
// none.
func (c *testCluster) node(name string) *tempest.Node {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[name]
	c.mu.Unlock()
	if n == nil {
		c.t.Fatalf("no running node %s", name)
	}
	return n
}

// waitFor polls cond (a state check, not a sleep for synchronisation)
// until it holds or d passes.
// why, if given, points at the last reason cond reported for failing.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, why ...*string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			reason := ""
			if len(why) > 0 && why[0] != nil {
				reason = ": " + *why[0]
			}
			t.Fatalf("timed out after %v waiting for %s%s", d, what, reason)
		}
		<-tick.C
	}
}

// waitSettled waits for c.settled and says why it did not happen.
func waitSettled(t *testing.T, c *testCluster, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		why := c.unsettled()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", d, what, why)
		}
		<-tick.C
	}
}

// settled: every live node is ready and every shard is owned by a live
// node in every node's table, with no move in progress.
func (c *testCluster) settled() bool { return c.unsettled() == "" }

// unsettled says why the cluster is not settled ("" when it is).
func (c *testCluster) unsettled() string {
	nodes := c.live()
	names := map[string]bool{}
	for _, n := range nodes {
		names[n.Name()] = true
	}
	for _, n := range nodes {
		if !n.Ready() {
			return fmt.Sprintf("%s not ready (leader %q)", n.Name(), n.Leader())
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

// checkSingleActivation reads the activation log of every node (one
// process, one clock) and fails if an identity was ever active on two
// nodes at once.
func checkSingleActivation(t *testing.T, logs string) {
	t.Helper()
	type span struct {
		node string
		from string
	}
	active := map[string]span{} // actor → where it is active
	events := 0
	for _, line := range strings.Split(logs, "\n") {
		var activated bool
		switch {
		case strings.Contains(line, `msg="`+tempest.LogActivated+`"`):
			activated = true
		case strings.Contains(line, `msg="`+tempest.LogDeactivated+`"`):
		default:
			continue
		}
		node, actorName, at := attr(line, tempest.LogKeyNode), attr(line, tempest.LogKeyActor), attr(line, "time")
		events++
		cur, ok := active[actorName]
		switch {
		case activated && ok && cur.node != node:
			t.Errorf("%s activated on %s at %s while active on %s since %s", actorName, node, at, cur.node, cur.from)
		case activated:
			active[actorName] = span{node, at}
		case ok && cur.node == node:
			delete(active, actorName)
		}
	}
	if events == 0 {
		t.Error("no activation log lines")
	}
}

// attr returns the value of key=value in a text log line.
func attr(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		if !strings.HasPrefix(line, key+"=") {
			return ""
		}
	} else {
		line = line[i+1:]
	}
	v := strings.TrimPrefix(line, key+"=")
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

func TestClusterRoutesAndFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t)
	for _, name := range []string{"n1", "n2", "n3"} {
		c.start(name, 3)
	}
	t0 := time.Now()
	waitSettled(t, c, 30*time.Second, "three ready nodes with a settled table")
	t.Logf("settled after %v", time.Since(t0))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.logs.String())
		}
	})

	// Asks to many keys from every node.
	const keys = 48
	ctx := ctxT(t)
	owners := map[string]int{}
	for _, n := range c.live() {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			text := n.Name() + "/" + key
			got, err := n.Ask(ctx, n.Ref(demo.Echo, key), demo.EchoIn{Text: text})
			if err != nil {
				t.Fatalf("%s asks echo/%s: %v", n.Name(), key, err)
			}
			if e, ok := got.(demo.EchoIn); !ok || e.Text != text {
				t.Fatalf("%s asks echo/%s: got %#v", n.Name(), key, got)
			}
			owner, _, _ := n.Locate(n.Ref(demo.Echo, key))
			owners[owner]++
		}
		if n.Stats().Mail.AsksSent == 0 {
			t.Errorf("%s sent no ask over the wire", n.Name())
		}
	}
	if len(owners) != 3 {
		t.Fatalf("keys spread over %v, want all three nodes", owners)
	}

	// Steady asks from the two survivors, then kill the raft leader
	// without a leave: a new leader must be elected before its shards move.
	victimName := c.live()[0].Leader()
	if victimName == "" {
		t.Fatal("no leader")
	}
	var (
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		ok, fails atomic.Int64
		mismatch  atomic.Int64
		late      atomic.Int64
	)
	const deadline = 2 * time.Second
	for _, n := range c.live() {
		if n.Name() == victimName {
			continue
		}
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("k%d", (i*7+w)%keys)
					text := fmt.Sprintf("%s-%d-%d", n.Name(), w, i)
					actx, cancel := context.WithTimeout(context.Background(), deadline)
					start := time.Now()
					got, err := n.Ask(actx, n.Ref(demo.Echo, key), demo.EchoIn{Text: text})
					took := time.Since(start)
					cancel()
					if err != nil {
						fails.Add(1)
						if took > deadline+time.Second {
							late.Add(1)
						}
						continue
					}
					if e, ok2 := got.(demo.EchoIn); !ok2 || e.Text != text {
						mismatch.Add(1)
					}
					ok.Add(1)
				}
			}()
		}
	}
	waitFor(t, 10*time.Second, "steady asks", func() bool { return ok.Load() > 200 })
	victim := c.remove(victimName)
	killed := time.Now()
	if err := tempest.Halt(context.Background(), victim); err != nil {
		t.Logf("halt %s: %v", victimName, err)
	}
	// Its actors answer again on the survivors.
	waitFor(t, 30*time.Second, "every key answering on the survivors", func() bool {
		for _, n := range c.live() {
			for k := range keys {
				actx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				_, err := n.Ask(actx, n.Ref(demo.Echo, fmt.Sprintf("k%d", k)), demo.EchoIn{Text: "probe"})
				cancel()
				if err != nil {
					return false
				}
			}
		}
		return true
	})
	recovery := time.Since(killed)
	before := ok.Load()
	waitFor(t, 10*time.Second, "asks succeeding after recovery", func() bool { return ok.Load() > before+100 })
	close(stop)
	wg.Wait()
	t.Logf("failover: every key answering again %v after killing the leader %s; %d asks ok, %d failed",
		recovery, victimName, ok.Load(), fails.Load())
	for _, n := range c.live() {
		if l := n.Leader(); l == "" || l == victimName {
			t.Errorf("%s follows leader %q after the kill", n.Name(), l)
		}
	}
	if n := mismatch.Load(); n != 0 {
		t.Errorf("%d replies did not match their ask (lost or duplicated)", n)
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d failed asks returned well after their deadline", n)
	}
	for _, n := range c.live() {
		for k := range keys {
			owner, _, err := n.Locate(n.Ref(demo.Echo, fmt.Sprintf("k%d", k)))
			if err != nil || owner == victimName {
				t.Fatalf("%s: k%d owned by %q (%v) after failover", n.Name(), k, owner, err)
			}
		}
	}
	checkSingleActivation(t, c.logs.String())
}

func TestClusterLeaveAndRejoinKeepCounters(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t)
	for _, name := range []string{"n1", "n2", "n3"} {
		c.start(name, 3)
	}
	waitSettled(t, c, 30*time.Second, "three ready nodes with a settled table")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.logs.String())
		}
	})
	// The asker must stay up through the test: it is asked at the end
	// whether n3 owns shards again, and a node that has left answers from
	// the table it had when it closed.
	n1 := c.node("n1")
	const keys = 64
	want := map[string]int64{}
	onN3 := 0
	for k := range keys {
		// A deadline per key and per check below, not one for the whole
		// test: the counter is durable, every add waits for an fsync, and
		// a loaded disk makes those slow.
		ctx := ctxT(t)
		key := fmt.Sprintf("c%d", k)
		for i := range 3 {
			if _, err := n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Add{N: int64(k + i)}); err != nil {
				t.Fatalf("add to %s: %v", key, err)
			}
			want[key] += int64(k + i)
		}
		if owner, _, _ := n1.Locate(n1.Ref(demo.Counter, key)); owner == "n3" {
			onN3++
		}
	}
	if onN3 == 0 {
		t.Fatal("no counter on n3; pick more keys")
	}
	check := func(when string) {
		t.Helper()
		ctx := ctxT(t)
		for _, n := range c.live() {
			for key, v := range want {
				got, err := n.Ask(ctx, n.Ref(demo.Counter, key), demo.Get{})
				if err != nil {
					t.Fatalf("%s: %s gets %s: %v", when, n.Name(), key, err)
				}
				if g := got.(demo.CounterValue).N; g != v {
					t.Fatalf("%s: %s gets %s = %d, want %d", when, n.Name(), key, g, v)
				}
			}
		}
	}

	leaver := c.remove("n3")
	if err := leaver.Close(ctxT(t)); err != nil {
		t.Fatalf("graceful close of n3: %v", err)
	}
	waitSettled(t, c, 30*time.Second, "two nodes owning every shard")
	check("after n3 left")

	c.start("n3", 3)
	why := ""
	waitFor(t, 30*time.Second, "n3 owning shards again", func() bool {
		if why = c.unsettled(); why != "" {
			return false
		}
		owned := 0
		for key := range want {
			o, _, err := n1.Locate(n1.Ref(demo.Counter, key))
			if err != nil {
				why = fmt.Sprintf("n1 locates %s: %v", key, err)
				return false
			}
			if o == "n3" {
				owned++
			}
		}
		if owned == 0 {
			tab := n1.Table()
			why = fmt.Sprintf("n3 owns none of the counters (%d shards); in n1's table: %+v", len(tab.Owned("n3")), tab.Nodes["n3"])
			for _, m := range n1.Members() {
				if m.Name == "n3" {
					why += fmt.Sprintf("; n1 sees n3 %v leaving=%v", m.Status, m.Meta.Leaving)
				}
			}
		}
		return owned > 0
	}, &why)
	check("after n3 rejoined")
	checkSingleActivation(t, c.logs.String())
}

// TestClusterFullRestartThenLeave restarts every node on new addresses
// (raft recovers by node names), checks that persistent counters kept
// their values, then lets a node leave: the actors it holds dormant since
// before the restart move with their shards, found through its shard
// index.
func TestClusterFullRestartThenLeave(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t)
	names := []string{"n1", "n2", "n3"}
	for _, name := range names {
		c.start(name, 3)
	}
	waitSettled(t, c, 30*time.Second, "three ready nodes with a settled table")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.logs.String())
		}
	})
	ctx := ctxT(t)
	const keys = 24
	for k := range keys {
		n := c.live()[k%3]
		if _, err := n.Ask(ctx, n.Ref(demo.Counter, fmt.Sprintf("c%d", k)), demo.Add{N: int64(100 + k)}); err != nil {
			t.Fatal(err)
		}
	}
	// Everything stops at once, as a power cut would (each node still
	// writes what it has at rest locally on the way down).
	c.haltAll()
	c.mu.Lock()
	c.seed = ""
	c.mu.Unlock()
	for _, name := range names {
		c.start(name, 3)
	}
	waitSettled(t, c, 30*time.Second, "the restarted cluster settled")
	check := func(when string) {
		t.Helper()
		for _, n := range c.live() {
			for k := range keys {
				got, err := n.Ask(ctx, n.Ref(demo.Counter, fmt.Sprintf("c%d", k)), demo.Get{})
				if err != nil {
					t.Fatalf("%s: %s gets c%d: %v", when, n.Name(), k, err)
				}
				if g := got.(demo.CounterValue).N; g != int64(100+k) {
					t.Fatalf("%s: %s gets c%d = %d, want %d", when, n.Name(), k, g, 100+k)
				}
			}
		}
	}
	// n2's actors are dormant since before the restart: only its shard
	// index knows them.
	if err := c.remove("n2").Close(ctx); err != nil {
		t.Fatalf("graceful close of n2: %v", err)
	}
	waitSettled(t, c, 30*time.Second, "two nodes owning every shard")
	check("after n2 left")
	checkSingleActivation(t, c.logs.String())
}

// TestClusterOfOne: a single node with BootstrapExpect 1 serves, and its
// graceful Close does not wait for a handoff nobody can take.
func TestClusterOfOne(t *testing.T) {
	c := newTestCluster(t)
	n := c.start("solo", 1)
	waitSettled(t, c, 30*time.Second, "a ready node")
	ctx := ctxT(t)
	if got, err := n.AskJSON(ctx, demo.Counter, "x", []byte(`{"Add":{"n":5}}`)); err != nil || string(got) != `{"n":5}` {
		t.Fatalf("AskJSON: %s, %v", got, err)
	}
	if st, err := n.Status(ctx, n.Ref(demo.Counter, "x")); err != nil || st.Node != "solo" || st.State != actor.Valid {
		t.Fatalf("status %+v, %v", st, err)
	}
	if s := n.Stats(); !s.Leader || s.Members != 1 {
		t.Fatalf("stats: leader %v, members %d", s.Leader, s.Members)
	}
	if ps, ok := n.PlacementStatus(); !ok || ps.Leader != "solo" || !ps.LeaseFresh || ps.ShardsOwned != 64 {
		t.Fatalf("placement status %+v, %v", ps, ok)
	}
	for _, m := range n.Members() {
		if m.Name == "solo" && m.Meta.QUICAddr == "" {
			t.Errorf("no QUIC address in the metadata: %+v", m.Meta)
		}
	}
	start := time.Now()
	if err := c.remove("solo").Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("close of the last node took %v", d)
	}
	// Every component tags its lines with the node once, not once per
	// layer the logger went through.
	logs := c.logs.String()
	if !strings.Contains(logs, "gossip listening") {
		t.Fatalf("no membership line in the logs:\n%s", logs)
	}
	for line := range strings.Lines(logs) {
		if n := strings.Count(line, " node="); n != 1 {
			t.Errorf("%d node attributes in %q", n, line)
		}
	}
}

// TestClusterPartitionedNodeStopsServing cuts one node off the network
// while it keeps running: it must stop serving its shards within its
// lease, the others take them over only after that, and the activation
// logs never show an identity active on two nodes at once.
func TestClusterPartitionedNodeStopsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t)
	for _, name := range []string{"n1", "n2", "n3"} {
		c.start(name, 3)
	}
	waitSettled(t, c, 30*time.Second, "three ready nodes with a settled table")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.logs.String())
		}
	})
	ctx := ctxT(t)
	var n3 *tempest.Node
	for _, n := range c.live() {
		if n.Name() == "n3" {
			n3 = n
		}
	}
	const keys = 48
	var mine []string // keys n3 owns
	for k := range keys {
		key := fmt.Sprintf("p%d", k)
		if _, err := n3.Ask(ctx, n3.Ref(demo.Counter, key), demo.Add{N: 1}); err != nil {
			t.Fatal(err)
		}
		if owner, _, _ := n3.Locate(n3.Ref(demo.Counter, key)); owner == "n3" {
			mine = append(mine, key)
		}
	}
	if len(mine) == 0 {
		t.Fatal("n3 owns none of the keys")
	}

	isolated := time.Now()
	tempest.Isolate(n3)
	// n3 keeps being asked locally; it must refuse within its lease.
	lease := placementTiming().Lease
	var stopped time.Duration
	waitFor(t, 10*time.Second, "the isolated node refusing its own shard", func() bool {
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := n3.Ask(actx, n3.Ref(demo.Counter, mine[0]), demo.Get{})
		if errors.Is(err, actor.ErrProcessUnavailable) {
			stopped = time.Since(isolated)
			return true
		}
		return false
	})
	if stopped > lease+2*time.Second {
		t.Errorf("isolated node served %v after the cut, lease %v", stopped, lease)
	}
	c.remove("n3")
	defer tempest.Halt(context.Background(), n3)
	tookOver := time.Now()
	for _, n := range c.live() {
		waitFor(t, 30*time.Second, "survivors answering for the isolated node's keys", func() bool {
			for _, key := range mine {
				actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, err := n.Ask(actx, n.Ref(demo.Counter, key), demo.Get{})
				cancel()
				if err != nil {
					return false
				}
			}
			return true
		})
	}
	t.Logf("isolated node refused after %v; survivors answered for all its keys %v after the cut", stopped, time.Since(isolated))
	_ = tookOver
	waitFor(t, 10*time.Second, "the isolated node's activations passivated", func() bool {
		return n3.Stats().Supervisor.Active == 0
	})
	checkSingleActivation(t, c.logs.String())
}

// TestClusterOfFive: five nodes with BootstrapExpect 3 form one cluster
// (one leader, every node owning shards) and route from every node.
func TestClusterOfFive(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t)
	for i := range 5 {
		c.start(fmt.Sprintf("n%d", i+1), 3)
	}
	waitSettled(t, c, 60*time.Second, "five ready nodes with a settled table")
	waitFor(t, 30*time.Second, "every node owning shards under one leader", func() bool {
		leader := ""
		for _, n := range c.live() {
			ps, _ := n.PlacementStatus()
			if ps.ShardsOwned == 0 || ps.Leader == "" || (leader != "" && ps.Leader != leader) {
				return false
			}
			leader = ps.Leader
		}
		return c.settled()
	})
	ctx := ctxT(t)
	for _, n := range c.live() {
		for k := range 20 {
			key := fmt.Sprintf("f%d", k)
			got, err := n.Ask(ctx, n.Ref(demo.Echo, key), demo.EchoIn{Text: key})
			if err != nil || got.(demo.EchoIn).Text != key {
				t.Fatalf("%s asks %s: %v, %v", n.Name(), key, got, err)
			}
		}
	}
	why := ""
	waitFor(t, 10*time.Second, "three voters", func() bool {
		voters := 0
		for _, n := range c.live() {
			if ps, _ := n.PlacementStatus(); ps.Voter {
				voters++
			}
		}
		why = fmt.Sprintf("%d voters", voters)
		return voters == 3
	}, &why)
}

// TestLocateAfterCloseIsErrClosed: a closed node no longer follows the
// cluster, so it must not answer where an actor lives from the table it
// had when it closed (a test that asked a departed node that way waited
// for a change it could never see).
func TestLocateAfterCloseIsErrClosed(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ref := n.Ref(demo.Counter, "c1")
	if owner, _, err := n.Locate(ref); err != nil || owner != n.Name() {
		t.Fatalf("running node locates %v: %q, %v", ref, owner, err)
	}
	if err := n.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if owner, _, err := n.Locate(ref); !errors.Is(err, tempest.ErrClosed) {
		t.Fatalf("closed node locates %v: %q, %v; want ErrClosed", ref, owner, err)
	}
}
