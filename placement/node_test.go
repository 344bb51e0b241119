package placement_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
)

func TestBootstrapExpect(t *testing.T) {
	for _, tc := range []struct{ n, expect, voters int }{{3, 3, 3}, {5, 3, 3}, {5, 5, 5}} {
		t.Run(fmt.Sprintf("nodes=%d,expect=%d", tc.n, tc.expect), func(t *testing.T) {
			c := newTestCluster(t, tc.expect)
			c.voters = tc.voters
			var names []string
			for i := tc.n - 1; i >= 0; i-- { // highest names first: they must not bootstrap
				names = append(names, fmt.Sprintf("n%d", i))
			}
			terms := sampleTerms(c)
			startAll(c, names...)
			slices.Sort(names)
			waitFor(t, 30*time.Second, "one settled table", func() bool { return c.settled(names...) })
			terms.check(t)
			ls := c.leaders()
			if len(ls) != 1 {
				t.Fatalf("leaders %v", ls)
			}
			leader := c.node(ls[0])
			waitFor(t, 10*time.Second, "voters", func() bool {
				v, nv := raftServers(t, leader)
				return len(v) == tc.voters && len(v)+len(nv) == tc.n
			})
			// Exactly one cluster: every node follows the same leader.
			for name, n := range c.live() {
				if n.Leader() != ls[0] {
					t.Errorf("%s follows %q, not %s", name, n.Leader(), ls[0])
				}
			}
		})
	}
}

func TestNewcomerWithLowestNameJoins(t *testing.T) {
	c := newTestCluster(t, 3)
	names := []string{"b", "c", "d"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	leader := c.leaders()[0]
	a := c.start("a") // sorts lowest, no state, same bootstrap-expect
	all := []string{"a", "b", "c", "d"}
	waitFor(t, 30*time.Second, "settled with the newcomer", func() bool { return c.settled(all...) })
	if got := a.Leader(); got != c.leaders()[0] || c.leaders()[0] != leader {
		t.Fatalf("newcomer follows %q; leader was %s, is %v", got, leader, c.leaders())
	}
	if len(a.Table().Owned("a")) == 0 {
		t.Fatal("newcomer received no shards")
	}
}

func TestRestartAndFullClusterRestart(t *testing.T) {
	c := newTestCluster(t, 3)
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })

	// Snapshot on a follower, then restart it: it restores and catches up.
	var follower string
	for name, n := range c.live() {
		if !n.IsLeader() {
			follower = name
		}
	}
	if err := c.node(follower).Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	before := c.node(follower).Table()
	c.stop(follower, placement.PeerFailed)
	n := c.start(follower)
	if got := n.Table(); got.Version < before.Version || got.ShardCount != before.ShardCount {
		// Restored from its own snapshot (and log) before hearing any leader.
		waitFor(t, 5*time.Second, "restored table", func() bool { return n.Table().Version >= before.Version })
	}
	waitFor(t, 30*time.Second, "settled after restart", func() bool { return c.settled(names...) })

	// Full restart: everyone stops, everyone comes back from disk.
	owners := c.node("a").Table()
	for _, name := range names {
		c.stop(name, placement.PeerFailed)
	}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled after full restart", func() bool { return c.settled(names...) })
	after := c.node("a").Table()
	for i := 0; i < after.ShardCount; i++ {
		a, _ := owners.Shard(ref(i))
		b, _ := after.Shard(ref(i))
		if a.Owner != b.Owner {
			t.Fatalf("shard %d moved %s→%s across a full restart", i, a.Owner, b.Owner)
		}
	}
}

func TestLeaderKill(t *testing.T) {
	c := newTestCluster(t, 3)
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	terms := sampleTerms(c)
	old := c.leaders()[0]
	oldTerm := c.node(old).Term()
	killedAt := time.Now()
	c.stop(old, placement.PeerFailed)
	var rest []string
	for _, n := range names {
		if n != old {
			rest = append(rest, n)
		}
	}
	waitFor(t, 30*time.Second, "new leader", func() bool { return len(c.leaders()) == 1 })
	if nl := c.leaders()[0]; c.node(nl).Term() <= oldTerm {
		t.Fatalf("new leader %s at term %d, old term %d", nl, c.node(nl).Term(), oldTerm)
	}
	waitFor(t, 30*time.Second, "old leader's shards on survivors", func() bool {
		for _, n := range c.live() {
			if len(n.Table().Owned(old)) > 0 {
				return false
			}
		}
		return true
	})
	// Its actors answer again: each shard passes the fence on a survivor.
	waitFor(t, 10*time.Second, "every shard served", func() bool {
		for i := 0; i < 64; i++ {
			served := false
			for _, n := range c.live() {
				if n.Check(ref(i), 0, time.Now()) == nil {
					served = true
				}
			}
			if !served {
				return false
			}
		}
		return true
	})
	t.Logf("leader kill → every shard served again: %s (fence delay %s)", time.Since(killedAt), fence(testConfig()))
	terms.check(t)
}

func TestDeadVoterReplaced(t *testing.T) {
	c := newTestCluster(t, 3)
	names := []string{"a", "b", "c", "d"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	leader := c.leaders()[0]
	waitFor(t, 10*time.Second, "3 voters + 1 non-voter", func() bool {
		v, nv := raftServers(t, c.node(leader))
		return len(v) == 3 && len(nv) == 1
	})
	v, nv := raftServers(t, c.node(leader))
	var victim string
	for _, x := range v {
		if x != leader {
			victim = x
			break
		}
	}
	c.stop(victim, placement.PeerFailed)
	waitFor(t, 30*time.Second, "dead voter replaced by the non-voter", func() bool {
		l := c.leaders()
		if len(l) != 1 {
			return false
		}
		v2, nv2 := raftServers(t, c.node(l[0]))
		return len(v2) == 3 && !slices.Contains(v2, victim) && slices.Contains(v2, nv[0]) && len(nv2) == 0
	})
}

func TestPartitionedLeaderFencing(t *testing.T) {
	t.Run("forwarder", func(t *testing.T) { testPartitionedLeaderFencing(t, false) })
	t.Run("gossip-sync", func(t *testing.T) { testPartitionedLeaderFencing(t, true) })
}

func testPartitionedLeaderFencing(t *testing.T, noForward bool) {
	c := newTestCluster(t, 3)
	if noForward {
		c.noForward = true
		c.mem.syncOf = func(name string) string {
			if n := c.node(name); n != nil {
				return n.PendingSync()
			}
			return ""
		}
	}
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	cfg := testConfig()
	terms := sampleTerms(c)
	fs := sampleFence(c, 64)
	old := c.leaders()[0]
	owned := c.node(old).Table().Owned(old)
	if len(owned) == 0 {
		t.Fatal("old leader owns nothing")
	}
	cutAt := time.Now()
	c.partition(old)
	c.mem.set(old, placement.PeerFailed)

	// The isolated old leader stops serving within its lease (plus the
	// time raft takes to depose it, which the lease anchor accounts for).
	waitFor(t, 10*time.Second, "old leader stops serving", func() bool {
		for _, r := range owned {
			if c.node(old).Check(r, 0, time.Now()) == nil {
				return false
			}
		}
		return true
	})
	if stopped := time.Since(cutAt); stopped > cfg.Lease+cfg.LeaseMargin+2*cfg.HeartbeatTimeout {
		t.Errorf("old leader kept serving %s after the cut", stopped)
	}
	// The majority reassigns, and the new owners serve.
	waitFor(t, 30*time.Second, "new owners serve", func() bool {
		for _, r := range owned {
			served := false
			for name, n := range c.live() {
				if name != old && n.Check(r, 0, time.Now()) == nil {
					served = true
				}
			}
			if !served {
				return false
			}
		}
		return true
	})
	// The old owner's last successful check came within its lease of the
	// cut (its anchor cannot be later than its last quorum contact).
	for _, r := range owned {
		if last := fs.lastOK(old, r); last.After(cutAt.Add(cfg.Lease + cfg.LeaseMargin)) {
			t.Errorf("%s: old leader served until %s after the cut", r, last.Sub(cutAt))
		}
	}
	// Heal: the old leader rejoins as a follower and converges.
	c.heal(old)
	c.mem.set(old, placement.PeerAlive)
	waitFor(t, 30*time.Second, "settled after heal", func() bool { return c.settled(names...) })
	fs.finish(t)
	terms.check(t)
}

func TestNodeDownReassignedOnlyAfterFence(t *testing.T) {
	c := newTestCluster(t, 3)
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	cfg := testConfig()
	leader := c.leaders()[0]
	var victim string
	for _, n := range names {
		if n != leader {
			victim = n
		}
	}
	if len(c.node(leader).Table().Owned(victim)) == 0 {
		t.Fatal("victim owns nothing")
	}
	fs := sampleFence(c, 64)
	c.stop(victim, placement.PeerFailed)
	ln := c.node(leader)
	var downAt, movedAt time.Time
	waitFor(t, 30*time.Second, "victim's shards reassigned", func() bool {
		tb := ln.Table()
		if downAt.IsZero() && tb.Nodes[victim].Status == placement.StatusDown {
			downAt = time.Now()
		}
		if !downAt.IsZero() && len(tb.Owned(victim)) == 0 {
			movedAt = time.Now()
			return true
		}
		return false
	})
	// Polling (and a busy scheduler) can make downAt late; allow 300 ms of
	// that. Without the fence the shards would move within one reconcile
	// period (100 ms) of the down mark.
	if gap := movedAt.Sub(downAt); gap < fence(cfg)-300*time.Millisecond {
		t.Fatalf("reassigned %s after the down mark, fence delay is %s", gap, fence(cfg))
	}
	fs.finish(t)

	// The victim stays in the table, down, its fence long over: the
	// leader's loop waits for its next reason to step (the reconcile
	// period, 100 ms, or an event), not for that past deadline, which
	// once woke it every millisecond.
	var reads atomic.Int64
	ln.FSM().ObserveReads(func() { reads.Add(1) })
	defer ln.FSM().ObserveReads(nil)
	time.Sleep(time.Second) // measuring a rate over an interval
	t.Logf("%d table reads in a second", reads.Load())
	if n := reads.Load(); n > 200 {
		t.Fatalf("%d table reads in a second with a node down and nothing to do: the leader's loop spins", n)
	}
}

func TestGracefulLeaveAndRejoin(t *testing.T) {
	c := newTestCluster(t, 3)
	c.handoff = true
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	fs := sampleFence(c, 64)
	// Leave a follower (forwarded) and then the leader's successor test
	// below covers leadership transfer.
	leaver := "c"
	if c.node(leaver).IsLeader() {
		leaver = "b"
	}
	epochs := map[placement.ShardRef]uint64{}
	for _, r := range c.node(leaver).Table().Owned(leaver) {
		s, _ := c.node(leaver).Owner(r)
		epochs[r] = s.Epoch
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.node(leaver).Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	// With a confirming Handoff the moves do not wait out the fence delay
	// one batch after another.
	t.Logf("drained %d shards in %s", len(epochs), time.Since(start))
	tb := c.node(leaver).Table()
	for r, e := range epochs {
		s, _ := tb.Shard(r)
		if s.Owner == leaver || s.Epoch != e+1 {
			t.Fatalf("%s: %+v after leave (epoch was %d)", r, s, e)
		}
	}
	c.stop(leaver, placement.PeerLeft)
	var rest []string
	for _, n := range names {
		if n != leaver {
			rest = append(rest, n)
		}
	}
	waitFor(t, 30*time.Second, "leaver removed", func() bool {
		if !c.settled(rest...) {
			return false
		}
		v, nv := raftServers(t, c.node(c.leaders()[0]))
		return !slices.Contains(v, leaver) && !slices.Contains(nv, leaver)
	})
	// Rejoin with the same name and its old data: shards flow back.
	c.start(leaver)
	waitFor(t, 30*time.Second, "settled after rejoin", func() bool { return c.settled(names...) })
	fs.finish(t)
}

func TestLeaderLeaveTransfersLeadership(t *testing.T) {
	c := newTestCluster(t, 3)
	c.handoff = true
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	old := c.leaders()[0]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.node(old).Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	waitFor(t, 10*time.Second, "another leader", func() bool {
		ls := c.leaders()
		return len(ls) == 1 && ls[0] != old
	})
	if n := len(c.node(old).Table().Owned(old)); n != 0 {
		t.Fatalf("leader left owning %d shards", n)
	}
}

func TestProposeOnFollowerWithoutForwarder(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.start("solo")
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled("solo") })
	if _, err := n.Propose(t.Context(), placement.Command{Op: placement.OpInit, Shards: 3}); err != nil {
		t.Fatalf("propose on leader: %v", err)
	}
	if err := n.ApplyForwarded(t.Context(), "solo", []byte{1, '{'}); !errors.Is(err, placement.ErrBadCommand) {
		t.Fatalf("bad forwarded command: %v", err)
	}
	if loc, err := n.Locate(tk, "x"); err != nil || loc.Owner != "solo" {
		t.Fatalf("locate: %+v %v", loc, err)
	}
	waitFor(t, 10*time.Second, "lease", func() bool { return n.Status().LeaseFresh })
	if st := n.Status(); st.RaftState != "Leader" || !st.Voter || st.ShardsOwned != 64 || st.Leader != "solo" {
		t.Fatalf("status %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := testConfig()
	if err := cfg.Validate(); !errors.Is(err, placement.ErrBadConfig) {
		t.Fatalf("missing name: %v", err)
	}
	cfg.Name, cfg.DataDir, cfg.Membership = "x", t.TempDir(), newFakeMembership()
	_, cfg.Transport = raftInmem("x")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.Lease = cfg.HeartbeatTimeout / 2
	if err := bad.Validate(); !errors.Is(err, placement.ErrBadConfig) {
		t.Fatalf("short lease: %v", err)
	}
}

func TestPartitionLeaderPlusOne(t *testing.T) {
	c := newTestCluster(t, 5)
	c.voters = 5
	names := []string{"a", "b", "c", "d", "e"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	terms := sampleTerms(c)
	fs := sampleFence(c, 64)
	old := c.leaders()[0]
	minority := []string{old}
	for _, n := range names {
		if n != old && len(minority) < 2 {
			minority = append(minority, n)
		}
	}
	c.split(minority...)
	for _, m := range minority {
		c.mem.set(m, placement.PeerFailed)
	}
	// The majority elects a leader and takes over the minority's shards.
	waitFor(t, 30*time.Second, "majority serves every shard", func() bool {
		for i := 0; i < 64; i++ {
			ok := false
			for name, n := range c.live() {
				if !slices.Contains(minority, name) && n.Check(ref(i), 0, time.Now()) == nil {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
	for _, m := range minority {
		for i := 0; i < 64; i++ {
			if err := c.node(m).Check(ref(i), 0, time.Now()); err == nil {
				t.Fatalf("minority node %s still serves shard %d", m, i)
			}
		}
	}
	c.healAll()
	for _, m := range minority {
		c.mem.set(m, placement.PeerAlive)
	}
	waitFor(t, 30*time.Second, "equal placement state after heal", func() bool { return c.settled(names...) })
	fs.finish(t)
	terms.check(t)
}
