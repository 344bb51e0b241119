package actor_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/actor"
)

func TestRefStringRoundTrip(t *testing.T) {
	for _, r := range []actor.Ref{
		actor.Virtual("user", "42"),
		actor.Virtual("user", "a/b").WithIncarnation(3),
		actor.Spawned("node-1", 7, 1),
		actor.Spawned("", 9, 0),
	} {
		got, err := actor.ParseRef(r.String())
		if err != nil {
			t.Fatalf("ParseRef(%q): %v", r.String(), err)
		}
		if got != r {
			t.Fatalf("ParseRef(%q) = %#v, want %#v", r.String(), got, r)
		}
	}
	for _, bad := range []string{"", "user", "/x", "user/", "@n/0", "@n/x", "user/1#x"} {
		if _, err := actor.ParseRef(bad); err == nil {
			t.Fatalf("ParseRef(%q) succeeded", bad)
		}
	}
}

func TestRefIdentity(t *testing.T) {
	a := actor.Virtual("user", "1").WithIncarnation(2)
	if a.Unpinned() != actor.Virtual("user", "1") {
		t.Fatal("Unpinned does not drop the incarnation")
	}
	if a == actor.Virtual("user", "1").WithIncarnation(3) {
		t.Fatal("different incarnations compare equal")
	}
	m := map[actor.Ref]int{a: 1}
	if m[actor.Virtual("user", "1").WithIncarnation(2)] != 1 {
		t.Fatal("Ref is not usable as a map key")
	}
	if !(actor.Ref{}).IsZero() || a.IsZero() || !a.IsVirtual() || actor.Spawned("n", 1, 1).IsVirtual() {
		t.Fatal("IsZero/IsVirtual wrong")
	}
}

func TestErrorsArePrefixedSentinels(t *testing.T) {
	for _, e := range []error{actor.ErrRefused, actor.ErrDeadlineExceeded, actor.ErrActorTerminated,
		actor.ErrProcessUnavailable, actor.ErrUnknownKind, actor.ErrNoEligibleNode} {
		if !strings.HasPrefix(e.Error(), "tempest: ") {
			t.Fatalf("%q lacks the prefix", e)
		}
		if !errors.Is(fmt.Errorf("ctx: %w", e), e) {
			t.Fatalf("%v not errors.Is-able when wrapped", e)
		}
	}
}

func TestReferenceStateString(t *testing.T) {
	want := []string{"Unknown", "Valid", "Dormant", "ActorTerminated", "ProcessUnavailable"}
	for i, w := range want {
		if got := actor.ReferenceState(i).String(); got != w {
			t.Fatalf("state %d = %q, want %q", i, got, w)
		}
	}
}

func TestCheckVirtual(t *testing.T) {
	for _, tc := range []struct {
		kind, key string
		ok        bool
	}{
		{"user", "42", true},
		{"user", "a/b#c@d", true},
		{"user", "日本語", true},
		{strings.Repeat("k", actor.MaxKindLen), strings.Repeat("v", actor.MaxKeyLen), true},
		{"", "42", false},
		{"user", "", false},
		{"user", "\xff\xfe", false},
		{"us\xc3", "42", false},
		{strings.Repeat("k", actor.MaxKindLen+1), "42", false},
		{"user", strings.Repeat("v", actor.MaxKeyLen+1), false},
		{"a/b", "42", false},
		{"a#b", "42", false},
		{"@node", "42", false},
	} {
		err := actor.CheckVirtual(tc.kind, tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("CheckVirtual(%.20q, %.20q) = %v, want ok=%v", tc.kind, tc.key, err, tc.ok)
		}
		if err != nil && !errors.Is(err, actor.ErrInvalidKey) {
			t.Errorf("CheckVirtual(%.20q, %.20q) = %v, not ErrInvalidKey", tc.kind, tc.key, err)
		}
		if err != nil && len(err.Error()) > 300 {
			t.Errorf("error of %d bytes: a refused name is shortened", len(err.Error()))
		}
		if got := actor.Virtual(tc.kind, tc.key).Check(); (got == nil) != tc.ok {
			t.Errorf("Virtual(%.20q, %.20q).Check() = %v, want ok=%v", tc.kind, tc.key, got, tc.ok)
		}
	}
	for _, r := range []actor.Ref{{}, actor.Spawned("n1", 3, 1)} {
		if err := r.Check(); err != nil {
			t.Errorf("%v.Check() = %v", r, err)
		}
	}
	// A kind alone is checked as CheckVirtual checks it, and its error
	// names no key.
	if err := actor.CheckKind("user"); err != nil {
		t.Errorf("CheckKind(user) = %v", err)
	}
	for _, kind := range []string{"", "us\xc3", "a/b", "@node", strings.Repeat("k", actor.MaxKindLen+1)} {
		err := actor.CheckKind(kind)
		if !errors.Is(err, actor.ErrInvalidKey) || !strings.HasPrefix(err.Error(), "tempest: invalid kind ") {
			t.Errorf("CheckKind(%.20q) = %v, want ErrInvalidKey naming the kind only", kind, err)
		}
	}
}
