package tempest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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
		if late && !b.late {
			t.Errorf("%s is registered before the kinds but listed after a late one", b.code)
		}
		late = late || b.late
		if !strings.HasPrefix(b.code, reservedErrorPrefix) || codes[b.code] {
			t.Errorf("code %q: not reserved, or listed twice", b.code)
		}
		codes[b.code] = true
		for _, later := range builtinErrors[i+1:] {
			if later.err == b.err || errors.Is(later.err, b.err) {
				t.Errorf("%s (%v) matches %s, listed before it", later.code, later.err, b.code)
			}
		}
	}
	r := wire.NewRegistry()
	if err := (errorTable{}).register(r); err != nil {
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
	if err := (errorTable{"app.rejected": rejected}).register(r); err != nil {
		t.Fatal(err)
	}
	v, err := r.DecodeError(r.AppendError(nil, fmt.Errorf("%w: %w", rejected, reminders.ErrTooMany)))
	var re *wire.RemoteError
	if e, _ := v.(error); err != nil || !errors.As(e, &re) || re.AppCode != "app.rejected" || !errors.Is(e, rejected) {
		t.Fatalf("decoded %#v, %v: want the kind's code", v, err)
	}
}
