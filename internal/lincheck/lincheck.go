// Package lincheck records histories of operations on counters (the demo
// kind: Add returns the new value, Get the current one) from concurrent
// clients and checks them for linearizability with porcupine. Tests of
// several packages share it: one node killed and restarted, three nodes
// killed, paused and partitioned.
//
// An operation whose answer never came (the ask failed or timed out)
// may or may not have taken effect: it stays open in the history until
// the end of time, and porcupine may place it anywhere after its call
// (last, where nothing observes it, if it never took effect). An
// acknowledged Add must be visible to every later operation, and no
// operation may observe a value that a failure took back.
//
// Porcupine's search grows with the unanswered Adds: it may place each
// anywhere after its call, or nowhere. Clients should draw Add amounts
// from a wide range (say 1 to 2^30), so that every set of Adds sums to
// its own value, and end with a read of every counter: from it Check
// works out which unanswered Adds never took effect and leaves them out
// of the search (settle, which changes no verdict). A soak history of
// 24,000 operations with 424 unanswered Adds, 336 of them left out, is
// decided in under a second; one of 30,000 with 363, amounts 1-5 and
// nothing left out, took six minutes on two cores. Check also runs
// checks that are necessary for linearizability and decided in
// O(n log n) (Result.Lost, Result.Regressions, Result.Bounds), which
// name what went wrong; Result.Err says whether a history passed.
package lincheck

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is the input of one operation on a counter.
type Op struct {
	Key string
	Add int64 // 0: a Get
}

// Out is what an operation returned; Known is false when the caller
// never heard.
type Out struct {
	V     int64
	Known bool
}

// Model is the sequential specification of the counters, partitioned by
// key.
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(Op).Key
			by[k] = append(by[k], op)
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(by))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(int64), input.(Op), output.(Out)
		next := s + in.Add
		return !out.Known || out.V == next, next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Op), output.(Out)
		res := "?"
		if out.Known {
			res = fmt.Sprint(out.V)
		}
		if in.Add == 0 {
			return fmt.Sprintf("get(%s) -> %s", in.Key, res)
		}
		return fmt.Sprintf("add(%s, %d) -> %s", in.Key, in.Add, res)
	},
}

// History collects operations. Safe for concurrent use.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []*porcupine.Operation
}

// NewHistory returns an empty history; times are measured from now on
// the monotonic clock.
func NewHistory() *History { return &History{start: time.Now()} }

// Call records that client starts op and returns the function to call
// with its result once it returns: ok false if the outcome is unknown
// (an Add then stays open; a Get is forgotten).
func (h *History) Call(client int, op Op) func(v int64, ok bool) {
	h.mu.Lock()
	o := &porcupine.Operation{ClientId: client, Input: op, Call: int64(time.Since(h.start)), Output: Out{}, Return: math.MaxInt64}
	h.ops = append(h.ops, o)
	h.mu.Unlock()
	return func(v int64, ok bool) {
		if !ok {
			if op.Add == 0 {
				// A read that did not answer changed nothing: leaving it
				// open would only widen porcupine's search.
				h.mu.Lock()
				o.Input = nil
				h.mu.Unlock()
			}
			return
		}
		at := int64(time.Since(h.start))
		h.mu.Lock()
		o.Output, o.Return = Out{V: v, Known: true}, at
		h.mu.Unlock()
	}
}

// Result is what Check found.
type Result struct {
	Ops, Unanswered int
	// Settled counts the unanswered Adds a final read showed never took
	// effect, left out of porcupine's search (settle).
	Settled int
	// Linearizable is porcupine's verdict (false also when it timed out).
	Linearizable bool
	Verdict      porcupine.CheckResult
	// Lost counts acknowledged Adds no later read accounts for: per key,
	// the sum of acknowledged Adds minus the last acknowledged value,
	// when positive (an open Add can only add to the value).
	Lost int64
	// LostByKey is Lost per key (only keys that lost any).
	LostByKey map[string]int64
	// Regressions describes the first answers (at most ten) that went
	// below what an operation finished before they began had answered:
	// key, both values, and when (UTC wall clock) each began and
	// returned.
	Regressions []string
	// Bounds describes answers (at most ten) outside what a counter can
	// answer whatever the order: below the sum of the Adds acknowledged
	// before the operation began (its own included), above the sum of
	// every Add begun by the time it returned, answered or not; or an
	// acknowledged Add's value answered twice (every Add adds at least
	// 1). Only keys whose Adds are all positive are checked. A necessary
	// condition of linearizability, not a sufficient one (answers within
	// the bounds may still fit no single order: porcupine decides that),
	// but decided in O(n log n), for histories too large for porcupine to
	// decide in time.
	Bounds []string
	// Visualization is the file porcupine's view of a failed check was
	// written to ("" if none).
	Visualization string
}

func (r Result) String() string {
	return fmt.Sprintf("%d operations (%d unanswered, %d of them shown never to have taken effect): %s, %d acknowledged Adds lost, %d out of bounds, %d went back",
		r.Ops, r.Unanswered, r.Settled, r.Verdict, r.Lost, len(r.Bounds), len(r.Regressions))
}

// Err is nil if the history passed: linearizable (porcupine decided it)
// and no acknowledged Add lost, no answer out of bounds, no counter that
// went back. A history porcupine could not decide in time fails.
func (r Result) Err() error {
	if r.Verdict == porcupine.Ok && r.Lost == 0 && len(r.Bounds) == 0 && len(r.Regressions) == 0 {
		return nil
	}
	return fmt.Errorf("history not linearizable or acknowledged Adds lost: %s (visualization: %q)", r, r.Visualization)
}

// Check checks the history within timeout. A history that is not
// linearizable is written as an HTML visualization to the temporary
// directory.
func (h *History) Check(timeout time.Duration) Result {
	h.mu.Lock()
	ops := make([]porcupine.Operation, 0, len(h.ops))
	for _, o := range h.ops {
		if o.Input != nil {
			ops = append(ops, *o)
		}
	}
	h.mu.Unlock()
	r := Result{Ops: len(ops)}
	type last struct {
		at int64
		v  int64
	}
	acked, final := map[string]int64{}, map[string]last{}
	for _, o := range ops {
		in, out := o.Input.(Op), o.Output.(Out)
		if !out.Known {
			r.Unanswered++
			continue
		}
		acked[in.Key] += in.Add
		if l, ok := final[in.Key]; !ok || o.Return > l.at {
			final[in.Key] = last{o.Return, out.V}
		}
	}
	for k, sum := range acked {
		if d := sum - final[k].v; d > 0 {
			r.Lost += d
			if r.LostByKey == nil {
				r.LostByKey = map[string]int64{}
			}
			r.LostByKey[k] = d
		}
	}
	r.Regressions = regressions(ops, h.start, 10)
	r.Bounds = bounds(ops, h.start, 10)
	ops, r.Settled = settle(ops)
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	r.Verdict, r.Linearizable = res, res == porcupine.Ok
	if res == porcupine.Illegal {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("tempest-history-%d.html", time.Now().UnixNano()))
		if porcupine.VisualizePath(Model, info, path) == nil {
			r.Visualization = path
		}
	}
	return r
}

// regressions finds answered operations whose value is below the value
// of an operation of the same key that returned before they were called
// (for an Add, not above it): a counter that went back.
func regressions(ops []porcupine.Operation, start time.Time, limit int) []string {
	at := func(d int64) string { return start.Add(time.Duration(d)).UTC().Format("15:04:05.000") }
	byKey := map[string][]porcupine.Operation{}
	shrinks := map[string]bool{} // keys with an Add below 1: their counters may go down
	for _, o := range ops {
		if o.Input.(Op).Add < 0 {
			shrinks[o.Input.(Op).Key] = true
		}
		if o.Output.(Out).Known {
			k := o.Input.(Op).Key
			byKey[k] = append(byKey[k], o)
		}
	}
	keys := slices.Sorted(maps.Keys(byKey))
	var out []string
	for _, k := range keys {
		if shrinks[k] {
			continue
		}
		calls := slices.Clone(byKey[k])
		slices.SortFunc(calls, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		rets := slices.Clone(byKey[k])
		slices.SortFunc(rets, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
		var best *porcupine.Operation
		j := 0
		for _, o := range calls {
			for j < len(rets) && rets[j].Return < o.Call {
				if best == nil || rets[j].Output.(Out).V > best.Output.(Out).V {
					best = &rets[j]
				}
				j++
			}
			if best == nil {
				continue
			}
			v, prev := o.Output.(Out).V, best.Output.(Out).V
			if v < prev || (o.Input.(Op).Add > 0 && v <= prev) {
				out = append(out, fmt.Sprintf("%s: %+v answered %d (called %s, returned %s) after %+v answered %d (returned %s)",
					k, o.Input.(Op), v, at(o.Call), at(o.Return),
					best.Input.(Op), prev, at(best.Return)))
				if len(out) == limit {
					return out
				}
				break // one per key
			}
		}
	}
	return out
}

// bounds checks every answer against what a counter can answer in any
// order of the operations (see Result.Bounds).
func bounds(ops []porcupine.Operation, start time.Time, limit int) []string {
	at := func(d int64) string { return start.Add(time.Duration(d)).UTC().Format("15:04:05.000") }
	type add struct {
		t int64 // return (acknowledged) or call (any)
		d int64
	}
	byKey := map[string][]porcupine.Operation{}
	for _, o := range ops {
		k := o.Input.(Op).Key
		byKey[k] = append(byKey[k], o)
	}
	// sums sorts xs by t and returns their prefix sums: sum[i] is the
	// total of the first i.
	sums := func(xs []add) []int64 {
		slices.SortFunc(xs, func(a, b add) int { return cmp.Compare(a.t, b.t) })
		sum := make([]int64, len(xs)+1)
		for i, x := range xs {
			sum[i+1] = sum[i] + x.d
		}
		return sum
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		var acked, begun []add
		positive := true
		for _, o := range byKey[k] {
			in := o.Input.(Op)
			if in.Add == 0 {
				continue
			}
			positive = positive && in.Add > 0
			begun = append(begun, add{o.Call, in.Add})
			if o.Output.(Out).Known {
				acked = append(acked, add{o.Return, in.Add})
			}
		}
		if !positive {
			continue // the bounds below hold for counters that only grow
		}
		ackedSum, begunSum := sums(acked), sums(begun)
		seen := map[int64]porcupine.Operation{}
		for _, o := range byKey[k] {
			in, res := o.Input.(Op), o.Output.(Out)
			if !res.Known {
				continue
			}
			// Acknowledged before o began: those returned strictly
			// before o's call.
			i, _ := slices.BinarySearchFunc(acked, o.Call, func(a add, t int64) int { return cmp.Compare(a.t, t) })
			lo := ackedSum[i]
			if in.Add != 0 {
				lo += in.Add // its own, which returned after its call
			}
			// Begun by the time o returned: those called before or at its
			// return (porcupine takes a call and a return at one instant
			// as concurrent).
			j, _ := slices.BinarySearchFunc(begun, o.Return+1, func(a add, t int64) int { return cmp.Compare(a.t, t) })
			hi := begunSum[j]
			var why string
			switch {
			case res.V < lo:
				why = fmt.Sprintf("below %d, the Adds acknowledged before it began", lo)
			case res.V > hi:
				why = fmt.Sprintf("above %d, every Add begun before it returned", hi)
			}
			if in.Add > 0 && why == "" {
				if p, dup := seen[res.V]; dup {
					why = fmt.Sprintf("the value %+v answered too (called %s)", p.Input.(Op), at(p.Call))
				}
				seen[res.V] = o
			}
			if why != "" {
				out = append(out, fmt.Sprintf("%s: %+v answered %d (called %s, returned %s): %s",
					k, in, res.V, at(o.Call), at(o.Return), why))
				if len(out) == limit {
					return out
				}
			}
		}
	}
	return out
}
