package tempest

import (
	"context"
	"errors"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire"
)

// The retry policy of every sender (program code, actor tells, actor asks,
// asks made inside a turn) is one: a message is sent again only when it
// certainly did not run, only within its bound, and only after something
// changed that may let it through.
//
//   - What may be sent again (resendable): a send that failed before it
//     left this node because placement is in flux (waitable: the shard is
//     moving, not placed yet, its owner is down, this node's table is behind
//     or its lease is not fresh) or because there is no link to the owner's
//     node (noLinkError: the link went down and is not up again, wire.LinkWatch,
//     or the transport refused the send at once and queued nothing; the
//     owner crashed or is cut off, and this node's table names it until
//     gossip declares it failed and placement moves its shards), and a
//     refusal by the owner's node, which never ran it: NOT_OWNER (the
//     sender routed by a stale table) and
//     NOT_SERVING (the owner cannot serve for a moment), and BUSY (the
//     message needs an activation and the owner is over its hydration
//     backlog: it is sent again after the wait the refusal asks for). The
//     owner refuses so at admission, or once the mail has waited in the
//     mailbox for an activation its fence then refuses (remote.fence: the
//     shard moved or began to move meanwhile); that mail never ran either,
//     and is refused as admission would refuse it then, marked wire.NotRun.
//     What becomes of it depends on where it came from. This node's own
//     senders' mail (program code's and turns', asks and tells) is handed
//     back by the scheduler in one batch (ariel.Resender, remote.ResendAll)
//     and waits here ahead of the mail queued for its recipient since,
//     which its senders sent after it. An ask from another node goes back
//     to its caller's node as that refusal (a Refused, not a Reply), which
//     resends it from its own queue, in order with that caller's later
//     mail. A tell from another node is lost: this node could send it on
//     only out of order with its sender's later tells, which that sender's
//     node routes to the new owner itself, and the wire protocol cannot
//     refuse a tell once admitted (a tell gets no answer to match), so it
//     is failed as before the fence (counted undelivered by the scheduler;
//     its sender, program code or an actor, is not told). So a local owner
//     and a remote one end a fenced-off ask alike, and a tell alike only
//     when its sender is on the owner's node. Never an ask whose
//     turn ran and did not commit (actor.ErrNotCommitted: its outcome is
//     unknown), never an ask on a link that went down before its answer
//     (wire.ErrLinkLost: it was handed to the link, so whether the peer
//     ran it is unknown; its caller gets that error at once, an error
//     that says so, and the ask runs at most once), never any other
//     refusal, and never an error an actor replied, whatever it wraps (it
//     ran: the scheduler
//     strips wire.NotRun's mark from every error an asker on the owner's
//     node is given and every error an actor replies).
//   - When: a NOT_OWNER refusal is sent again as soon as this node's table
//     routes the recipient elsewhere, or to the same node at another epoch,
//     than when it was refused: the wait is for the table to change, never
//     a timer. The others are sent again when the table changes, or after a
//     back-off (retryBackoff: 5 ms doubling to 100 ms), since a lease being
//     renewed, a peer's table catching up or a link coming back (a
//     partition healed before gossip noticed) is no change of this node's
//     table. Mail without a link is so routed again at the table change
//     that moves its shard off the lost node (or names that node at a new
//     epoch), and goes to the new owner then, or at once when the link's up
//     event comes; until then each attempt is refused at once again,
//     nothing sent, and it keeps its place.
//   - How long: an ask until its deadline (then it fails as a deadline,
//     naming nothing it did not do); a tell for tellRetryWait from its own
//     first refusal (then an actor sender gets it back as
//     actor.Undelivered with actor.ErrProcessUnavailable, and program code,
//     which nobody can tell, has it counted in Stats().Retry.GaveUp). A
//     tell refused by another node keeps the start of its first wait when
//     this node had sent it again (mailq.Queues.NoteResent); one fenced
//     off by this node's own fence after it was routed here again starts
//     its wait anew, which takes two table changes (the move undone, then
//     begun again), so it cannot loop on an unchanged table.
//
// The queue that holds such mail is the routing layer's (package mailq,
// driven from handoff_buffer.go),
// keyed by recipient so that mail from one sender to one recipient keeps its
// order; program code that gets a waitable error back at once (Node.Tell,
// Node.Ask) waits in its own goroutine under the same rules (awaitRetry).

// noLinkError is mail for a virtual actor that never left this node:
// the link to the owner's node went down and has not come up since
// (wire.LinkWatch), or the transport had no link and could make none then
// (wire.ErrUnavailable from a send, which queued nothing): the owner
// crashed, is cut off, or its link is backing off. The table may still
// name that node until gossip declares it failed and placement moves its
// shards, so the mail waits (waitable) for the table to route it to a
// live node, or for the link to come back. It keeps the transport error's
// identity (wire.ErrUnavailable, actor.ErrProcessUnavailable) for a
// sender that gives up on it. Mail handed to a link that then went down is
// not one: its asks fail with wire.ErrLinkLost, outcome unknown, and are
// never resent.
type noLinkError struct {
	node string
	err  error
}

func (e *noLinkError) Error() string { return e.err.Error() }
func (e *noLinkError) Unwrap() error { return e.err }

// kick wakes the retry loop (mail may go now).
func (r *remote) kick() {
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

// retryBackoff is the wait before attempt n+1 (n ≥ 0) when no table
// change prompts it.
func retryBackoff(n int) time.Duration {
	d := retryBackoffMin
	for ; n > 0 && d < retryBackoffMax; n-- {
		d *= 2
	}
	return min(d, retryBackoffMax)
}

// resendable reports whether a send that failed with err may be sent
// again under the policy above.
func resendable(err error) bool {
	if err == nil || errors.Is(err, actor.ErrNotCommitted) {
		return false
	}
	return waitable(err) || errors.Is(err, wire.ErrNotOwner) || errors.Is(err, wire.ErrBusy)
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

// awaitRetry waits before attempt n+1 of a send from program code that
// failed with a resendable error: until the applied table changes, the
// back-off passes, or ctx ends (its error) or the node closes (ErrClosed).
func (c *cluster) awaitRetry(ctx context.Context, n int) error {
	return c.awaitChange(ctx, retryBackoff(n))
}
