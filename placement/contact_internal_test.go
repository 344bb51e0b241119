package placement

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestNoteContactAcrossRejoin replays what the leader observes when a
// node leaves and comes back under the same name: its replication is
// stopped when it is removed, a heartbeat still in flight fails after the
// removal, and the new replication started when it is added again never
// reports that heartbeats resumed (it never saw them fail). The returning
// node must not stay "failing": reconcileNodes would keep it down.
func TestNoteContactAcrossRejoin(t *testing.T) {
	n := &Node{clock: SystemClock{}, failing: map[string]time.Time{}}
	conf := map[raft.ServerID]bool{"n1": true, "n2": true, "n3": true}
	inConfig := func(id raft.ServerID) bool { return conf[id] }
	failed := func(id raft.ServerID) raft.Observation {
		return raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: id, LastContact: time.Now().Add(-time.Second)}}
	}
	peer := func(id raft.ServerID, removed bool) raft.Observation {
		return raft.Observation{Data: raft.PeerObservation{Peer: raft.Server{ID: id, Address: raft.ServerAddress(id)}, Removed: removed}}
	}
	isFailing := func(name string) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		_, ok := n.failing[name]
		return ok
	}

	// A member of the configuration that stops answering is failing.
	n.noteContact(failed("n2"), inConfig)
	if !isFailing("n2") {
		t.Fatal("a failed heartbeat to a configured peer was not recorded")
	}
	n.noteContact(raft.Observation{Data: raft.ResumedHeartbeatObservation{PeerID: "n2"}}, inConfig)
	if isFailing("n2") {
		t.Fatal("resumed heartbeats did not clear the failure")
	}

	// n3 leaves: removed from the configuration, its replication stops,
	// then its last heartbeat fails.
	delete(conf, "n3")
	n.noteContact(peer("n3", true), inConfig)
	n.noteContact(failed("n3"), inConfig)
	if isFailing("n3") {
		t.Fatal("a heartbeat failing after n3 was removed counts against its next incarnation")
	}

	// A failure recorded before the removal is forgotten with the
	// replication that saw it.
	conf["n3"] = true
	n.noteContact(failed("n3"), inConfig)
	delete(conf, "n3")
	n.noteContact(peer("n3", true), inConfig)
	if isFailing("n3") {
		t.Fatal("stopping n3's replication kept its failure")
	}

	// And so is one recorded before a new replication starts.
	n.noteContact(failed("n2"), inConfig)
	n.noteContact(peer("n2", false), inConfig)
	if isFailing("n2") {
		t.Fatal("starting a new replication to n2 kept the old one's failure")
	}
}
