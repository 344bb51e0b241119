package tempest

import "context"

// Halt stops n as a crash would, as far as the cluster can tell.
func Halt(ctx context.Context, n *Node) error { return n.close(ctx, false) }

// Isolate cuts n off the cluster's network while it keeps running.
func Isolate(n *Node) { n.cl.isolate() }
