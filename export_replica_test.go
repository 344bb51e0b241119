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
	conn, err := n.cl.tr.DialStream(ctx, peer, serviceReplica)
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
	return n.repl != nil && n.repl.Uncommitted(replicaShard(shard))
}
