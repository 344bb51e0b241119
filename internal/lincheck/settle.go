package lincheck

import (
	"cmp"
	"slices"

	"github.com/anishathalye/porcupine"
)

// maxSettle bounds the unanswered Adds of one key that settle looks at:
// it enumerates the sums of each half of them (2^20 each at most).
const maxSettle = 40

// settle leaves out of ops the unanswered Adds that no linearization
// needs, and returns what it kept and how many it left out. Porcupine
// places an unanswered Add anywhere after its call (at the end, where
// nothing observes it, if it never took effect), so each one doubles
// its search; most of them never took effect, and a final read tells
// which.
//
// For a key with a final operation z (answered, called after every
// answered Add of the key returned and after every unanswered one was
// called; reads may overlap it if they answered what z did), every
// linearization holds every answered Add before z, and the unanswered
// Adds it holds before z sum to X = z's value minus the answered Adds'
// sum (z's own included). When all the key's Adds are positive, an
// unanswered Add larger than X is never before z, nor is any Add outside
// the one set that sums to X, when exactly one does. Those Adds come
// after z in every linearization, where nothing observes them (a read
// placed after z answered what z did, so it saw none of them): leaving
// them out changes no verdict. Nor can leaving out an unanswered Add
// ever make an illegal history legal: a linearization without it stays
// one with it placed last. With amounts drawn from a wide range the set
// is almost always unique.
func settle(ops []porcupine.Operation) ([]porcupine.Operation, int) {
	byKey := map[string][]int{}
	for i, o := range ops {
		k := o.Input.(Op).Key
		byKey[k] = append(byKey[k], i)
	}
	drop := map[int]bool{}
	for _, idx := range byKey {
		for _, i := range settleKey(ops, idx) {
			drop[i] = true
		}
	}
	if len(drop) == 0 {
		return ops, 0
	}
	kept := make([]porcupine.Operation, 0, len(ops)-len(drop))
	for i, o := range ops {
		if !drop[i] {
			kept = append(kept, o)
		}
	}
	return kept, len(drop)
}

// settleKey returns the indexes (into ops) of the unanswered Adds among
// idx, the operations of one key, that no linearization places before
// the key's final operation.
func settleKey(ops []porcupine.Operation, idx []int) []int {
	z := -1
	for _, i := range idx {
		o := ops[i]
		if o.Input.(Op).Add < 0 {
			return nil // a key that shrinks
		}
		if o.Output.(Out).Known && (z < 0 || o.Call > ops[z].Call) {
			z = i
		}
	}
	if z < 0 {
		return nil
	}
	var open []int
	sum := int64(0)
	for _, i := range idx {
		o := ops[i]
		in := o.Input.(Op)
		switch {
		case i == z:
			sum += in.Add
		case o.Output.(Out).Known && in.Add == 0:
			// A read changes nothing. One beside z may be placed after
			// it, where an Add left out could have been before it:
			// only one that saw what z saw rules that out.
			if o.Return >= ops[z].Call && o.Output.(Out).V != ops[z].Output.(Out).V {
				return nil
			}
		case o.Output.(Out).Known:
			if o.Return >= ops[z].Call {
				return nil // concurrent with z: z is not final
			}
			sum += in.Add
		case in.Add != 0:
			if o.Call >= ops[z].Call {
				return nil
			}
			open = append(open, i)
		}
		// An unanswered read (still in flight) accepts any value: it
		// observes nothing.
	}
	x := ops[z].Output.(Out).V - sum
	if x < 0 {
		return nil // no set sums to it: illegal, porcupine says so
	}
	// An Add larger than x is in no set that sums to x; of the others,
	// one set must be the only one.
	var out, cand []int
	for _, i := range open {
		if ops[i].Input.(Op).Add > x {
			out = append(out, i)
		} else {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 || len(cand) > maxSettle {
		return out
	}
	amounts := make([]int64, len(cand))
	for j, i := range cand {
		amounts[j] = ops[i].Input.(Op).Add
	}
	in, ok := uniqueSubset(amounts, x)
	if !ok {
		return out
	}
	for j, i := range cand {
		if !in[j] {
			out = append(out, i)
		}
	}
	return out
}

// uniqueSubset reports which of amounts (positive, at most maxSettle)
// make up the one subset that sums to x, and whether exactly one does.
// It meets in the middle: the sums of each half's subsets, one half
// sorted and searched for what the other lacks.
func uniqueSubset(amounts []int64, x int64) ([]bool, bool) {
	if x < 0 {
		return nil, false
	}
	h := len(amounts) / 2
	type part struct {
		sum  int64
		mask uint32
	}
	sums := func(a []int64) []part {
		out := make([]part, 0, 1<<len(a))
		for m := uint32(0); m < 1<<len(a); m++ {
			s := int64(0)
			for j := range a {
				if m&(1<<j) != 0 {
					s += a[j]
				}
			}
			out = append(out, part{s, m})
		}
		return out
	}
	left, right := sums(amounts[:h]), sums(amounts[h:])
	slices.SortFunc(right, func(a, b part) int { return cmp.Compare(a.sum, b.sum) })
	found := 0
	var lm, rm uint32
	for _, l := range left {
		want := x - l.sum
		j, _ := slices.BinarySearchFunc(right, want, func(p part, t int64) int { return cmp.Compare(p.sum, t) })
		for ; j < len(right) && right[j].sum == want; j++ {
			found++
			if found > 1 {
				return nil, false
			}
			lm, rm = l.mask, right[j].mask
		}
	}
	if found != 1 {
		return nil, false
	}
	in := make([]bool, len(amounts))
	for j := range amounts {
		if j < h {
			in[j] = lm&(1<<j) != 0
		} else {
			in[j] = rm&(1<<(j-h)) != 0
		}
	}
	return in, true
}
