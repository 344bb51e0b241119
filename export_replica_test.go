package tempest

import (
	"context"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/replica"
)

// SendReplicaFrame opens a replication stream from n to peer, writes
// frame on it and returns the peer's answer.
func SendReplicaFrame(ctx context.Context, n *Node, peer string, frame []byte) error {
	conn, err := n.eng.DialReplica(ctx, peer)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write(frame); err != nil {
		return err
	}
	return replica.ReadAck(conn)
}

// StoredState reads id from n's local store.
func StoredState(ctx context.Context, n *Node, id prospero.Identity) (prospero.Record, error) {
	return n.store.Get(ctx, id)
}

// ReplicaUncommitted reports whether a write of shard landed in n's store
// without committing (n's replication store remembers it until restart):
// a planned move of such a shard ships its state instead of promoting.
func ReplicaUncommitted(n *Node, shard placement.ShardRef) bool {
	return n.repl != nil && n.repl.Uncommitted(replica.Shard{Group: shard.Group, Index: shard.Index})
}

// ApplyReplicaCopy stores recs in n's store as n's replica applier does
// with the records of a replication stream or a catch-up's bulk copy it
// accepted: each only if newer, by (epoch, version), than what n holds.
// Tests deliver with it a copy accepted under an older epoch whose write
// was still queued when a newer record arrived by another path.
func ApplyReplicaCopy(n *Node, recs []prospero.Replicated) (int, error) {
	return n.store.ApplyReplicated(recs)
}

// StoredAt returns the epoch and version at which n's store holds id
// (the epoch of a record n wrote itself is 0), or ErrNotFound.
func StoredAt(ctx context.Context, n *Node, id prospero.Identity) (epoch, version uint64, err error) {
	err = prospero.ErrNotFound
	serr := n.store.ScanHeld(ctx, func(x prospero.Identity) bool { return x == id }, func(_ prospero.Identity, e, v uint64) error {
		epoch, version, err = e, v, nil
		return nil
	})
	if serr != nil {
		return 0, 0, serr
	}
	return epoch, version, err
}
