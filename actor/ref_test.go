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
