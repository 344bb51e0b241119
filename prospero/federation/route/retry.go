package route

import (
	"errors"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// NoLinkError is mail for a virtual actor that never left this node:
// the link to the owner's node went down and has not come up since
// (wire.LinkWatch), or the transport had no link and could make none then
// (wire.ErrUnavailable from a send, which queued nothing): the owner
// crashed, is cut off, or its link is backing off. The table may still
// name that node until gossip declares it failed and placement moves its
// shards, so the mail waits (Waitable) for the table to route it to a
// live node, or for the link to come back. It keeps the transport error's
// identity (wire.ErrUnavailable, actor.ErrProcessUnavailable) for a
// sender that gives up on it. Mail handed to a link that then went down is
// not one: its asks fail with wire.ErrLinkLost, outcome unknown, and are
// never resent.
type NoLinkError struct {
	node string
	err  error
}

func (e *NoLinkError) Error() string { return e.err.Error() }
func (e *NoLinkError) Unwrap() error { return e.err }

// kick wakes the retry loop (mail may go now).
func (r *Router) kick() {
	if r.buf == nil {
		return
	}
	r.buf.Kick()
}

// tellRetryWait bounds how long a tell may wait to be sent again.
const tellRetryWait = actor.DefaultAskTimeout

// Back-off between attempts that no table change prompts.
const (
	retryBackoffMin = 5 * time.Millisecond
	retryBackoffMax = 100 * time.Millisecond
)

// Backoff is the wait before attempt n+1 (n ≥ 0) when no table
// change prompts it.
func Backoff(n int) time.Duration {
	d := retryBackoffMin
	for ; n > 0 && d < retryBackoffMax; n-- {
		d *= 2
	}
	return min(d, retryBackoffMax)
}

// Resendable reports whether a send that failed with err may be sent
// again under the retry policy (see the package doc).
func Resendable(err error) bool {
	if err == nil || errors.Is(err, actor.ErrNotCommitted) {
		return false
	}
	return Waitable(err) || errors.Is(err, wire.ErrNotOwner) || errors.Is(err, wire.ErrBusy)
}

// busyFor returns the wait a BUSY refusal asks for (at least the first
// back-off), and whether err is one.
func busyFor(err error) (time.Duration, bool) {
	var re *wire.RefusedError
	if !errors.As(err, &re) || re.Reason != wire.RefusedReasonBusy {
		return 0, false
	}
	return max(re.RetryAfter, retryBackoffMin), true
}

// refusedBy returns the node that refused err and whether the refusal was
// NOT_OWNER, for a *wire.RefusedError.
func refusedBy(err error) (node string, notOwner bool) {
	var re *wire.RefusedError
	if !errors.As(err, &re) {
		return "", false
	}
	return re.Node, re.Reason == wire.RefusedReasonNotOwner
}

// Waitable reports that a send failed before anything left this node, because
// placement is in flux, the owner's link is down (NoLinkError), or this
// node, the owner, is marked down (it is marked up again or its shards
// move, as a remote sender refused NOT_SERVING by it waits for); it may
// be tried again.
func Waitable(err error) bool {
	if errors.Is(err, actor.ErrNotCommitted) {
		// The turn ran: its state was not committed, but its write may
		// have landed (and reached replicas). Sending the ask again would
		// run it twice, whatever the commit's cause (a lapsed lease, a
		// shard moving) says.
		return false
	}
	var nl *NoLinkError
	return errors.As(err, &nl) || errors.Is(err, placement.ErrHandoff) || errors.Is(err, placement.ErrUnassigned) || errors.Is(err, placement.ErrOwnerDown) ||
		errors.Is(err, placement.ErrUninitialized) || errors.Is(err, placement.ErrLeaseExpired) ||
		errors.Is(err, placement.ErrBehind) || errors.Is(err, placement.ErrNodeDown) || errors.Is(err, wire.ErrNotServing)
}
