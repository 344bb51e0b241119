// Package testhooks lets the test-cluster package reach what a node
// offers for fault injection without widening the node's public API. The
// root package sets the functions in its init; they take the *tempest.Node
// as an any because this package cannot import the root package.
package testhooks

import (
	"context"

	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
)

var (
	// Halt stops a node as a crash would, as far as the cluster can tell:
	// it vanishes from gossip and raft without handing anything off, and
	// its state store is left as a kill leaves it (crashhook.Abandon):
	// writes not yet committing are never committed.
	Halt func(ctx context.Context, node any) error
	// Isolate cuts a node off the cluster's network while it keeps
	// running (its gossip and its QUIC transport stop).
	Isolate func(node any)
	// Pausable makes a node pausable; it must be called before Start.
	Pausable func(node any) error
	// Pause holds (paused true) or releases a pausable node's traffic,
	// gossip and QUIC alike, without closing anything.
	Pause func(node any, paused bool) error
	// Simulate puts a cluster node, before Start, on an in-memory
	// network: its transport joins net instead of opening QUIC, and its
	// gossip is the view that view returns (given the member record the
	// node announces) instead of memberlist. The test scripts every
	// node's view, acting as gossip; gone tells it the node left gossip,
	// gracefully (Close) or not (Halt, Isolate), maybe more than once.
	// A simulated node is not pausable.
	Simulate func(node any, net *wire.MemNetwork, view func(self membership.Member) *membership.Fake, gone func(graceful bool)) error
)
