// Package crashhook lets a node's test crash (testhooks.Halt) leave its
// state store as a killed process would, without widening prospero's
// public API: prospero sets Abandon in its init.
package crashhook

// Abandon stops a *prospero.BoltStore (passed as any) as a kill would
// leave it: writes queued and not yet committing are never committed and
// fail, and nothing is written to the file any more; what a killed
// process leaves behind (the database as of its last commit, the pending
// log) is what the next open finds. The store must still be closed.
var Abandon func(store any)
