package tempest

import (
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
	return n.cl.rem.mail.TellAt(peer, epoch, to, actor.Ref{}, msg)
}
