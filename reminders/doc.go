// Package reminders keeps durable reminders: named schedules of ticks
// that belong to a virtual actor's identity, not to one of its
// activations. A reminder survives passivation, restarts of the actor,
// moves of its shard between nodes and restarts of the whole cluster,
// and wakes a dormant actor to deliver its tick. Use an activation timer
// (actor.Context.After, Every) for anything that should end with the
// activation.
//
// # Model
//
// An actor registers a reminder in one of its turns: a name, the first
// due time, a period (zero: one-shot), a catch-up policy and a payload
// message. Reminders are kept in the node's state store, beside the
// state of the identity's shard (records of kind RecordKind: one per
// reminder, ReminderID, and one of delivered progress per shard,
// RecordID), so they move with the shard's state in a handoff and are
// replicated wherever the shard's state is.
//
// A turn's changes follow reply after commit, like durable state: the
// node validates each registration or removal when the turn makes it
// (PrepareRegister, PrepareUnregister: every bad-input error is returned
// then), keeps it with the turn, and commits the turn's changes once the
// turn has ended (Commit), without a worker waiting for the store; the
// turn's outputs wait instead, and Commit.Finish reports whether the turn
// as a whole committed. A registration fires only once its turn
// committed; a removal is in force from the end of its turn. A turn that
// did not commit is taken out of the history of each name it changed:
// the name holds what it would hold without that turn (what it held
// before, unless a later turn changed it since), whatever order the
// outcomes of overlapping turns come in (see Commit.settle). Operators
// use RegisterFor, Cancel and ListOf, which return once the change is at
// rest.
//
// Each tick is delivered to the actor as a Tick message carrying the
// reminder's name, its scheduled time, its sequence number (occurrence
// 1 is due at Due, occurrence n at Due + (n-1)·Period) and the payload.
//
// An Engine fires the reminders of the shards it holds (Acquire,
// Release; Pause and Resume while a lease lapses). In a cluster a Holder
// keeps those equal to the shards the node keeps: the node's reminder
// loop gives it, at each pass, each shard it owns and does not move away
// with its placement epoch and whether it may serve it now (Kept), and
// Holder.Sync releases, pauses, resumes and acquires to match. A shard
// kept at another epoch than it was loaded at is released and loaded
// again; a lapse only pauses.
//
// # Semantics
//
//   - At most one outstanding tick per reminder: the next one is not
//     dispatched before the previous one reached its actor's turn, so a
//     slow actor never has a backlog of ticks. A tick that does not reach
//     its turn within DeliveryTimeout counts as failed and is fired again;
//     one the Deliverer reports dropped before its turn (its activation
//     refused) fires again after RetryAfter.
//   - Occurrences missed while the owner or the cluster was down, or while
//     a tick was outstanding, follow the reminder's Catchup policy: Skip
//     (resume with the next occurrence), FireOnce (one tick for all of
//     them, the default) or FireUpTo (the newest N, oldest first).
//   - From the end of the turn that unregistered a reminder (Commit), and
//     once Cancel returned nil, no tick of the reminder runs, also not
//     one already queued in the actor's mailbox: the
//     engine is asked once more on the actor's turn thread, right before
//     the handler would see the tick, and answers by registration
//     generation and sequence number. A node that released the shard
//     (handoff, new owner) or paused it (Pause: a lease that lapsed)
//     answers no for all of its ticks.
//   - Delivery is at least once across a crash: the sequence number of the
//     last delivered tick is written at rest every FlushInterval, so up to
//     that much progress can be redone after a crash, with the same
//     sequence numbers. An actor that must not act twice de-duplicates on
//     (Name, Seq).
//   - Bad input is refused at registration with an error matching
//     ErrInvalid and one of ErrPeriodTooShort (below MinPeriod, default
//     1 s), ErrDueInPast, ErrUnknownPayload (not a declared message of
//     the kind), ErrBadName (empty, over MaxNameBytes, not UTF-8),
//     ErrBadCatchup (an unknown policy, a MaxCatchup that does not fit
//     it) or ErrTooMany (MaxPerIdentity, default 64); each of those
//     matches ErrInvalid by itself. A stored record that holds
//     what registration would refuse (damaged, or written by something
//     else) is not loaded (ErrBadRecord, logged); its shard's other
//     reminders are.
//
// # Cost
//
// There is no goroutine and no runtime timer per reminder. Schedule, the
// deterministic core (no goroutines, no clock, no I/O: time is passed in),
// holds every reminder of the shards this node holds in one timer heap;
// Engine, the shell, runs one goroutine that sleeps until the earliest
// due time, dispatches due ticks through a Deliverer and writes delivered
// progress at rest. A shard's reminders are loaded when the node takes
// the shard over (Acquire), paused while the node may not serve it for a
// moment (Pause, Resume: kept loaded, not written out and read back), and
// dropped when it leaves (Release). A
// dormant identity with reminders costs its entry in the heap and
// nothing in the scheduler.
//
// A registration writes its reminder's record alone (about a hundred
// bytes and the payload), whatever else its shard holds; on a store that
// commits in groups (prospero.AsyncStore) the writes of concurrent
// registrations share commits, and so do deletions of records
// (cancellations, one-shot reminders done) on a store that queues them
// (prospero.AsyncDeleter). Acquire reads a shard's reminders with one
// prefix scan of the store (prospero.PrefixScanner); when the records at
// rest may hold writes that never committed (Config.InDoubt: a replicated
// store), it writes each of them again, as a new version, before any of
// the shard's reminders fires, and loads nothing if one of those writes
// fails. Delivered progress
// is written every FlushInterval as one small record per shard that
// lists only the reminders behind their schedule: a punctual reminder is
// recorded by the time of the write alone. Records of the earlier
// formats (one record per shard, 64 buckets per shard) are rewritten as
// a record per reminder when their shard is loaded.
//
// An engine that is never started is driven by its caller with RunDue
// and Flush: the deterministic simulation runs reminders this way on
// ariel's simulated scheduler and virtual clock.
//
// # Usage
//
//	rem := node.Reminders()
//	node.Register("account", func(key string) actor.Actor { return &Account{rem: rem} },
//		tempest.KindOptions{Reminders: true})
//
//	func (a *Account) Receive(ctx actor.Context, msg any) {
//		switch m := msg.(type) {
//		case Open:
//			err := a.rem.Register(ctx, reminders.Reminder{Name: "interest", Period: time.Hour,
//				Catchup: reminders.FireUpTo, MaxCatchup: 24})
//			...
//		case reminders.Tick:
//			if m.Seq <= a.lastInterest {
//				return // delivered again after a crash
//			}
//			a.lastInterest = m.Seq
//			a.balance += a.balance * a.rate
//		}
//	}
package reminders
