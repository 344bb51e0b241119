package tempest

import (
	"context"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
)

// SetManifest replaces n's manifest; call it before Start. Tests use it to
// run nodes that discharge different clauses.
func SetManifest(n *Node, m manifest.Manifest) { n.man = m }

// TellStamped sends msg to to on node peer from program code, stamped
// with the placement epoch epoch, bypassing routing: tests craft stale
// stamps with it.
func TellStamped(n *Node, peer string, epoch uint64, to actor.Ref, msg any) error {
	return n.eng.TellStamped(peer, epoch, to, msg)
}

// DeliverHere delivers an ask for ref to n's own scheduler, past the
// routing and ownership checks, as mail admitted just before a move
// would reach it, and waits for the answer.
func DeliverHere(ctx context.Context, n *Node, ref actor.Ref, msg any) (any, error) {
	type answer struct {
		v   any
		err error
	}
	ch := make(chan answer, 1)
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(5 * time.Second)
	}
	if err := n.sched.Deliver(ref, actor.Ref{}, msg, dl, func(v any, err error) { ch <- answer{v, err} }); err != nil {
		return nil, err
	}
	select {
	case a := <-ch:
		return a.v, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
