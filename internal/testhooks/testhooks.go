// Package testhooks lets the test-cluster package reach what a node
// offers for fault injection without widening the node's public API. The
// root package sets the functions in its init; they take the *tempest.Node
// as an any because this package cannot import the root package.
package testhooks

import "context"

var (
	// Halt stops a node as a crash would, as far as the cluster can tell:
	// it vanishes from gossip and raft without handing anything off.
	Halt func(ctx context.Context, node any) error
	// Isolate cuts a node off the cluster's network while it keeps
	// running (its gossip and its QUIC transport stop).
	Isolate func(node any)
	// Pausable makes a node pausable; it must be called before Start.
	Pausable func(node any) error
	// Pause holds (paused true) or releases a pausable node's traffic,
	// gossip and QUIC alike, without closing anything.
	Pause func(node any, paused bool) error
)
