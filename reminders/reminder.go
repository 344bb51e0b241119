package reminders

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tempest-actors/tempest/prospero"
)

// Catchup says what a reminder does with occurrences it missed: ticks
// that came due while the identity's owner (or the whole cluster) was
// down, or while the previous tick was still outstanding. An occurrence
// counts as missed when a later occurrence is also due by the time the
// reminder can fire; a tick that is merely late is never missed.
type Catchup uint8

const (
	// FireOnce (the default) fires one tick for all missed occurrences,
	// carrying the newest one's sequence number and scheduled time; the
	// others are counted as skipped.
	FireOnce Catchup = iota
	// Skip fires none of them: the reminder resumes with the next
	// occurrence due after now.
	Skip
	// FireUpTo fires the newest MaxCatchup missed occurrences, oldest
	// first, one at a time; older ones are skipped.
	FireUpTo
)

func (c Catchup) String() string {
	switch c {
	case FireOnce:
		return "fire-once"
	case Skip:
		return "skip"
	case FireUpTo:
		return "fire-up-to"
	}
	return fmt.Sprintf("Catchup(%d)", uint8(c))
}

// ParseCatchup parses the String form of a policy.
func ParseCatchup(s string) (Catchup, error) {
	for _, c := range []Catchup{FireOnce, Skip, FireUpTo} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w %q", ErrBadCatchup, s)
}

// Reminder is what an actor registers: a named schedule of ticks that
// belongs to its identity, not to its activation.
type Reminder struct {
	// Name identifies the reminder within the identity (1 to
	// MaxNameBytes bytes of UTF-8). Registering an existing name
	// replaces that reminder: its old ticks stop, also one in flight.
	Name string
	// Due is the first occurrence. It must not be in the past. Zero
	// means now + Period.
	Due time.Time
	// Period is the interval between occurrences; zero makes the
	// reminder one-shot (it is removed once its tick was delivered).
	// Otherwise at least the engine's MinPeriod.
	Period time.Duration
	// Catchup and MaxCatchup (for FireUpTo, at least 1) say what to do
	// with missed occurrences.
	Catchup    Catchup
	MaxCatchup int
	// Payload is delivered in every Tick. It must be a message type the
	// engine's Codec can store (on a node: one declared for the kind);
	// nil is allowed.
	Payload any
}

// Tick is the message a reminder delivers to its actor. Delivery is at
// least once across failovers and restarts (a tick whose delivery was
// not yet recorded at rest may be delivered again, with the same Seq),
// so an actor that must not act twice de-duplicates on (Name, Seq).
type Tick struct {
	Name string
	// Seq numbers the occurrence: the tick scheduled at Due is 1, the
	// next one Period later is 2, and so on. Missed occurrences that
	// were skipped leave gaps.
	Seq uint64
	// Scheduled is when this occurrence was due (Due + (Seq-1)*Period).
	Scheduled time.Time
	Payload   any
}

// Info describes a registered reminder (List).
type Info struct {
	ID         prospero.Identity
	Name       string
	Due        time.Time // first occurrence
	Period     time.Duration
	Catchup    Catchup
	MaxCatchup int
	// Next is when the next tick is due; LastSeq the sequence number of
	// the last tick delivered (0: none yet); Outstanding whether a tick
	// is in flight.
	Next        time.Time
	LastSeq     uint64
	Outstanding bool
	// PayloadType is what the payload is stored under ("" for none): on
	// a node, the payload message's tag, in decimal (its kind's
	// KindOptions.Messages say which type that is).
	PayloadType string
	// Uncommitted (List in a turn only): the registration, made by this
	// turn or an earlier one of the actor, is not committed yet, and the
	// reminder does not fire until it is. Operators' listings (ListOf)
	// show committed reminders only.
	Uncommitted bool
}

// Errors. Registration errors match ErrInvalid and exactly one of the
// specific sentinels (ErrPeriodTooShort, ErrDueInPast, ErrUnknownPayload,
// ErrBadName, ErrBadCatchup, ErrTooMany, ErrTooFar), so callers can branch on
// either. Each specific sentinel matches ErrInvalid by itself, so an
// error that keeps only its specific sentinel (one that crossed to
// another node: tempest registers these as built-in error codes) still
// matches ErrInvalid.
var (
	// ErrInvalid: a registration the engine refuses; nothing was stored.
	ErrInvalid = errors.New("reminders: invalid reminder")
	// ErrPeriodTooShort: Period below the engine's MinPeriod (and not 0).
	ErrPeriodTooShort error = &refusal{"period below the minimum"}
	// ErrDueInPast: Due is before now (or missing for a one-shot
	// reminder).
	ErrDueInPast error = &refusal{"due time in the past"}
	// ErrUnknownPayload: the payload's type cannot be stored for the kind.
	ErrUnknownPayload error = &refusal{"unknown payload type"}
	// ErrBadName: Name is empty, longer than MaxNameBytes or not UTF-8.
	ErrBadName error = &refusal{"bad reminder name"}
	// ErrBadCatchup: an unknown catch-up policy, or a MaxCatchup that
	// does not fit the policy (ParseCatchup too).
	ErrBadCatchup error = &refusal{"bad catch-up policy"}
	// ErrTooMany: the identity already has MaxPerIdentity reminders.
	ErrTooMany error = &refusal{"too many reminders for one identity"}
	// ErrTooFar: Due or Period lies more than MaxHorizon ahead.
	ErrTooFar error = &refusal{"due time or period too far ahead"}
	// ErrNotFound: no reminder of that name (Unregister).
	ErrNotFound = errors.New("reminders: no such reminder")
	// ErrNotOwner: the identity's shard is not held by this engine (the
	// call did not run on the identity's owner, or ownership is moving).
	ErrNotOwner = errors.New("reminders: identity not owned here")
	// ErrNotInTurn: Register/Unregister/List need the Context of a turn of
	// a virtual actor.
	ErrNotInTurn = errors.New("reminders: not called in a turn of a virtual actor")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("reminders: engine closed")
)

// refusal is a specific registration sentinel: it matches ErrInvalid.
type refusal struct{ what string }

func (e *refusal) Error() string { return "reminders: " + e.what }
func (e *refusal) Unwrap() error { return ErrInvalid }

// invalidError is a registration refused for one specific reason (kind,
// one of the specific sentinels), which it matches, and ErrInvalid
// through it.
type invalidError struct {
	name   string
	kind   error
	detail string
}

func (e *invalidError) Error() string {
	return fmt.Sprintf("reminders: reminder %q: %s: %s", e.name, strings.TrimPrefix(e.kind.Error(), "reminders: "), e.detail)
}

func (e *invalidError) Unwrap() error { return e.kind }

func invalid(name string, kind error, format string, args ...any) error {
	return &invalidError{name: name, kind: kind, detail: fmt.Sprintf(format, args...)}
}

// Limits enforced at registration.
const (
	// MaxNameBytes bounds a reminder's name.
	MaxNameBytes = 128
	// DefaultMinPeriod is the shortest period of a periodic reminder
	// unless Config.MinPeriod says otherwise: reminders are for
	// schedules at human scale (billing, expiry, retries); an activation
	// timer (Context.Every) serves shorter ones.
	DefaultMinPeriod = time.Second
	// FloorMinPeriod is the least Config.MinPeriod may be.
	FloorMinPeriod = time.Millisecond
	// DefaultMaxPerIdentity bounds the reminders of one identity.
	DefaultMaxPerIdentity = 64
	// DefaultMaxCatchup bounds FireUpTo's MaxCatchup.
	DefaultMaxCatchup = 1000
	// MaxHorizon bounds how far ahead Due and Period may lie: a record
	// holds times to the nanosecond, which reach to the year 2262.
	MaxHorizon = 100 * 365 * 24 * time.Hour
)

// CheckName reports a name no reminder can have (ErrBadName, which
// matches ErrInvalid), as Register, Unregister and Cancel do.
func CheckName(name string) error { return checkName(name) }

// checkName reports a name no reminder can have (ErrBadName).
func checkName(name string) error {
	if name != "" && len(name) <= MaxNameBytes && utf8.ValidString(name) {
		return nil
	}
	shown := name
	if len(shown) > 32 {
		shown = strings.ToValidUTF8(shown[:32], "?") + "…"
	}
	return invalid(shown, ErrBadName, "name must be 1 to %d bytes of UTF-8 (got %d)", MaxNameBytes, len(name))
}

// validate checks r at now and returns it normalised (Due filled in).
func (r Reminder) validate(now time.Time, minPeriod time.Duration) (Reminder, error) {
	if err := checkName(r.Name); err != nil {
		return r, err
	}
	switch {
	case r.Period < 0:
		return r, invalid(r.Name, ErrPeriodTooShort, "negative period %v", r.Period)
	case r.Period > MaxHorizon:
		return r, invalid(r.Name, ErrTooFar, "period %v (the most is %v)", r.Period, MaxHorizon)
	case r.Period != 0 && r.Period < minPeriod:
		return r, invalid(r.Name, ErrPeriodTooShort, "%v (the minimum is %v)", r.Period, minPeriod)
	case r.Catchup > FireUpTo:
		return r, invalid(r.Name, ErrBadCatchup, "unknown policy %d", r.Catchup)
	case r.Catchup == FireUpTo && (r.MaxCatchup < 1 || r.MaxCatchup > DefaultMaxCatchup):
		return r, invalid(r.Name, ErrBadCatchup, "fire-up-to needs MaxCatchup in 1..%d (got %d)", DefaultMaxCatchup, r.MaxCatchup)
	case r.Catchup != FireUpTo && r.MaxCatchup != 0:
		return r, invalid(r.Name, ErrBadCatchup, "MaxCatchup is only for fire-up-to")
	}
	if r.Due.IsZero() {
		if r.Period == 0 {
			return r, invalid(r.Name, ErrDueInPast, "a one-shot reminder needs a due time")
		}
		r.Due = now.Add(r.Period)
	}
	if r.Due.After(now.Add(MaxHorizon)) {
		return r, invalid(r.Name, ErrTooFar, "due %v is more than %v ahead", r.Due.UTC(), MaxHorizon)
	}
	if r.Due.Before(now) {
		return r, invalid(r.Name, ErrDueInPast, "due %v is %v before now", r.Due.UTC(), now.Sub(r.Due))
	}
	return r, nil
}
