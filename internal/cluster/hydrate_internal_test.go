package cluster

import (
	"testing"

	"github.com/tempest-actors/tempest/placement"
)

// The new owner's side of a warm handoff, for each way its applied table
// and backlog can stand.
func TestHydrationDecisions(t *testing.T) {
	moving := placement.Shard{Owner: "a", Epoch: 4, MovingTo: "b"}
	moved := placement.Shard{Owner: "b", Epoch: 5}
	for _, tc := range []struct {
		name string
		s    placement.Shard
		ok   bool
		from string
		want bool
	}{
		{"the move not applied here yet, the sender still the owner", moving, true, "a", true},
		{"the move applied here", moved, true, "a", true},
		{"no such shard in this table yet", placement.Shard{}, false, "a", false},
		{"a sender that is not the owner", moving, true, "c", false},
		{"moving to another node", placement.Shard{Owner: "a", Epoch: 4, MovingTo: "c"}, true, "a", false},
		{"the table past the move", placement.Shard{Owner: "b", Epoch: 6}, true, "a", false},
		{"the table behind the move", placement.Shard{Owner: "a", Epoch: 3, MovingTo: "b"}, true, "a", false},
		{"the move went elsewhere", placement.Shard{Owner: "c", Epoch: 5}, true, "a", false},
	} {
		if got := hydrationCurrent(tc.s, tc.ok, 5, tc.from, "b"); got != tc.want {
			t.Errorf("hydrationCurrent, %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	for _, tc := range []struct {
		name              string
		backlog, limit, n int
		taken             bool
		want              hydrateAdmit
	}{
		{"an idle node takes a request of any size", 0, 16, 100, false, hydrateTake},
		{"room in the backlog", 10, 16, 6, false, hydrateTake},
		{"over the backlog", 10, 16, 7, false, hydrateBusy},
		{"a replay of a taken request", 0, 16, 1, true, hydrateDuplicate},
		{"busy before duplicate: a refused request was not taken", 16, 16, 1, true, hydrateBusy},
	} {
		if got := hydrationAdmission(tc.backlog, tc.limit, tc.n, tc.taken); got != tc.want {
			t.Errorf("hydrationAdmission, %s: %d, want %d", tc.name, got, tc.want)
		}
	}

	for _, tc := range []struct {
		name string
		s    placement.Shard
		ok   bool
		want warmStep
	}{
		{"the move done here", moved, true, warmGo},
		{"not applied here yet", moving, true, warmWait},
		{"no such shard yet", placement.Shard{}, false, warmWait},
		{"done here and moving on already", placement.Shard{Owner: "b", Epoch: 5, MovingTo: "c"}, true, warmWait},
		{"the table past the epoch", placement.Shard{Owner: "b", Epoch: 6}, true, warmOver},
		{"the epoch given to another", placement.Shard{Owner: "c", Epoch: 5}, true, warmOver},
	} {
		if got := warmReadiness(tc.s, tc.ok, 5, "b"); got != tc.want {
			t.Errorf("warmReadiness, %s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
