// Package placement decides which node runs each actor, and makes sure
// that at most one node believes so at any instant.
//
// # The table
//
// The replicated state is a Table, kept by hashicorp/raft (log in
// raft-wal under DataDir/raft/wal, snapshots under DataDir/raft/snapshots):
//
//   - Nodes: name, addresses, build version, assumption manifest and a
//     status: up (may own and receive shards), draining (keeps what it owns
//     until each shard is handed off, receives nothing new) or down (lost;
//     must not serve; its shards fail over).
//   - Groups of S shards each (S fixed when the cluster is bootstrapped,
//     default 1024). Kinds with no clause requirements share the default
//     group; a kind that requires clauses (say ControlPlaneImmunity) lives
//     in the group of that requirement set, whose shards are placed only on
//     nodes whose manifest discharges those clauses. A group with no
//     eligible node leaves its shards unassigned and Locate answers
//     ErrNoEligibleNode.
//   - Each shard has an Owner, an Epoch that increases on every change of
//     owner, and during a planned handoff a MovingTo target. The table has
//     a Version that increases with every effective command.
//
// An identity kind/key lives in shard ShardOf(kind, key, S): 64-bit FNV-1a
// over kind, a zero byte and key, modulo S. The hash is written out here,
// not borrowed, and pinned by golden vectors, because every node of every
// version must agree on it.
//
// # Commands
//
// The table changes only through Commands applied in log order (Apply is
// deterministic). Every command is idempotent, because a proposal that
// failed with raft.ErrLeadershipLost may still have committed and will be
// retried: node upserts and status changes are idempotent by nature;
// shard moves carry a precondition (expected owner, epoch and target)
// that no longer holds once they applied. Commands are encoded as a
// version byte plus JSON for now; they move to BARE with the rest of the
// wire formats.
//
// # Assignment
//
// Only the leader plans (Planner, a pure function of the table and the
// leader's clock). Targets come from rendezvous hashing over the eligible
// up nodes, so a join moves only the shards the newcomer wins and a
// departure only the shards the departed node held.
//
//   - Unassigned shards are assigned directly (nobody holds them).
//   - A down node's shards are assigned directly to their new targets, but
//     only once the node's lease must have expired: FenceDelay after the
//     leader first saw it down (see below).
//   - Shards of live nodes that are not at their target (a node joined, or
//     is draining) move through a handoff, at most MaxMoving at a time
//     cluster-wide: begin (MovingTo set: the old owner stops admitting),
//     then complete (Owner = target, Epoch+1) once the Handoff callback
//     reports that the old owner shipped its actors' state, or after the
//     fence delay when no callback confirms. A move whose target dies is
//     aborted.
//
// # Leases and fencing
//
// A node may serve a shard (Node.Check returns nil) only when all hold:
// its applied table assigns it the shard with no handoff in progress, the
// caller's epoch (if stamped) is the current one, it is not marked down,
// and its lease is fresh. Stale epochs and non-owners get a
// *NotOwnerError with the current owner as hint, so the sender retries
// once, at the right node.
//
// The lease: a follower's lease is anchored at its last contact from the
// leader (raft's LastContact); the leader's at the start of its last
// successful VerifyLeader round (a quorum still followed it then). The
// lease is fresh for Lease after its anchor, on the node's own clock.
//
// Why no two nodes serve one shard. Let A own shard s and be cut off at
// real time t0. Every renewal A received was sent by a leader before t0,
// so A's anchor is at most t0 + d, where d bounds a message still in flight
// (the transport's I/O timeout); A stops serving at the latest when its
// clock has advanced Lease past the anchor, i.e. by real time
// t0 + d + Lease·(1+ρ) if clock rates differ by at most ρ. The leader marks A
// down at some t1 ≥ t0 and reassigns s no earlier than
// t1 + Lease·(1+ρ) + Margin on its own clock. With Margin ≥ d, the new owner
// starts after A stopped. Only clock rates matter, never clock offsets:
// each node measures an interval on its own clock from an event it saw.
//
// Two more cases complete the argument. A node that keeps hearing from the
// leader while the leader marks it down (membership and raft disagree)
// applies its own down status within the same bound d, because a follower
// reachable for heartbeats is reachable for the append that carries the
// entry; its fence then answers ErrNodeDown. And a node that regains
// contact after a gap renews its lease from heartbeats before its log
// has caught up, so its stale table could still name it owner of shards
// that moved: a node that saw a gap in contact longer than half a lease
// (or just started) treats its lease as lapsed until it has applied an
// OpSync barrier it requested after regaining contact. Followers request
// it through the Config.Forwarder or, without one, by publishing
// Node.PendingSync in their gossip metadata (Peer.Sync), which the leader
// turns into the barrier.
//
// Leases are not enough when a process pauses (a GC pause or a stopped
// VM can outlast any lease between the check and the work), so epochs
// fence as well: work is stamped with the epoch the sender saw, and an
// owner refuses work stamped with an older epoch.
//
// # Bootstrap and membership
//
// With BootstrapExpect N, once N nodes are alive in the membership view and
// the view has been stable for two reconcile periods, the node with the
// lowest name bootstraps raft with the lowest N names as voters; nobody
// else ever bootstraps, a node that has raft state never does, and no node
// does while an alive peer reports raft state (Peer.InCluster): it waits
// to be added to that cluster instead. Raft
// server IDs and addresses are node names; the transport resolves names
// to current addresses, so a cluster whose nodes all come back on new IPs
// recovers with no manual step. The leader keeps up to MaxVoters voters
// (others are non-voters), replaces a voter dead for DeadVoterGrace with a
// live node, turns membership events and failed raft heartbeats into
// node status commands, and removes nodes that left once they own nothing.
// A peer membership reports as PeerUnproven (gossip lists it, but it has
// not proved its name with a cluster certificate) counts for none of
// this: it is never bootstrapped, added to raft or to the table.
//
// # Damaged files
//
// New verifies the raft data before raft sees it: every retained
// snapshot (meta.json decodes, state.bin matches its checksum), every
// log entry (reads back, decodes), no gap after the newest snapshot, and
// raft/log.mark, the last index the log made durable, which the log must
// reach. A failure is a *CorruptError (errors.Is ErrCorrupt) naming the
// file: the node must not vote or serve with a log that lost entries it
// acknowledged.
//
// # Usage
//
//	n, err := placement.New(placement.Config{
//		Name: "node-1", DataDir: dir, Transport: trans, Membership: members,
//		BootstrapExpect: 3, Handoff: shipper, Forwarder: fwd,
//	})
//	if err != nil { ... }
//	if err := n.Start(ctx); err != nil { ... }
//	defer n.Close(ctx)
//
//	loc, err := n.Locate("counter", "alice") // owner and epoch
//	if loc.Owner == self {
//		err = n.Check(loc.Shard, loc.Epoch, time.Now()) // nil: run it here
//	}
package placement
