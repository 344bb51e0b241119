package placement

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrNoEligibleNode: no live node's manifest discharges the clauses a
	// kind requires, so its identities cannot be placed. The actor package
	// defines the user-facing sentinel of the same name; the root package
	// maps this one onto it (errors.Is through wrapping).
	ErrNoEligibleNode = errors.New("placement: no eligible node")
	// ErrUnassigned: the shard has no owner yet (the leader has not
	// placed it); retry shortly.
	ErrUnassigned = errors.New("placement: shard not assigned yet")
	// ErrUninitialized: the cluster has not been bootstrapped, or this
	// node has not applied the table's initialisation yet.
	ErrUninitialized = errors.New("placement: table not initialised")
	// ErrLeaseExpired: this node owns the shard in its applied table but
	// has not heard from a leader within the lease, so it must not serve:
	// callers answer ErrProcessUnavailable.
	ErrLeaseExpired = errors.New("placement: ownership lease not fresh")
	// ErrNodeDown: the applied table marks this node down; it must not
	// serve anything until the leader marks it up again.
	ErrNodeDown = errors.New("placement: this node is marked down")
	// ErrOwnerDown: the shard's owner is marked down and the leader has
	// not given the shard to another node yet (it waits for the owner's
	// lease to run out); retry when the table changes.
	ErrOwnerDown = errors.New("placement: shard owner is down, failover pending")
	// ErrHandoff: the shard is being handed off; mail should wait in a
	// bounded buffer and be routed again when the move completes.
	ErrHandoff = errors.New("placement: shard handoff in progress")
	// ErrMoveRefused: returned (wrapped) by Handoff.Transfer when the old
	// owner is alive and answered that it cannot ship the shard now. The
	// leader aborts the move at once rather than completing it after the
	// fence delay without the shard's state.
	ErrMoveRefused = errors.New("placement: handoff refused by the old owner")
	// ErrBehind: the caller stamped an epoch newer than this node's
	// applied table; this node is behind and must not serve until it
	// catches up.
	ErrBehind = errors.New("placement: local table is behind the caller's epoch")
	// ErrNoDrainTarget: Leave cannot hand this node's shards to anyone:
	// no other node in the table is up (the others are draining too, as
	// when a whole cluster stops, or down, or their state stores cannot
	// write). The shards stay with this
	// node, at rest in its store and on their replicas.
	ErrNoDrainTarget = errors.New("placement: no other node is up to take this node's shards")
	// ErrNotLeader: the operation needs the raft leader and no forwarder
	// is configured (or no leader is known).
	ErrNotLeader = errors.New("placement: not the leader")
	// ErrClosed: the node has been closed.
	ErrClosed = errors.New("placement: closed")
	// ErrBadCommand: a command could not be decoded or is invalid.
	ErrBadCommand = errors.New("placement: bad command")
	// ErrNotForwardable: a node forwarded a command that is not its own
	// to propose (Forwardable). It matches ErrBadCommand.
	ErrNotForwardable = fmt.Errorf("%w: not the forwarding node's own to propose", ErrBadCommand)
	// ErrNoWitness: a node asked for its lease witness of a term cannot
	// give one (yet): its raft has not reached that term, or its
	// transport keeps no record of heartbeats (Node.Witness).
	ErrNoWitness = errors.New("placement: no lease witness for that term")
	// ErrSyncHeld: the leader holds back the sync barrier of the node
	// that led before it until that node is down in the table or has
	// answered the leader (see "A crashed leader's fence"); the node
	// asks again.
	ErrSyncHeld = errors.New("placement: sync barrier held")
	// ErrUnknownKind: no node has published the kind (OpHosts), so it has
	// no shards. The error names the kind. A node that registers the kind
	// itself sees this only until its publication applies.
	ErrUnknownKind = errors.New("placement: no node hosts the kind")
	// ErrBadConfig: Config.Validate failed.
	ErrBadConfig = errors.New("placement: invalid config")
)

// NotOwnerError is returned by Check when mail reaches a node that does
// not own the shard, or was stamped with an epoch older than the
// current one. The sender updates its view from the hint and retries
// once; it never loops.
type NotOwnerError struct {
	Shard ShardRef
	// Epoch is the shard's current epoch in the answering node's table.
	Epoch uint64
	// OwnerHint is the current owner in that table ("" if unassigned).
	OwnerHint string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("placement: not owner of %s (epoch %d, owner %q)", e.Shard, e.Epoch, e.OwnerHint)
}
