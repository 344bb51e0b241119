// Package tempest is the embeddable Tempest node: it wires the local
// scheduler (package ariel), the supervisor (package prospero) with its
// state store, and the registered kinds of virtual actors into one Node
// that program code, the tempest binary and the HTTP gateway address by
// kind/key.
//
// # A node
//
// A Node owns, in start order: the state store (a bbolt file, state.db, in
// Config.DataDir), the supervisor, which activates, hydrates, passivates
// and restarts virtual actors, and the scheduler, which runs their turns.
// Close stops them in reverse order, after passivating every active actor
// so that its state is at rest.
//
//	n, err := tempest.New(tempest.Config{Name: "n1", DataDir: "/var/lib/tempest"})
//	if err != nil { ... }
//	_ = n.Register("counter", newCounter, tempest.KindOptions{
//		KindOptions: prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistOnPassivation}},
//		Messages:    []tempest.Message{tempest.MessageOf[Add](1, "Add"), tempest.MessageOf[Value](2, "Value")},
//	})
//	if err := n.Start(ctx); err != nil { ... }
//	defer n.Close(context.Background())
//
//	reply, err := n.Ask(ctx, n.Ref("counter", "a"), Add{N: 5})
//
// Kinds are registered before Start. A kind's KindOptions carry the
// supervisor's options, the kind's message types (tags and BARE codecs,
// so that its messages can cross the network and the JSON gateway) and an
// optional Gateway: the BARE schema text and the input and reply type
// names, with which AskJSON and TellJSON turn JSON into the kind's Go
// messages and replies back into JSON. Package demo has three small kinds
// (echo, a persistent counter, and ticker, which uses a durable reminder)
// built this way.
//
// # A cluster
//
// With Config.Cluster set, Start also brings up the cluster side, after
// the scheduler and the supervisor: the message registry (the kinds'
// message types), the mail layer and the QUIC transport (mutual TLS with
// the cluster CA), gossip membership (join through seeds, metadata with the
// QUIC and HTTP addresses, manifest digest, kinds and version), stream
// services for placement commands and handoffs, and raft placement over
// QUIC streams (data in DataDir/raft, bootstrapped by BootstrapExpect).
// Any node then accepts mail for any kind/key.
//
// The data path of a cross-node ask:
//
//	n.Ask(ctx, ref, msg)
//	  → ariel: the router asks the locator where ref lives
//	  → placement: hash(kind, key) → shard → owner and epoch in the applied table
//	  → owner is this node: fence (owner, no handoff, fresh lease) → mailbox → turn
//	  → owner is another node: wire.Mailer encodes msg by its registered tag
//	      → QUIC link, lane by recipient hash → owner's Mailer
//	      → owner's fence (else a NOT_OWNER refusal with its owner hint)
//	      → owner's scheduler (hydrating first if dormant) → turn → Reply
//	      → reply frame → the asker's pending ask → Ask returns
//	  → NOT_OWNER: this node waits for its table to change and routes once more
//
// A node that loses its lease refuses mail for its shards and passivates
// their activations; the leader moves a failed node's shards only after
// that lease must have expired, so an identity is never active on two
// nodes at once. Close hands the node's shards off first: their actors are
// passivated and their state at rest shipped to the new owners. See
// docs/cluster.md for operators.
//
// # Observability
//
// Members, Leader, Table, Locate and PlacementStatus show a cluster node's
// view: gossip members, the raft leader, the applied placement table,
// where an identity lives, and this node's raft role and lease. Manifest
// is the node's assumption manifest, computed from the effective
// scheduler and supervisor configuration and the detected environment.
// Stats gathers the counters of the components for the metrics endpoint;
// Ready and Live answer the readiness and liveness probes. Every
// activation and deactivation is logged at info level with the stable
// keys node, actor, incarnation and epoch (LogKeyNode, ...), so that a
// test can check from the logs of several nodes that no identity was ever
// active on two nodes at once; Config.Events receives every lifecycle
// decision.
//
// # Errors
//
// Sends return the actor package's sentinels (ErrRefused,
// ErrDeadlineExceeded, ErrActorTerminated, ErrProcessUnavailable,
// ErrUnknownKind, ErrNoEligibleNode); a node that is shutting down answers
// ErrClosed, which also matches ErrProcessUnavailable; JSON that does not
// fit a kind's schema is a *JSONError (ErrBadJSON) naming the field.
package tempest
