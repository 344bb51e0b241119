package tempest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/kinds"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// An error crosses with the code of the first built-in sentinel it
// matches, so one that matches another comes before it: a specific
// reminder refusal crosses as itself, not as reminders.ErrInvalid. Codes
// and sentinels are unique and reserved.
func TestBuiltinErrorsMostSpecificFirst(t *testing.T) {
	codes := map[string]bool{}
	late := false
	for i, b := range builtinErrors {
		// They are registered early ones, kinds, then late ones: the
		// list's order is the registration order only if the late
		// ones come last.
		if late && !b.Late {
			t.Errorf("%s is registered before the kinds but listed after a late one", b.Code)
		}
		late = late || b.Late
		if !strings.HasPrefix(b.Code, kinds.ReservedPrefix) || codes[b.Code] {
			t.Errorf("code %q: not reserved, or listed twice", b.Code)
		}
		codes[b.Code] = true
		for _, later := range builtinErrors[i+1:] {
			if later.Err == b.Err || errors.Is(later.Err, b.Err) {
				t.Errorf("%s (%v) matches %s, listed before it", later.Code, later.Err, b.Code)
			}
		}
	}
	r := wire.NewRegistry()
	if err := kinds.NewErrors(builtinErrors).Register(r); err != nil {
		t.Fatal(err)
	}
	refused := fmt.Errorf("reminders: reminder %q: %w", "r", reminders.ErrTooMany)
	v, err := r.DecodeError(r.AppendError(nil, refused))
	var re *wire.RemoteError
	if e, _ := v.(error); err != nil || !errors.As(e, &re) || re.AppCode != "tempest.reminder_too_many" {
		t.Fatalf("decoded %#v, %v: want the code of ErrTooMany", v, err)
	}
}

// A kind's error that wraps a reminder refusal crosses with the kind's
// code: the kinds' codes are registered before the reminders'.
func TestKindErrorWrappingAReminderRefusalKeepsItsCode(t *testing.T) {
	rejected := errors.New("app: schedule rejected")
	r := wire.NewRegistry()
	errs := kinds.NewErrors(builtinErrors)
	errs.Add(map[string]error{"app.rejected": rejected})
	if err := errs.Register(r); err != nil {
		t.Fatal(err)
	}
	v, err := r.DecodeError(r.AppendError(nil, fmt.Errorf("%w: %w", rejected, reminders.ErrTooMany)))
	var re *wire.RemoteError
	if e, _ := v.(error); err != nil || !errors.As(e, &re) || re.AppCode != "app.rejected" || !errors.Is(e, rejected) {
		t.Fatalf("decoded %#v, %v: want the kind's code", v, err)
	}
}

// An ask's own expiry, in each form it reaches the asker in, is told
// apart from an error its actor replied that matches
// actor.ErrDeadlineExceeded, which keeps its text.
func TestAskExpired(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	replied := fmt.Errorf("downstream p1: %w", actor.ErrDeadlineExceeded)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		past bool
		want bool
	}{
		{"this node's timer", live, actor.ErrDeadlineExceeded, false, true},
		{"this node's timer, no quorum", live, fmt.Errorf("%w (%w)", actor.ErrDeadlineExceeded, ErrNoQuorum), false, true},
		{"the owner's mailbox", live, &wire.RefusedError{Node: "n2", Reason: wire.RefusedReasonExpired}, false, true},
		{"the context ended", ended, replied, false, true},
		{"the deadline passed by the clock", live, replied, true, true},
		{"replied by the actor", live, replied, false, false},
		{"replied across the wire", live, &wire.RemoteError{Message: replied.Error(), Code: wire.CodeDeadlineExceeded}, false, false},
	} {
		if got := askExpired(tc.ctx, tc.err, tc.past); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
