package placement_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/placement"
)

func TestIdentityHashGolden(t *testing.T) {
	// These values are a compatibility contract: if this test fails, the
	// change would move actors between nodes of mixed versions.
	golden := []struct {
		kind, key string
		hash      uint64
		shard     int
	}{
		{"counter", "alice", 0xd11c71ec053883, 131},
		{"user", "42", 0xd6ee58a5aa1192bc, 700},
		{"", "", 0xaf63bd4c8601b7df, 991},
		{"k", "", 0x8bdde07b561d17e, 382},
		{"order", "2026-11-30/ü", 0x69a63b21cd11c4de, 222},
	}
	for _, g := range golden {
		if got := placement.IdentityHash(g.kind, g.key); got != g.hash {
			t.Errorf("IdentityHash(%q,%q) = %#x, want %#x", g.kind, g.key, got, g.hash)
		}
		if got := placement.ShardOf(g.kind, g.key, 1024); got != g.shard {
			t.Errorf("ShardOf(%q,%q) = %d, want %d", g.kind, g.key, got, g.shard)
		}
		// Cross-check against the standard library's FNV-1a.
		h := fnv.New64a()
		h.Write([]byte(g.kind + "\x00" + g.key))
		if got := h.Sum64(); got != g.hash {
			t.Errorf("stdlib fnv-1a of %q/%q = %#x, want %#x", g.kind, g.key, got, g.hash)
		}
	}
	if placement.IdentityHash("ab", "c") == placement.IdentityHash("a", "bc") {
		t.Error("separator does not separate kind from key")
	}
}

func TestShardOfSpread(t *testing.T) {
	const shards = 64
	counts := make([]int, shards)
	for i := 0; i < 64000; i++ {
		counts[placement.ShardOf("k", fmt.Sprint(i), shards)]++
	}
	for s, c := range counts {
		if c < 700 || c > 1300 { // mean 1000
			t.Errorf("shard %d holds %d of 64000 keys", s, c)
		}
	}
}

func mf(discharged ...manifest.ClauseID) manifest.Manifest {
	m := manifest.Manifest{Clauses: map[manifest.ClauseID]manifest.Discharge{}}
	for _, c := range manifest.Clauses {
		m.Clauses[c] = manifest.Assumed("os")
	}
	for _, c := range discharged {
		m.Clauses[c] = manifest.Discharged
	}
	return m
}

func node(name string, st placement.NodeStatus, m manifest.Manifest) placement.Command {
	return placement.Command{Op: placement.OpNode, Node: &placement.NodeInfo{Name: name, Status: st, Manifest: m}}
}

// tk is the kind most tests place; ref(i) is its shard i.
const tk = "k"

// hosts is the command by which node publishes the kinds it hosts, each
// with the empty policy digest.
func hosts(node string, kinds ...string) placement.Command {
	c := placement.Command{Op: placement.OpHosts, Name: node}
	for _, k := range kinds {
		c.Kinds = append(c.Kinds, placement.KindSpec{Name: k})
	}
	return c
}

// upNode adds name, up with manifest m, hosting the test kind.
func upNode(t *testing.T, tb *placement.Table, name string, m manifest.Manifest) {
	t.Helper()
	mustApply(t, tb, node(name, placement.StatusUp, m))
	mustApply(t, tb, hosts(name, tk))
}

func mustApply(t *testing.T, tb *placement.Table, c placement.Command) placement.Result {
	t.Helper()
	// Every command goes through its encoding, as it would through raft.
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	d, err := placement.DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	r := tb.Apply(d)
	if r.Err != nil {
		t.Fatalf("apply %s: %v", c.Op, r.Err)
	}
	return r
}

func ref(i int) placement.ShardRef { return placement.ShardRef{Group: tk, Index: i} }

func TestCommandsIdempotent(t *testing.T) {
	tb := placement.NewTable()
	cmds := []placement.Command{
		{Op: placement.OpInit, Shards: 8},
		node("a", placement.StatusUp, mf()),
		node("b", placement.StatusUp, mf(manifest.Fairness)),
		hosts("a", tk),
		{Op: placement.OpHosts, Name: "b", Kinds: []placement.KindSpec{{Name: tk}, {Name: "ledger", Requires: []manifest.ClauseID{manifest.Fairness}}}},
		{Op: placement.OpAssign, Moves: []placement.Move{{Shard: ref(0), To: "a"}, {Shard: ref(1), To: "b"}}},
		{Op: placement.OpBegin, Moves: []placement.Move{{Shard: ref(0), From: "a", Epoch: 1, To: "b"}}},
		{Op: placement.OpComplete, Moves: []placement.Move{{Shard: ref(0), From: "a", Epoch: 1, To: "b"}}},
		{Op: placement.OpStatus, Name: "a", Status: placement.StatusDraining},
		{Op: placement.OpSync, Name: "a", Nonce: "a/1"},
	}
	for _, c := range cmds {
		first := mustApply(t, tb, c)
		if first.Applied == 0 {
			t.Fatalf("%s applied nothing: %+v", c.Op, first)
		}
		before := snapshotBytes(t, tb)
		again := mustApply(t, tb, c) // a retry after an indeterminate ErrLeadershipLost
		if again.Applied != 0 || again.Version != first.Version {
			t.Fatalf("%s applied twice: %+v then %+v", c.Op, first, again)
		}
		if !bytes.Equal(before, snapshotBytes(t, tb)) {
			t.Fatalf("%s changed the table on retry", c.Op)
		}
	}
	s, _ := tb.Shard(ref(0))
	if s.Owner != "b" || s.Epoch != 2 || s.MovingTo != "" {
		t.Fatalf("shard 0 = %+v, want owner b epoch 2", s)
	}
	if tb.Version != uint64(len(cmds)) {
		t.Fatalf("version %d, want %d", tb.Version, len(cmds))
	}
	// A stale move (old epoch) is skipped, not applied.
	r := mustApply(t, tb, placement.Command{Op: placement.OpAssign, Moves: []placement.Move{{Shard: ref(0), From: "a", Epoch: 1, To: "a"}}})
	if r.Applied != 0 || r.Skipped != 1 {
		t.Fatalf("stale move: %+v", r)
	}
	// A kind's requirements are its first publisher's: another node that
	// publishes the kind with others does not change the group.
	mustApply(t, tb, placement.Command{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: tk}, {Name: "ledger", Requires: []manifest.ClauseID{manifest.Admission}}}})
	if g := tb.Groups["ledger"]; len(g.Requires) != 1 || g.Requires[0] != manifest.Fairness {
		t.Fatalf("ledger requires %v after a second publisher, want [Fairness]", g.Requires)
	}
	// A malformed publication is refused and changes nothing.
	for _, bad := range []placement.Command{
		{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: ""}}},
		{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: "x"}, {Name: "x"}}},
	} {
		v := tb.Version
		if r := tb.Apply(bad); !errors.Is(r.Err, placement.ErrBadCommand) || tb.Version != v {
			t.Fatalf("%+v: %v (version %d→%d)", bad.Kinds, r.Err, v, tb.Version)
		}
	}
	// A node that owns shards cannot be removed.
	if r := mustApply(t, tb, placement.Command{Op: placement.OpRemove, Name: "b"}); r.Applied != 0 {
		t.Fatal("removed a node that owns shards")
	}
}

func TestDecodeCommandRejects(t *testing.T) {
	good, _ := placement.Command{Op: placement.OpInit, Shards: 4}.Encode()
	for name, b := range map[string][]byte{
		"empty":    nil,
		"version":  append([]byte{9}, good[1:]...),
		"unknown":  append([]byte{1}, []byte(`{"op":"init","bogus":1}`)...),
		"trailing": append(bytes.Clone(good), []byte(`{"op":"init"}`)...),
		"garbage":  {1, '{'},
	} {
		if _, err := placement.DecodeCommand(b); !errors.Is(err, placement.ErrBadCommand) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	tb := placement.NewTable()
	if r := tb.Apply(placement.Command{Op: "nope"}); !errors.Is(r.Err, placement.ErrBadCommand) {
		t.Errorf("unknown op: %v", r.Err)
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []placement.Command{
		{Op: placement.OpInit, Shards: 4},
		node("a", placement.StatusUp, mf(manifest.Fairness)),
		{Op: placement.OpBegin, Moves: []placement.Move{{Shard: ref(1), From: "a", Epoch: 3, To: "b"}}},
	} {
		b, _ := c.Encode()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := placement.DecodeCommand(b)
		if err != nil {
			return
		}
		tb := placement.NewTable()
		tb.Apply(placement.Command{Op: placement.OpInit, Shards: 4})
		tb.Apply(c) // must not panic
	})
}

func snapshotBytes(t testing.TB, tb *placement.Table) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := placement.WriteSnapshot(&buf, tb); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 256})
	for i := 0; i < 5; i++ {
		mustApply(t, tb, node(fmt.Sprintf("n%d", i), placement.StatusUp, mf(manifest.Clauses[:i%4]...)))
		mustApply(t, tb, placement.Command{Op: placement.OpHosts, Name: fmt.Sprintf("n%d", i), Kinds: []placement.KindSpec{
			{Name: tk, Digest: fmt.Sprint(i % 2)}, {Name: "ledger", Requires: []manifest.ClauseID{manifest.Fairness}}}})
	}
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 8})
	now := time.Unix(1000, 0)
	for step := 0; step < 20; step++ {
		if rng.IntN(3) == 0 {
			mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: fmt.Sprintf("n%d", rng.IntN(5)), Status: placement.NodeStatus(1 + rng.IntN(3))})
		}
		for _, c := range p.Step(tb, now) {
			mustApply(t, tb, c)
		}
		now = now.Add(300 * time.Millisecond)
	}
	b := snapshotBytes(t, tb)
	f := placement.NewFSM()
	if err := f.Restore(readCloser{bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
	if got := snapshotBytes(t, f.Table()); !bytes.Equal(got, b) {
		t.Fatalf("restored table differs:\n%s\nvs\n%s", got, b)
	}
	a, _ := json.Marshal(tb.Nodes)
	c, _ := json.Marshal(f.Table().Nodes)
	if !bytes.Equal(a, c) {
		t.Fatal("nodes differ after restore")
	}
	if f.Table().Version != tb.Version {
		t.Fatal("version differs after restore")
	}
	// Truncated snapshots fail cleanly.
	if _, err := placement.ReadSnapshot(bytes.NewReader(b[:len(b)/2])); err == nil {
		t.Fatal("truncated snapshot accepted")
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%02d", i)
	}
	return out
}

func TestRendezvousMinimalMovement(t *testing.T) {
	const shards = 1024
	for _, n := range []int{3, 5, 8} {
		before := names(n)
		after := names(n + 1) // one node joins
		moved, toNew := 0, 0
		load := map[string]int{}
		for s := 0; s < shards; s++ {
			a, b := placement.Rendezvous("", s, before), placement.Rendezvous("", s, after)
			load[a]++
			if a != b {
				moved++
				if b != after[n] {
					t.Fatalf("shard %d moved %s→%s, not to the new node", s, a, b)
				}
				toNew++
			}
		}
		// Expected movement is shards/(n+1); allow 30% slack.
		want := shards / (n + 1)
		if moved > want*13/10 || moved < want*7/10 {
			t.Errorf("n=%d: %d shards moved on join, want about %d", n, moved, want)
		}
		for name, l := range load {
			if l < shards/n*6/10 || l > shards/n*14/10 {
				t.Errorf("n=%d: %s holds %d shards, want about %d", n, name, l, shards/n)
			}
		}
		// Removing a node moves only the shards it held.
		gone := before[1]
		rest := append(append([]string{}, before[:1]...), before[2:]...)
		for s := 0; s < shards; s++ {
			a, b := placement.Rendezvous("", s, before), placement.Rendezvous("", s, rest)
			if a != b && a != gone {
				t.Fatalf("shard %d moved %s→%s though %s left", s, a, b, gone)
			}
		}
	}
}

func TestEligibilityAndNoEligibleNode(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 16})
	mustApply(t, tb, node("plain", placement.StatusUp, mf()))
	mustApply(t, tb, node("strict", placement.StatusUp, mf(manifest.ControlPlaneImmunity, manifest.Fairness)))
	mustApply(t, tb, node("gone", placement.StatusDown, mf(manifest.Admission)))
	all := []placement.KindSpec{{Name: "plain-kind"},
		{Name: "supervisor", Requires: []manifest.ClauseID{manifest.ControlPlaneImmunity}},
		{Name: "gate", Requires: []manifest.ClauseID{manifest.Admission}}}
	for _, n := range []string{"plain", "strict", "gone"} {
		mustApply(t, tb, placement.Command{Op: placement.OpHosts, Name: n, Kinds: all})
	}

	if got := tb.Eligible("supervisor"); len(got) != 1 || got[0] != "strict" {
		t.Fatalf("eligible = %v", got)
	}
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 4})
	for _, c := range p.Step(tb, time.Unix(0, 0)) {
		mustApply(t, tb, c)
	}
	for i := 0; i < 50; i++ {
		loc, err := tb.Locate("supervisor", fmt.Sprint(i))
		if err != nil || loc.Owner != "strict" {
			t.Fatalf("supervisor/%d at %+v, %v; want strict", i, loc, err)
		}
		if loc, err := tb.Locate("plain-kind", fmt.Sprint(i)); err != nil || loc.Owner == "gone" {
			t.Fatalf("plain-kind/%d at %+v, %v", i, loc, err)
		}
	}
	if _, err := tb.Locate("gate", "x"); !errors.Is(err, placement.ErrNoEligibleNode) {
		t.Fatalf("gate: err = %v, want ErrNoEligibleNode", err)
	}
	if _, err := tb.Locate("nobody-hosts-it", "x"); !errors.Is(err, placement.ErrUnknownKind) || !strings.Contains(err.Error(), `"nobody-hosts-it"`) {
		t.Fatalf("unpublished kind: err = %v, want ErrUnknownKind naming it", err)
	}
}

// fenceOK reports which of the given nodes pass the fence for ref.
func TestCheckOwnership(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 4})
	upNode(t, tb, "a", mf())
	upNode(t, tb, "b", mf())
	mustApply(t, tb, placement.Command{Op: placement.OpAssign, Moves: []placement.Move{{Shard: ref(0), To: "a"}}})
	mustApply(t, tb, placement.Command{Op: placement.OpAssign, Moves: []placement.Move{{Shard: ref(0), From: "a", Epoch: 1, To: "b"}}})
	// Shard 0: owner b, epoch 2.
	check := func(self string, epoch uint64, fresh bool) error {
		return placement.CheckOwnership(tb, self, ref(0), epoch, fresh)
	}
	if err := check("b", 2, true); err != nil {
		t.Fatalf("owner: %v", err)
	}
	if err := check("b", 0, true); err != nil {
		t.Fatalf("owner, unstamped: %v", err)
	}
	var no *placement.NotOwnerError
	if err := check("a", 0, true); !errors.As(err, &no) || no.OwnerHint != "b" || no.Epoch != 2 {
		t.Fatalf("non-owner: %v", err)
	}
	if err := check("b", 1, true); !errors.As(err, &no) || no.OwnerHint != "b" {
		t.Fatalf("stale epoch: %v", err)
	}
	if err := check("b", 3, true); !errors.Is(err, placement.ErrBehind) {
		t.Fatalf("newer epoch: %v", err)
	}
	if err := check("b", 2, false); !errors.Is(err, placement.ErrLeaseExpired) {
		t.Fatalf("stale lease: %v", err)
	}
	mustApply(t, tb, placement.Command{Op: placement.OpBegin, Moves: []placement.Move{{Shard: ref(0), From: "b", Epoch: 2, To: "a"}}})
	if err := check("b", 2, true); !errors.Is(err, placement.ErrHandoff) {
		t.Fatalf("during handoff (old owner): %v", err)
	}
	if err := check("a", 0, true); !errors.As(err, &no) {
		t.Fatalf("during handoff (new owner): %v", err)
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "b", Status: placement.StatusDown})
	if err := check("b", 2, true); !errors.Is(err, placement.ErrNodeDown) {
		t.Fatalf("down: %v", err)
	}
}

func TestLease(t *testing.T) {
	l := placement.Lease{Duration: time.Second}
	at := time.Unix(100, 0)
	if l.Fresh(time.Time{}, at) {
		t.Fatal("zero anchor fresh")
	}
	if !l.Fresh(at, at.Add(999*time.Millisecond)) || l.Fresh(at, at.Add(time.Second)) {
		t.Fatal("lease boundary wrong")
	}
	if got := placement.FenceDelay(10*time.Second, 0.05, time.Second); got != 11500*time.Millisecond {
		t.Fatalf("FenceDelay = %s", got)
	}
}

func TestPlannerFailoverWaitsForFence(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 32})
	for _, n := range []string{"a", "b", "c"} {
		upNode(t, tb, n, mf())
	}
	fence := 5 * time.Second
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 4})
	now := time.Unix(0, 0)
	cmds := p.Step(tb, now)
	if len(cmds) != 1 || cmds[0].Op != placement.OpAssign || len(cmds[0].Moves) != 32 {
		t.Fatalf("initial plan: %+v", cmds)
	}
	if at, ok := p.NextDeadline(time.Time{}); ok {
		t.Fatalf("a deadline (%s) with no delay running", at)
	}
	mustApply(t, tb, cmds[0])
	if len(p.Step(tb, now)) != 0 {
		t.Fatal("plan not stable")
	}
	ownedByB := tb.Owned("b")
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "b", Status: placement.StatusDown})
	// Nothing moves until the fence delay has passed since the leader saw b down.
	for d := time.Duration(0); d < fence; d += 500 * time.Millisecond {
		if cmds := ownerChanges(p.Step(tb, now.Add(d))); len(cmds) != 0 {
			t.Fatalf("at +%s: reassigned before the fence: %+v", d, cmds)
		}
	}
	// The planner names the instant its caller must step again.
	if at, ok := p.NextDeadline(time.Time{}); !ok || !at.Equal(now.Add(fence)) {
		t.Fatalf("next deadline %s %v, want the fence's end %s", at, ok, now.Add(fence))
	}
	cmds = ownerChanges(p.Step(tb, now.Add(fence)))
	if len(cmds) != 1 || cmds[0].Op != placement.OpAssign || len(cmds[0].Moves) != len(ownedByB) {
		t.Fatalf("failover plan: %+v (b owned %d)", cmds, len(ownedByB))
	}
	for _, m := range cmds[0].Moves {
		if m.From != "b" || m.To == "b" {
			t.Fatalf("bad failover move %+v", m)
		}
	}
	mustApply(t, tb, cmds[0])
	// A new leader (fresh planner) restarts the timer: never earlier.
	p2 := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 4})
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "c", Status: placement.StatusDown})
	if cmds := ownerChanges(p2.Step(tb, now.Add(time.Hour))); len(cmds) != 0 {
		t.Fatalf("fresh planner moved at once: %+v", cmds)
	}
	if cmds := ownerChanges(p2.Step(tb, now.Add(time.Hour+fence))); len(cmds) != 1 {
		t.Fatalf("fresh planner never moved: %+v", cmds)
	}
}

// ownerChanges drops the commands that change only replica sets.
func ownerChanges(cmds []placement.Command) []placement.Command {
	var out []placement.Command
	for _, c := range cmds {
		if c.Op != placement.OpShrink && c.Op != placement.OpJoin {
			out = append(out, c)
		}
	}
	return out
}

func TestPlannerGradualHandoff(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 64})
	upNode(t, tb, "a", mf())
	upNode(t, tb, "b", mf())
	fence := 2 * time.Second
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 3})
	now := time.Unix(0, 0)
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
	}
	upNode(t, tb, "c", mf()) // joins
	target := 0
	for s := 0; s < 64; s++ {
		if placement.Rendezvous(tk, s, []string{"a", "b", "c"}) == "c" {
			target++
		}
	}
	steps := 0
	for len(tb.Owned("c")) < target {
		steps++
		if steps > 200 {
			t.Fatalf("c owns %d of %d after %d steps", len(tb.Owned("c")), target, steps)
		}
		cmds := p.Step(tb, now)
		for _, c := range cmds {
			if c.Op == placement.OpAssign {
				t.Fatalf("join moved shards without handoff: %+v", c)
			}
			if c.Op == placement.OpComplete {
				// Completion only after confirmation or the fence delay.
				for _, m := range c.Moves {
					s, _ := tb.Shard(m.Shard)
					if s.MovingTo != "c" {
						t.Fatalf("complete of a shard not moving: %+v", s)
					}
				}
			}
			mustApply(t, tb, c)
		}
		moving := 0
		for i := 0; i < 64; i++ {
			if s, _ := tb.Shard(ref(i)); s.MovingTo != "" {
				moving++
				if steps%2 == 0 { // half the moves are confirmed by a handoff
					p.Confirm(placement.Move{Shard: ref(i), From: s.Owner, Epoch: s.Epoch, To: s.MovingTo})
				}
			}
		}
		if moving > 3 {
			t.Fatalf("%d moves in flight, limit 3", moving)
		}
		now = now.Add(fence / 4)
	}
	// Every shard c gained went through a handoff: epoch 2.
	for _, r := range tb.Owned("c") {
		if s, _ := tb.Shard(r); s.Epoch != 2 {
			t.Fatalf("%s epoch %d", r, s.Epoch)
		}
	}
	// Draining moves everything off, and aborts moves to a node that died.
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "a", Status: placement.StatusDraining})
	cmds := p.Step(tb, now)
	for _, c := range cmds {
		mustApply(t, tb, c)
	}
	var begun []placement.Move
	for _, c := range cmds {
		if c.Op == placement.OpBegin {
			begun = c.Moves
		}
	}
	if len(begun) == 0 {
		t.Fatal("draining began no move")
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: begun[0].To, Status: placement.StatusDown})
	cmds = p.Step(tb, now)
	if len(cmds) == 0 || cmds[0].Op != placement.OpAbort {
		t.Fatalf("no abort for a dead target: %+v", cmds)
	}
}

func TestPlanVoters(t *testing.T) {
	now := time.Unix(1000, 0)
	alive := func(names ...string) []placement.Peer {
		var ps []placement.Peer
		for _, n := range names {
			ps = append(ps, placement.Peer{Name: n, State: placement.PeerAlive})
		}
		return ps
	}
	deadAt := map[string]time.Time{}
	in := placement.VoterInput{
		Self:      "a",
		MaxVoters: 3,
		Grace:     10 * time.Second,
		Now:       now,
		DeadSince: func(n string) (time.Time, bool) { t, ok := deadAt[n]; return t, ok },
	}
	// Join: new peers become non-voters, then the short voter set is filled.
	in.Servers = []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: false}}
	in.Peers = alive("a", "b", "c", "d")
	got := fmt.Sprint(placement.PlanVoters(in))
	want := fmt.Sprint([]placement.ConfigChange{{Op: placement.AddNonvoter, ID: "c"}, {Op: placement.AddNonvoter, ID: "d"}, {Op: placement.Promote, ID: "b"}})
	if got != want {
		t.Fatalf("join: %s, want %s", got, want)
	}
	// A dead voter within grace is kept; after grace it is replaced.
	in.Servers = []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}, {ID: "d"}}
	in.Peers = append(alive("a", "b", "d"), placement.Peer{Name: "c", State: placement.PeerFailed})
	deadAt["c"] = now.Add(-5 * time.Second)
	if ch := placement.PlanVoters(in); len(ch) != 0 {
		t.Fatalf("within grace: %v", ch)
	}
	deadAt["c"] = now.Add(-11 * time.Second)
	got = fmt.Sprint(placement.PlanVoters(in))
	want = fmt.Sprint([]placement.ConfigChange{{Op: placement.Promote, ID: "d"}, {Op: placement.RemoveServer, ID: "c"}})
	if got != want {
		t.Fatalf("dead voter: %s, want %s", got, want)
	}
	// A peer that left is removed; the leader never removes itself.
	in.Peers = append(alive("b", "c", "d"), placement.Peer{Name: "a", State: placement.PeerLeft}, placement.Peer{Name: "e", State: placement.PeerLeft})
	in.Servers = []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}, {ID: "e"}}
	got = fmt.Sprint(placement.PlanVoters(in))
	want = fmt.Sprint([]placement.ConfigChange{{Op: placement.AddNonvoter, ID: "d"}, {Op: placement.RemoveServer, ID: "e"}})
	if got != want {
		t.Fatalf("left: %s, want %s", got, want)
	}
}

func TestBootstrapDecision(t *testing.T) {
	peers := func(names ...string) []placement.Peer {
		var ps []placement.Peer
		for _, n := range names {
			ps = append(ps, placement.Peer{Name: n, State: placement.PeerAlive})
		}
		return ps
	}
	all := peers("n3", "n1", "n4", "n2", "n5")
	var who []string
	for _, p := range all {
		if v, ok := placement.BootstrapDecision(p.Name, 3, all, false); ok {
			who = append(who, p.Name)
			if fmt.Sprint(v) != "[n1 n2 n3]" {
				t.Fatalf("voters %v", v)
			}
		}
	}
	if fmt.Sprint(who) != "[n1]" {
		t.Fatalf("bootstrappers %v", who)
	}
	if _, ok := placement.BootstrapDecision("n1", 3, all[:2], false); ok {
		t.Fatal("bootstrapped below expect")
	}
	if _, ok := placement.BootstrapDecision("n1", 3, all, true); ok {
		t.Fatal("bootstrapped a node with state")
	}
	// A newcomer that sorts lowest must not start a second cluster.
	existing := peers("n0", "n1", "n2", "n3")
	existing[2].InCluster = true
	if _, ok := placement.BootstrapDecision("n0", 3, existing, false); ok {
		t.Fatal("bootstrapped beside an existing cluster")
	}
	// Failed peers do not count toward expect.
	some := peers("n1", "n2", "n3")
	some[2].State = placement.PeerFailed
	if _, ok := placement.BootstrapDecision("n1", 3, some, false); ok {
		t.Fatal("counted a failed peer")
	}
}

func FuzzReadSnapshot(f *testing.F) {
	tb := placement.NewTable()
	tb.Apply(placement.Command{Op: placement.OpInit, Shards: 2})
	tb.Apply(placement.Command{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "a", Status: placement.StatusUp}})
	tb.Apply(placement.Command{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: "k", Requires: []manifest.ClauseID{manifest.Admission}, Digest: "d1"}}})
	var buf bytes.Buffer
	if err := placement.WriteSnapshot(&buf, tb); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"v":1,"shards":1048576,"groups":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := placement.ReadSnapshot(bytes.NewReader(b))
		if err != nil {
			return
		}
		// Whatever decodes must encode and decode to the same bytes.
		var out bytes.Buffer
		if err := placement.WriteSnapshot(&out, got); err != nil {
			return // e.g. a nil group pointer cannot come from ReadSnapshot
		}
		again, err := placement.ReadSnapshot(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("re-read: %v", err)
		}
		var out2 bytes.Buffer
		if err := placement.WriteSnapshot(&out2, again); err != nil || !bytes.Equal(out.Bytes(), out2.Bytes()) {
			t.Fatalf("snapshot not stable: %v", err)
		}
	})
}

// TestPlannerRefusedHandoffAborts: a handoff the old owner refused is
// aborted at the next step (the old owner keeps the shard with its state)
// rather than completed after the fence delay, and that shard is not
// moved again until a fence delay has passed.
func TestPlannerRefusedHandoffAborts(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 16})
	upNode(t, tb, "a", mf())
	fence := 2 * time.Second
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 16})
	now := time.Unix(0, 0)
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
	}
	upNode(t, tb, "b", mf())
	var begun []placement.Move
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
		if c.Op == placement.OpBegin {
			begun = c.Moves
		}
	}
	if len(begun) == 0 {
		t.Fatal("b's join began no handoff")
	}
	if cmds := p.Step(tb, now); len(cmds) != 0 { // starts the moves' fence timers
		t.Fatalf("moves in flight, nothing to do yet: %+v", cmds)
	}
	refused := begun[0]
	p.Refuse(refused)
	// Even past the fence delay, the refused move aborts; the others
	// (unconfirmed) complete by the fence delay as before.
	now = now.Add(fence)
	var aborted, completed []placement.Move
	for _, c := range p.Step(tb, now) {
		switch c.Op {
		case placement.OpAbort:
			aborted = append(aborted, c.Moves...)
		case placement.OpComplete:
			completed = append(completed, c.Moves...)
		}
		mustApply(t, tb, c)
	}
	if len(aborted) != 1 || aborted[0] != refused {
		t.Fatalf("aborted %+v, want only the refused %+v", aborted, refused)
	}
	if got, want := len(completed), len(begun)-1; got != want {
		t.Fatalf("completed %d moves, want %d", got, want)
	}
	if s, _ := tb.Shard(refused.Shard); s.Owner != "a" || s.MovingTo != "" || s.Epoch != refused.Epoch+1 {
		t.Fatalf("after the abort the shard is %+v, want a's at epoch %d", s, refused.Epoch+1)
	}
	for _, c := range p.Step(tb, now.Add(fence/2)) {
		for _, m := range c.Moves {
			if m.Shard == refused.Shard {
				t.Fatalf("refused shard moved again within the fence delay: %+v", c)
			}
		}
	}
	again := false
	for _, c := range p.Step(tb, now.Add(fence)) {
		for _, m := range c.Moves {
			again = again || (c.Op == placement.OpBegin && m.Shard == refused.Shard)
		}
	}
	if !again {
		t.Fatal("refused shard never tried again")
	}
}

// settle steps the planner, confirming every handoff, until it has
// nothing left to do.
func settle(t *testing.T, tb *placement.Table, p *placement.Planner, now time.Time) {
	t.Helper()
	for i := 0; i < 100; i++ {
		cmds := p.Step(tb, now)
		if len(cmds) == 0 {
			return
		}
		for _, c := range cmds {
			mustApply(t, tb, c)
		}
		for _, gn := range tb.GroupNames() {
			for j, s := range tb.Groups[gn].Shards {
				if s.MovingTo != "" {
					p.Confirm(placement.Move{Shard: placement.ShardRef{Group: gn, Index: j}, From: s.Owner, Epoch: s.Epoch, To: s.MovingTo})
				}
			}
		}
	}
	t.Fatal("planner did not settle")
}

func owners(tb *placement.Table, kind string) map[string]int {
	out := map[string]int{}
	for _, s := range tb.Groups[kind].Shards {
		out[s.Owner]++
	}
	return out
}

// TestPlannerKindsOnlyWhereHostedAndAgreed: a kind's shards go only to
// the nodes that host it; a node whose policy digest for the kind differs
// from the others' is given none of them (its shards are handed off),
// is reported by Policy, and receives shards again once it agrees.
func TestPlannerKindsOnlyWhereHostedAndAgreed(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 64})
	for _, n := range []string{"a", "b", "c"} {
		mustApply(t, tb, node(n, placement.StatusUp, mf()))
	}
	spec := func(kind, digest string) placement.KindSpec { return placement.KindSpec{Name: kind, Digest: digest} }
	publish := func(n string, ks ...placement.KindSpec) {
		mustApply(t, tb, placement.Command{Op: placement.OpHosts, Name: n, Kinds: ks})
	}
	// "bank" on a and b only; "echo" everywhere.
	publish("a", spec("bank", "v1"), spec("echo", "e"))
	publish("b", spec("bank", "v1"), spec("echo", "e"))
	publish("c", spec("echo", "e"))
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 64})
	now := time.Unix(0, 0)
	settle(t, tb, p, now)
	if o := owners(tb, "bank"); o["c"] != 0 || o["a"] == 0 || o["b"] == 0 || o[""] != 0 {
		t.Fatalf("bank owners %v: want only a and b", o)
	}
	if o := owners(tb, "echo"); o["a"] == 0 || o["b"] == 0 || o["c"] == 0 {
		t.Fatalf("echo owners %v: want all three", o)
	}
	for i := 0; i < 200; i++ {
		loc, err := tb.Locate("bank", fmt.Sprint(i))
		if err != nil || loc.Owner == "c" {
			t.Fatalf("bank/%d at %+v, %v", i, loc, err)
		}
	}

	if why := tb.Unsettled(); why != "" {
		t.Fatalf("settled table reports %s", why)
	}

	// Rolling upgrade: c registers bank with a new policy (v2) while a
	// and b still run v1. c gets none of bank's shards and is reported.
	publish("c", spec("bank", "v2"), spec("echo", "e"))
	settle(t, tb, p, now)
	if o := owners(tb, "bank"); o["c"] != 0 {
		t.Fatalf("bank owners %v: c disagrees and must own none", o)
	}
	if v := tb.Policy("bank"); v.Digest != "v1" || fmt.Sprint(v.Agree) != "[a b]" || v.Differ["c"] != "v2" {
		t.Fatalf("policy view %+v", v)
	}
	// b upgrades too: now a is the one that differs, and its shards are
	// handed off (never assigned directly away from a live node).
	publish("b", spec("bank", "v2"), spec("echo", "e"))
	if why := tb.Unsettled(); !strings.Contains(why, `is on "a"`) && !strings.Contains(why, `its target`) {
		t.Fatalf("after b's upgrade Unsettled = %q, want a's shards off target", why)
	}
	for i := 0; i < 100; i++ {
		cmds := p.Step(tb, now)
		if len(cmds) == 0 {
			break
		}
		for _, c := range cmds {
			if c.Op == placement.OpAssign {
				t.Fatalf("shards taken from a live node without a handoff: %+v", c)
			}
			mustApply(t, tb, c)
		}
		for j, s := range tb.Groups["bank"].Shards {
			if s.MovingTo != "" {
				p.Confirm(placement.Move{Shard: placement.ShardRef{Group: "bank", Index: j}, From: s.Owner, Epoch: s.Epoch, To: s.MovingTo})
			}
		}
	}
	if o := owners(tb, "bank"); o["a"] != 0 || o["b"] == 0 || o["c"] == 0 {
		t.Fatalf("bank owners %v after b upgraded: want b and c only", o)
	}
	if v := tb.Policy("bank"); v.Digest != "v2" || v.Differ["a"] != "v1" || len(v.Differ) != 1 {
		t.Fatalf("policy view %+v", v)
	}
	if o := owners(tb, "echo"); o["a"] == 0 {
		t.Fatalf("echo owners %v: a's disagreement about bank must not cost it echo", o)
	}
	// a agrees again: it receives bank shards.
	publish("a", spec("bank", "v2"), spec("echo", "e"))
	settle(t, tb, p, now)
	if o := owners(tb, "bank"); o["a"] == 0 || o["b"] == 0 || o["c"] == 0 {
		t.Fatalf("bank owners %v after a agreed: want all three", o)
	}
	if v := tb.Policy("bank"); len(v.Differ) != 0 || len(v.Agree) != 3 {
		t.Fatalf("policy view %+v", v)
	}
}

// TestPolicyTieKeepsTheOwners: with two nodes that disagree, the digest
// whose node owns the kind's shards stays agreed, so the first node of a
// two-node rolling upgrade does not take everything.
func TestPolicyTieKeepsTheOwners(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 16})
	mustApply(t, tb, node("a", placement.StatusUp, mf()))
	mustApply(t, tb, placement.Command{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: "bank", Digest: "zz-old"}}})
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 16})
	settle(t, tb, p, time.Unix(0, 0))
	mustApply(t, tb, node("b", placement.StatusUp, mf()))
	mustApply(t, tb, placement.Command{Op: placement.OpHosts, Name: "b", Kinds: []placement.KindSpec{{Name: "bank", Digest: "aa-new"}}})
	if v := tb.Policy("bank"); v.Digest != "zz-old" || v.Differ["b"] != "aa-new" {
		t.Fatalf("tie went to %+v, want the owners' digest", v)
	}
	settle(t, tb, p, time.Unix(0, 0))
	if o := owners(tb, "bank"); o["a"] != 16 {
		t.Fatalf("owners %v", o)
	}
	// A node marked down does not vote.
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "a", Status: placement.StatusDown})
	if v := tb.Policy("bank"); v.Digest != "aa-new" || len(v.Differ) != 0 {
		t.Fatalf("with a down: %+v", v)
	}
}

// TestPlannerConfirmedMovesNeverCompleteUnshipped: with ConfirmMoves (a
// node with a Handoff), a begun move whose old owner is alive completes
// only once confirmed, however long it waits; a failed or refused
// transfer aborts it, and so does one nobody reports on for four fence
// delays. Completing unconfirmed would hand the shard to a node without
// the state the old owner still holds.
func TestPlannerConfirmedMovesNeverCompleteUnshipped(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 16})
	upNode(t, tb, "a", mf())
	upNode(t, tb, "b", mf())
	fence := 2 * time.Second
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 2, ConfirmMoves: true})
	now := time.Unix(0, 0)
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
	}
	upNode(t, tb, "c", mf()) // joins: shards move to c through handoffs
	var begun []placement.Move
	for _, c := range ownerChanges(p.Step(tb, now)) {
		mustApply(t, tb, c)
		if c.Op == placement.OpBegin {
			begun = append(begun, c.Moves...)
		}
	}
	if len(begun) != 2 {
		t.Fatalf("began %d moves, want 2: %+v", len(begun), begun)
	}
	first, second := begun[0], begun[1]
	step := func(at time.Time) []placement.Command {
		t.Helper()
		cmds := ownerChanges(p.Step(tb, at))
		for _, c := range cmds {
			if c.Op == placement.OpComplete || c.Op == placement.OpAssign {
				for _, m := range c.Moves {
					if m == first || m == second {
						t.Fatalf("at +%s: %v of an unconfirmed move %+v", at.Sub(now), c.Op, m)
					}
				}
			}
			mustApply(t, tb, c)
		}
		return cmds
	}
	// The planner times a move from the first step that sees it.
	seen := now.Add(time.Millisecond)
	step(seen)
	// Past the fence delay, unconfirmed: neither completes.
	step(seen.Add(fence))
	for _, m := range begun {
		if s, _ := tb.Shard(m.Shard); s.MovingTo != "c" || s.Owner != m.From {
			t.Fatalf("after the fence delay %s is %+v, want still moving from %s", m.Shard, s, m.From)
		}
	}
	// The first transfer failed: aborted, its old owner keeps it.
	p.Refuse(first)
	aborted := false
	for _, c := range step(seen.Add(fence + time.Millisecond)) {
		if c.Op == placement.OpAbort && slices.ContainsFunc(c.Moves, func(m placement.Move) bool { return m.Shard == first.Shard }) {
			aborted = true
		}
	}
	if s, _ := tb.Shard(first.Shard); !aborted || s.MovingTo != "" || s.Owner != first.From || s.Epoch != first.Epoch+1 {
		t.Fatalf("a failed transfer: aborted %v, shard %+v", aborted, s)
	}
	// Nobody reports on the second: aborted after four fence delays.
	if at, ok := p.NextDeadline(time.Time{}); !ok || at.After(seen.Add(4*fence)) {
		t.Fatalf("next deadline %s %v, want by +%s", at.Sub(seen), ok, 4*fence)
	}
	step(seen.Add(4*fence - time.Millisecond))
	if s, _ := tb.Shard(second.Shard); s.MovingTo != "c" {
		t.Fatalf("aborted early: %+v", s)
	}
	step(seen.Add(4 * fence))
	if s, _ := tb.Shard(second.Shard); s.MovingTo != "" || s.Owner != second.From {
		t.Fatalf("a move nobody reported on after four fence delays: %+v, want aborted", s)
	}
}

// TestPlannerConfirmWinsOverRefusal: two transfers of one move may report
// (a leader that stepped down and the next one each ran one); when one
// confirms, the move completes even if the other failed: the old owner
// shipped the state and may have let go of it.
func TestPlannerConfirmWinsOverRefusal(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 8})
	upNode(t, tb, "a", mf())
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: time.Second, MaxMoving: 1, ConfirmMoves: true})
	now := time.Unix(0, 0)
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
	}
	upNode(t, tb, "b", mf())
	var begun []placement.Move
	for _, c := range ownerChanges(p.Step(tb, now)) {
		mustApply(t, tb, c)
		if c.Op == placement.OpBegin {
			begun = c.Moves
		}
	}
	if len(begun) != 1 {
		t.Fatalf("began %+v, want one move", begun)
	}
	m := begun[0]
	p.Refuse(m)
	p.Confirm(m)
	for _, c := range ownerChanges(p.Step(tb, now)) {
		if c.Op == placement.OpAbort {
			t.Fatalf("aborted a confirmed move: %+v", c)
		}
		mustApply(t, tb, c)
	}
	if s, _ := tb.Shard(m.Shard); s.Owner != "b" || s.Epoch != m.Epoch+1 {
		t.Fatalf("shard %+v, want completed to b at epoch %d", s, m.Epoch+1)
	}
}

// driveOthers steps p at at, confirming at once every handoff it begins
// except those of shard, until it begins nothing more; it returns the
// move of shard it began, if any. With watch false, the first shard to
// be moved becomes the watched one (*shard is set).
func driveOthers(t *testing.T, tb *placement.Table, p *placement.Planner, at time.Time, shard *placement.ShardRef, watch *bool) (placement.Move, bool) {
	t.Helper()
	var found placement.Move
	var ok bool
	for i := 0; i < 64; i++ {
		began := false
		for _, c := range ownerChanges(p.Step(tb, at)) {
			mustApply(t, tb, c)
			if c.Op != placement.OpBegin {
				continue
			}
			for _, m := range c.Moves {
				began = true
				if !*watch {
					*shard, *watch = m.Shard, true
				}
				if m.Shard == *shard {
					found, ok = m, true
				} else {
					p.Confirm(m)
				}
			}
		}
		if !began {
			return found, ok
		}
	}
	t.Fatal("the planner keeps beginning moves")
	return found, ok
}

// TestPlannerBacksOffRepeatedlyAbortedMoves: a shard whose handoffs to
// one target keep being aborted is moved there again after one fence
// delay, then two, then four, and four from then on, so an old owner
// does not passivate the shard's actors every fence delay for a target
// that is not ready; once the shard settles the back-off is gone.
func TestPlannerBacksOffRepeatedlyAbortedMoves(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 8})
	upNode(t, tb, "a", mf())
	fence := time.Second
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 1, ConfirmMoves: true})
	now := time.Unix(0, 0)
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
	}
	upNode(t, tb, "b", mf())
	var shard placement.ShardRef
	watch := false
	m, ok := driveOthers(t, tb, p, now, &shard, &watch)
	if !ok {
		t.Fatal("b's join began no handoff")
	}
	for i, wait := range []time.Duration{fence, 2 * fence, 4 * fence, 4 * fence} {
		p.Refuse(m)
		driveOthers(t, tb, p, now, &shard, &watch) // the abort
		if _, ok := driveOthers(t, tb, p, now, &shard, &watch); ok {
			t.Fatalf("abort %d: moved again at once", i+1)
		}
		if s, _ := tb.Shard(shard); s.MovingTo != "" || s.Owner != "a" {
			t.Fatalf("abort %d: the shard is %+v, want a's", i+1, s)
		}
		if at, ok := p.NextDeadline(time.Time{}); !ok || at.After(now.Add(wait)) {
			t.Fatalf("abort %d: next deadline +%s %v, want by +%s", i+1, at.Sub(now), ok, wait)
		}
		if _, ok := driveOthers(t, tb, p, now.Add(wait-time.Millisecond), &shard, &watch); ok {
			t.Fatalf("abort %d: moved again before +%s", i+1, wait)
		}
		now = now.Add(wait)
		if m, ok = driveOthers(t, tb, p, now, &shard, &watch); !ok || m.To != "b" {
			t.Fatalf("abort %d: after +%s began %+v %v, want the move to b again", i+1, wait, m, ok)
		}
		// A back-off that ran out is no deadline to wake the leader for.
		if at, ok := p.NextDeadline(time.Time{}); ok && !at.After(now) {
			t.Fatalf("abort %d: next deadline +%s, at or before now", i+1, at.Sub(now))
		}
	}
	// This time it ships: the move completes and the shard is settled.
	p.Confirm(m)
	driveOthers(t, tb, p, now, &shard, &watch)
	if s, _ := tb.Shard(shard); s.Owner != "b" {
		t.Fatalf("confirmed move left the shard %+v, want b's", s)
	}
	driveOthers(t, tb, p, now, &shard, &watch) // a step that sees it settled
	if at, ok := p.NextDeadline(time.Time{}); ok {
		t.Fatalf("a settled shard keeps a deadline at +%s", at.Sub(now))
	}
}

// TestPlannerDrainingOwnerFallsBackToNextRanked: a draining node waits
// for its shards to move away; when handoffs of one to its top-ranked
// node were aborted twice in a row, the shard goes to the next-ranked
// node instead of waiting out a growing back-off.
func TestPlannerDrainingOwnerFallsBackToNextRanked(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 8})
	for _, n := range []string{"a", "b", "c"} {
		upNode(t, tb, n, mf())
	}
	fence := time.Second
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 8, ConfirmMoves: true})
	now := time.Unix(0, 0)
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "a", Status: placement.StatusDraining})
	var shard placement.ShardRef
	watch := false
	m, ok := driveOthers(t, tb, p, now, &shard, &watch)
	if !ok {
		t.Fatal("draining a began no handoff")
	}
	top := m.To
	for i, wait := range []time.Duration{fence} {
		p.Refuse(m)
		driveOthers(t, tb, p, now, &shard, &watch) // the abort
		if _, ok := driveOthers(t, tb, p, now, &shard, &watch); ok {
			t.Fatalf("abort %d: moved again at once", i+1)
		}
		now = now.Add(wait)
		if m, ok = driveOthers(t, tb, p, now, &shard, &watch); !ok || m.To != top {
			t.Fatalf("after abort %d: began %+v %v, want a move to %s again", i+1, m, ok, top)
		}
	}
	p.Refuse(m)
	driveOthers(t, tb, p, now, &shard, &watch) // the abort
	m, ok = driveOthers(t, tb, p, now, &shard, &watch)
	if !ok || m.To == top || m.To == "a" {
		t.Fatalf("after two aborts to %s: began %+v %v, want a move to the next-ranked node at once", top, m, ok)
	}
	alt := m.To
	// The next-ranked node fails too: neither is tried again at once, and
	// top's two failures are not forgotten (it still waits its two fence
	// delays, while alt waits one).
	p.Refuse(m)
	driveOthers(t, tb, p, now, &shard, &watch) // the abort
	if got, ok := driveOthers(t, tb, p, now, &shard, &watch); ok {
		t.Fatalf("after the fallback to %s failed: began %+v at once", alt, got)
	}
	now = now.Add(fence)
	if m, ok = driveOthers(t, tb, p, now, &shard, &watch); !ok || m.To != alt {
		t.Fatalf("a fence delay after the fallback failed: began %+v %v, want the move to %s again (%s backs off longer)", m, ok, alt, top)
	}
	p.Confirm(m)
	driveOthers(t, tb, p, now, &shard, &watch)
	if s, _ := tb.Shard(shard); s.Owner != alt || s.MovingTo != "" {
		t.Fatalf("shard %+v, want %s's", s, alt)
	}
	// a has left the shard; the planner does not move it on to top
	// before top's back-off passed.
	if got, ok := driveOthers(t, tb, p, now.Add(time.Millisecond), &shard, &watch); ok {
		t.Fatalf("moved to the failing node again at once: %+v", got)
	}
}

// TestForwardableOnlyTheNodesOwn: a node may have the leader apply only
// changes of its own; a command about another node, a move, or anything
// from a node the table does not hold is refused (ErrNotForwardable,
// matching ErrBadCommand), whatever its content.
func TestForwardableOnlyTheNodesOwn(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 2})
	for _, n := range []string{"a", "b"} {
		mustApply(t, tb, placement.Command{Op: placement.OpNode, Node: &placement.NodeInfo{Name: n, Status: placement.StatusUp}})
	}
	mustApply(t, tb, placement.Command{Op: placement.OpStatus, Name: "b", Status: placement.StatusDraining})
	sh := placement.ShardRef{Group: "g", Index: 0}
	own := []placement.Command{
		{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "a", Status: placement.StatusUp, Addr: "new"}},
		{Op: placement.OpStatus, Name: "a", Status: placement.StatusDraining},
		{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: tk}}},
		{Op: placement.OpSync, Name: "a", Nonce: "x"},
		{Op: placement.OpShrink, Moves: []placement.Move{{Shard: sh, From: "a", Epoch: 1, To: "b"}}}, // a's follower out
		{Op: placement.OpShrink, Moves: []placement.Move{{Shard: sh, From: "b", Epoch: 1, To: "a"}}}, // a leaves b's set
		{Op: placement.OpJoin, Moves: []placement.Move{{Shard: sh, From: "a", Epoch: 1, To: "b"}}},
	}
	for _, c := range own {
		if err := placement.Forwardable(tb, "a", c); err != nil {
			t.Errorf("a's own %s refused: %v", c.Op, err)
		}
	}
	if err := placement.Forwardable(tb, "b", placement.Command{Op: placement.OpStatus, Name: "b", Status: placement.StatusUp}); err != nil {
		t.Errorf("draining b coming back up refused: %v", err)
	}
	others := []placement.Command{
		{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "b", Status: placement.StatusUp}},
		{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "a", Status: placement.StatusDown}}, // its status is the leader's
		{Op: placement.OpStatus, Name: "b", Status: placement.StatusDown},
		{Op: placement.OpStatus, Name: "a", Status: placement.StatusDown},
		{Op: placement.OpStatus, Name: "a", Status: placement.StatusUp}, // up, not draining
		{Op: placement.OpHosts, Name: "b"},
		{Op: placement.OpSync, Name: "b", Nonce: "x"},
		{Op: placement.OpRemove, Name: "b"},
		{Op: placement.OpInit, Shards: 4},
		{Op: placement.OpAssign, Moves: []placement.Move{{Shard: sh, From: "b", Epoch: 1, To: "a"}}},
		{Op: placement.OpBegin, Moves: []placement.Move{{Shard: sh, From: "a", Epoch: 1, To: "b"}}},
		{Op: placement.OpComplete, Moves: []placement.Move{{Shard: sh, From: "a", Epoch: 1, To: "b"}}},
		{Op: placement.OpAbort, Moves: []placement.Move{{Shard: sh, From: "a", Epoch: 1, To: "b"}}},
		{Op: placement.OpShrink, Moves: []placement.Move{{Shard: sh, From: "b", Epoch: 1, To: "c"}}},
		{Op: placement.OpShrink},
		{Op: placement.OpJoin, Moves: []placement.Move{{Shard: sh, From: "b", Epoch: 1, To: "a"}}},
		{Op: placement.OpJoin, Moves: []placement.Move{{Shard: sh, From: "a", Epoch: 1, To: "b"}, {Shard: sh, From: "b", Epoch: 1, To: "a"}}},
	}
	for _, c := range others {
		if err := placement.Forwardable(tb, "a", c); !errors.Is(err, placement.ErrNotForwardable) || !errors.Is(err, placement.ErrBadCommand) {
			t.Errorf("a forwarding %s %+v: %v, want ErrNotForwardable", c.Op, c, err)
		}
	}
	// A node the table does not hold forwards nothing, not even its own.
	if err := placement.Forwardable(tb, "mallory", placement.Command{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "mallory", Status: placement.StatusUp}}); !errors.Is(err, placement.ErrNotForwardable) {
		t.Errorf("a node outside the table forwarding its entry: %v", err)
	}
	// Ask timeouts in a publication are checked.
	if r := tb.Apply(placement.Command{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: tk, AskTimeout: -1}}}); !errors.Is(r.Err, placement.ErrBadCommand) {
		t.Errorf("a negative ask timeout: %v", r.Err)
	}
}

// TestPlanVotersKeepsAQuorum: a voter that left, or is dead past its
// grace, is removed only if the voters left alive are a majority of the
// voters left. Removing a node that drained and left while another voter
// is down would leave a configuration of two voters, one dead: raft uses
// it at once, and no node coming back could repair it; kept, the node
// that left regains the quorum when it returns.
func TestPlanVotersKeepsAQuorum(t *testing.T) {
	now := time.Unix(1000, 0)
	deadAt := map[string]time.Time{"c": now.Add(-time.Second)}
	in := placement.VoterInput{
		Self: "b", MaxVoters: 3, Grace: 10 * time.Second, Now: now,
		DeadSince: func(n string) (time.Time, bool) { t, ok := deadAt[n]; return t, ok },
		Servers:   []placement.RaftServer{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}},
		Peers: []placement.Peer{{Name: "a", State: placement.PeerLeft}, {Name: "b", State: placement.PeerAlive},
			{Name: "c", State: placement.PeerFailed}},
	}
	if ch := placement.PlanVoters(in); len(ch) != 0 {
		t.Fatalf("a left while c is down: %v, want no change (the removal would leave no quorum)", ch)
	}
	in.Peers[2].State = placement.PeerAlive // c is back
	delete(deadAt, "c")
	got := fmt.Sprint(placement.PlanVoters(in))
	if want := fmt.Sprint([]placement.ConfigChange{{Op: placement.RemoveServer, ID: "a"}}); got != want {
		t.Fatalf("a left, b and c alive: %s, want %s", got, want)
	}
	// A dead voter past its grace is not removed either while the rest
	// cannot form a quorum without it.
	in.Peers = []placement.Peer{{Name: "a", State: placement.PeerFailed}, {Name: "b", State: placement.PeerAlive},
		{Name: "c", State: placement.PeerFailed}}
	deadAt = map[string]time.Time{"a": now.Add(-time.Minute), "c": now.Add(-time.Minute)}
	if ch := placement.PlanVoters(in); len(ch) != 0 {
		t.Fatalf("two voters of three dead: %v, want no change", ch)
	}
}

// A move that is aborted and begun again is a move of its own: the abort
// raises the shard's epoch, so an outcome of the aborted one (its old
// owner's shipment, read before the owner served again, reporting late)
// is never taken for the new one's. The two used to bear the same name,
// and the late confirmation completed the new move with the state the
// old owner held before the abort: its writes since were lost.
func TestPlannerTakesNoOutcomeOfAnAbortedMoveForItsSuccessor(t *testing.T) {
	tb := placement.NewTable()
	mustApply(t, tb, placement.Command{Op: placement.OpInit, Shards: 16})
	upNode(t, tb, "a", mf())
	upNode(t, tb, "b", mf())
	fence := 2 * time.Second
	p := placement.NewPlanner(placement.PlannerConfig{FenceDelay: fence, MaxMoving: 64, ConfirmMoves: true})
	now := time.Unix(0, 0)
	for _, c := range p.Step(tb, now) {
		mustApply(t, tb, c)
	}
	upNode(t, tb, "c", mf())
	var first placement.Move
	for _, c := range ownerChanges(p.Step(tb, now)) {
		mustApply(t, tb, c)
		if c.Op == placement.OpBegin && first.To == "" {
			first = c.Moves[0]
		}
	}
	if first.To != "c" {
		t.Fatalf("c's join began no handoff to it: %+v", first)
	}
	p.Refuse(first)
	steps := func(at time.Time) (begun, completed []placement.Move) {
		for _, c := range ownerChanges(p.Step(tb, at)) {
			mustApply(t, tb, c)
			for _, m := range c.Moves {
				if m.Shard != first.Shard {
					continue
				}
				switch c.Op {
				case placement.OpBegin:
					begun = append(begun, m)
				case placement.OpComplete:
					completed = append(completed, m)
				}
			}
		}
		return begun, completed
	}
	steps(now.Add(time.Millisecond))
	if s, _ := tb.Shard(first.Shard); s.MovingTo != "" || s.Owner != first.From || s.Epoch != first.Epoch+1 {
		t.Fatalf("after the refusal the shard is %+v, want %s's, not moving, at epoch %d", s, first.From, first.Epoch+1)
	}
	// Once the back-off has passed, the same move is planned again.
	var again placement.Move
	for at := now.Add(fence); at.Before(now.Add(10*fence)) && again.To == ""; at = at.Add(fence / 4) {
		if b, _ := steps(at); len(b) > 0 {
			again = b[0]
		}
	}
	if again.To != first.To || again.From != first.From || again.Epoch != first.Epoch+1 {
		t.Fatalf("begun again as %+v, want from %s to %s at epoch %d", again, first.From, first.To, first.Epoch+1)
	}
	// The aborted move's shipment confirms late: nothing completes.
	p.Confirm(first)
	if _, done := steps(now.Add(10 * fence)); len(done) != 0 {
		t.Fatalf("a confirmation of the aborted %+v completed %+v", first, done)
	}
	if s, _ := tb.Shard(first.Shard); s.MovingTo != "c" || s.Owner != first.From {
		t.Fatalf("the move begun again is %+v, want still moving", s)
	}
	p.Confirm(again)
	if _, done := steps(now.Add(10*fence + time.Millisecond)); len(done) != 1 || done[0] != again {
		t.Fatalf("its own confirmation completed %+v, want %+v", done, again)
	}
}
