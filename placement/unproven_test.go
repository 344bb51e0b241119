package placement_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
)

// A peer gossip lists but that never proved its name is no candidate for
// anything: not a raft server, not a bootstrap voter.
func TestUnprovenPeerPlansNothing(t *testing.T) {
	now := time.Unix(1000, 0)
	peers := []placement.Peer{{Name: "a", State: placement.PeerAlive}, {Name: "b", State: placement.PeerAlive},
		{Name: "r", State: placement.PeerUnproven}}
	got := placement.PlanVoters(placement.VoterInput{Self: "a", MaxVoters: 3, Grace: time.Second, Now: now,
		Servers: []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}},
		Peers:   peers, DeadSince: func(string) (time.Time, bool) { return time.Time{}, false }})
	if len(got) != 0 {
		t.Fatalf("plan %v with an unproven peer, want none", got)
	}
	// An unproven raft server is missing: it is removed after the grace.
	got = placement.PlanVoters(placement.VoterInput{Self: "a", MaxVoters: 3, Grace: time.Second, Now: now,
		Servers: []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "r"}},
		Peers:   peers, DeadSince: func(string) (time.Time, bool) { return now.Add(-2 * time.Second), true }})
	if want := fmt.Sprint([]placement.ConfigChange{{Op: placement.RemoveServer, ID: "r"}}); fmt.Sprint(got) != want {
		t.Fatalf("plan %v, want %s", got, want)
	}
	// "a" sorts lowest, but with "r" not counted two alive peers are
	// fewer than three expected.
	if voters, ok := placement.BootstrapDecision("a", 3, peers, false); ok {
		t.Fatalf("bootstrapped with %v", voters)
	}
}

// On real raft: an unproven peer never enters the table or the raft
// configuration, while a proven newcomer does.
func TestUnprovenPeerStaysOutOfTableAndRaft(t *testing.T) {
	c := newTestCluster(t, 3)
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	c.mem.set("r", placement.PeerUnproven)
	// A proven node joining after it is the barrier: once it is in the
	// table and raft, the leader has planned with r in view.
	c.start("d")
	all := []string{"a", "b", "c", "d"}
	waitFor(t, 30*time.Second, "settled with d", func() bool { return c.settled(all...) })
	leader := c.node(c.leaders()[0])
	waitFor(t, 10*time.Second, "d in raft", func() bool {
		v, nv := raftServers(t, leader)
		return slices.Contains(append(v, nv...), "d")
	})
	v, nv := raftServers(t, leader)
	if slices.Contains(append(v, nv...), "r") {
		t.Errorf("r is a raft server: voters %v, non-voters %v", v, nv)
	}
	for name, n := range c.live() {
		if _, ok := n.Table().Nodes["r"]; ok {
			t.Errorf("%s: r is in the table", name)
		}
	}
}
