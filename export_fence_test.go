package tempest

import "github.com/tempest-actors/tempest/manifest"

// SetManifest replaces n's manifest; call it before Start. Tests use it to
// run nodes that discharge different clauses.
func SetManifest(n *Node, m manifest.Manifest) { n.man = m }
