// Package membership keeps this node's view of which nodes form the cluster,
// using SWIM-style gossip (hashicorp/memberlist): who is alive, who failed,
// who left, and what each node says about itself.
//
// # Model
//
// Every node runs one Membership. New binds the gossip port (TCP and UDP,
// 7946 by default) and knows only itself; Start joins the seeds in the
// background, retrying with back-off until one answers, and keeps
// re-joining seeds that are not alive members, so that two halves of a
// cluster that forgot each other after a partition merge again. Seeds are
// addresses or DNS names; a name is resolved to all of its addresses on
// every attempt, which is what a Kubernetes headless service needs.
//
// Each node gossips a small versioned record, Meta: its QUIC and HTTP
// addresses, its manifest digest, the actor kinds it registered, its build
// version and a boot id. The whole record must fit memberlist's 512-byte
// limit; a kind list that does not fit is replaced by its digest
// (Meta.KindsDigest) and readers consult the node's manifest instead.
// Metadata that cannot fit even then is refused with *MetaTooLargeError.
//
// Failure detection is memberlist's: random probes, indirect probes through
// other nodes, a suspicion period during which the suspect may refute, then
// a "dead" verdict gossiped to all. Timing (LANTiming, FastTiming) trades
// detection speed against false verdicts on CPU-starved machines.
//
// With GossipKeys set, all gossip is encrypted (AES-GCM) and every incoming
// packet must decrypt with one of the keys: a node with another key or none
// is ignored. Keys rotate without downtime in three steps run on every node
// in turn: InstallKey, UseKey, RemoveKey.
//
// # Proving identities
//
// Gossip proves nothing: anyone with the gossip key can join under any
// name and advertise any address. A Prover keeps, per member, whether a
// mutually authenticated link (its Connector: the QUIC transport) was
// made under the member's name, and for which QUIC address and process;
// a new address or a restart proves itself again, and failures back off
// from ProveRetryMin to ProveRetryMax. Its decisions (Due, Done, Proven)
// are plain methods under one lock, tested without a network; Run is the
// loop that carries them out. The node admits a member to placement only
// while it is Proven.
//
// # Events
//
// Consumers such as placement depend on the Cluster interface. Subscribe
// returns the member list at that instant plus every later change, in
// order, as Events: join, update (metadata or address), leave (graceful)
// and fail (declared dead). Gossip handlers never block on a slow
// subscriber; each subscription queues its own events. Fake implements
// Cluster in memory for unit tests, scripted with Join, Update, Suspect,
// Fail and Leave.
//
// # Usage
//
//	cfg := membership.DefaultConfig()
//	cfg.Name = "node-1"
//	cfg.Seeds = []string{"tempest-headless.default.svc.cluster.local"}
//	cfg.GossipKeys, err = membership.LoadKeyFile("/etc/tempest/gossip.key")
//	cfg.Meta = membership.Meta{QUICAddr: "10.0.0.1:7947", Kinds: kinds, Version: version}
//	m, err := membership.New(cfg)
//	err = m.Start(ctx)
//	sub := m.Subscribe()
//	defer sub.Close()
//	for { ev, err := sub.Next(ctx); ... }
//	...
//	err = m.Close(ctx) // announces the departure, then leaves
//
// Close leaves gracefully; Halt stops as a crash would (for tests).
package membership
