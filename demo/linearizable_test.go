package demo_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tempest-actors/tempest/demo"
)

const linChildEnv = "TEMPEST_TEST_DEMO_LIN"

// counterOp is the input of one operation on a counter.
type counterOp struct {
	key string
	add int64 // 0: a Get
}

// counterOut is what the operation returned; known is false when the
// caller never heard (the node was killed, or the ask failed): the Add may
// or may not have happened.
type counterOut struct {
	v     int64
	known bool
}

// counterModel is the sequential specification of the demo counters,
// partitioned by key: Add returns the new value, Get the current one.
var counterModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(counterOp).key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(int64), input.(counterOp), output.(counterOut)
		next := s + in.add
		return !out.known || out.v == next, next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(counterOp), output.(counterOut)
		res := "?"
		if out.known {
			res = fmt.Sprint(out.v)
		}
		if in.add == 0 {
			return fmt.Sprintf("get(%s) -> %s", in.key, res)
		}
		return fmt.Sprintf("add(%s, %d) -> %s", in.key, in.add, res)
	},
}

// Linearizability of the durable demo counter across kill -9: concurrent
// Adds and Gets on three counters from six clients, the node killed with
// SIGKILL mid-stream and restarted on its data directory, more operations
// after the restart; porcupine checks the whole history. An operation
// whose answer never came may or may not have happened, but an
// acknowledged one must be there after the crash, and nobody may have
// seen a value that the crash took back.
func TestCounterLinearizableAcrossKill(t *testing.T) {
	if spec := os.Getenv(linChildEnv); spec != "" {
		linChild(t, spec)
		return
	}
	dir := t.TempDir()
	h := &history{ops: map[string]*porcupine.Operation{}}
	// Phase 1: killed after 400 lines of history.
	h.run(t, dir, "a", 400, true)
	// Phase 2: a fixed number of operations, then a clean exit.
	h.run(t, dir, "b", -1, false)
	ops := h.list()
	pending := 0
	for _, op := range ops {
		if !op.Output.(counterOut).known {
			pending++
		}
	}
	if len(ops)-pending < 200 {
		t.Fatalf("only %d operations completed", len(ops)-pending)
	}
	res, info := porcupine.CheckOperationsVerbose(counterModel, ops, 30*time.Second)
	if res != porcupine.Ok {
		// Kept after the test for a look in a browser.
		path := filepath.Join(os.TempDir(), fmt.Sprintf("tempest-history-%d.html", time.Now().UnixNano()))
		_ = porcupine.VisualizePath(counterModel, info, path)
		t.Fatalf("history of %d operations (%d without an answer) is %s; visualization in %s", len(ops), pending, res, path)
	}
}

// history collects operations from the children's output.
type history struct {
	mu  sync.Mutex
	ops map[string]*porcupine.Operation
}

func (h *history) list() []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range h.ops {
		out = append(out, *op)
	}
	return out
}

// run starts a child for phase, reads its history lines, and kills it
// after limit lines (limit < 0: waits for it to finish).
func (h *history) run(t *testing.T, dir, phase string, limit int, kill bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCounterLinearizableAcrossKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), linChildEnv+"="+phase+":"+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for n := 0; (limit < 0 || n < limit) && sc.Scan(); n++ {
		h.line(t, sc.Text())
	}
	if kill {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		// The child kept working until the signal landed: every line it
		// wrote before dying is history too (an operation announces its
		// call before it is sent), or the checker would see the effects of
		// Adds it was never told about. (Each line is one write to the
		// pipe, so none is cut short; complete is a guard.)
		for sc.Scan() {
			if l := sc.Text(); complete(l) {
				h.line(t, l)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		return
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("phase %s: %v", phase, err)
	}
}

// complete reports whether l is a whole history line (the kill may cut the
// last one short).
func complete(l string) bool {
	f := strings.Fields(l)
	return (len(f) == 6 && f[0] == "C") || (len(f) == 4 && f[0] == "R")
}

// line parses "C id client key add call" (an operation starts) or
// "R id value return" (it returned).
func (h *history) line(t *testing.T, s string) {
	f := strings.Fields(s)
	num := func(i int) int64 {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("history line %q: %v", s, err)
		}
		return v
	}
	switch {
	case len(f) == 6 && f[0] == "C":
		h.ops[f[1]] = &porcupine.Operation{ClientId: int(num(2)), Input: counterOp{key: f[3], add: num(4)},
			Call: num(5), Output: counterOut{}, Return: math.MaxInt64}
	case len(f) == 4 && f[0] == "R":
		op := h.ops[f[1]]
		if op == nil {
			t.Fatalf("return without a call: %q", s)
		}
		op.Output, op.Return = counterOut{v: num(2), known: true}, num(3)
	case strings.HasPrefix(s, "PASS"), strings.HasPrefix(s, "ok"), s == "":
	default:
		t.Fatalf("unexpected child output %q", s)
	}
}

// linChild runs six clients on three counters. Phase "a" runs until it
// is killed; phase "b" does 50 operations per client and stops.
func linChild(t *testing.T, spec string) {
	phase, dir, _ := strings.Cut(spec, ":")
	n := startNode(t, dir)
	var mu sync.Mutex
	emit := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format, args...)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(phase[0])))
			for i := 0; phase != "b" || i < 50; i++ {
				key := fmt.Sprint(rng.IntN(3))
				var add int64
				var msg any = demo.Get{}
				if rng.IntN(10) < 7 {
					add = 1 + rng.Int64N(5)
					msg = demo.Add{N: add}
				}
				id := fmt.Sprintf("%s-%d-%d", phase, c, i)
				emit("C %s %d %s %d %d\n", id, c, key, add, time.Now().UnixNano())
				v, err := n.Ask(context.Background(), n.Ref(demo.Counter, key), msg)
				if err != nil {
					continue // unknown outcome: stays open in the history
				}
				emit("R %s %d %d\n", id, v.(demo.CounterValue).N, time.Now().UnixNano())
			}
		}()
	}
	wg.Wait()
}
