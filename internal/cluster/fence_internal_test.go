package cluster

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation/route"
)

// routeTable is a table of one shard of kind "k", which node a owns at
// epoch 1, with nodes a and b up; change edits it before the read.
func routeTable(t *testing.T, change ...placement.Command) (*placement.Table, actor.Ref) {
	t.Helper()
	tb := placement.NewTable()
	cmds := []placement.Command{
		{Op: placement.OpInit, Shards: 1},
		{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "a", Status: placement.StatusUp}},
		{Op: placement.OpNode, Node: &placement.NodeInfo{Name: "b", Status: placement.StatusUp}},
		{Op: placement.OpHosts, Name: "a", Kinds: []placement.KindSpec{{Name: "k"}}},
		{Op: placement.OpHosts, Name: "b", Kinds: []placement.KindSpec{{Name: "k"}}},
	}
	ref := actor.Virtual("k", "x")
	cmds = append(cmds, placement.Command{Op: placement.OpAssign, Moves: []placement.Move{{Shard: placement.ShardRef{Group: "k", Index: 0}, To: "a"}}})
	for _, c := range append(cmds, change...) {
		if r := tb.Apply(c); r.Err != nil {
			t.Fatalf("apply %s: %v", c.Op, r.Err)
		}
	}
	return tb, ref
}

// The routing core, for each way the table can stand: who gets the mail,
// with which epoch, and each refusal's identity.
func TestRouteIn(t *testing.T) {
	shard := placement.ShardRef{Group: "k", Index: 0}
	moving := placement.Command{Op: placement.OpBegin, Moves: []placement.Move{{Shard: shard, From: "a", Epoch: 1, To: "b"}}}
	aDown := placement.Command{Op: placement.OpStatus, Name: "a", Status: placement.StatusDown}
	for _, tc := range []struct {
		name    string
		self    string
		fresh   bool
		change  []placement.Command
		ref     actor.Ref
		owner   string
		local   bool
		is      error // the refusal's identity; nil: routed
		stalled bool
	}{
		{name: "the owner, its lease fresh", self: "a", fresh: true, owner: "a", local: true},
		{name: "another node routes to the owner", self: "b", fresh: false, owner: "a"},
		{name: "the owner's lease lapsed", self: "a", is: placement.ErrLeaseExpired, stalled: true},
		{name: "the owner marked down, here", self: "a", fresh: true, change: []placement.Command{aDown}, is: placement.ErrNodeDown, stalled: true},
		{name: "the owner marked down, elsewhere", self: "b", fresh: true, change: []placement.Command{aDown}, is: placement.ErrOwnerDown},
		{name: "a planned move, at the owner", self: "a", fresh: true, change: []placement.Command{moving}, is: placement.ErrHandoff},
		{name: "a planned move, elsewhere", self: "b", fresh: true, change: []placement.Command{moving}, is: placement.ErrHandoff},
		{name: "a kind no node hosts", self: "a", fresh: true, ref: actor.Virtual("nobody", "x"), is: placement.ErrUnknownKind, stalled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, ref := routeTable(t, tc.change...)
			if tc.ref != (actor.Ref{}) {
				ref = tc.ref
			}
			r := routeIn(tb, ref, tc.self, tc.fresh)
			if r.owner != tc.owner || r.local != tc.local || r.stalled != tc.stalled {
				t.Errorf("got owner %q local %v stalled %v, want %q %v %v", r.owner, r.local, r.stalled, tc.owner, tc.local, tc.stalled)
			}
			if tc.is == nil {
				if r.err != nil || r.epoch != 1 {
					t.Errorf("routed with err %v epoch %d, want nil and 1", r.err, r.epoch)
				}
				return
			}
			if !errors.Is(r.err, tc.is) {
				t.Fatalf("err %v, want %v", r.err, tc.is)
			}
			if !r.stalled && !errors.Is(r.err, actor.ErrProcessUnavailable) {
				t.Errorf("err %v does not match actor.ErrProcessUnavailable", r.err)
			}
			var h *route.Hint
			if errors.As(r.err, &h) != errors.Is(tc.is, placement.ErrHandoff) || (h != nil && (h.Owner != "b" || h.Shard != shard.String())) {
				t.Errorf("hint %+v for %v", h, r.err)
			}
		})
	}
}

// The fence loop's core, for each way the table can stand: what is
// passivated, what is named to the new owner of a moving shard, and
// which peers' links are dropped, once.
func TestFenceStep(t *testing.T) {
	shard := placement.ShardRef{Group: "k", Index: 0}
	moving := placement.Command{Op: placement.OpBegin, Moves: []placement.Move{{Shard: shard, From: "a", Epoch: 1, To: "b"}}}
	aDown := placement.Command{Op: placement.OpStatus, Name: "a", Status: placement.StatusDown}
	bDown := placement.Command{Op: placement.OpStatus, Name: "b", Status: placement.StatusDown}
	x := prospero.Identity{Kind: "k", Key: "x"}
	y := prospero.Identity{Kind: "k", Key: "y"}
	active := []prospero.Identity{x, y}
	for _, tc := range []struct {
		name      string
		self      string
		fresh     bool
		change    []placement.Command
		down      map[string]bool // before the step
		passivate int
		movingOut int
		newlyDown []string
		downAfter []string
	}{
		{name: "the owner, its lease fresh", self: "a", fresh: true},
		{name: "the owner's lease lapsed", self: "a", passivate: 2},
		{name: "the owner marked down", self: "a", fresh: true, change: []placement.Command{aDown}, passivate: 2},
		{name: "a planned move away", self: "a", fresh: true, change: []placement.Command{moving}, passivate: 2, movingOut: 2},
		{name: "activations left on a node that does not own the shard", self: "b", fresh: true, passivate: 2},
		{name: "a peer newly marked down", self: "a", fresh: true, change: []placement.Command{bDown},
			newlyDown: []string{"b"}, downAfter: []string{"b"}},
		{name: "a peer still marked down", self: "a", fresh: true, change: []placement.Command{bDown},
			down: map[string]bool{"b": true}, downAfter: []string{"b"}},
		{name: "a peer up again", self: "a", fresh: true, down: map[string]bool{"b": true}},
		{name: "self marked down is no peer", self: "a", change: []placement.Command{aDown}, passivate: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, _ := routeTable(t, tc.change...)
			down := map[string]bool{}
			for k, v := range tc.down {
				down[k] = v
			}
			f := fenceStep(tb, tc.self, tc.fresh, active, down)
			if len(f.passivate) != tc.passivate {
				t.Errorf("passivate %v, want %d of them", f.passivate, tc.passivate)
			}
			if n := len(f.movingOut[shard]); n != tc.movingOut || len(f.movingOut) > 1 {
				t.Errorf("moving out %v, want %d of shard %s", f.movingOut, tc.movingOut, shard)
			}
			if !slices.Equal(f.newlyDown, tc.newlyDown) {
				t.Errorf("newly down %v, want %v", f.newlyDown, tc.newlyDown)
			}
			if got := slices.Sorted(maps.Keys(down)); !slices.Equal(got, tc.downAfter) {
				t.Errorf("down after %v, want %v", got, tc.downAfter)
			}
		})
	}
}
