package placement_test

import (
	"reflect"
	"testing"

	"github.com/tempest-actors/tempest/placement"
)

// A clone is equal to its table and shares nothing with it that a write
// to one could change in the other, the replica sets included (which
// the clone keeps in one backing array per group).
func TestTableCloneSharesNothing(t *testing.T) {
	empty := make([]string, 0, 4) // an emptied set that kept its capacity
	tb := placement.NewTable()
	tb.Version, tb.ShardCount = 7, 4
	tb.Groups["g"] = &placement.Group{Name: "g", Shards: []placement.Shard{
		{Owner: "a", Epoch: 1, Replicas: []string{"a", "b", "c"}},
		{Owner: "b", Epoch: 2},
		{Owner: "c", Epoch: 3, Replicas: empty},
		{Owner: "d", Epoch: 4, Replicas: []string{"d", "e"}},
	}}
	c := tb.Clone()
	if !reflect.DeepEqual(c, tb) {
		t.Fatalf("clone differs:\n%+v\n%+v", c, tb)
	}
	sh := c.Groups["g"].Shards
	sh[0].Replicas = append(sh[0].Replicas, "q")
	sh[0].Replicas[1] = "x"
	sh[2].Replicas = append(sh[2].Replicas, "y")
	sh[1].Replicas = append(sh[1].Replicas, "z")
	orig := tb.Groups["g"].Shards
	if !reflect.DeepEqual(orig[0].Replicas, []string{"a", "b", "c"}) || orig[1].Replicas != nil ||
		len(orig[2].Replicas) != 0 || empty[:1][0] == "y" {
		t.Fatalf("writes to the clone reached the table: %+v", orig)
	}
	if !reflect.DeepEqual(sh[1].Replicas, []string{"z"}) || !reflect.DeepEqual(sh[0].Replicas, []string{"a", "x", "c", "q"}) ||
		!reflect.DeepEqual(sh[3].Replicas, []string{"d", "e"}) {
		t.Fatalf("the clone's own sets: %+v", sh)
	}
}
