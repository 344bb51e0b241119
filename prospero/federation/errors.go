package federation

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Error is a failure a peer answered with: the peer is alive, received
// the request and said no. Code names the condition; Unwrap returns the
// sentinels of Code in the Errors table both nodes were built with, so
// errors.Is(err, placement.ErrNotLeader) holds on the caller exactly as
// it would have on the answering node. Detail is the answering node's
// text, for people; nothing branches on it.
type Error struct {
	Code      Code
	Detail    string
	OwnerHint string // NOT_OWNER: the node that owns the actor, if known
	// RetryAfter (BUSY) is how long the peer asks the sender to wait
	// before it tries again; 0: no advice.
	RetryAfter time.Duration
	sentinels  []error
}

// BusyError is a Handler's refusal of a request it cannot take now, with
// the delay after which the sender may try again: answered BUSY with
// retryAfterNs, it reaches the sender as an *Error whose RetryAfter is
// Delay and which matches ErrBusy.
type BusyError struct {
	Delay  time.Duration
	Reason string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v: %s (retry after %v)", ErrBusy, e.Reason, e.Delay)
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// RetryAfter returns Delay.
func (e *BusyError) RetryAfter() time.Duration { return e.Delay }

// maxRetryAfter bounds the delay an answer asks for.
const maxRetryAfter = time.Minute

// Error is the answering node's text when it gave one, so that a call
// answered by another node reads as it would have on that node (the
// same error wherever the actor lives); otherwise it names the code.
func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("federation: peer answered %s", e.Code)
	}
	return e.Detail
}

// Unwrap returns the sentinels Code stands for.
func (e *Error) Unwrap() []error { return e.sentinels }

// ErrUnanswered: a request was sent and no answer will come (the link
// to the peer went down or the endpoint closed); whether the peer acted
// on it is unknown. Errors wrapping it also match the transport's
// unavailable sentinel given in Config.Unavailable.
var ErrUnanswered = errors.New("federation: request unanswered")

// Conditions the Endpoint answers itself. Put them in the Codes table
// under BAD_REQUEST, BUSY and DUPLICATE.
var (
	// ErrBadRequest: a request was malformed or out of range.
	ErrBadRequest = errors.New("federation: bad request")
	// ErrBusy: the peer had too many requests in progress and did not run
	// this one; retrying later is safe.
	ErrBusy = errors.New("federation: peer busy")
	// ErrDuplicate: a request with the same id from the same peer was in
	// progress (a replay); this one was not run.
	ErrDuplicate = errors.New("federation: duplicate request")
)

// ErrBadConfig: New was given an invalid Config.
var ErrBadConfig = errors.New("federation: invalid config")

// Codes maps each Code to the sentinels an error with that code matches.
// Every node of a cluster must be built with the same table (the root
// package builds it once): an answered error takes the first code (in
// numeric order) one of whose sentinels it matches, and the decoded Error
// matches all of that code's sentinels.
type Codes map[Code][]error

// validate checks that every code is declared and every entry names at
// least one sentinel.
func (t Codes) validate() error {
	for c, errs := range t {
		if !c.Valid() || c == CodeOk || c == CodeOther {
			return fmt.Errorf("%w: Codes has %s", ErrBadConfig, c)
		}
		if len(errs) == 0 || errs[0] == nil {
			return fmt.Errorf("%w: Codes[%s] has no sentinel", ErrBadConfig, c)
		}
	}
	return nil
}

// codeOf classifies err: OK for nil, the Code of an *Error it wraps (an
// answer passed on), else the first code in numeric order one of whose
// sentinels err is or wraps, else the first one of whose sentinels err
// matches (errors.Is), else OTHER. A sentinel that matches a more
// general one (ErrClosed matches actor.ErrProcessUnavailable) so keeps
// its own code whatever the codes' order.
func (t Codes) codeOf(err error) Code {
	if err == nil {
		return CodeOk
	}
	var fe *Error
	if errors.As(err, &fe) && fe.Code.Valid() && fe.Code != CodeOk {
		return fe.Code
	}
	for _, match := range []func(err, s error) bool{wraps, errors.Is} {
		for c := CodeOther + 1; c.Valid(); c++ {
			for _, s := range t[c] {
				if match(err, s) {
					return c
				}
			}
		}
	}
	return CodeOther
}

// wraps reports whether s is err or in its chain of wrapped errors, by
// identity (no Is method asked).
func wraps(err, s error) bool {
	for err != nil {
		if reflect.TypeOf(err).Comparable() && err == s {
			return true
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				if wraps(e, s) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// Result returns the answer to request id that reports err.
func (t Codes) Result(id uint64, err error) Result {
	r := Result{Id: id, Code: t.codeOf(err)}
	if err != nil {
		r.Detail = strings.ToValidUTF8(err.Error(), "\uFFFD")
		if len(r.Detail) > maxDetail {
			r.Detail = strings.ToValidUTF8(r.Detail[:maxDetail], "")
		}
		var fe *Error
		var hint interface{ Hint() string }
		switch {
		case errors.As(err, &fe):
			r.OwnerHint = fe.OwnerHint
			r.RetryAfterNs = uint64(max(fe.RetryAfter, 0))
		case errors.As(err, &hint):
			r.OwnerHint = hint.Hint()
		}
		var busy interface{ RetryAfter() time.Duration }
		if r.Code == CodeBusy && errors.As(err, &busy) {
			r.RetryAfterNs = uint64(min(max(busy.RetryAfter(), 0), maxRetryAfter))
		}
		if r.Code != CodeBusy {
			r.RetryAfterNs = 0
		}
	}
	return r
}

// maxDetail bounds the text of an answer.
const maxDetail = 1024

// Err returns the error r reports: nil for OK, else an *Error.
func (t Codes) Err(r *Result) error {
	if r.Code == CodeOk {
		return nil
	}
	e := &Error{Code: r.Code, Detail: r.Detail, OwnerHint: r.OwnerHint, sentinels: t[r.Code]}
	if r.Code == CodeBusy {
		e.RetryAfter = time.Duration(min(r.RetryAfterNs, uint64(maxRetryAfter)))
	}
	return e
}
