package tempest

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// reservedErrorPrefix starts the codes of Tempest's own errors.
const reservedErrorPrefix = "tempest."

// builtinErrors are Tempest's own sentinels that an actor's reply or the
// owner node may produce beyond the actor sentinels (which cross by their
// own codes): they keep their identity across nodes like a kind's Errors.
// An error crosses with the code of the first one it matches, so a
// sentinel that matches another (a specific reminder refusal matches
// reminders.ErrInvalid) comes before it; they are registered in this
// order, the node's own first, then the kinds' errors, then the
// reminders' (an application error that wraps a reminder refusal keeps
// the application's code).
var builtinErrors = []builtinError{
	{"tempest.bad_json", ErrBadJSON, false},
	{"tempest.closed", ErrClosed, false},
	{"tempest.invalid_key", ErrInvalidKey, false},
	{"tempest.no_gateway", ErrNoGateway, false},
	{"tempest.no_quorum", ErrNoQuorum, false},
	{"tempest.not_started", ErrNotStarted, false},
	{"tempest.unregistered_message", ErrUnregisteredMessage, false},
	// What Reminders.Register, Unregister and List return to an actor,
	// which may reply it: the refusals' specific sentinels, then
	// reminders.ErrInvalid, which each of them matches.
	{"tempest.reminder_period_too_short", reminders.ErrPeriodTooShort, true},
	{"tempest.reminder_due_in_past", reminders.ErrDueInPast, true},
	{"tempest.reminder_unknown_payload", reminders.ErrUnknownPayload, true},
	{"tempest.reminder_bad_name", reminders.ErrBadName, true},
	{"tempest.reminder_bad_catchup", reminders.ErrBadCatchup, true},
	{"tempest.reminder_too_many", reminders.ErrTooMany, true},
	{"tempest.reminder_too_far", reminders.ErrTooFar, true},
	{"tempest.reminder_invalid", reminders.ErrInvalid, true},
	{"tempest.reminder_not_found", reminders.ErrNotFound, true},
	{"tempest.reminder_not_owner", reminders.ErrNotOwner, true},
	{"tempest.reminder_not_in_turn", reminders.ErrNotInTurn, true},
	{"tempest.reminders_closed", reminders.ErrClosed, true},
}

// builtinError is one of Tempest's own error codes; late ones are
// registered after the kinds' errors.
type builtinError struct {
	code string
	err  error
	late bool
}

// errorTable maps application error codes to sentinels. Written only
// before Start.
type errorTable map[string]error

// check reports why errs cannot be added for kind, without adding them.
func (t errorTable) check(kind string, errs map[string]error) error {
	for _, code := range slices.Sorted(maps.Keys(errs)) {
		err := errs[code]
		switch {
		case code == "" || err == nil:
			return fmt.Errorf("%w %q: error code %q for %v: both must be set", ErrInvalidKind, kind, code, err)
		case !reflect.TypeOf(err).Comparable():
			return fmt.Errorf("%w %q: error code %q: %T is not comparable, so it cannot be a sentinel", ErrInvalidKind, kind, code, err)
		case strings.HasPrefix(code, reservedErrorPrefix):
			return fmt.Errorf("%w %q: error code %q: codes starting with %q are reserved", ErrInvalidKind, kind, code, reservedErrorPrefix)
		}
		for _, b := range builtinErrors {
			if b.err == err {
				return fmt.Errorf("%w %q: error code %q: %v is Tempest's own, with code %q", ErrInvalidKind, kind, code, err, b.code)
			}
		}
		if old, ok := t[code]; ok && old != err {
			return fmt.Errorf("%w %q: error code %q is %v in another kind", ErrInvalidKind, kind, code, old)
		}
		for c, e := range t {
			if e == err && c != code {
				return fmt.Errorf("%w %q: error %v has code %q in another kind", ErrInvalidKind, kind, err, c)
			}
		}
		for c, e := range errs {
			if e == err && c != code {
				return fmt.Errorf("%w %q: error %v has two codes (%q, %q)", ErrInvalidKind, kind, err, c, code)
			}
		}
	}
	return nil
}

func (t errorTable) add(errs map[string]error) { maps.Copy(t, errs) }

// register gives the wire registry Tempest's and the kinds' error codes.
func (t errorTable) register(r *wire.Registry) error {
	builtins := func(late bool) error {
		for _, b := range builtinErrors {
			if b.late != late {
				continue
			}
			if err := r.RegisterError(b.code, b.err); err != nil {
				return err
			}
		}
		return nil
	}
	if err := builtins(false); err != nil {
		return err
	}
	for _, code := range slices.Sorted(maps.Keys(t)) {
		if err := r.RegisterError(code, t[code]); err != nil {
			return err
		}
	}
	return builtins(true)
}

// ErrorCode returns the code under which a kind registered the
// application error err matches (errors.Is; see KindOptions.Errors), so
// that a program or the HTTP API can report it; false when err matches
// none. Codes are tried in sorted order.
func (n *Node) ErrorCode(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	for _, code := range slices.Sorted(maps.Keys(n.errs)) {
		if errors.Is(err, n.errs[code]) {
			return code, true
		}
	}
	return "", false
}
