package wire

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire/bare"
)

// faultP is a typed error with a pointer receiver, faultV one with a
// value receiver: both must cross in the form they were sent.
type faultP struct{ N uint64 }

func (v *faultP) AppendBARE(dst []byte) ([]byte, error) { return bare.AppendUint(dst, v.N), nil }
func (v *faultP) DecodeBARE(d *bare.Decoder)            { v.N = d.Uint() }
func (v *faultP) Error() string                         { return fmt.Sprintf("fault %d", v.N) }

type faultV struct{ N uint64 }

func (v *faultV) AppendBARE(dst []byte) ([]byte, error) { return bare.AppendUint(dst, v.N), nil }
func (v *faultV) DecodeBARE(d *bare.Decoder)            { v.N = d.Uint() }
func (v faultV) Error() string                          { return fmt.Sprintf("fault %d", v.N) }

// sliceErr is not comparable: it cannot be a sentinel, and comparing it
// must not panic.
type sliceErr []string

func (e sliceErr) Error() string { return "slice error" }

var errFunds = errors.New("insufficient funds")

func errorRegistry(t *testing.T) *Registry {
	t.Helper()
	r := NewRegistry()
	if err := Register[faultP](r, 1); err != nil {
		t.Fatal(err)
	}
	if err := Register[faultV](r, 2); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterError("app.funds", errFunds); err != nil {
		t.Fatal(err)
	}
	return r
}

func crossed(t *testing.T, r *Registry, err error) error {
	t.Helper()
	v, derr := r.DecodeError(r.AppendError(nil, err))
	if derr != nil {
		t.Fatal(derr)
	}
	return v.(error)
}

func TestApplicationErrorsKeepTheirIdentity(t *testing.T) {
	r := errorRegistry(t)
	// The sentinel itself arrives as the sentinel.
	if got := crossed(t, r, errFunds); got != errFunds {
		t.Fatalf("sentinel crossed as %#v", got)
	}
	// A wrapped sentinel keeps its text and matches the sentinel, and an
	// actor sentinel beside it.
	in := fmt.Errorf("withdraw 5: %w (%w)", errFunds, actor.ErrRefused)
	got := crossed(t, r, in)
	if !errors.Is(got, errFunds) || !errors.Is(got, actor.ErrRefused) || got.Error() != in.Error() {
		t.Fatalf("wrapped sentinel crossed as %#v", got)
	}
	// Typed values arrive in the form they were sent.
	if got := crossed(t, r, &faultP{N: 3}); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", &faultP{N: 3}) {
		t.Fatalf("*faultP crossed as %#v", got)
	}
	if got := crossed(t, r, faultV{N: 4}); got != (faultV{N: 4}) {
		t.Fatalf("faultV crossed as %#v", got)
	}
	if got := crossed(t, r, &faultV{N: 5}); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", &faultV{N: 5}) {
		t.Fatalf("*faultV crossed as %#v", got)
	}
	// A wrapped typed value is found by errors.As.
	got = crossed(t, r, fmt.Errorf("turn: %w", &faultP{N: 6}))
	var fp *faultP
	if !errors.As(got, &fp) || fp.N != 6 || got.Error() != "turn: fault 6" {
		t.Fatalf("wrapped *faultP crossed as %#v", got)
	}
	// Passed on again, the identity stays.
	again := crossed(t, r, got)
	if !errors.As(again, &fp) || fp.N != 6 {
		t.Fatalf("forwarded error lost its value: %#v", again)
	}
	// An unregistered error keeps its text only; a non-comparable one
	// does not panic.
	if got := crossed(t, r, sliceErr{"a"}); got.Error() != "slice error" || errors.Is(got, errFunds) {
		t.Fatalf("slice error crossed as %#v", got)
	}
	// A node that does not know the code keeps the text and the code.
	var re *RemoteError
	v, err := NewRegistry().DecodeError(r.AppendError(nil, in))
	if err != nil || !errors.As(v.(error), &re) || re.AppCode != "app.funds" || re.App != nil || re.Code != CodeRefused {
		t.Fatalf("unknown code crossed as %#v, %v", v, err)
	}
	// A body from an older peer (code and message only) still decodes.
	if got := crossed(t, r, nil); got.Error() != "<nil>" {
		t.Fatalf("nil crossed as %#v", got)
	}
}

func TestRegisterErrorRefusesConflicts(t *testing.T) {
	r := errorRegistry(t)
	if err := r.RegisterError("app.funds", errFunds); err != nil {
		t.Fatalf("same pair twice: %v", err)
	}
	for _, c := range []struct {
		code string
		err  error
	}{
		{"app.funds", errors.New("other")},
		{"app.other", errFunds},
		{"", errors.New("x")},
		{"app.nil", nil},
		{"app.slice", sliceErr{"a"}},
	} {
		if err := r.RegisterError(c.code, c.err); !errors.Is(err, ErrBadErrorCode) {
			t.Errorf("RegisterError(%q, %v) = %v", c.code, c.err, err)
		}
	}
}
