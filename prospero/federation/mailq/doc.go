// Package mailq holds the mail a node's routing layer may not send now
// but may soon: mail for a shard being handed off, not placed yet, whose
// owner is down, whose lease is not fresh, or whose owner's node refused
// it (NOT_OWNER, NOT_SERVING, BUSY) or fenced it off after admitting it.
//
// # Model
//
// Queues keeps one queue per recipient identity (Key), so that mail from
// one sender to one recipient keeps its order: once a recipient has a
// queue, later mail for it joins the queue (Add with mustExist) even if
// the cause has passed. Each message has a place (Item.Seq) given when it
// first waits; a message sent on from the queue and refused again goes
// back to that place (Requeue, or Add with the Place it was sent with),
// ahead of what was queued behind it. Mail this node admitted and then
// fenced off left the recipient's mailbox before anything queued for the
// recipient since, so it goes ahead of that mail, behind mail fenced off
// earlier (AddUnrun, Item.Unrun).
//
// The queues of one shard hold at most the limit given to New; beyond it
// Add refuses with actor.ErrRefused, as a full mailbox does. A tell waits
// at most the wait given to New from its first refusal, an ask until its
// deadline (Expire, Expiry). A tell sent again to another node is noted
// (NoteResent) so that its refusal, which echoes only the message, keeps
// the tell's first start and place (PlaceOf); the notes are forgotten a
// wait after that start (Sweep).
//
// The package decides nothing about routing: its caller (the node's
// routing layer) locates recipients, sends, and runs the retry loop that
// takes each queue's head when the table changes, a back-off ends
// (Item.Due) or mail is queued (Kicked). Queues only keeps the order, the
// bounds and the clocks, under one lock, and is tested without a
// network.
package mailq
