package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/tempesttest"
)

// demoCluster starts a tempesttest cluster whose nodes host the demo
// kinds, and whatever opts.Register adds, on the UDP socket a production
// node has (Unpausable): the tests below exercise the production mail
// path.
func demoCluster(t testing.TB, opts tempesttest.Options) *tempesttest.Cluster {
	t.Helper()
	extra := opts.Register
	opts.Register = func(n *tempest.Node) error {
		if err := demo.Register(n, demo.Options{}); err != nil {
			return err
		}
		if extra != nil {
			return extra(n)
		}
		return nil
	}
	opts.Unpausable = true
	return tempesttest.New(t, opts)
}

// checkSingleActivation fails the test if the cluster's history shows an
// identity active on two nodes at once.
func checkSingleActivation(t *testing.T, c *tempesttest.Cluster) {
	t.Helper()
	if err := c.SingleActivation(); err != nil {
		t.Error(err)
	}
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
	t0 := time.Now()
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	t.Logf("settled after %v", time.Since(t0))

	// Asks to many keys from every node.
	const keys = 48
	ctx := ctxT(t)
	owners := map[string]int{}
	for _, n := range c.Nodes() {
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
	victimName := c.Nodes()[0].Leader()
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
	for _, n := range c.Nodes() {
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
	killed := time.Now()
	c.Kill(victimName)
	// Its actors answer again on the survivors.
	waitFor(t, 30*time.Second, "every key answering on the survivors", func() bool {
		for _, n := range c.Nodes() {
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
	for _, n := range c.Nodes() {
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
	for _, n := range c.Nodes() {
		for k := range keys {
			owner, _, err := n.Locate(n.Ref(demo.Echo, fmt.Sprintf("k%d", k)))
			if err != nil || owner == victimName {
				t.Fatalf("%s: k%d owned by %q (%v) after failover", n.Name(), k, owner, err)
			}
		}
	}
	checkSingleActivation(t, c)
}

func TestClusterLeaveAndRejoinKeepCounters(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	// The asker must stay up through the test: it is asked at the end
	// whether n3 owns shards again, and a node that has left answers from
	// the table it had when it closed.
	n1 := c.Node("n1")
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
		for _, n := range c.Nodes() {
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

	if err := c.Close("n3"); err != nil {
		t.Fatalf("graceful close of n3: %v", err)
	}
	c.WaitSettled()
	check("after n3 left")

	c.Start("n3")
	why := ""
	waitFor(t, 30*time.Second, "n3 owning shards again", func() bool {
		if why = c.Unsettled(); why != "" {
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
	checkSingleActivation(t, c)
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
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	names := []string{"n1", "n2", "n3"}
	ctx := ctxT(t)
	const keys = 24
	for k := range keys {
		n := c.Nodes()[k%3]
		if _, err := n.Ask(ctx, n.Ref(demo.Counter, fmt.Sprintf("c%d", k)), demo.Add{N: int64(100 + k)}); err != nil {
			t.Fatal(err)
		}
	}
	// Everything stops at once, as a power cut would (each node still
	// writes what it has at rest locally on the way down).
	c.KillAll()
	for _, name := range names {
		c.Start(name)
	}
	c.WaitSettled()
	check := func(when string) {
		t.Helper()
		ctx := ctxT(t) // a deadline per check, not one across the restart
		for _, n := range c.Nodes() {
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
	if err := c.Close("n2"); err != nil {
		t.Fatalf("graceful close of n2: %v", err)
	}
	c.WaitSettled()
	check("after n2 left")
	checkSingleActivation(t, c)
}

// TestClusterOfOne: a single node with BootstrapExpect 1 serves, and its
// graceful Close does not wait for a handoff nobody can take.
func TestClusterOfOne(t *testing.T) {
	c := demoCluster(t, tempesttest.Options{Nodes: 1})
	n := c.Node("n1")
	ctx := ctxT(t)
	if got, err := n.AskJSON(ctx, demo.Counter, "x", []byte(`{"Add":{"n":5}}`)); err != nil || string(got) != `{"n":5}` {
		t.Fatalf("AskJSON: %s, %v", got, err)
	}
	if st, err := n.Status(ctx, n.Ref(demo.Counter, "x")); err != nil || st.Node != n.Name() || st.State != actor.Valid {
		t.Fatalf("status %+v, %v", st, err)
	}
	if s := n.Stats(); !s.Leader || s.Members != 1 {
		t.Fatalf("stats: leader %v, members %d", s.Leader, s.Members)
	}
	if ps, ok := n.PlacementStatus(); !ok || ps.Leader != n.Name() || !ps.LeaseFresh || ps.ShardsOwned != 64*len(n.Kinds()) { // 64 shards per kind
		t.Fatalf("placement status %+v, %v", ps, ok)
	}
	for _, m := range n.Members() {
		if m.Name == n.Name() && m.Meta.QUICAddr == "" {
			t.Errorf("no QUIC address in the metadata: %+v", m.Meta)
		}
	}
	start := time.Now()
	if err := c.Close(n.Name()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("close of the last node took %v", d)
	}
	// Every component tags its lines with the node once, not once per
	// layer the logger went through.
	logs := c.Logs()
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
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	ctx := ctxT(t)
	n3 := c.Node("n3")
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
	c.Partition("n3")
	// n3 keeps being asked locally; it must refuse within its lease.
	_, place := tempesttest.FastTiming()
	lease := place.Lease
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
	// n3 is no longer among c.Nodes(): the survivors.
	for _, n := range c.Nodes() {
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
	waitFor(t, 10*time.Second, "the isolated node's activations passivated", func() bool {
		return n3.Stats().Supervisor.Active == 0
	})
	checkSingleActivation(t, c)
}

// TestClusterOfFive: five nodes with BootstrapExpect 3 form one cluster
// (one leader, every node owning shards) and route from every node.
func TestClusterOfFive(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 5, BootstrapExpect: 3})
	waitFor(t, 30*time.Second, "every node owning shards under one leader", func() bool {
		leader := ""
		for _, n := range c.Nodes() {
			ps, _ := n.PlacementStatus()
			if ps.ShardsOwned == 0 || ps.Leader == "" || (leader != "" && ps.Leader != leader) {
				return false
			}
			leader = ps.Leader
		}
		return c.Unsettled() == ""
	})
	ctx := ctxT(t)
	for _, n := range c.Nodes() {
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
		for _, n := range c.Nodes() {
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

// TestReadinessNamesTheStep: a cluster node whose seeds do not answer is
// not ready, and says why with the node's own *NotReadyError (the step:
// "not joined"), also through WaitReady once its context ends.
func TestReadinessNamesTheStep(t *testing.T) {
	c := demoCluster(t, tempesttest.Options{Nodes: 1})
	cfg := c.Config("lonely")
	cfg.Cluster.Seeds = []string{"127.0.0.1:1"} // nobody gossips there
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctxT(t))
	var nr *tempest.NotReadyError
	if err := n.Readiness(); !errors.As(err, &nr) || nr.Node != "lonely" || nr.Reason != "not joined" {
		t.Fatalf("Readiness of a node whose seeds do not answer: %v, want a *NotReadyError for lonely, not joined", err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	if err := n.WaitReady(ctx); !errors.As(err, &nr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady: %v, want the deadline and a *NotReadyError", err)
	}
}

// TestWholeClusterShutdownDoesNotWaitForADrain: every node of a cluster
// stopped at once (docker compose down, a rolling restart gone wrong)
// has nobody to hand its shards to once the others are draining too.
// Each Shutdown returns nil instead of waiting out its leave timeout and
// failing with ErrHandoffIncomplete (every node did, 20 s after the
// signal, before placement.ErrNoDrainTarget), and after a restart of
// all three every counter has its value.
func TestWholeClusterShutdownDoesNotWaitForADrain(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3, BootstrapExpect: 3})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n1 := c.Node("n1")
	const keys = 12
	for k := range keys {
		if _, err := n1.AskJSON(ctx, demo.Counter, fmt.Sprintf("k%d", k), []byte(fmt.Sprintf(`{"Add":{"n":%d}}`, k+1))); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"n1", "n2", "n3"}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		n := c.Node(name)
		wg.Go(func() { errs[i] = n.Shutdown(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Shutdown of %s with the whole cluster stopping: %v", names[i], err)
		}
	}
	for _, name := range names {
		c.Restart(name)
	}
	c.WaitSettled()
	n1 = c.Node("n1")
	for k := range keys {
		got, err := n1.AskJSON(ctx, demo.Counter, fmt.Sprintf("k%d", k), []byte(`{"Get":null}`))
		if want := fmt.Sprintf(`{"n":%d}`, k+1); err != nil || string(got) != want {
			t.Errorf("k%d after the restart: %s, %v; want %s", k, got, err, want)
		}
	}
}
