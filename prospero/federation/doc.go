// Package federation is the protocol between the supervisors of a
// cluster's nodes: what one node's Prospero says to another's. Its
// messages are declared in federation.bare (Go code generated into
// federation_bare.go) and travel on the control lane of the link between
// two nodes, which never queues behind actor mail; only the records of a
// handoff travel on a bulk stream of their own. docs/federation.md has
// the table of messages, their checks and their answer codes.
//
// The model is request and answer. A sender calls Endpoint.Call (or
// Endpoint.Status) with a request; the receiving Endpoint runs its
// Handler's method for it in a goroutine of its own, within the budget
// the request carries, and answers with a Code. Codes, not text, carry
// the outcome: both nodes are built with the same Codes table, which maps
// each code to the Go sentinels it stands for, so an *Error answered by a
// peer matches with errors.Is what the error matched on that peer.
// Notices (HandoffAbort, CancelAsk) have no answer.
//
// An Endpoint owns no transport: give it a Sender (the control lane of
// *wire.QUIC or *wire.Mem), install Endpoint.Handle as the mail layer's
// control-lane handler (wire.MailConfig.Control) and call
// Endpoint.LinkDown on link-down events:
//
//	ep, _ := federation.New(federation.Config{Sender: tr, Handler: h, Codes: codes})
//	mc := wire.MailConfig{..., Control: ep.Handle}
//	...
//	err := ep.Call(ctx, "node-2", &federation.ForwardCommand{Command: cmd})
//	if errors.Is(err, placement.ErrNotLeader) { ... }
//	...
//	ep.Close() // fails what waits, stops the handlers running
//
// Bad input never panics: a frame that does not decode is counted and
// returned as an error (the transport resets the lane), a replayed
// request id is answered DUPLICATE, more requests than MaxInFlight are
// answered BUSY. Notices (HandoffAbort, CancelAsk) get no answer; the
// outcome of a CancelAsk is counted by code (Stats.Noticed). Every decoder
// is fuzzed (FuzzMessage, FuzzStateRecord).
package federation
