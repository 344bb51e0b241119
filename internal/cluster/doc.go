// Package cluster is a node's part in a cluster: the engine that makes a
// tempest.Node a member. It starts and owns gossip membership
// (membership), raft placement (placement), the QUIC links and their
// stream services (wire), the routing of mail between nodes
// (prospero/federation/route), the federation protocol's handlers
// (prospero/federation) and the replication of state at rest
// (prospero/replica), and it runs the loops that keep them consistent
// with the applied placement table: fencing (an identity runs only where
// its shard may be served), the shard index, handoffs, re-replication,
// the reminders a node holds, and the manifest and policies it publishes.
//
// The model: the applied placement table decides; the engine acts on it.
// Every decision reads the table once (Engine.Route, locateAt) and is
// checked again by the receiver against its own applied table and epochs,
// so a stale sender is refused, never obeyed.
//
// Decisions are separate from the goroutines, locks and I/O that carry
// them out: routing is routeIn and the fence loop's tick is fenceStep
// (fence.go), the old owner's side of a handoff is shipReadiness,
// moveStands, retryUntil, shipSet and promotes (shipping.go), the new
// owner's is the transfers state machine (transfers.go) and, for a warm
// handoff, hydrationCurrent, hydrationAdmission and warmReadiness
// (hydrate.go), and placement's own are placement.Planner's. Each takes
// the table, the time and what the node holds as arguments and is tested
// by table; the engine's methods are the shell around them.
//
// The engine knows its node only through Host (whether it runs; status,
// passivation and reminders of identities it owns) and Deps (the
// components it is started with: scheduler, supervisor, stores), so it does not import the root package; the root package's Node
// keeps the public API and asks the engine through its router, an
// interface the engine implements. A standalone node has no engine: its
// router answers as the owner of everything.
//
// Lifecycle: New, then Start once the node's scheduler and supervisor run;
// Leave hands the node's shards off on a graceful close; StopNetwork stops
// every goroutine the engine started, the last step of the node's Close.
//
// Tests put the engine on an in-memory network (Simulate) or freeze its
// network (MakePausable, Pause); testing.go has what the root package's
// tests use to act as a rogue or late peer.
package cluster
