// Package route is a node's mail to and from actors of other nodes: the
// routing layer between the local scheduler (package ariel) and the mail
// lanes of the links between nodes (wire.Mailer).
//
// A Router is the scheduler's ariel.Router. Mail for an actor of this
// node goes to its cell; mail for any other actor is routed by the
// Locator the node gives it (placement's answer: owner, placement epoch,
// or why there is none now), stamped with that epoch and queued on the
// link to the owner. On the receiving side the Router is the Mailer's
// local delivery: mail is admitted only while this node owns the
// recipient at the epoch it was stamped with (wire.EpochFence), an
// activation runs only while it still does (FenceActivation), and a
// refusal goes back to the sender as a typed wire.RefusedError (NOT_OWNER
// naming the owner to try, NOT_SERVING, BUSY with the wait to ask for),
// never as text. Mail that may not be sent now but may be soon waits in
// the Router's retry queues (package mailq) and is routed again when the
// table changes (RetryLoop).
//
// # Retry policy
//
// Every sender (program code, actor tells, actor asks, asks made inside a
// turn) is under one policy: a message is sent again only when it
// certainly did not run, only within its bound, and only after something
// changed that may let it through.
//
// What may be sent again (Resendable):
//
//   - a send that failed before it left this node because placement is in
//     flux (Waitable: the shard is moving, not placed yet, its owner is
//     down, this node's table is behind, its lease is not fresh, or this
//     node is the owner and marked down), or
//     because there is no link to the owner's node (NoLinkError: the link
//     went down and is not up again, see wire.LinkWatch, or the transport
//     refused the send at once and queued nothing; the owner crashed or is
//     cut off, and this node's table names it until gossip declares it
//     failed and placement moves its shards);
//   - a refusal by the owner's node, which never ran it: NOT_OWNER (the
//     sender routed by a stale table), NOT_SERVING (the owner cannot serve
//     for a moment) and BUSY (the message needs an activation and the owner
//     is over its hydration backlog: it is sent again after the wait the
//     refusal asks for).
//
// The owner refuses so at admission, or once the mail has waited in the
// mailbox for an activation its fence then refuses (FenceActivation: the
// shard moved or began to move meanwhile); that mail never ran either,
// and is refused as admission would refuse it then, marked wire.NotRun.
// What becomes of it depends on where it came from. The owner node's own
// senders' mail (program code's and turns', asks and tells) is handed back
// by the scheduler in one batch (ariel.Resender, Router.ResendAll) and
// queued ahead of the mail queued for its recipient since, which its
// senders sent after it. An ask from another node goes back to its
// caller's node as that refusal (a Refused, not a Reply), which resends it
// from its own queue, in order with that caller's later mail. A tell from
// another node is lost: the owner could send it on only out of order with
// its sender's later tells, which that sender's node routes to the new
// owner itself, and the wire protocol cannot refuse a tell once admitted
// (a tell gets no answer to match), so it is failed as before the fence
// (counted undelivered by the scheduler; its sender is not told). So a
// local owner and a remote one end a fenced-off ask alike, and a tell
// alike only when its sender is on the owner's node.
//
// Never sent again: an ask whose turn ran and did not commit
// (actor.ErrNotCommitted: its outcome is unknown); an ask on a link that
// went down before its answer (wire.ErrLinkLost: it was handed to the
// link, so whether the peer ran it is unknown; its caller gets that error
// at once, and the ask runs at most once); any other refusal; and an
// error an actor replied, whatever it wraps (it ran: the scheduler strips
// wire.NotRun's mark from every error an actor replies and every error an
// asker on the owner's node is given).
//
// When: a NOT_OWNER refusal is sent again as soon as this node's table
// routes the recipient elsewhere, or to the same node at another epoch,
// than when it was refused: the wait is for the table to change, never a
// timer. The others are sent again when the table changes, or after a
// back-off (Backoff: 5 ms doubling to 100 ms), since a lease being
// renewed, a peer's table catching up or a link coming back (a partition
// healed before gossip noticed) is no change of this node's table. Mail
// without a link is routed again at the table change that moves its shard
// off the lost node (or names that node at a new epoch), or at once when
// the link's up event comes; until then each attempt is refused at once
// again, nothing sent, and it keeps its place.
//
// How long: an ask until its deadline (then it fails as a deadline,
// naming nothing it did not do); a tell for actor.DefaultAskTimeout from
// its own first refusal (then an actor sender gets it back as
// actor.Undelivered with actor.ErrProcessUnavailable, and for program
// code, which nobody can tell, it is counted as given up). A tell refused
// by another node keeps the start of its first wait when this node had
// sent it again (mailq.Queues.NoteResent); one fenced off by this node's
// own fence after it was routed here again starts its wait anew, which
// takes two table changes (the move undone, then begun again), so it
// cannot loop on an unchanged table.
//
// # Retry queues
//
// What waits under that policy waits in bounded per-recipient queues
// (package mailq): mail for a shard in flux from an actor, and asks from
// anyone; mail from anyone that the owner's node refused NOT_OWNER,
// NOT_SERVING or BUSY; and the fenced-off mail of this node's own senders
// (Router.ResendAll). A tell from program code whose route is in flux when
// it is sent is not queued: the node's Tell gets the error at once and
// waits in its caller's goroutine under the same rules (Waitable,
// Resendable, Backoff); one refused by another node, or fenced off after
// admission, is queued as any other mail.
//
// Each recipient's queue is routed again in order when the table changes,
// or when its head's back-off ends, to whichever node owns the shard then
// (this one included). Once a recipient has a queue, later mail for it
// joins the queue even if the move has completed meanwhile, so mail from
// one sender to one recipient keeps its order; a message sent on from a
// queue and refused again goes back to the place it first got
// (mailq.Item.Seq), ahead of what was queued behind it. Fenced-off mail
// left the recipient's mailbox, so it was sent before anything queued for
// the recipient since: it goes ahead of that mail, behind mail fenced off
// earlier (mailq.Queues.AddUnrun), and is handed over before the mailbox
// admits mail again. A move that is aborted leaves the shard with its old
// owner, where the waiting mail then goes.
//
// A moving shard's queues hold at most 1,024 messages, and so do one
// shard's for every other cause (one kind's while its shard is not
// known); beyond that the sender gets actor.ErrRefused, as for a full
// mailbox, and program code's tell is counted as given up.
package route
