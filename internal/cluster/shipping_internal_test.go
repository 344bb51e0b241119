package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
)

// The old owner's side of a handoff: whether its applied table lets it
// ship a move, for every way the table can stand against the move.
func TestShipReadiness(t *testing.T) {
	m := placement.Move{From: "a", To: "b", Epoch: 5}
	for _, tc := range []struct {
		name string
		s    placement.Shard
		ok   bool
		want shipStep
	}{
		{"no such shard yet", placement.Shard{}, false, shipWait},
		{"move applied", placement.Shard{Owner: "a", Epoch: 5, MovingTo: "b"}, true, shipGo},
		{"behind: the move is not applied yet", placement.Shard{Owner: "a", Epoch: 5}, true, shipWait},
		{"behind: an older epoch", placement.Shard{Owner: "a", Epoch: 4, MovingTo: "c"}, true, shipWait},
		{"ahead: the move completed", placement.Shard{Owner: "b", Epoch: 6}, true, shipRefuse},
		{"another owner at the epoch", placement.Shard{Owner: "c", Epoch: 5, MovingTo: "b"}, true, shipRefuse},
		{"moving elsewhere at the epoch", placement.Shard{Owner: "a", Epoch: 5, MovingTo: "c"}, true, shipRefuse},
	} {
		if got := shipReadiness(tc.s, tc.ok, m, "a"); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A failed transfer is tried again only while the leader's table still
// shows the move, and until a quarter of its budget is left.
func TestTransferRetryBounds(t *testing.T) {
	m := placement.Move{From: "a", To: "b", Epoch: 5}
	if !moveStands(placement.Shard{Owner: "a", Epoch: 5, MovingTo: "b"}, true, m) {
		t.Error("the move in progress does not stand")
	}
	for _, s := range []placement.Shard{
		{Owner: "a", Epoch: 5},                // aborted
		{Owner: "b", Epoch: 6},                // completed
		{Owner: "a", Epoch: 5, MovingTo: "c"}, // another move
		{Owner: "a", Epoch: 4, MovingTo: "b"}, // not this one
	} {
		if moveStands(s, true, m) {
			t.Errorf("%+v: stands", s)
		}
	}
	if moveStands(placement.Shard{Owner: "a", Epoch: 5, MovingTo: "b"}, false, m) {
		t.Error("a shard the table lacks stands")
	}
	now := time.Unix(1000, 0)
	if got := retryUntil(now, now.Add(40*time.Second)); !got.Equal(now.Add(30 * time.Second)) {
		t.Errorf("retryUntil with 40 s left: %v after now, want 30s", got.Sub(now))
	}
	if got := retryUntil(now, time.Time{}); !got.IsZero() {
		t.Errorf("retryUntil with no deadline: %v, want zero", got)
	}
}

// What a handoff moves: the union of every source, the shard's only, each
// once, in key order; invalid keys set apart; the active ones to hydrate.
func TestShipSet(t *testing.T) {
	id := func(k string) prospero.Identity { return prospero.Identity{Kind: "counter", Key: k} }
	other := id("elsewhere")
	bad := id("bad\xff")
	index := []prospero.Identity{id("c"), id("a"), other}
	held := []prospero.Identity{id("b"), id("a")}
	inMemory := []prospero.Identity{id("d"), bad}
	active := []prospero.Identity{id("d"), other, id("a"), id("d")}
	ids, hydrate, invalid := shipSet([][]prospero.Identity{index, held, inMemory, active}, active,
		func(x prospero.Identity) bool { return x != other })
	want := []prospero.Identity{id("a"), id("b"), id("c"), id("d")}
	if !slices.Equal(ids, want) {
		t.Errorf("ids: %v, want %v", ids, want)
	}
	if want := []prospero.Identity{id("a"), id("d")}; !slices.Equal(hydrate, want) {
		t.Errorf("hydrate: %v, want %v", hydrate, want)
	}
	if len(invalid) != 1 || invalid[bad] == nil {
		t.Errorf("invalid: %v, want only %v", invalid, bad)
	}
}

// A move is a promotion only when the target holds every committed
// record: in the in-sync set, with replication on, nothing of the shard
// uncommitted here, the target not suspected of losing records.
func TestPromotes(t *testing.T) {
	m := placement.Move{From: "a", To: "b", Epoch: 5}
	inSync := placement.Shard{Owner: "a", Epoch: 5, MovingTo: "b", Replicas: []string{"a", "b", "c"}}
	if !promotes(inSync, true, m, "a", true, false, false) {
		t.Error("an in-sync target is not promoted")
	}
	outOfSync := inSync
	outOfSync.Replicas = []string{"a", "c"}
	for name, got := range map[string]bool{
		"target out of the set": promotes(outOfSync, true, m, "a", true, false, false),
		"no replication":        promotes(inSync, true, m, "a", false, false, false),
		"a write uncommitted":   promotes(inSync, true, m, "a", true, true, false),
		"target suspect":        promotes(inSync, true, m, "a", true, false, true),
		"move not applied here": promotes(placement.Shard{Owner: "a", Epoch: 5, Replicas: inSync.Replicas}, true, m, "a", true, false, false),
		"table lacks the shard": promotes(inSync, false, m, "a", true, false, false),
	} {
		if got {
			t.Errorf("%s: promoted", name)
		}
	}
}
