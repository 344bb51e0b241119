package lincheck

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is an operation on key "k" from call to ret (ret < 0: never
// answered).
func op(add int64, call, ret int64, v int64) porcupine.Operation {
	o := porcupine.Operation{Input: Op{Key: "k", Add: add}, Call: call, Return: ret, Output: Out{V: v, Known: ret >= 0}}
	if ret < 0 {
		o.Return, o.Output = math.MaxInt64, Out{}
	}
	return o
}

func TestBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want string // "" for none, else a part of the one violation
	}{
		{"sequential", []porcupine.Operation{op(2, 0, 1, 2), op(3, 2, 3, 5), op(0, 4, 5, 5)}, ""},
		{"concurrent adds either order", []porcupine.Operation{op(2, 0, 10, 5), op(3, 1, 9, 3), op(0, 11, 12, 5)}, ""},
		{"an unanswered add may count", []porcupine.Operation{op(2, 0, 1, 2), op(4, 2, -1, 0), op(0, 3, 4, 6)}, ""},
		{"an unanswered add may not count", []porcupine.Operation{op(2, 0, 1, 2), op(4, 2, -1, 0), op(0, 3, 4, 2)}, ""},
		{"a lost add", []porcupine.Operation{op(2, 0, 1, 2), op(3, 2, 3, 5), op(0, 4, 5, 2)}, "below 5"},
		{"a value from nowhere", []porcupine.Operation{op(2, 0, 1, 2), op(0, 2, 3, 9)}, "above 2"},
		{"an add not begun yet", []porcupine.Operation{op(0, 0, 1, 3), op(3, 2, 3, 3)}, "above 0"},
		{"one value answered twice", []porcupine.Operation{op(1, 0, 10, 1), op(1, 1, 9, 1)}, "answered too"},
		// porcupine takes a call and a return at one instant as concurrent.
		{"a read returning as an add is called", []porcupine.Operation{op(0, 0, 5, 3), op(3, 5, 10, 3)}, ""},
		{"an add called and returned at one instant", []porcupine.Operation{op(3, 5, 5, 3)}, ""},
		{"a decrement: not checked", []porcupine.Operation{op(5, 0, 1, 5), op(-2, 2, 3, 3), op(0, 4, 5, 3)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := bounds(tc.ops, time.Unix(0, 0), 10)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("violations %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Fatalf("violations %q, want one about %q", got, tc.want)
			}
			// The cases are small enough for porcupine, which agrees.
			if res := porcupine.CheckOperations(Model, tc.ops); res != (tc.want == "") {
				t.Fatalf("porcupine finds the history linearizable: %v; the bounds: %q", res, got)
			}
		})
	}
}

func TestResultErr(t *testing.T) {
	for _, tc := range []struct {
		r          Result
		wantPassed bool
	}{
		{Result{Verdict: porcupine.Ok}, true},
		{Result{Verdict: porcupine.Unknown}, false},
		{Result{Verdict: porcupine.Ok, Bounds: []string{"x"}}, false},
		{Result{Verdict: porcupine.Ok, Regressions: []string{"x"}}, false},
		{Result{Verdict: porcupine.Ok, Lost: 1}, false},
		{Result{Verdict: porcupine.Illegal}, false},
	} {
		if err := tc.r.Err(); (err == nil) != tc.wantPassed {
			t.Errorf("%+v.Err() = %v, want passed %v", tc.r, err, tc.wantPassed)
		}
	}
}
