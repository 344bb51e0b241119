// Package actor defines what an actor is in Tempest (the role the design
// calls Olivier): a value with private state whose Receive handler runs one
// message at a time, the Context a handler uses to talk to the world, the Ref
// that names an actor, the lifecycle messages, the reference states and the
// error sentinels every layer returns.
//
// The package has no scheduler of its own and imports only the standard
// library. A scheduler (package ariel) runs turns; a supervisor decides what
// happens to actors that fail; the cluster moves mail between nodes. Actor
// code depends only on this package, so it does not change when the actor it
// talks to moves to another node.
//
// # Turns
//
// A turn is one call of Receive with one message. At most one turn of an
// actor runs at any instant, so an actor's fields need no locks. A turn runs
// to completion; it should not block. Work that waits (a request to another
// actor) uses Context.Ask, whose continuation runs as a later turn of the same
// actor; whether other mail runs meanwhile is the kind's Reentrancy
// (Reentrant by default, CallChainReentrant, NonReentrant; an ask that
// would deadlock fails at once with ErrDeadlock). To answer the caller
// from a continuation, take its Replier with Context.ReplyLater. A
// blocking Client.Ask inside a turn is refused with ErrAskInTurn.
//
// # Sending
//
// Context.Tell from inside a turn is buffered and delivered when the turn
// returns; admission is decided at the call (a full mailbox refuses at once),
// so a refusal is never silent. Program code outside actors uses a Client
// (Tell, and Ask that blocks only the calling goroutine).
//
//	type counter struct{ n int }
//
//	func (c *counter) Receive(ctx actor.Context, msg any) {
//		switch m := msg.(type) {
//		case int:
//			c.n += m
//		case string: // "get"
//			ctx.Reply(c.n)
//		}
//	}
package actor
