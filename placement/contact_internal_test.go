package placement

import (
	"context"
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
	noContact := func() time.Time { return time.Time{} }
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
	n.noteContact(failed("n2"), inConfig, noContact)
	if !isFailing("n2") {
		t.Fatal("a failed heartbeat to a configured peer was not recorded")
	}
	n.noteContact(raft.Observation{Data: raft.ResumedHeartbeatObservation{PeerID: "n2"}}, inConfig, noContact)
	if isFailing("n2") {
		t.Fatal("resumed heartbeats did not clear the failure")
	}

	// n3 leaves: removed from the configuration, its replication stops,
	// then its last heartbeat fails.
	delete(conf, "n3")
	n.noteContact(peer("n3", true), inConfig, noContact)
	n.noteContact(failed("n3"), inConfig, noContact)
	if isFailing("n3") {
		t.Fatal("a heartbeat failing after n3 was removed counts against its next incarnation")
	}

	// A failure recorded before the removal is forgotten with the
	// replication that saw it.
	conf["n3"] = true
	n.noteContact(failed("n3"), inConfig, noContact)
	delete(conf, "n3")
	n.noteContact(peer("n3", true), inConfig, noContact)
	if isFailing("n3") {
		t.Fatal("stopping n3's replication kept its failure")
	}

	// And so is one recorded before a new replication starts.
	n.noteContact(failed("n2"), inConfig, noContact)
	n.noteContact(peer("n2", false), inConfig, noContact)
	if isFailing("n2") {
		t.Fatal("starting a new replication to n2 kept the old one's failure")
	}
}

// TestNoteContactAfterElection: a new leader counts a failure of the
// leader it replaced from its own last contact with it (not from the
// start of the new replication, which is the election), and a leader
// that steps down lapses.
func TestNoteContactAfterElection(t *testing.T) {
	n := &Node{cfg: Config{Name: "n1", Transport: &SplitTransport{}}, clock: SystemClock{}, failing: map[string]time.Time{}}
	inConfig := func(raft.ServerID) bool { return true }
	heard := time.Now().Add(-1500 * time.Millisecond)
	contact := func() time.Time { return heard }
	leader := func(id raft.ServerID) {
		n.noteContact(raft.Observation{Data: raft.LeaderObservation{LeaderID: id, LeaderAddr: raft.ServerAddress(id)}}, inConfig, contact)
	}
	failed := func(id raft.ServerID) {
		// A fresh replication's last contact is its start: now.
		n.noteContact(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: id, LastContact: time.Now()}}, inConfig, contact)
	}
	leader("n2")
	leader("")
	leader("n1") // elected after n2 went silent
	// Its replications start (raft reports each peer): n2 still counts
	// as failing from the last heartbeat n1 had from it.
	n.noteContact(raft.Observation{Data: raft.PeerObservation{Peer: raft.Server{ID: "n2", Address: "n2"}}}, inConfig, contact)
	n.mu.Lock()
	presumed, ok := n.failing["n2"]
	n.mu.Unlock()
	if !ok || !presumed.Equal(heard) {
		t.Fatalf("the previous leader is not failing from the last heartbeat from it (%v, %s)", ok, presumed)
	}
	failed("n2")
	failed("n3")
	n.mu.Lock()
	got2, got3, lapsed := n.failing["n2"], n.failing["n3"], n.lapsed
	n.mu.Unlock()
	if d := got2.Sub(heard); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("previous leader failing since %s, want the last contact %s", got2, heard)
	}
	if time.Since(got3) > time.Second {
		t.Errorf("another peer failing since %s: backdated like the previous leader", got3)
	}
	if lapsed {
		t.Fatal("lapsed on becoming leader")
	}
	leader("n3") // n1 stepped down
	n.mu.Lock()
	lapsed, prev := n.lapsed, n.prevLeader
	n.mu.Unlock()
	if !lapsed {
		t.Error("a leader that stepped down did not lapse")
	}
	if prev != "" {
		t.Errorf("previous leader %q kept after stepping down", prev)
	}
}

// TestLeaseLapsesOnANewTerm: a renewal in a newer term than the last
// one is a lapse even without a gap: the new leader's table may not be
// applied here yet.
func TestLeaseLapsesOnANewTerm(t *testing.T) {
	n := &Node{lapseGap: time.Second}
	at := time.Unix(1000, 0)
	n.noteAnchorLocked(at, 5, true) // the first look: lapsed until a barrier
	n.lapsed = false                // as if its barrier applied
	n.noteAnchorLocked(at.Add(10*time.Millisecond), 5, true)
	if n.lapsed {
		t.Fatal("a renewal in the same term lapsed")
	}
	n.noteAnchorLocked(at.Add(20*time.Millisecond), 6, true)
	if !n.lapsed {
		t.Fatal("a renewal in a newer term did not lapse")
	}
	// Already lapsed with a barrier asked for: a newer term forgets it.
	n.syncNonce = "old"
	n.noteAnchorLocked(at.Add(25*time.Millisecond), 7, true)
	if !n.lapsed || n.syncNonce != "" {
		t.Fatalf("a newer term kept the barrier asked for before (%q)", n.syncNonce)
	}
	n.lapsed = false
	n.noteAnchorLocked(at.Add(30*time.Millisecond), 5, true) // an older term seen late
	if n.lapsed {
		t.Fatal("a late look at an older term lapsed")
	}
}

type noWitnesses struct{}

func (noWitnesses) LeaseWitness(context.Context, string, uint64) (time.Duration, error) {
	return 0, nil
}

// TestSyncHeldForThePreviousLeader: a new leader holds the sync barrier
// of the node that led before it until that node is down in its applied
// table, also before it handled the observation of its own election;
// other nodes' barriers are never held.
func TestSyncHeldForThePreviousLeader(t *testing.T) {
	n := &Node{cfg: Config{Name: "l", Witnesses: noWitnesses{}, Transport: &SplitTransport{}}, clock: SystemClock{}, fsm: NewFSM(), failing: map[string]time.Time{}}
	const term = 7
	apply := func(c Command) {
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		n.fsm.Apply(&raft.Log{Data: b})
	}
	for _, name := range []string{"l", "p", "o"} {
		apply(Command{Op: OpNode, Node: &NodeInfo{Name: name, Status: StatusUp}})
	}
	n.leaderSeen = "p" // elected, the observation not handled yet
	n.caughtUpTerm = term
	if !n.syncHeld("p", term) || n.syncHeld("o", term) || n.syncHeld("l", term) {
		t.Fatal("before the observation: want p held, o and l not")
	}
	n.leaderSeen, n.prevLeader, n.prevContact = "l", "p", time.Now()
	if !n.syncHeld("p", term) {
		t.Fatal("the previous leader's barrier was not held")
	}
	apply(Command{Op: OpStatus, Name: "p", Status: StatusDown})
	if n.syncHeld("p", term) {
		t.Fatal("held after the previous leader is down in the table")
	}
	// A table not yet caught up with this term's log may show a down
	// status that a later entry undid.
	if !n.syncHeld("p", term+1) {
		t.Fatal("not held while the table has not caught up with the term")
	}
	n.cfg.Transport = nil
	apply(Command{Op: OpNode, Node: &NodeInfo{Name: "p", Status: StatusUp}})
	if n.syncHeld("p", term) {
		t.Fatal("held without a transport that records heartbeats")
	}
	n.cfg.Transport, n.cfg.Witnesses = &SplitTransport{}, nil
	if n.syncHeld("p", term) {
		t.Fatal("held without Witnesses")
	}
}

// TestFailureEndsWithAnAnswer: a heartbeat of a replication that was
// stopped fails after the peer was added again; the new replication
// never saw a failure, so raft never reports heartbeats resumed. The
// peer answering the new replication's heartbeats must end the failure
// (the node stayed down in the table for as long as the leader led).
// The previous leader, presumed failing and then failing for real, is
// not cleared by answers from before its failure was seen.
func TestFailureEndsWithAnAnswer(t *testing.T) {
	tr := &SplitTransport{answered: map[raft.ServerID]time.Time{}}
	n := &Node{cfg: Config{Name: "n1", Transport: tr}, clock: SystemClock{}, failing: map[string]time.Time{}}
	inConfig := func(raft.ServerID) bool { return true }
	noContact := func() time.Time { return time.Time{} }
	answer := func(id raft.ServerID) {
		tr.mu.Lock()
		tr.answered[id] = time.Now()
		tr.mu.Unlock()
	}
	failing := func(name string) bool {
		_, ok := n.stillFailing()[name]
		return ok
	}

	// n3 was removed and added again; its new replication started
	// (forgetting the old failures), then the old one's last heartbeat
	// failed.
	n.noteContact(raft.Observation{Data: raft.PeerObservation{Peer: raft.Server{ID: "n3", Address: "n3"}}}, inConfig, noContact)
	answer("n3") // an answer from before the failure was seen
	time.Sleep(time.Millisecond)
	n.noteContact(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "n3", LastContact: time.Now()}}, inConfig, noContact)
	if !failing("n3") {
		t.Fatal("a failed heartbeat was cleared by an answer from before it")
	}
	time.Sleep(time.Millisecond)
	answer("n3") // the new replication's heartbeat
	if failing("n3") {
		t.Fatal("n3 answered a heartbeat after its failure was seen and still counts as failing")
	}

	// n2 led before n1: presumed failing from the last contact with it.
	heard := time.Now().Add(-time.Second)
	n.noteContact(raft.Observation{Data: raft.LeaderObservation{LeaderID: "n2", LeaderAddr: "n2"}}, inConfig, noContact)
	n.noteContact(raft.Observation{Data: raft.LeaderObservation{LeaderID: "n1", LeaderAddr: "n1"}}, inConfig, func() time.Time { return heard })
	if !failing("n2") {
		t.Fatal("the previous leader is not presumed failing")
	}
	answer("n2") // it answered a heartbeat of this term ...
	time.Sleep(time.Millisecond)
	n.noteContact(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "n2", LastContact: time.Now()}}, inConfig, noContact)
	if !failing("n2") { // ... and then stopped: failing for real
		t.Fatal("the previous leader's failure was cleared by an answer from before it failed")
	}
	time.Sleep(time.Millisecond)
	answer("n2")
	if failing("n2") {
		t.Fatal("the previous leader answered again and still counts as failing")
	}
}

// A restarted peer is not lost at once for its previous process's raft
// failures: those count from when gossip saw it come back, and a peer
// that keeps failing is lost DownAfter after that.
func TestRaftFailuresOfAPreviousProcessCountFromTheReturn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	down := time.Second
	failing := t0.Add(-2 * time.Second) // the old process's last contact
	if !raftLostAt(failing, time.Time{}, t0, down) {
		t.Fatal("a peer failing for two DownAfter, never restarted, is not lost")
	}
	back := t0.Add(-100 * time.Millisecond)
	if raftLostAt(failing, back, t0, down) {
		t.Fatal("a peer back for 100ms is lost for its previous process's failures")
	}
	if !raftLostAt(failing, back, back.Add(down), down) {
		t.Fatal("a peer still failing DownAfter after its return is not lost")
	}
	if !raftLostAt(t0, back, t0.Add(down), down) {
		t.Fatal("a failure after the return does not count from itself")
	}
}

// TestGossipFlapsDoNotRestartTheRaftFailureClock: a peer whose raft
// heartbeats keep failing while its gossip state flaps between failed
// and alive counts from its first return within the failure, so it is
// marked down DownAfter after it, whatever flaps follow; a return after
// the failure ended, or one before it began, starts afresh.
func TestGossipFlapsDoNotRestartTheRaftFailureClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	down := time.Second
	failing := t0.Add(-2 * time.Second)
	// The first return within the failure (a restart) counts from itself.
	back := returnedAt(time.Time{}, failing, true, t0)
	if !back.Equal(t0) {
		t.Fatalf("first return counted at %v, want %v", back, t0)
	}
	// Flaps every half DownAfter while raft keeps failing.
	now := t0
	for i := 0; i < 6; i++ {
		now = now.Add(down / 2)
		back = returnedAt(back, failing, true, now)
	}
	if !back.Equal(t0) {
		t.Fatalf("a flap moved the return to %v, want %v", back, t0)
	}
	if !raftLostAt(failing, back, now, down) {
		t.Fatal("a peer failing raft for 3 DownAfter after its first return is not lost for its gossip flaps")
	}
	// A return from an earlier failure does not hold for a new one.
	later := now.Add(time.Minute)
	if got := returnedAt(back, later.Add(-time.Second), true, later); !got.Equal(later) {
		t.Fatalf("return during a new failure counted at %v, want %v", got, later)
	}
	// Nor does it without a failure.
	if got := returnedAt(back, time.Time{}, false, later); !got.Equal(later) {
		t.Fatalf("return without a failure counted at %v, want %v", got, later)
	}
}
