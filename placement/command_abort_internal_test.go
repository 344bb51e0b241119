package placement

import "testing"

// An abort from a raft log an earlier build wrote ("abort") keeps the
// epoch, as that build applied it; one this build proposes raises it.
// A node that replays the earlier entry from an older snapshot than
// another's thus reaches the same table.
func TestAbortOfAnEarlierBuildKeepsTheEpoch(t *testing.T) {
	for _, c := range []struct {
		op    Op
		epoch uint64
	}{{opAbortKeepEpoch, 4}, {OpAbort, 5}} {
		tb := NewTable()
		for _, cmd := range []Command{
			{Op: OpInit, Shards: 1},
			{Op: OpNode, Node: &NodeInfo{Name: "a", Status: StatusUp}},
			{Op: OpNode, Node: &NodeInfo{Name: "b", Status: StatusUp}},
		} {
			if r := tb.Apply(cmd); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		ref := ShardRef{Group: "counter", Index: 0}
		tb.Groups[ref.Group] = &Group{Name: ref.Group, Shards: []Shard{{Owner: "a", Epoch: 4, Replicas: []string{"a"}}}}
		m := Move{Shard: ref, From: "a", Epoch: 4, To: "b"}
		if r := tb.Apply(Command{Op: OpBegin, Moves: []Move{m}}); r.Err != nil || r.Applied != 1 {
			t.Fatalf("begin: %+v", r)
		}
		b, err := Command{Op: c.op, Moves: []Move{m}}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		if r := tb.Apply(cmd); r.Err != nil || r.Applied != 1 {
			t.Fatalf("%s: %+v", c.op, r)
		}
		if s, _ := tb.Shard(ref); s.Owner != "a" || s.MovingTo != "" || s.Epoch != c.epoch {
			t.Fatalf("after %q the shard is %+v, want a's at epoch %d", c.op, s, c.epoch)
		}
	}
}
