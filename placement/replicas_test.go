package placement_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
)

// setup returns a table of shards shards with replica sets of size
// replicas over up nodes, assigned by a planner's first step.
func replicatedTable(t *testing.T, shards, replicas int, nodes ...string) (*placement.Table, *placement.Planner) {
	t.Helper()
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: shards, Replicas: replicas})
	for _, n := range nodes {
		upNode(t, tb, n, mf())
	}
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 4})
	for _, c := range p.Step(tb, time.Unix(0, 0)) {
		mustApply(t, tb, c)
	}
	return tb, p
}

func TestReplicaSetsFollowTheRanking(t *testing.T) {
	tb, _ := replicatedTable(t, 64, 3, "a", "b", "c", "d")
	for i := range 64 {
		s, _ := tb.Shard(ref(i))
		want := placement.Ranked(tk, i, []string{"a", "b", "c", "d"})[:3]
		if !slices.Equal(s.Replicas, want) || s.Owner != want[0] {
			t.Fatalf("shard %d: owner %s set %v, want %v", i, s.Owner, s.Replicas, want)
		}
		if !slices.Equal(tb.WantReplicas(ref(i)), want) {
			t.Fatalf("shard %d: WantReplicas %v, want %v", i, tb.WantReplicas(ref(i)), want)
		}
		if placement.Rendezvous(tk, i, []string{"a", "b", "c", "d"}) != want[0] {
			t.Fatalf("shard %d: Ranked and Rendezvous disagree", i)
		}
	}
	if u := tb.UnderReplicated(); len(u) != 0 {
		t.Fatalf("whole sets reported under-replicated: %v", u)
	}
	// A follower leaves one set: that shard, and only it, is under-replicated.
	s0, _ := tb.Shard(ref(0))
	mustApply(t, tb, placement.Command{Op: placement.OpShrink, Moves: []placement.Move{{Shard: ref(0), From: s0.Owner, Epoch: s0.Epoch, To: s0.Replicas[1]}}})
	if u := tb.UnderReplicated(); !slices.Equal(u, []placement.ShardRef{ref(0)}) {
		t.Fatalf("after a shrink of shard 0: under-replicated %v", u)
	}
	// A cluster smaller than the count keeps one replica per node: its
	// sets are as whole as it can hold, and below the count all the same.
	small, _ := replicatedTable(t, 8, 3, "a", "b")
	for i := range 8 {
		if s, _ := small.Shard(ref(i)); len(s.Replicas) != 2 {
			t.Fatalf("two nodes, shard %d: set %v", i, s.Replicas)
		}
	}
	if u, b := small.UnderReplicated(), small.BelowReplicas(); len(u) != 0 || len(b) != 8 {
		t.Fatalf("two nodes, three replicas: %d under-replicated (want 0), %d below the count (want 8)", len(u), len(b))
	}
	if b := tb.BelowReplicas(); !slices.Equal(b, []placement.ShardRef{ref(0)}) {
		t.Fatalf("after a shrink of shard 0: below the count %v", b)
	}
	// The count defaults to DefaultReplicas in a table that never set it.
	if got := placement.NewTable().Replication(); got != placement.DefaultReplicas {
		t.Fatalf("default replication %d", got)
	}
}

func TestFailoverPicksAnInSyncFollower(t *testing.T) {
	tb, p := replicatedTable(t, 64, 3, "a", "b", "c", "d", "e")
	before := map[int]placement.Shard{}
	for _, r := range tb.Owned("a") {
		s, _ := tb.Shard(r)
		before[r.Index] = s
	}
	// A follower of some of a's shards goes out of sync first.
	var shrunk int = -1
	for i, s := range before {
		mustApply(t, tb, placement.Command{Op: placement.OpShrink, Moves: []placement.Move{{Shard: ref(i), From: "a", Epoch: s.Epoch, To: s.Replicas[1]}}})
		shrunk = i
		break
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "a", Status: placement.StatusDown})
	now := time.Unix(100, 0)
	p.Step(tb, now)
	for _, c := range p.Step(tb, now.Add(time.Second)) {
		mustApply(t, tb, c)
	}
	for i, old := range before {
		s, _ := tb.Shard(ref(i))
		if s.Owner == "a" || s.Epoch != old.Epoch+1 {
			t.Fatalf("shard %d not failed over: %+v", i, s)
		}
		set := old.Followers()
		if i == shrunk {
			set = set[1:]
		}
		if !slices.Contains(set, s.Owner) {
			t.Fatalf("shard %d went to %s, outside its in-sync followers %v", i, s.Owner, set)
		}
		if want := placement.Rendezvous(tk, i, set); s.Owner != want {
			t.Fatalf("shard %d went to %s, want best-ranked follower %s", i, s.Owner, want)
		}
		if s.InSync("a") || s.Replicas[0] != s.Owner || len(s.Replicas) != len(set) {
			t.Fatalf("shard %d set after failover: %v (followers were %v)", i, s.Replicas, set)
		}
	}
}

func TestShrinkAndJoinAreFenced(t *testing.T) {
	tb, p := replicatedTable(t, 8, 3, "a", "b", "c")
	s, _ := tb.Shard(ref(0))
	f := s.Replicas[2]
	shrink := placement.Command{Op: placement.OpShrink, Moves: []placement.Move{{Shard: ref(0), From: s.Owner, Epoch: s.Epoch, To: f}}}
	if r := mustApply(t, tb, shrink); r.Applied != 1 {
		t.Fatalf("shrink: %+v", r)
	}
	if r := mustApply(t, tb, shrink); r.Applied != 0 { // idempotent
		t.Fatalf("second shrink: %+v", r)
	}
	// The owner cannot be shrunk away, a stale epoch or owner changes nothing.
	for _, m := range []placement.Move{
		{Shard: ref(0), From: s.Owner, Epoch: s.Epoch, To: s.Owner},
		{Shard: ref(0), From: s.Owner, Epoch: s.Epoch - 1, To: s.Replicas[1]},
		{Shard: ref(0), From: f, Epoch: s.Epoch, To: s.Replicas[1]},
	} {
		if r := mustApply(t, tb, placement.Command{Op: placement.OpShrink, Moves: []placement.Move{m}}); r.Applied != 0 {
			t.Fatalf("shrink %+v applied", m)
		}
	}
	join := placement.Command{Op: placement.OpJoin, Moves: []placement.Move{{Shard: ref(0), From: s.Owner, Epoch: s.Epoch, To: f}}}
	if r := mustApply(t, tb, join); r.Applied != 1 {
		t.Fatalf("join: %+v", r)
	}
	if r := mustApply(t, tb, join); r.Applied != 0 {
		t.Fatalf("second join: %+v", r)
	}
	if got, _ := tb.Shard(ref(0)); !slices.Equal(got.Replicas, []string{s.Owner, s.Replicas[1], f}) {
		t.Fatalf("set after shrink and join: %v", got.Replicas)
	}
	stale := placement.Command{Op: placement.OpJoin, Moves: []placement.Move{{Shard: ref(0), From: s.Owner, Epoch: s.Epoch + 1, To: "z"}}}
	if r := mustApply(t, tb, stale); r.Applied != 0 {
		t.Fatal("join at a future epoch applied")
	}
	// A planned move keeps the old owner as a follower.
	mustApply(t, tb, placement.Command{Op: placement.OpBegin, Moves: []placement.Move{{Shard: ref(0), From: s.Owner, Epoch: s.Epoch, To: f}}})
	mustApply(t, tb, placement.Command{Op: placement.OpComplete, Moves: []placement.Move{{Shard: ref(0), From: s.Owner, Epoch: s.Epoch, To: f}}})
	if got, _ := tb.Shard(ref(0)); got.Owner != f || !slices.Equal(got.Replicas, []string{f, s.Owner, s.Replicas[1]}) {
		t.Fatalf("after the move: %+v", got)
	}
	// The leader drops a follower that is down.
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: s.Owner, Status: placement.StatusDown})
	var dropped bool
	for _, c := range p.Step(tb, time.Unix(50, 0)) {
		if c.Op == placement.OpShrink {
			for _, m := range c.Moves {
				dropped = dropped || (m.Shard == ref(0) && m.To == s.Owner)
			}
		}
		mustApply(t, tb, c)
	}
	if got, _ := tb.Shard(ref(0)); !dropped || got.InSync(s.Owner) {
		t.Fatalf("down follower kept: %+v", got)
	}
	// Replica sets of assign must match the moves.
	bad := placement.Command{Op: placement.OpAssign, Moves: []placement.Move{{Shard: ref(1), To: "a"}}, Sets: [][]string{{"a"}, {"b"}}}
	if r := tb.Apply(bad); r.Err == nil {
		t.Fatal("assign with more sets than moves accepted")
	}
}

// A node that reports its state store failing (OpStore) is given no
// shard and no place in a replica set: its shards move to other nodes,
// the owners of the shards it follows replicate to others instead, and
// it is dropped from those sets once a replacement caught up. Reporting
// its writes working again makes it eligible again.
func TestStoreFailingNodeIsNotEligible(t *testing.T) {
	tb, p := replicatedTable(t, 64, 3, "a", "b", "c", "d")
	owned := len(tb.Owned("d"))
	if owned == 0 {
		t.Fatal("d owns no shard to start with")
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStore, Name: "d", Failing: "no space left on device"})
	if got := tb.Nodes["d"].StoreFailing; got != "no space left on device" {
		t.Fatalf("StoreFailing = %q", got)
	}
	if e := tb.Eligible(tk); !slices.Equal(e, []string{"a", "b", "c"}) {
		t.Fatalf("Eligible = %v, want the three others", e)
	}
	// An upsert of its entry (gossip) keeps what only the node reports.
	mustApply(t, tb, node("d", placement.StatusUp, mf()))
	if tb.Nodes["d"].StoreFailing == "" {
		t.Fatal("an OpNode upsert cleared StoreFailing")
	}
	var follows []int
	for i := range 64 {
		s, _ := tb.Shard(ref(i))
		if want := tb.WantReplicas(ref(i)); slices.Contains(want, "d") {
			t.Fatalf("shard %d still wants d as a replica: %v", i, want)
		}
		if s.Owner != "d" && slices.Contains(s.Replicas, "d") {
			follows = append(follows, i)
		}
	}
	begun := 0
	for _, c := range p.Step(tb, time.Unix(10, 0)) {
		if c.Op == placement.OpBegin {
			for _, m := range c.Moves {
				if m.From != "d" || m.To == "d" {
					t.Fatalf("move %+v: want only d's shards moving away", m)
				}
				begun++
			}
		}
		mustApply(t, tb, c)
	}
	if begun == 0 {
		t.Fatal("no handoff of d's shards began")
	}
	// An owner caught up a replacement for d in a set d follows: the
	// next step drops d from it.
	i := follows[0]
	s, _ := tb.Shard(ref(i))
	var repl string
	for _, n := range tb.WantReplicas(ref(i)) {
		if !slices.Contains(s.Replicas, n) {
			repl = n
		}
	}
	mustApply(t, tb, placement.Command{Op: placement.OpJoin, Moves: []placement.Move{{Shard: ref(i), From: s.Owner, Epoch: s.Epoch, To: repl}}})
	for _, c := range p.Step(tb, time.Unix(11, 0)) {
		mustApply(t, tb, c)
	}
	if s, _ := tb.Shard(ref(i)); slices.Contains(s.Replicas, "d") || len(s.Replicas) != 3 {
		t.Fatalf("shard %d after its replacement joined: set %v, want three without d", i, s.Replicas)
	}
	// Only d may report d's store; a reason is bounded.
	if err := placement.Forwardable(tb, "d", placement.Command{Op: placement.OpStore, Name: "d"}); err != nil {
		t.Fatalf("d forwarding its own report: %v", err)
	}
	if err := placement.Forwardable(tb, "a", placement.Command{Op: placement.OpStore, Name: "d", Failing: "x"}); err == nil {
		t.Fatal("a may forward a report about d")
	}
	if r := tb.Apply(placement.Command{Op: placement.OpStore, Name: "d", Failing: string(make([]byte, 257))}); r.Err == nil {
		t.Fatal("a 257-byte reason applied")
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStore, Name: "d"})
	if e := tb.Eligible(tk); !slices.Contains(e, "d") {
		t.Fatalf("Eligible after d's writes work again = %v", e)
	}
}

// A down owner's shard fails over to its in-sync follower even when that
// follower's store fails and no node is eligible: losing the records
// would be worse than a follower whose disk is full.
func TestDownOwnerFailsOverToAStoreFailingFollower(t *testing.T) {
	for _, failing := range []bool{false, true} {
		tb, p := replicatedTable(t, 16, 2, "a", "b")
		if failing {
			mustApply(t, tb, placement.Command{Op: placement.OpStore, Name: "b", Failing: "no space left on device"})
		}
		shard := -1
		for i := range 16 {
			if s, _ := tb.Shard(ref(i)); s.Owner == "a" && s.InSync("b") {
				shard = i
				break
			}
		}
		if shard < 0 {
			t.Fatal("a owns no shard that b follows")
		}
		mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "a", Status: placement.StatusDown})
		for _, at := range []int64{10, 20, 30} {
			for _, c := range p.Step(tb, time.Unix(at, 0)) {
				mustApply(t, tb, c)
			}
		}
		if s, _ := tb.Shard(ref(shard)); s.Owner != "b" {
			t.Errorf("b failing=%v: shard %d still owned by %q (set %v)", failing, shard, s.Owner, s.Replicas)
		}
	}
}

// The moves of an owner whose store fails go first, as a draining
// owner's do: its writes fail until its shards have moved.
func TestStoreFailingOwnerMovesFirst(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 64, Replicas: 1})
	for _, n := range []string{"a", "b"} {
		upNode(t, tb, n, mf())
	}
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 2})
	for _, c := range p.Step(tb, time.Unix(0, 0)) {
		mustApply(t, tb, c)
	}
	// A newcomer wins some shards of both; b's store fails: b's moves
	// take the two slots.
	upNode(t, tb, "c", mf())
	mustApply(t, tb, placement.Command{Op: placement.OpStore, Name: "b", Failing: "no space left on device"})
	var begun []placement.Move
	for _, c := range p.Step(tb, time.Unix(1, 0)) {
		if c.Op == placement.OpBegin {
			begun = append(begun, c.Moves...)
		}
	}
	if len(begun) != 2 || begun[0].From != "b" || begun[1].From != "b" {
		t.Fatalf("begun %+v: want two of b's moves first", begun)
	}
}

// A set whose member is down counts as under-replicated until the member
// is dropped or its shard failed over: its copies there cannot be read.
func TestUnderReplicatedCountsDownMembers(t *testing.T) {
	tb, _ := replicatedTable(t, 16, 3, "a", "b", "c", "d")
	if u := tb.UnderReplicated(); len(u) != 0 {
		t.Fatalf("whole sets reported under-replicated: %v", u)
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "d", Status: placement.StatusDown})
	want := 0
	for i := range 16 {
		if s, _ := tb.Shard(ref(i)); slices.Contains(s.Replicas, "d") {
			want++
		}
	}
	if u := tb.UnderReplicated(); len(u) != want || want == 0 {
		t.Fatalf("with d down: %d under-replicated, want the %d sets d is in", len(u), want)
	}
}
