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
//   - Kinds: each kind some node published (OpHosts) has a group of its
//     own, S shards (S fixed when the cluster is bootstrapped, default
//     1024), with the clauses the kind requires. Every node publishes the
//     kinds it hosts itself, each with its required clauses and a policy
//     digest (Config.Kinds; gossip carries names, not digests).
//   - A group's shards are placed only on eligible nodes (Table.Eligible):
//     up, with a state store that writes (a node whose store fails says
//     so, OpStore, and is given no shard or replica place until it
//     reports it writing again), discharging the group's clauses,
//     hosting its kind, and
//     publishing the policy digest the cluster agrees on (Table.Policy:
//     the digest most live hosts publish; on a tie the one whose nodes own
//     most of the kind's shards). A host that publishes another digest is
//     given none of the kind's shards (its own are handed off) until it
//     agrees: the rolling-upgrade case. A group with no eligible node
//     leaves its shards unassigned and Locate answers ErrNoEligibleNode; a
//     kind nobody published answers ErrUnknownKind.
//   - Each shard has an Owner, an Epoch that increases on every change of
//     owner and on every aborted handoff (so that a move begun again is
//     never taken for the aborted one), and during a planned handoff a
//     MovingTo target. The table has a Version that increases with every
//     effective command.
//   - Each shard also has its in-sync replica set, Replicas: the owner
//     first, then followers holding every record of state at rest the
//     owner committed (R nodes in all, default 3, fixed at bootstrap). It
//     changes only by commands checked against the owner and epoch:
//     OpShrink removes a follower (its owner proposes it before committing
//     without that follower; the leader for followers that are down),
//     OpJoin adds one that caught up. The protocol that keeps the sets
//     true lives in prospero/replica; docs/cluster.md describes it.
//
// An identity kind/key lives in shard ShardOf(kind, key, S) of its kind's
// group: 64-bit FNV-1a over kind, a zero byte and key, modulo S. The
// hash is written out here,
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
//   - Unassigned shards are assigned directly (nobody holds them), with
//     the first R nodes of the rendezvous ranking (Ranked) as their set.
//   - A down node's shards are assigned directly, but only once the node's
//     lease must have expired: FenceDelay after the leader first saw it
//     down (see below); each goes to the best-ranked live follower of its
//     set, which holds every committed record, or, when none is left, to
//     its rendezvous target.
//   - Shards of live nodes that are not at their target (a node joined, or
//     is draining) move through a handoff, at most MaxMoving at a time
//     cluster-wide: begin (MovingTo set: the old owner stops admitting),
//     then complete (Owner = target, Epoch+1) once the Handoff callback
//     reports that the old owner shipped its actors' state. A handoff
//     that fails or is refused aborts the move (the old owner keeps the
//     shard, at Epoch+1, and serves again; it is not moved to that target again for a fence delay,
//     doubling with each abort in a row up to four; a draining owner's
//     shard goes to the next-ranked node after two), as does one with
//     no outcome after four fence delays (a backstop: a transfer has
//     three to report). A
//     move whose old owner or target dies is aborted. Without a Handoff
//     callback, a move completes after the fence delay.
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
// The lease. A follower's lease is anchored at the receipt of the last
// heartbeat from a leader that raft accepted (SplitTransport records it;
// with another transport, raft's LastContact); a leader's at the start
// of its last successful VerifyLeader round (a quorum still followed it
// then), or, when the transport records heartbeats, at the send of the
// latest heartbeat a quorum of voters accepted if that is earlier (a
// round counts non-voters' answers too, and answers to appends sent
// before it began); its gaps in contact are looked for between the
// rounds' starts. Raft's own
// contact time never renews a leader: it dates from before the
// election, and raft stamps it anew when the leader steps down, so a
// node that steps down lapses (below). The lease is fresh for
// Lease after its anchor, on the node's own clock. A node that saw a gap
// longer than LapseGap (three quarters of LeaseMargin) between two
// consecutive anchors, stepped down, or just started treats its lease as
// lapsed until it has applied an OpSync barrier it requested after
// regaining contact (see "catching up" below).
//
// The numbers (DefaultConfig, for a LAN): heartbeats every 100-200 ms
// (HeartbeatTimeout/10 with jitter), HeartbeatTimeout 1 s (a follower
// campaigns 1-2 s after its last contact), LeaderLeaseTimeout 0.5 s,
// Lease 1.5 s, LeaseMargin 0.6 s (LapseGap 0.45 s), ClockDrift 5%,
// DownAfter 1 s with heartbeats timing out after 0.5 s. FenceDelay =
// Lease·(1+ρ) + LeaseMargin = 2.175 s.
//
// Why no two nodes serve one shard. Let A own shard s and let the leader
// L mark A down at t1 (on L's clock; because heartbeats to A failed for
// DownAfter, or membership declared A dead). L's planner first sees the
// down status at some t2 ≥ t1 and reassigns s no earlier than t2 +
// FenceDelay on L's clock. Only clock rates matter, never offsets: every
// interval is measured on one node's clock from an event that node saw,
// and two clocks' rates differ by at most ρ. There are three ways A can
// still be renewed after t1, and each ends in time:
//
//  1. A hears nothing after t1 from any leader. Its last renewal was
//     the receipt of a heartbeat sent before t1. Assume a heartbeat is
//     received at most LeaseMargin − LapseGap after it was sent unless
//     A's process stalled; a stall longer than LapseGap shows as a gap
//     between A's anchors, and a heartbeat delayed by a stall shorter
//     than that arrives within LeaseMargin. (Heartbeats carry no data
//     and no disk write stands between their receipt and the anchor;
//     appends, which raft stamps after their fsync, are not renewals.)
//     So A's anchor is before t1 + LeaseMargin, and A stops serving by
//     real time t1 + LeaseMargin + Lease·(1+ρ) as measured from L: before
//     the new owner starts.
//  2. A keeps hearing from L (membership and raft disagree, or only A's
//     answers are lost). Then A also receives the append that carries
//     its down status, and its fence answers ErrNodeDown once it
//     applied it. Heartbeats carry no commit index; raft resends a
//     failed append after a back-off that grows with each failure in a
//     row (up to about 10 s), so this holds within FenceDelay while A's
//     append lane works, and is a known gap when A's appends stall while
//     its heartbeats pass (two faults at once). A crashed leader's fence
//     below does not rest on this case.
//  3. A is renewed by an older leader L0 on its side of a partition. L0
//     keeps leading only while a quorum answers it within
//     LeaderLeaseTimeout, so it steps down at most about
//     LeaderLeaseTimeout after the last quorum contact; L was elected
//     after that quorum moved on, and marks A down no sooner than
//     DownAfter ≥ 2·LeaderLeaseTimeout after its election (a new
//     replication counts from the election). So L0's last heartbeat to A
//     precedes t1, and case 1 applies. L0 itself lapses when it steps
//     down, and its own leader lease was anchored before L's election.
//
// A new leader starts its planner's timers afresh (t2 is at or after its
// election), which only ever delays a reassignment. One thing it does
// take over: it counts the previous leader as failing from its own last
// contact with it (it campaigned because that contact had stopped),
// until the previous leader answers a heartbeat of the new term; so a
// crashed leader is marked down as soon as the new leader leads. Marking
// down early is never unsafe, only a cost: safety rests on the fence
// delay counted from t2, or on the witness below.
//
// A crashed leader's fence. Counted from t2, a crashed leader's fence
// also waits out the election. The new leader L of term T can count it
// from when the previous leader P went silent instead, because every
// renewal of P's lease passed through another voter:
//
//   - As leader, P renews at the start of a VerifyLeader round, but never
//     later than the send of the latest heartbeat that a quorum of voters
//     accepted (Node.leaderAnchor; the round itself may count answers to
//     appends sent before it began). So a voter other than P accepted a
//     heartbeat of P's term sent at or after P's anchor.
//   - As a follower, P renews at the receipt of a heartbeat that a leader
//     L1 ≠ P sent, at most δ = LeaseMargin − LapseGap after the send (as
//     in case 1). L1 is a voter.
//
// The transport (LeaseWitness) records, by term, the latest heartbeat it
// accepted (noted at receipt, before raft decides) and sent (noted when
// the send ended, the receipt being before that or a delivery after).
// L asks every
// other voter of its configuration for its Witness of T (Config.Witnesses,
// on the control lane): how long ago it last accepted or sent a
// heartbeat of a term below T, or started, if later (what an earlier
// process did precedes its start). A voter answers once its raft has
// reached T, after the sends of older terms in flight ended, and from
// then on its transport neither accepts nor sends a heartbeat of a term
// below T, so no later renewal escapes its answer.
// L counts each age as age/(1+ρ) of its own clock back from the answer's
// arrival (the voter's clock may run fast; the arrival is after the
// answer), and takes w, the latest of these and of its own witness. Then
// P's last renewal was before w + δ, and P stops serving by
// w + δ + Lease·(1+ρ) ≤ w + FenceDelay. Renewals in T come from L alone
// and cannot make P serve: a renewal in a newer term than the last one
// is a lapse (as is a step-down), so P serves in T only after applying
// its own sync barrier, and L commits no barrier of P (ErrSyncHeld)
// until P is down in L's applied table, and not before that table has
// applied everything committed before T (a raft barrier at the start of
// the term: a status in it is then no older entry's); P therefore
// applies its down status first. So P's shards may move at max(w + FenceDelay, t2), and
// never later than t2 + FenceDelay (Planner.Witnessed). The witness
// counts only if every voter but P answered within FenceDelay (with
// three voters: both survivors), and only while P has answered no
// heartbeat of T: once it has, L may have renewed it, its barrier is no
// longer held, and a later down status of P is another failure, fenced
// in full.
// This rests on raft changing its configuration one server at a time, so
// that a quorum of P's configuration holds a voter of L's other than P,
// and on a voter that left the configuration having stopped leading long
// before (it is replaced after DeadVoterGrace).
//
// Catching up. A node that regains contact after a gap renews its lease
// from heartbeats before its log has caught up, so its stale table could
// still name it owner of shards that moved: hence the lapse until an
// OpSync barrier it requested after regaining contact has been applied.
// Followers request it through the Config.Forwarder or, without one, by
// publishing Node.PendingSync in their gossip metadata (Peer.Sync),
// which the leader turns into the barrier. A renewal in a newer term
// (a new leader) is a lapse too, even without a gap, where the transport
// records heartbeats' terms (SplitHeartbeats): every such node applies
// a barrier of the new leader's term before it serves again.
//
// Leases are not enough when a process pauses (a GC pause or a stopped
// VM can outlast any lease between the check and the work), so epochs
// fence as well: work is stamped with the epoch the sender saw, and an
// owner refuses work stamped with an older epoch.
//
// What failover costs. A crashed follower is marked down about DownAfter
// after its last answer and its shards reassigned FenceDelay later
// (about 3.2 s with the defaults); a crashed leader first costs an
// election (1-2 s, more when a round is lost), after which it is marked
// down at once; with its witnesses its shards are reassigned FenceDelay
// after it went silent, or at once if the election took longer (about
// 2.2-2.5 s in all), without them FenceDelay after the election (about
// 3.2-4.2 s). Mail for a shard whose
// owner is down waits for the reassignment (Location.OwnerDown,
// ErrOwnerDown) instead of going to the dead node. The leader's reconcile
// loop wakes when a fence delay runs out (the first deadline of the
// planner's timers after its last Step), not at its next periodic pass.
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
// A server name is not enough to know a voter: a node that lost its data
// directory and came back under its name would be taken for the voter it
// was. Each data directory therefore has a data ID (LoadDataID), gossiped
// (Peer.DataID) and recorded in the table by the leader (OpDataID) before
// the node enters the raft configuration; raft streams name the data ID
// their sender expects and are refused by any other (GuardStreamLayer),
// and a node found with another one is marked down until its shards
// have failed over (it holds none of their state), removed, and added
// back as a new server (PlanVoters).
//
// # Damaged files
//
// New verifies the raft data before raft sees it: every retained
// snapshot (meta.json decodes, state.bin matches its checksum), every
// log entry (reads back, decodes), no gap after the newest snapshot, and
// raft/log.mark, the last index the log made durable, which the log must
// reach; a node with raft state (a term, a log, a snapshot) must have a
// valid mark, a missing or empty one is damage. A failure is a *CorruptError (errors.Is ErrCorrupt) naming the
// file: the node must not vote or serve with a log that lost entries it
// acknowledged.
//
// # Usage
//
//	n, err := placement.New(placement.Config{
//		Name: "node-1", DataDir: dir, Transport: trans, Membership: members,
//		BootstrapExpect: 3, Handoff: shipper, Forwarder: fwd,
//		Kinds: []placement.KindSpec{{Name: "counter", Digest: policyDigest}},
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
