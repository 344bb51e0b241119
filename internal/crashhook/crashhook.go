// Package crashhook lets a node's tests fault its state store (leave it
// as a killed process would, fill its disk) without widening prospero's
// public API: prospero sets the functions in its init.
package crashhook

// Abandon stops a *prospero.BoltStore (passed as any) as a kill would
// leave it: writes queued and not yet committing are never committed and
// fail, and nothing is written to the file any more; what a killed
// process leaves behind (the database as of its last commit, the pending
// log) is what the next open finds. The store must still be closed.
var Abandon func(store any)

// FailWrites makes every commit of a *prospero.BoltStore (passed as
// any), group commits and single writes alike, fail with err, and its
// check for room too, as a full disk would; a nil err ends that.
var FailWrites func(store any, err error)
