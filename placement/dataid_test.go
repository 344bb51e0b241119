package placement_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tempest-actors/tempest/placement"
)

func TestLoadDataID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	id, err := placement.LoadDataID(dir)
	if err != nil || len(id) != 32 {
		t.Fatalf("new directory: %q, %v", id, err)
	}
	again, err := placement.LoadDataID(dir)
	if err != nil || again == id {
		t.Fatalf("reloaded before raft state was set up: %q, %v; want a new one", again, err)
	}
	// Once the directory holds raft state (raft.member says so), the data
	// ID stays; raft state reset (raft/ and raft.member removed) gets a new one.
	if err := os.WriteFile(filepath.Join(dir, "raft.member"), []byte("n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id = again
	if again, err := placement.LoadDataID(dir); err != nil || again != id {
		t.Fatalf("reloaded: %q, %v; want %q", again, err, id)
	}
	other, err := placement.LoadDataID(t.TempDir())
	if err != nil || other == id {
		t.Fatalf("another directory: %q, %v", other, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "raft.id"), []byte("not an id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *placement.CorruptError
	if _, err := placement.LoadDataID(dir); !errors.As(err, &ce) || !errors.Is(err, placement.ErrCorrupt) {
		t.Fatalf("damaged file: %v, want a *CorruptError", err)
	}
}

// A voter that gossips another data directory than the table records
// lost its own: it is removed, then recorded and added back as a new
// server. New servers are recorded before they are added; servers with
// none recorded are recorded.
func TestPlanVotersDataIDs(t *testing.T) {
	now := time.Unix(1000, 0)
	peer := func(name, id string) placement.Peer {
		return placement.Peer{Name: name, State: placement.PeerAlive, DataID: id}
	}
	in := placement.VoterInput{
		Self: "a", MaxVoters: 3, Grace: 10 * time.Second, Now: now,
		DeadSince: func(string) (time.Time, bool) { return time.Time{}, false },
		Servers:   []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}},
		Peers:     []placement.Peer{peer("a", "A1"), peer("b", "B1"), peer("c", "C1")},
		DataIDs:   map[string]string{"a": "A1", "b": "B1", "c": "C1"},
	}
	if ch := placement.PlanVoters(in); len(ch) != 0 {
		t.Fatalf("all recorded: %v", ch)
	}
	check := func(what string, want []placement.ConfigChange) {
		t.Helper()
		if got := placement.PlanVoters(in); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
	in.Peers[1].DataID = "B2"
	check("b emptied", []placement.ConfigChange{{Op: placement.RemoveServer, ID: "b"}})
	in.Servers = in.Servers[:1:1]
	in.Servers = append(in.Servers, placement.RaftServer{ID: "c", Voter: true})
	in.Owns = func(n string) bool { return n == "a" || n == "b" }
	check("b removed, still owning shards", nil)
	in.Owns = func(n string) bool { return n == "a" }
	check("b removed", []placement.ConfigChange{{Op: placement.RecordDataID, ID: "b", DataID: "B2"}, {Op: placement.AddNonvoter, ID: "b"}})

	// Emptied while another voter is down: removing it would leave no
	// quorum, so it stays (and, refused its streams, counts as down).
	in.Servers = []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}}
	in.Peers[2].State = placement.PeerFailed
	check("b emptied, c down", nil)
	in.Peers[2].State = placement.PeerAlive

	// Nothing recorded (a new cluster, or one upgraded): recorded as
	// gossiped, but only once every live peer gossips one (a build from
	// before data IDs could not read them).
	in.Peers[1].DataID = "B1"
	in.DataIDs = nil
	in.Peers[2].DataID = ""
	check("c from before data IDs", nil)
	in.Peers = append(in.Peers, peer("d", ""))
	in.Peers[2].DataID = "C1"
	check("d from before data IDs joins unrecorded", []placement.ConfigChange{{Op: placement.AddNonvoter, ID: "d"}})
	in.Peers = in.Peers[:3]
	check("none recorded", []placement.ConfigChange{{Op: placement.RecordDataID, ID: "a", DataID: "A1"},
		{Op: placement.RecordDataID, ID: "b", DataID: "B1"}, {Op: placement.RecordDataID, ID: "c", DataID: "C1"}})

	// The leader's own is recorded too, but it is never removed.
	in.DataIDs = map[string]string{"a": "A0", "b": "B1", "c": "C1"}
	check("leader's own differs", nil)

	// The first record waits for every server and every peer that has not
	// left, in any state: one from before data IDs that is down or
	// draining could not read the log after it.
	in.DataIDs = nil
	in.Peers = []placement.Peer{peer("a", "A1"), peer("b", "B1"), {Name: "c", State: placement.PeerFailed}}
	check("c down, from before data IDs", nil)
	in.Peers = in.Peers[:2]
	check("c gone from gossip, still a voter", nil)
	in.Servers = in.Servers[:2]
	in.Peers = append(in.Peers, placement.Peer{Name: "z", State: placement.PeerUnproven})
	check("an unproven gossip member gossiping none", []placement.ConfigChange{
		{Op: placement.RecordDataID, ID: "a", DataID: "A1"}, {Op: placement.RecordDataID, ID: "b", DataID: "B1"}})
	in.Servers = []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}}
	// Once one is recorded, the rest follow whatever gossips none (a build
	// from before cannot read the log any more), so an emptied node is
	// never removed without being recorded again.
	in.DataIDs = map[string]string{"a": "A1"}
	in.Peers = []placement.Peer{peer("a", "A1"), peer("b", "B1"), peer("c", ""), peer("x", "X2")}
	check("after the first record", []placement.ConfigChange{
		{Op: placement.RecordDataID, ID: "b", DataID: "B1"},
		{Op: placement.RecordDataID, ID: "x", DataID: "X2"}, {Op: placement.AddNonvoter, ID: "x"}})

	// A name neither in the configuration nor in gossip is forgotten.
	in.DataIDs = map[string]string{"a": "A1", "b": "B1", "c": "C1", "old": "O1"}
	in.Peers = []placement.Peer{peer("a", "A1"), peer("b", "B1"), peer("c", "C1")}
	check("a name long gone", []placement.ConfigChange{{Op: placement.ForgetDataID, ID: "old"}})
}

func TestOpDataID(t *testing.T) {
	tb := placement.NewTable()
	tb.Apply(placement.Command{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "b", Status: placement.StatusUp}})
	if r := tb.Apply(placement.Command{Op: placement.OpDataID, Name: "b", DataID: "B1"}); r.Applied != 1 || tb.DataIDs["b"] != "B1" {
		t.Fatalf("recorded: %+v, %q", r, tb.DataIDs["b"])
	}
	if r := tb.Apply(placement.Command{Op: placement.OpDataID, DataID: "B1"}); !errors.Is(r.Err, placement.ErrBadCommand) {
		t.Fatalf("without a name: %+v", r)
	}
	// The node's entry may go (it left gossip owning nothing) while its
	// raft server keeps its seat: the data ID stays.
	if r := tb.Apply(placement.Command{Op: placement.OpRemove, Name: "b"}); r.Applied != 1 || tb.DataIDs["b"] != "B1" {
		t.Fatalf("after the entry's removal: %+v, %q", r, tb.DataIDs["b"])
	}
	// Snapshots keep them; a table without any writes none (builds from
	// before data IDs read it).
	var buf bytes.Buffer
	if err := placement.WriteSnapshot(&buf, tb); err != nil {
		t.Fatal(err)
	}
	back, err := placement.ReadSnapshot(&buf)
	if err != nil || back.DataIDs["b"] != "B1" {
		t.Fatalf("snapshot: %v, %v", back, err)
	}
	buf.Reset()
	if err := placement.WriteSnapshot(&buf, placement.NewTable()); err != nil || strings.Contains(buf.String(), "data_id") {
		t.Fatalf("snapshot of a table without data IDs: %q, %v", buf.String(), err)
	}
	tb.Apply(placement.Command{Op: placement.OpDataID, Name: "z", DataID: "Z1"})
	if r := tb.Apply(placement.Command{Op: placement.OpDataID, Name: "z"}); r.Applied != 1 || tb.DataIDs["z"] != "" || len(tb.DataIDs) != 1 {
		t.Fatalf("forgotten: %+v, %v", r, tb.DataIDs)
	}
	if err := placement.Forwardable(tb, "b", placement.Command{Op: placement.OpDataID, Name: "b", DataID: "B2"}); !errors.Is(err, placement.ErrNotForwardable) {
		t.Fatalf("a node forwards its own data ID: %v, want ErrNotForwardable (the leader records it)", err)
	}
}

// pipeLayer is a raft.StreamLayer over an in-memory listener.
type pipeLayer struct {
	ln *pipeListener
	to *pipeListener
}

type pipeListener struct{ ch chan net.Conn }

func (l *pipeListener) Accept() (net.Conn, error) {
	c, ok := <-l.ch
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l *pipeListener) Close() error   { return nil }
func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe"} }

func (p pipeLayer) Accept() (net.Conn, error) { return p.ln.Accept() }
func (p pipeLayer) Close() error              { return nil }
func (p pipeLayer) Addr() net.Addr            { return p.ln.Addr() }
func (p pipeLayer) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) {
	a, b := net.Pipe()
	p.to.ch <- b
	return a, nil
}

func TestGuardStreamLayer(t *testing.T) {
	ln := &pipeListener{ch: make(chan net.Conn, 1)}
	expect := "B1"
	server := placement.GuardStreamLayer(pipeLayer{ln: ln}, "B1", func(string) string { return "" }, nil)
	client := placement.GuardStreamLayer(pipeLayer{ln: &pipeListener{}, to: ln}, "A1", func(string) string { return expect }, nil)
	roundTrip := func() error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			conn, err := client.Dial("b", time.Second)
			if err == nil {
				_, err = conn.Write([]byte{1, 2, 3}) // raft's RPC type bytes are small numbers
				_ = conn.Close()
			}
			done <- err
		}()
		conn, err := server.Accept()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(conn)
		_ = conn.Close()
		<-done
		if err == nil && string(b) != "\x01\x02\x03" {
			t.Fatalf("read %q", b)
		}
		return err
	}
	if err := roundTrip(); err != nil {
		t.Fatalf("meant for this data directory: %v", err)
	}
	expect = ""
	if err := roundTrip(); err != nil {
		t.Fatalf("no preamble: %v", err)
	}
	expect = "B0"
	if err := roundTrip(); !errors.Is(err, placement.ErrWrongDataID) {
		t.Fatalf("meant for another data directory: %v, want ErrWrongDataID", err)
	}
}

// dataIDCluster starts a, b and c over TCP with data IDs (tune, if not
// nil, changes their config) and returns the cluster, its leader and a
// follower whose data ID the leader has recorded.
func dataIDCluster(t *testing.T, tune func(*placement.Config)) (*testCluster, *placement.Node, string) {
	t.Helper()
	c := newTestCluster(t, 3)
	c.tcp, c.dataIDs, c.tune = true, true, tune
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 60*time.Second, "settled", func() bool { return c.settled(names...) })
	leader := c.leaders()[0]
	victim := names[0]
	if victim == leader {
		victim = names[1]
	}
	l := c.node(leader)
	waitFor(t, 30*time.Second, "the follower's data ID recorded", func() bool { return l.DataIDOf(victim) != "" })
	return c, l, victim
}

// A voter's data ID outlives its table entry: a node gossip forgot (its
// entry removed once it owned nothing) keeps its raft seat, and when it
// comes back emptied it is still told apart, removed and added back.
func TestEmptiedVoterForgottenByGossipIsReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, l, victim := dataIDCluster(t, func(cfg *placement.Config) { cfg.DeadVoterGrace = time.Hour }) // keep its seat
	old := l.DataIDOf(victim)
	removed := make(chan raft.Observation, 16)
	obs := raft.NewObserver(removed, false, func(o *raft.Observation) bool {
		p, ok := o.Data.(raft.PeerObservation)
		return ok && p.Removed && string(p.Peer.ID) == victim
	})
	l.Raft().RegisterObserver(obs)
	defer l.Raft().DeregisterObserver(obs)

	c.stop(victim, placement.PeerFailed)
	c.mem.forget(victim)
	waitFor(t, 30*time.Second, "the victim's table entry removed", func() bool {
		_, ok := l.Table().Nodes[victim]
		return !ok
	})
	if voters, _ := raftServers(t, l); !slices.Contains(voters, victim) {
		t.Fatalf("voters %v: the victim lost its seat (the test needs it kept)", voters)
	}
	dir := c.dirs[victim]
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	c.start(victim)
	select {
	case <-removed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the emptied %s was never removed from the raft configuration (recorded data ID %q, was %q)", victim, l.DataIDOf(victim), old)
	}
	waitFor(t, 60*time.Second, "the emptied node added back", func() bool {
		voters, _ := raftServers(t, l)
		id := l.DataIDOf(victim)
		return slices.Contains(voters, victim) && id != "" && id != old
	})
}

// An owner that lost its data directory and came back before it was
// marked down holds none of its shards' state: it is marked down, its
// shards fail over, and it is recorded and added back only after that,
// so that it never serves one of them at the epoch it owned it at.
func TestEmptiedOwnerQuickRestartGivesUpItsShards(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c, l, victim := dataIDCluster(t, nil)
	old := l.DataIDOf(victim)
	owned := map[placement.ShardRef]uint64{}
	tb := l.Table()
	for _, r := range tb.Owned(victim) {
		s, _ := tb.Shard(r)
		owned[r] = s.Epoch
	}
	if len(owned) == 0 {
		t.Fatalf("%s owns no shard", victim)
	}

	c.stop(victim, placement.PeerAlive) // a crash, restarted before anyone marks it down
	if err := os.RemoveAll(c.dirs[victim]); err != nil {
		t.Fatal(err)
	}
	c.start(victim)
	waitFor(t, 60*time.Second, "the emptied owner back up under its new data ID", func() bool {
		tb := l.Table()
		id := tb.DataIDs[victim]
		info, ok := tb.Nodes[victim]
		return id != "" && id != old && ok && info.Status == placement.StatusUp
	})
	tb = l.Table()
	for r, epoch := range owned {
		if s, _ := tb.Shard(r); s.Owner == victim && s.Epoch == epoch {
			t.Errorf("%s is up again owning %s at epoch %d, the epoch it owned it at before it lost its data", victim, r, epoch)
		}
	}
}

// A voter whose data directory was emptied and that came back under its
// old name must not help elect a leader that lacks entries the cluster
// committed. a leads; c crashes; an entry commits on a and b; b crashes
// and comes back emptied; a crashes and c comes back. Raft alone would
// let c (which lacks the entry) win b's vote and lead without it. c's
// vote requests name b's old data directory, b refuses them, and no
// leader is elected until a is back; then b is removed and added back as
// a new server, and catches up.
func TestEmptiedVoterCannotElectAStaleLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t, 3)
	c.tcp, c.dataIDs = true, true
	c.tune = func(cfg *placement.Config) { cfg.DeadVoterGrace = time.Hour } // keep the crashed voters' seats
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 60*time.Second, "settled", func() bool { return c.settled(names...) })
	recorded := func() bool {
		for _, n := range c.live() {
			for _, name := range names {
				c.mem.mu.Lock()
				want := c.mem.dataIDs[name]
				c.mem.mu.Unlock()
				if n.DataIDOf(name) != want {
					return false
				}
			}
		}
		return true
	}
	waitFor(t, 30*time.Second, "data IDs recorded on every node", recorded)
	leader := c.leaders()[0]
	var others []string
	for _, n := range names {
		if n != leader {
			others = append(others, n)
		}
	}
	emptied, stale := others[0], others[1]

	c.stop(stale, placement.PeerFailed)
	const marker = "committed-without-the-stale-node"
	kinds := append(slices.Clone(testKinds), placement.KindSpec{Name: marker})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.node(leader).Propose(ctx, placement.Command{Op: placement.OpHosts, Name: leader, Kinds: kinds}); err != nil {
		t.Fatal(err)
	}
	has := func(n *placement.Node) bool { _, ok := n.Table().Kinds[marker]; return ok }

	c.stop(emptied, placement.PeerFailed)
	dir := c.dirs[emptied]
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c.start(emptied)
	t.Logf("emptied %s restarted: %v", emptied, c.node(emptied).Raft().Stats())
	c.stop(leader, placement.PeerFailed)
	c.start(stale)

	// Eight election timeouts: raft alone elects the stale node in one or two.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		for name, n := range c.live() {
			if n.IsLeader() {
				t.Logf("stats: %v", n.Raft().Stats())
				t.Fatalf("%s was elected with the vote of the emptied %s; it holds the committed entry: %t", name, emptied, has(n))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}

	c.start(leader)
	waitFor(t, 60*time.Second, "the emptied node re-added and caught up", func() bool {
		l := c.leaders()
		if len(l) != 1 || !has(c.node(l[0])) {
			return false
		}
		voters, _ := raftServers(t, c.node(l[0]))
		return slices.Contains(voters, emptied) && has(c.node(emptied)) && recorded()
	})
	for name, n := range c.live() {
		if !has(n) {
			t.Errorf("%s lost the committed entry", name)
		}
	}
}
