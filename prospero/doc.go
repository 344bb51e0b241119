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
// go.etcd.io/bbolt file in the node's data directory); NewMemStore is for
// tests. Package storetest is the one contract suite both pass. State is
// written on passivation, on graceful shutdown, and, by policy, after
// every turn or every N turns / D. NewBoltStore reads every record once
// when it opens a file: a damaged or truncated file is refused as a
// *CorruptError (errors.Is ErrCorrupt) naming it, never a panic in a
// later read; so is a file that is not the one the store last opened or
// closed at that path, or an older copy of it (ErrStoreReplaced: its
// mark, MarkFile, says which). A replicated store sends each write to the followers before
// it is fsync'd here (BoltStore.PutAsyncSent): such a write is decided
// and logged in the pending log first, so the store gives it back after
// a kill and never goes on without it.
//
// # Reply after commit
//
// The persistence modes promise this on a crash of the process (kill -9,
// OOM, panic outside a turn) or of the machine:
//
//   - PersistNone: nothing survives; the identity and its incarnation do.
//   - PersistOnPassivation: the state as of the last passivation or
//     graceful shutdown survives; everything since the activation is lost.
//   - PersistPeriodic: the state as of the last periodic write survives;
//     replies never wait for a write, so acknowledged updates since it are
//     lost.
//   - PersistEveryTurn: every acknowledged update survives. A turn that
//     changed the state (its marshalled bytes differ from the last
//     written ones) keeps its outputs — the reply, the tells and asks it
//     sent — back until the write is committed as the store defines it
//     (BoltStore: fsync'd; a cluster node's replicated store: received
//     by every in-sync replica, and fsync'd by each too only with
//     ReplicationConfig.SyncReplicas); only then do they leave. A turn that changed nothing writes nothing,
//     but its outputs still wait behind those of earlier turns, so nobody
//     sees state that could still be lost.
//
// No worker waits for a write: the turn ends, its outputs wait in the
// scheduler (ariel's Hold), and later turns of the same actor run
// meanwhile, their outputs released in order. Each activation has at most
// one write in flight; turns that change the state meanwhile are
// coalesced into the next one. The supervisor keeps the last written
// state bytes of each such active actor to tell a turn that changed
// nothing (it costs one copy of the state per active actor). A store
// that implements AsyncStore (BoltStore does) commits the writes of many
// actors together, one transaction and one fsync per group (group
// commit); AsyncDeleter queues deletions into the same groups. A write that fails
// fails the outputs of its turns with a *CommitError naming the identity
// (errors.Is ErrNotCommitted; a clustered node hands it to askers in its
// wire form, actor.ErrNotCommitted with the text, on every node), is
// logged and counted as a StoreError event, and the activation reloads
// its last committed state (a FaultCommit fault remedied by Hydrate), so
// the update that was refused is never observed. A turn that ends after
// its actor's passivation was decided writes and waits the same way; the
// passivation's final write queues behind it, and is skipped if it fails.
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
// A panic or a BudgetExhausted turn is a fault. A BudgetExhausted turn
// is abandoned by the host before it is reported (TurnAbandoned,
// EventTurnAbandoned): the actor value is already out of service, so the
// remedy applies at once, without waiting for a turn that may never
// return, and a state that turn marshals afterwards is not written.
// Decide applies the
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
