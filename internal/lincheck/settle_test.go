package lincheck

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ops     []porcupine.Operation
		settled int
		verdict bool
	}{
		{"the final read shows which took effect",
			[]porcupine.Operation{op(7, 0, -1, 0), op(100, 1, -1, 0), op(3, 2, 3, 103), op(0, 10, 11, 103)}, 1, true},
		{"an add as the final operation",
			[]porcupine.Operation{op(7, 0, -1, 0), op(100, 1, -1, 0), op(3, 10, 11, 10)}, 1, true},
		{"two sets sum to it: only what is larger than the sum left out",
			[]porcupine.Operation{op(5, 0, -1, 0), op(5, 1, -1, 0), op(9, 2, -1, 0), op(0, 10, 11, 5)}, 1, true},
		{"no set sums to it: only what is larger left out, and it stays illegal",
			[]porcupine.Operation{op(7, 0, -1, 0), op(100, 1, -1, 0), op(0, 10, 11, 50)}, 1, false},
		{"a read beside the final one that answered what it did",
			[]porcupine.Operation{op(7, 0, -1, 0), op(100, 1, -1, 0), op(0, 9, 12, 100), op(0, 10, 11, 100)}, 1, true},
		{"a read beside the final one that saw one more add: nothing left out",
			[]porcupine.Operation{op(7, 0, -1, 0), op(100, 1, -1, 0), op(0, 9, 12, 107), op(0, 10, 11, 100)}, 0, true},
		{"the last read is concurrent with an add: not final",
			[]porcupine.Operation{op(7, 0, -1, 0), op(100, 1, -1, 0), op(3, 2, 12, 103), op(0, 10, 11, 100)}, 0, true},
		{"an add called after the last read began: not final",
			[]porcupine.Operation{op(7, 0, -1, 0), op(0, 10, 12, 0), op(100, 11, -1, 0)}, 0, true},
		{"a key that shrinks",
			[]porcupine.Operation{op(7, 0, -1, 0), op(-1, 1, 2, -1), op(0, 10, 11, -1)}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, n := settle(tc.ops)
			if n != tc.settled || len(kept) != len(tc.ops)-n {
				t.Fatalf("left out %d of %d (kept %d), want %d", n, len(tc.ops), len(kept), tc.settled)
			}
			if got := porcupine.CheckOperations(Model, kept); got != tc.verdict {
				t.Fatalf("linearizable after settle: %v, want %v", got, tc.verdict)
			}
			if got := porcupine.CheckOperations(Model, tc.ops); got != tc.verdict {
				t.Fatalf("linearizable before settle: %v, want %v", got, tc.verdict)
			}
		})
	}
}

// TestSettleKeepsTheVerdict: on random histories of concurrent clients,
// some of whose Adds are never answered (taking effect or not, or only
// after the final read, seen by a read beside it) and some of whose
// answers are wrong, porcupine's verdict is the same with and without
// what settle leaves out, and settle leaves some out.
func TestSettleKeepsTheVerdict(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var settled, illegal int
	for range 3000 {
		ops := randomHistory(rng)
		kept, n := settle(ops)
		settled += n
		want := porcupine.CheckOperations(Model, ops)
		if !want {
			illegal++
		}
		if got := porcupine.CheckOperations(Model, kept); got != want {
			t.Fatalf("verdict %v after leaving out %d, %v before: %v", got, n, want, ops)
		}
	}
	t.Logf("%d unanswered Adds left out, %d illegal histories of 3000", settled, illegal)
	if settled == 0 || illegal == 0 {
		t.Fatalf("settled %d, illegal histories %d: the test would not see a change of verdict", settled, illegal)
	}
}

// randomHistory runs three clients' operations on one counter: each
// takes effect at a random point of its interval; an unanswered Add
// takes effect there or never; a few answers are off by a little.
func randomHistory(rng *rand.Rand) []porcupine.Operation {
	type event struct {
		at  int64
		idx int
	}
	var ops []porcupine.Operation
	var effects []event
	var applies []bool
	for c := range 3 {
		at := int64(rng.IntN(5))
		for range 1 + rng.IntN(4) {
			call := at
			ret := call + 1 + int64(rng.IntN(8))
			add := int64(0)
			if rng.IntN(3) > 0 {
				add = 1 + rng.Int64N(8) // small: sets that share a sum too
			}
			o := porcupine.Operation{ClientId: c, Input: Op{Key: "k", Add: add}, Call: call, Return: ret}
			applied := true
			if add != 0 && rng.IntN(3) == 0 {
				o.Return, o.Output = math.MaxInt64, Out{}
				applied = rng.IntN(2) == 0
			}
			effects = append(effects, event{call + rng.Int64N(ret-call), len(ops)})
			ops = append(ops, o)
			applies = append(applies, applied)
			at = ret + int64(rng.IntN(3))
		}
	}
	slices.SortFunc(effects, func(a, b event) int { return int(a.at - b.at) })
	v := int64(0)
	for _, e := range effects {
		in := ops[e.idx].Input.(Op)
		if applies[e.idx] {
			v += in.Add
		}
		if ops[e.idx].Output == nil {
			out := v
			if rng.IntN(20) == 0 {
				out += 1 + rng.Int64N(2)
			}
			ops[e.idx].Output = Out{V: out, Known: true}
		}
	}
	// The final read; sometimes another beside it, which may see an
	// unanswered Add that took effect only after the final read did.
	end := int64(100)
	final := porcupine.Operation{ClientId: 9, Input: Op{Key: "k"}, Call: end, Return: end + 1, Output: Out{V: v, Known: true}}
	beside := func(v int64) porcupine.Operation {
		return porcupine.Operation{ClientId: 8, Input: Op{Key: "k"}, Call: end - 1, Return: end + 3, Output: Out{V: v, Known: true}}
	}
	switch rng.IntN(4) {
	case 0:
		ops = append(ops, beside(v))
	case 1:
		for i, o := range ops {
			if !applies[i] {
				ops = append(ops, beside(v+o.Input.(Op).Add))
				break
			}
		}
	}
	return append(ops, final)
}
