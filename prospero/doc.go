// Package prospero is Tempest's supervisor: it decides what should
// happen to virtual actors on a node. The scheduler (package ariel)
// makes it happen in time; Prospero never runs a turn itself.
//
// # Kinds and identities
//
// A kind is registered once per node with KindOptions: mailbox depth,
// idle timeout (default 10 min), turn budget, the remedy applied on a
// fault (Restart by default, Retire, Hydrate), restart intensity (at
// most 3 restarts in 5 s, then the remedy escalates to Retire and an
// Escalated event reports it), restart back-off, a persistence policy
// and the manifest clauses a hosting node must discharge. Addressing a
// kind nobody registered fails with ErrUnknownKind (actor's sentinel).
//
// An Identity ("kind/key") exists conceptually forever. It is in one of
// three conditions: dormant (no memory at all here; at most a Record in
// the StateStore), active (an activation attached to its mailbox), or in
// transition (being hydrated, passivated, restarted or retired). Each
// activation runs under an incarnation number. Hydration keeps the
// number, so references stay Valid across a sleep; Restart re-mints it
// (incarnation + 1), so a reference pinned to the old one (the actor's
// own Self) reads ActorTerminated while a plain kind/key reference
// reaches the new incarnation. The incarnation is stored with the state
// at rest, so re-minting stays monotonic across passivation, retirement
// and process restarts. Status reports Valid, Dormant, ActorTerminated
// or Unknown, the current incarnation and whether the identity is in
// memory.
//
// # The mailbox precedes the actor
//
// Mail for an identity without an activation is admitted into that
// identity's bounded mailbox by the scheduler, which rings a doorbell.
// Prospero sees the doorbell (an admission event), never the message.
// It activates the identity under the node's hydration budget (a bounded
// number of concurrent activations, the rest waiting in FIFO order):
// the record is read from the store, the actor is built and restored
// from it, and the activation is attached with an init turn ahead of the
// waiting mail, which then runs in order. A thousand concurrent first
// messages produce one doorbell that matters and one activation.
//
// # State at rest
//
// A StateStore keeps one Record per identity: the incarnation and the
// state bytes (BARE, generated or hand-written), under a version that
// only grows. Writes are conditional on the version last seen, which
// fences out a stale activation. NewBoltStore is the embedded default (a
// go.etcd.io/bbolt file in the node's data directory, fsync'd per
// write); NewMemStore is for tests. Package storetest is the one
// contract suite both pass. State is written on passivation, on graceful
// shutdown, and, by policy, after every turn or every N turns / D.
//
// # Passivation
//
// An actor idle past its kind's timeout, or the least recently used
// ones when the node holds more active actors than its limit, receives a
// final Passivating turn; its state is written at rest, it becomes
// dormant and its memory is released. Mail arriving meanwhile simply
// hydrates it again.
//
// # Faults and remedies
//
// A panic or a BudgetExhausted turn is a fault. Decide applies the
// kind's remedy under restart intensity: Restart (new incarnation, from
// the last state at rest or empty), Hydrate (reload the last state at
// rest, same incarnation) or Retire (the actor and its state go as a
// unit; the record keeps only the next incarnation so that old pinned
// references stay terminated). Restarts back off exponentially, driven
// by the time the caller passes in.
//
// # Deterministic core, thin shell
//
// Every decision above is made by Core, a state machine with no
// goroutines, no I/O and no clock: inputs are method calls (Doorbell,
// Loaded, TurnDone, Fault, Tick, ...), outputs are typed lifecycle
// Events sent to an EventSink and Commands (OpLoad, OpPassivate, OpStop,
// OpRetire, OpReject) that a shell carries out against the store and
// the scheduler, reporting completion back. Decide, RestartHistory,
// Activity (idle and LRU tracking) and HydrationGate are the pure parts
// it is built from, each usable and tested on its own.
//
// Supervisor is that shell. It takes the scheduler's doorbell (Ring),
// fault reports (Fault) and activity (Touch, AfterTurn); runs the
// store I/O on its own workers, bounded by the hydration budget; ticks
// the core on its own goroutine, outside the scheduler's worker pool, so
// that supervision keeps running when every worker is busy; and drives
// the scheduler through the Host interface (plus the optional Replacer,
// for an in-place Hydrate remedy, and Rejecter, to answer the mail of a
// rejected activation at once). Package arielhost binds it to package
// ariel. Close passivates every active actor (writing state at rest)
// before it stops. Activation events (Activated, Hydrated, Rehydrated,
// Restarted) carry Hydration, the time from the doorbell (or the end of a
// back-off) to the actor attached, for a hydration-time histogram.
//
// Using the core directly:
//
//	reg := prospero.NewRegistry()
//	reg.Register("counter", prospero.KindOptions{
//		IdleTimeout: time.Minute,
//		Persistence: prospero.Persistence{Mode: prospero.PersistOnPassivation},
//	})
//	core := prospero.NewCore(reg, prospero.CoreConfig{MaxActive: 100_000, HydrationBudget: 64})
//	core.Doorbell(prospero.Identity{Kind: "counter", Key: "42"}, now)
//	for _, cmd := range core.Drain(nil) {
//		// cmd.Op == prospero.OpLoad: read the record, build and attach
//		// the actor, then core.Loaded(cmd.ID, cmd.LoadIncarnation(rec), rec.Version, true, now)
//	}
package prospero
