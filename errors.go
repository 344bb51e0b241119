package tempest

import (
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/kinds"
	"github.com/tempest-actors/tempest/reminders"
)

// builtinErrors are Tempest's own sentinels that an actor's reply or the
// owner node may produce beyond the actor sentinels (which cross by their
// own codes): they keep their identity across nodes like a kind's Errors.
// An error crosses with the code of the first one it matches, so a
// sentinel that matches another (a specific reminder refusal matches
// reminders.ErrInvalid) comes before it; they are registered in this
// order, the node's own first, then the kinds' errors, then the
// reminders' (an application error that wraps a reminder refusal keeps
// the application's code).
var builtinErrors = []kinds.Builtin{
	early("tempest.bad_json", ErrBadJSON),
	early("tempest.closed", ErrClosed),
	early("tempest.invalid_key", ErrInvalidKey),
	early("tempest.no_gateway", ErrNoGateway),
	early("tempest.no_quorum", ErrNoQuorum),
	early("tempest.not_started", ErrNotStarted),
	early("tempest.unregistered_message", ErrUnregisteredMessage),
	early("tempest.message_too_large", ErrMessageTooLarge),
	// What a turn's own calls may return, which it may reply as it came.
	early("tempest.ask_in_turn", actor.ErrAskInTurn),
	early("tempest.already_answered", actor.ErrAlreadyAnswered),
	early("tempest.not_ask", actor.ErrNotAsk),
	early("tempest.not_held", ErrNotHeld),
	// What Reminders.Register, Unregister and List return to an actor,
	// which may reply it: the refusals' specific sentinels, then
	// reminders.ErrInvalid, which each of them matches.
	late("tempest.reminder_period_too_short", reminders.ErrPeriodTooShort),
	late("tempest.reminder_due_in_past", reminders.ErrDueInPast),
	late("tempest.reminder_unknown_payload", reminders.ErrUnknownPayload),
	late("tempest.reminder_bad_name", reminders.ErrBadName),
	late("tempest.reminder_bad_catchup", reminders.ErrBadCatchup),
	late("tempest.reminder_too_many", reminders.ErrTooMany),
	late("tempest.reminder_too_far", reminders.ErrTooFar),
	late("tempest.reminder_invalid", reminders.ErrInvalid),
	late("tempest.reminder_not_found", reminders.ErrNotFound),
	late("tempest.reminder_not_owner", reminders.ErrNotOwner),
	late("tempest.reminder_not_in_turn", reminders.ErrNotInTurn),
	late("tempest.reminders_closed", reminders.ErrClosed),
}

// ErrorCode returns the code under which a kind registered the
// application error err matches (errors.Is; see KindOptions.Errors), so
// that a program or the HTTP API can report it; false when err matches
// none. Codes are tried in sorted order.
func (n *Node) ErrorCode(err error) (string, bool) {
	if n.errs == nil {
		return "", false
	}
	return n.errs.Code(err)
}

func early(code string, err error) kinds.Builtin { return kinds.Builtin{Code: code, Err: err} }
func late(code string, err error) kinds.Builtin {
	return kinds.Builtin{Code: code, Err: err, Late: true}
}
