package placement_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tempest-actors/tempest/placement"
)

// TestPlannerWitnessShortensTheFence: a witness lets a down node's
// shards go FenceDelay after its last renewal, but never before it was
// seen down nor later than without the witness, and a witness does not
// outlive the down period it was given for.
func TestPlannerWitnessShortensTheFence(t *testing.T) {
	const fence = 5 * time.Second
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		witness time.Duration // before the node is seen down; <0: none
		wantAt  time.Duration // after it is seen down
	}{
		{"none", -1, fence},
		{"silent long before", 10 * time.Second, 0},
		{"silent a while before", 2 * time.Second, fence - 2*time.Second},
		{"silent just before", 100 * time.Millisecond, fence - 100*time.Millisecond},
		{"a witness after the sighting counts for nothing", -2 * time.Second, fence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := placement.NewTable()
			mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 16})
			for _, n := range []string{"a", "b", "c"} {
				upNode(t, tb, n, mf())
			}
			p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 4})
			mustApply(t, tb, p.Step(tb, now.Add(-time.Minute))[0])
			// Not yet down: a witness given now is kept for the down period
			// that follows (the caller gives it before each Step).
			if tc.witness != -1 {
				p.Witnessed("b", now.Add(-tc.witness))
			}
			mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "b", Status: placement.StatusDown})
			if tc.wantAt == 0 {
				if cmds := ownerChanges(p.Step(tb, now)); len(cmds) != 1 {
					t.Fatalf("not moved when first seen down, long after the last renewal: %+v", cmds)
				}
				return
			}
			if cmds := ownerChanges(p.Step(tb, now)); len(cmds) != 0 {
				t.Fatalf("moved when first seen down: %+v", cmds)
			}
			if at, ok := p.NextDeadline(time.Time{}); !ok || !at.Equal(now.Add(tc.wantAt)) {
				t.Fatalf("next deadline %s %v, want %s", at, ok, now.Add(tc.wantAt))
			}
			if cmds := ownerChanges(p.Step(tb, now.Add(tc.wantAt-time.Millisecond))); len(cmds) != 0 {
				t.Fatalf("moved %s before the fence ended: %+v", time.Millisecond, cmds)
			}
			if cmds := ownerChanges(p.Step(tb, now.Add(tc.wantAt))); len(cmds) != 1 {
				t.Fatalf("not moved when the fence ended: %+v", cmds)
			}
		})
	}

	// A witness given while the node was up, and one of a down period
	// that ended, are forgotten: the next failure is fenced from when it
	// is seen.
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 16})
	for _, n := range []string{"a", "b", "c"} {
		upNode(t, tb, n, mf())
	}
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 4})
	mustApply(t, tb, p.Step(tb, now)[0])
	p.Witnessed("b", now.Add(-time.Hour))
	p.Step(tb, now) // b is up: forgotten
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "b", Status: placement.StatusDown})
	later := now.Add(time.Minute)
	p.Step(tb, later)
	if at, ok := p.NextDeadline(time.Time{}); !ok || !at.Equal(later.Add(fence)) {
		t.Fatalf("a witness given while b was up shortened its later fence: deadline %s, want %s", at, later.Add(fence))
	}
	// A witness that arrives after steps that found nothing to do (the
	// new leader's voters answer late) shortens the fence from then on,
	// with the table unchanged.
	for _, c := range p.Step(tb, later.Add(time.Second)) {
		mustApply(t, tb, c) // b leaves the replica sets
	}
	if cmds := p.Step(tb, later.Add(time.Second)); len(cmds) != 0 {
		t.Fatalf("nothing to do before the fence ends, got %+v", cmds)
	}
	p.Witnessed("b", later.Add(-3*time.Second))
	if cmds := ownerChanges(p.Step(tb, later.Add(2*time.Second))); len(cmds) != 1 {
		t.Fatalf("a late witness did not shorten the fence: %+v", cmds)
	}
}

// TestSplitTransportWitness: a witness of term T bounds every heartbeat
// of an older term the transport accepted or sent, and from then on
// none of an older term is accepted or sent; the bound is never before
// the transport's own start. QuorumAnswered gives the send of the
// heartbeats peers accepted.
func TestSplitTransportWitness(t *testing.T) {
	a := splitOverTCP(t, 500*time.Millisecond)
	b := splitOverTCP(t, 500*time.Millisecond)
	var mu sync.Mutex
	var handled []uint64
	b.SetHeartbeatHandler(func(rpc raft.RPC) {
		mu.Lock()
		handled = append(handled, rpc.Command.(*raft.AppendEntriesRequest).Term)
		mu.Unlock()
		rpc.Respond(&raft.AppendEntriesResponse{Term: rpc.Command.(*raft.AppendEntriesRequest).Term, Success: true}, nil)
	})
	start := time.Now()
	if w := b.Witness(1); w.IsZero() || w.After(start) {
		t.Fatalf("fresh transport's witness %s: want its start, before %s", w, start)
	}
	if q := a.QuorumAnswered([]raft.ServerID{"b"}, 1); !q.IsZero() {
		t.Fatalf("QuorumAnswered %s before any heartbeat", q)
	}

	var resp raft.AppendEntriesResponse
	before := time.Now()
	if err := a.AppendEntries("b", b.LocalAddr(), heartbeat(3), &resp); err != nil || !resp.Success {
		t.Fatalf("heartbeat of term 3: %v %+v", err, resp)
	}
	after := time.Now()
	q := a.QuorumAnswered([]raft.ServerID{"b"}, 1)
	if q.Before(before) || q.After(after) {
		t.Fatalf("QuorumAnswered %s, want the send, within [%s, %s]", q, before, after)
	}
	if q2 := a.QuorumAnswered([]raft.ServerID{"b", "c"}, 2); !q2.IsZero() {
		t.Fatalf("QuorumAnswered of two with one answer: %s", q2)
	}
	// Same term: not below it, so not bounded by it beyond the start.
	if w := b.Witness(3); w.After(before) {
		t.Fatalf("witness of term 3 counts a heartbeat of term 3: %s", w)
	}
	w := b.Witness(4)
	if w.Before(before) || w.After(after) {
		t.Fatalf("witness of term 4 %s, want the receipt of the term-3 heartbeat, within [%s, %s]", w, before, after)
	}
	// The sender's witness counts what it sent.
	if ws := a.Witness(4); ws.Before(before) || ws.After(after) {
		t.Fatalf("sender's witness of term 4 %s, want its send, within [%s, %s]", ws, before, after)
	}

	// From now on b refuses term 3, without raft seeing it, and a sends
	// none of it.
	if err := a.AppendEntries("b", b.LocalAddr(), heartbeat(5), &resp); err != nil || !resp.Success {
		t.Fatalf("heartbeat of term 5: %v %+v", err, resp)
	}
	c := splitOverTCP(t, 500*time.Millisecond)
	if err := c.AppendEntries("b", b.LocalAddr(), heartbeat(3), &resp); err != nil || resp.Success || resp.Term != 4 {
		t.Fatalf("heartbeat of a witnessed-out term: %v %+v, want refused naming term 4", err, resp)
	}
	if err := a.AppendEntries("b", b.LocalAddr(), heartbeat(3), &resp); err == nil {
		t.Fatal("a sent a heartbeat of a term it witnessed out")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 2 || handled[0] != 3 || handled[1] != 5 {
		t.Fatalf("raft saw heartbeats of terms %v, want [3 5]", handled)
	}
	if w2 := b.Witness(4); !w2.Equal(w) {
		t.Fatalf("witness of term 4 moved from %s to %s", w, w2)
	}
}

// TestCrashedLeaderFencedFromItsSilence: raft over TCP with split
// heartbeats, as in production. The leader crashes; the new leader asks
// the other voter for its witness and fences the old leader's shards
// from when it went silent rather than from the election. Checked from
// what the nodes record: the witness is no earlier than the crashed
// leader's own last lease renewal and earlier than the election (so it
// counts), no survivor serves one of its shards while its lease could
// still be fresh (the lease outlasts the election, so a fence that ended
// at the down status would show), no shard is served twice, and all of
// them fail over.
func TestCrashedLeaderFencedFromItsSilence(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t, 3)
	c.tcp = true
	const lease = 3 * time.Second
	c.tune = func(cfg *placement.Config) { cfg.Lease = lease }
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 60*time.Second, "settled", func() bool { return c.settled(names...) })
	leaders := c.leaders()
	if len(leaders) != 1 {
		t.Fatalf("leaders %v", leaders)
	}
	victimName := leaders[0]
	victim := c.node(victimName)
	owned := victim.Table().Owned(victimName)
	if len(owned) == 0 {
		t.Fatalf("the leader %s owns no shard", victimName)
	}
	fs := sampleFence(c, testConfig().Shards)

	c.stop(victimName, placement.PeerAlive) // a crash as raft sees it
	anchor := victim.VerifiedAtForTest()    // its last renewal: it is closed

	var newLeader string
	var elected time.Time
	waitFor(t, 30*time.Second, "a new leader", func() bool {
		if l := c.leaders(); len(l) == 1 {
			newLeader, elected = l[0], time.Now()
			return true
		}
		return false
	})
	// The survivors' first Check that passed for each of the victim's
	// shards, taken at the instant given to Check.
	firstServed := map[placement.ShardRef]time.Time{}
	waitFor(t, 30*time.Second, "the crashed leader's shards served again", func() bool {
		for name, n := range c.live() {
			for _, r := range owned {
				now := time.Now()
				if _, seen := firstServed[r]; !seen && n.Check(r, 0, now) == nil {
					firstServed[r] = now
					if now.Before(anchor.Add(lease)) {
						t.Errorf("%s served %s at %s, within the crashed leader's lease (renewed %s, lease %s)",
							name, r, now.Format(time.StampMicro), anchor.Format(time.StampMicro), lease)
					}
				}
			}
		}
		return len(firstServed) == len(owned)
	})
	fs.finish(t)

	// A question about a term no node has reached is refused and moves
	// no floor: a rogue or confused peer cannot silence a live leader.
	asked := time.Now()
	if _, err := c.node(newLeader).Witness(1 << 60); !errors.Is(err, placement.ErrNoWitness) {
		t.Fatalf("witness of a future term: %v, want ErrNoWitness", err)
	}
	for _, name := range names {
		if n := c.node(name); n != nil {
			if _, err := n.Witness(1 << 60); !errors.Is(err, placement.ErrNoWitness) {
				t.Fatalf("%s: witness of a future term: %v", name, err)
			}
		}
	}
	waitFor(t, 10*time.Second, "every survivor's lease renewed after the refused questions", func() bool {
		for _, n := range c.live() {
			if !n.LeaseAnchor().After(asked) {
				return false
			}
		}
		return true
	})

	who, at := c.node(newLeader).WitnessForTest()
	if who != victimName {
		t.Fatalf("the new leader %s has no witness of %s (has %q)", newLeader, victimName, who)
	}
	if at.Before(anchor) {
		t.Fatalf("witness %s precedes the crashed leader's last renewal %s: unsafe", at.Format(time.StampMicro), anchor.Format(time.StampMicro))
	}
	if !at.Before(elected) {
		t.Fatalf("witness %s not before the election (seen %s): it shortens nothing", at.Format(time.StampMicro), elected.Format(time.StampMicro))
	}
	t.Logf("silent for %s at the election; last renewal %s before the witness",
		elected.Sub(at).Round(time.Millisecond), at.Sub(anchor).Round(time.Millisecond))
}

// TestWitnessWaitsForASendInFlight: a heartbeat of an older term that
// passed the floor but is still on its way out is counted at the end of
// its send, so Witness waits for it rather than answering before it.
func TestWitnessWaitsForASendInFlight(t *testing.T) {
	a := splitOverTCP(t, 2*time.Second)
	b := splitOverTCP(t, 2*time.Second)
	entered, release := make(chan struct{}), make(chan struct{})
	b.SetHeartbeatHandler(func(rpc raft.RPC) {
		close(entered)
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Term: 3, Success: true}, nil)
	})
	sendDone := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		sendDone <- a.AppendEntries("b", b.LocalAddr(), heartbeat(3), &resp)
	}()
	<-entered
	witnessed := make(chan time.Time, 1)
	go func() { witnessed <- a.Witness(4) }()
	select {
	case w := <-witnessed:
		t.Fatalf("witness %s answered while a heartbeat of term 3 was still being sent", w)
	case <-time.After(100 * time.Millisecond):
	}
	released := time.Now()
	close(release)
	if err := <-sendDone; err != nil {
		t.Fatal(err)
	}
	if w := <-witnessed; w.Before(released) {
		t.Fatalf("witness %s precedes the end of the send (released %s)", w, released)
	}
}
