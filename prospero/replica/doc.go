// Package replica replicates a node's state at rest to the other members
// of each shard's replica set, so that any member can take the shard
// over holding every committed record (docs/cluster.md, "Replicated
// state at rest", says what it promises and what it does not).
//
// # Model
//
// A Store wraps the node's local prospero.BoltStore and is the
// supervisor's state store. Placement (the raft table, seen through the
// View interface) is the configuration manager: each shard has an owner
// and an in-sync set of followers, changed only through raft (View.Shrink
// removes a follower; Joiner.Join adds one after a catch-up). The owner sends
// every record it writes to each follower of the shard's set, on a
// stream of its own per follower (opened with the Dialer given to
// Attach, served by Serve on the follower): up to four batches in
// flight per follower (one with Config.SyncReplicas), acknowledged in
// order, the records of many actors sharing each network write and the
// follower's fsync (group commit). A write is committed once every
// follower in the set acknowledged it (on receipt by default, on fsync
// with Config.SyncReplicas), and the owner decided it; a follower that
// fails, refuses or does not answer within Config.Timeout is removed
// from the set through raft before any write commits without it. A
// follower that acknowledged records on receipt and then failed to store
// them (a background write on a full disk) refuses its owner's next
// batch with ErrLostRecords, and the owner removes it from every set it
// shares with it (FollowedView), not only the batch's.
//
// A follower applies a batch only if every record checks out (CRC-32C,
// identity) and its epoch is not older than the table's or than the
// newest it has seen for the shard (ErrStale); it keeps a record only
// if its (epoch, version) is newer than what it holds, so an old owner's
// leftovers can never win. A node that gains a shard (failover, move)
// serves it from its own copy.
//
// CatchUp brings a follower into a set: a bulk copy of the shard's
// records (throttled), the stream meanwhile, a confirmation that the
// follower made every record it acknowledged durable, then a join
// through raft.
// CatchUpStreaks turns the outcomes of its retries into what an operator
// should read.
//
// Until Attach, every write is local (a node not in a cluster). Close
// stops the Store's goroutines.
package replica
