package prospero

import (
	"errors"
	"fmt"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// ErrClosed: the supervisor is shutting down and activates nothing new.
var ErrClosed = errors.New("prospero: supervisor closed")

// phase is where an identity with an entry stands. Dormant identities
// have no entry at all.
type phase uint8

const (
	phaseQueued      phase = iota // waiting for a hydration slot
	phaseLoading                  // OpLoad issued, not yet reported
	phaseActive                   // an activation is attached
	phasePassivating              // OpPassivate issued
	phaseBackoff                  // faulted; waiting to restart or re-hydrate
	phaseRetiring                 // OpRetire issued
	phaseStopping                 // OpStop issued after a fault
	phaseRejecting                // OpReject issued, not yet reported (Rejected)
)

var phaseNames = [...]string{"queued", "loading", "active", "passivating", "backoff", "retiring", "stopping", "rejecting"}

func (p phase) String() string { return phaseNames[p] }

type entry struct {
	kind    *Kind
	phase   phase
	inc     uint64 // incarnation of the current (or last) activation; 0: not loaded yet
	version uint64 // store version last read or written
	// mint, when nonzero, is the incarnation the next load must re-mint
	// (a Restart is pending).
	mint     uint64
	remedy   Remedy // of a pending fault remedy (phaseBackoff)
	resumeAt time.Time
	history  RestartHistory
	mail     bool // mail arrived while the identity could not take it
	turns    int  // turns since state was last written at rest
	lastSave time.Time
	since    time.Time // when the current activation attempt began (doorbell or resume)
	// passivate asks for a passivation as soon as the activation in
	// progress is attached (PassivateSoon found none to passivate yet).
	passivate bool
	// unsaved is why the passivation ending now wrote no state (its
	// final turn was abandoned); nil when it did.
	unsaved error
}

// Op is an operation the shell must carry out for the core.
type Op uint8

const (
	// OpLoad: read the identity's record, re-mint its incarnation if
	// Command.Mint says so (a conditional Put of the new incarnation
	// with the old state), build the actor from the state, attach it
	// with a Hydrated init turn ahead of the waiting mail, then call
	// Loaded (or LoadFailed).
	OpLoad Op = iota + 1
	// OpPassivate: deliver the Passivating turn, write the state at rest
	// if Command.Persist (conditional on Command.Version), detach the
	// actor and release its memory, then call Passivated (or
	// PassivateFailed, leaving the actor attached).
	OpPassivate
	// OpStop: take the faulted actor value out of service, then call
	// Stopped. Its mail stays in the mailbox; a later OpLoad brings the
	// identity back. Command.Remedy says which remedy follows: before a
	// Restart, a host that replaces actor values in place (and re-mints
	// the incarnation as it does) may leave the value attached and report
	// Stopped at once; before a Hydrate the value must be detached.
	OpStop
	// OpRetire: stop the actor (its queued mail is answered
	// ErrActorTerminated) and replace its state at rest by a record
	// holding only incarnation Command.Mint (so the next activation
	// starts empty under a new incarnation), conditional on
	// Command.Version; once both are done, the host's mailbox released
	// (Host.Retire) and the record written, call Retired.
	OpRetire
	// OpReject: the identity cannot be activated (the supervisor is
	// closing, its state cannot be loaded, or the host's fence refused
	// it, Fencer): fail the mail waiting for it, so that no sender waits
	// in vain.
	OpReject
)

var opNames = [...]string{"", "Load", "Passivate", "Stop", "Retire", "Reject"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", o)
}

// Command is one operation for the shell, produced by the Core.
type Command struct {
	Op   Op
	ID   Identity
	Kind *Kind
	// Incarnation of the activation concerned (Passivate, Stop, Retire).
	Incarnation uint64
	// Mint: for Load, the incarnation to re-mint (0: keep the record's);
	// for Retire, the incarnation the tombstone record carries.
	Mint uint64
	// Version expected by the conditional write of Passivate or Retire.
	Version uint64
	// Persist: Passivate writes the state at rest.
	Persist bool
	// Reason of a Passivate (ReasonIdle, ReasonPressure, ReasonShutdown,
	// ReasonRequested).
	Reason string
	// Remedy that follows a Stop.
	Remedy Remedy
	// Err explains a Reject.
	Err error
	// Replace: for Load, the faulted actor value of this incarnation may
	// still be attached (remedy Hydrate on a host that replaces values in
	// place); the new value replaces it without re-minting.
	Replace bool
}

// LoadIncarnation returns the incarnation an OpLoad activation runs
// under, given the record read from the store (the zero Record when
// there is none): the record's own incarnation (1 for an identity never
// seen), or, when a restart re-mints, one above both the minted number
// and the record's.
func (c Command) LoadIncarnation(rec Record) uint64 {
	if c.Mint != 0 {
		return max(c.Mint, rec.Incarnation+1)
	}
	return max(rec.Incarnation, 1)
}

// CoreConfig configures a Core.
type CoreConfig struct {
	// MaxActive bounds active identities; beyond it the least recently
	// used are passivated (0: unbounded).
	MaxActive int
	// HydrationBudget bounds concurrent activations in progress (0:
	// unbounded).
	HydrationBudget int
	// Sink receives lifecycle events (nil: discarded).
	Sink EventSink
	// LastUse, if set, reports activity of an active identity recorded
	// outside the core (for example by the scheduler's router on every
	// message, without taking the supervisor's lock). Before passivating
	// an identity, Tick asks LastUse and spares it if it was used more
	// recently than the core knows. It must be a pure lookup.
	LastUse func(Identity) (time.Time, bool)
}

// Core is Prospero's deterministic decision core for one node: which
// identities are active, which are being hydrated, passivated,
// restarted or retired, and which incarnation each runs under. It owns
// no goroutine and performs no I/O; time is passed in. Inputs are
// method calls (a doorbell, a finished load, a fault, a tick), outputs
// are lifecycle events sent to the sink and Commands collected with
// Drain, which a shell carries out and reports back.
//
// A dormant identity has no entry: a million dormant identities cost
// nothing here. An entry exists from the doorbell that activates an
// identity until it is passivated or retired, or, when it cannot be
// activated, until the host reports that it refused its mail.
//
// Core is not safe for concurrent use; the shell serializes calls.
type Core struct {
	reg      *Registry
	cfg      CoreConfig
	sink     EventSink
	entries  map[Identity]*entry
	activity *Activity
	gate     *HydrationGate
	backoff  map[Identity]struct{} // entries in phaseBackoff
	out      []Command
	closing  bool
	scratch  []Identity
}

// NewCore returns a core deciding for the kinds in reg.
func NewCore(reg *Registry, cfg CoreConfig) *Core {
	sink := cfg.Sink
	if sink == nil {
		sink = discardSink{}
	}
	return &Core{
		reg:      reg,
		cfg:      cfg,
		sink:     sink,
		entries:  make(map[Identity]*entry),
		activity: NewActivity(),
		gate:     NewHydrationGate(cfg.HydrationBudget),
		backoff:  make(map[Identity]struct{}),
	}
}

// Drain appends the pending commands to dst in decision order, clears
// them, and returns dst.
func (c *Core) Drain(dst []Command) []Command {
	dst = append(dst, c.out...)
	clear(c.out)
	c.out = c.out[:0]
	return dst
}

// Entries returns the number of identities with an entry (not dormant).
func (c *Core) Entries() int { return len(c.entries) }

// Active returns the number of identities with an attached activation.
func (c *Core) Active() int { return c.activity.Len() }

// ActiveKeys appends to dst the keys of kind's identities with an
// attached activation, least recently used first, and returns dst.
func (c *Core) ActiveKeys(kind string, dst []string) []string { return c.activity.Keys(kind, dst) }

// Hydrating returns the activations in progress and those waiting for
// the hydration budget.
func (c *Core) Hydrating() (inFlight, waiting int) { return c.gate.InFlight(), c.gate.Waiting() }

func (c *Core) emit(e Event) { c.sink.Emit(e) }

// Doorbell reports that mail was admitted for id while no activation is
// attached to it. It starts an activation (OpLoad) under the hydration
// budget, queues it, or, when the identity is busy being passivated,
// retired or rejected, remembers to bring it back afterwards.
// Errors: ErrUnknownKind (the sender should get it), ErrClosed.
func (c *Core) Doorbell(id Identity, now time.Time) error {
	if e, ok := c.entries[id]; ok {
		switch e.phase {
		case phaseRejecting:
			if c.closing {
				// Nothing will activate it: the host refuses this mail
				// now, as for an identity with no entry.
				return ErrClosed
			}
			e.mail = true
		case phasePassivating, phaseRetiring:
			e.mail = true
		}
		return nil
	}
	k, err := c.reg.Lookup(id.Kind)
	if err != nil {
		return err
	}
	if c.closing {
		return ErrClosed
	}
	e := &entry{kind: k}
	c.entries[id] = e
	c.admit(id, e, now)
	return nil
}

// admit passes e through the hydration gate.
func (c *Core) admit(id Identity, e *entry, now time.Time) {
	e.mail = false
	e.since = now
	if c.gate.Acquire(id) {
		c.startLoad(id, e)
		return
	}
	e.phase = phaseQueued
	c.emit(Event{Type: EventHydrationQueued, At: now, ID: id, Incarnation: e.inc})
}

func (c *Core) startLoad(id Identity, e *entry) {
	e.phase = phaseLoading
	c.out = append(c.out, Command{Op: OpLoad, ID: id, Kind: e.kind, Mint: e.mint,
		Replace: e.inc != 0 && e.mint == 0})
}

// releaseSlot gives a freed hydration slot to the next queued identity.
func (c *Core) releaseSlot() {
	for {
		next, ok := c.gate.Release()
		if !ok {
			return
		}
		if e, ok := c.entries[next]; ok && e.phase == phaseQueued {
			c.startLoad(next, e)
			return
		}
		// The queued identity went away (shutdown); pass the slot on.
	}
}

// Loaded reports that the OpLoad of id attached an activation running
// under incarnation inc; version is the record's version in the store
// (0: none) and hydrated says whether state at rest was restored.
func (c *Core) Loaded(id Identity, inc, version uint64, hydrated bool, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseLoading {
		return
	}
	c.releaseSlot()
	typ := EventActivated
	switch {
	case e.mint != 0:
		typ = EventRestarted
	case e.inc != 0:
		typ = EventRehydrated
	case hydrated:
		typ = EventHydrated
	}
	e.phase, e.inc, e.version, e.mint = phaseActive, inc, version, 0
	e.turns, e.lastSave = 0, now
	c.activity.Touch(id, e.kind.Options.IdleTimeout, now)
	c.emit(Event{Type: typ, At: now, ID: id, Incarnation: inc, Hydration: now.Sub(e.since)})
	if c.closing {
		c.passivate(id, ReasonShutdown, now)
		return
	}
	if e.passivate {
		c.passivate(id, ReasonRequested, now) // PassivateSoon, before it was attached
		return
	}
	c.shed(now)
}

// Fenced reports that the host's fence refused the OpLoad of id just
// before it attached (Fencer): nothing is attached, and the waiting mail
// is rejected with err (OpReject; the entry is dropped once the host
// reports that it did, Rejected). It is not a fault: the identity is
// served elsewhere.
func (c *Core) Fenced(id Identity, err error, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseLoading {
		return
	}
	c.releaseSlot()
	c.reject(id, e, &FencedError{Err: err})
}

// LoadFailed reports that the OpLoad of id failed (store error or the
// state could not be restored). It is a fault of kind FaultHydration:
// retried under the kind's restart intensity, and when that is used up
// the waiting mail is rejected (OpReject: the entry is dropped once the
// host reports that it did, Rejected); state
// at rest is never retired because of a failed read.
func (c *Core) LoadFailed(id Identity, err error, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseLoading {
		return
	}
	c.releaseSlot()
	c.emit(Event{Type: EventStoreError, At: now, ID: id, Incarnation: e.inc, Err: err})
	opts := e.kind.Options
	opts.Remedy = Hydrate
	d := Decide(opts, Fault{ID: id, Incarnation: e.inc, Cause: FaultHydration, Err: err}, e.history, now)
	c.emit(Event{Type: EventFault, At: now, ID: id, Incarnation: e.inc, Cause: FaultHydration, Remedy: d.Remedy, Err: err})
	if d.Escalated {
		c.emit(Event{Type: EventEscalated, At: now, ID: id, Incarnation: e.inc, Remedy: Retire})
		c.reject(id, e, err)
		return
	}
	c.planResume(id, e, d, now)
	c.resume(id, e, now)
}

// planResume records a restart-like remedy decided at now.
func (c *Core) planResume(id Identity, e *entry, d Decision, now time.Time) {
	e.history = e.history.Record(now, e.kind.Options.RestartPeriod, e.kind.Options.MaxRestarts)
	e.remedy, e.resumeAt = d.Remedy, now.Add(d.Delay)
	c.emit(Event{Type: EventRestarting, At: now, ID: id, Incarnation: e.inc, Remedy: d.Remedy, Delay: d.Delay})
}

// resume brings a faulted identity back now if its back-off is over,
// or parks it until Tick.
func (c *Core) resume(id Identity, e *entry, now time.Time) {
	if c.closing {
		c.reject(id, e, ErrClosed)
		return
	}
	if !now.Before(e.resumeAt) {
		c.admit(id, e, now)
		return
	}
	e.phase = phaseBackoff
	c.backoff[id] = struct{}{}
}

// TurnDone reports that a turn of id under incarnation inc finished
// normally at now. It refreshes the identity's activity and applies the
// kind's persistence policy: when it returns persist, the shell writes
// the state at rest (still on the actor's turn, conditional on version)
// and reports Persisted or PersistFailed.
//
// A turn that was running when the passivation of its activation was
// decided ends in phasePassivating. Under PersistEveryTurn it persists
// all the same, so that what it answered waits for its own write (reply
// after commit) instead of leaving before anything is written, at the
// mercy of the passivation's final write; its activity is not refreshed
// (the identity is leaving). Under the other policies the final write of
// the passivation, which comes after the turn, covers its state.
func (c *Core) TurnDone(id Identity, inc uint64, now time.Time) (persist bool, version uint64) {
	return c.turnDone(id, inc, true, now)
}

// TickDone is TurnDone for a turn that handled the tick of an
// activation's own timer: the persistence policy applies (the tick may
// have changed the state), but the identity's activity is not refreshed,
// so an actor whose only traffic is its own timer still idles out.
func (c *Core) TickDone(id Identity, inc uint64, now time.Time) (persist bool, version uint64) {
	return c.turnDone(id, inc, false, now)
}

func (c *Core) turnDone(id Identity, inc uint64, activity bool, now time.Time) (persist bool, version uint64) {
	e, ok := c.entries[id]
	if !ok || e.inc != inc {
		return false, 0
	}
	switch {
	case e.phase == phasePassivating && e.kind.Options.Persistence.Mode == PersistEveryTurn:
		return true, e.version
	case e.phase != phaseActive:
		return false, 0
	}
	if activity {
		c.activity.Touch(id, e.kind.Options.IdleTimeout, now)
	}
	e.turns++
	p := e.kind.Options.Persistence
	switch p.Mode {
	case PersistEveryTurn:
		persist = true
	case PersistPeriodic:
		persist = (p.EveryTurns > 0 && e.turns >= p.EveryTurns) ||
			(p.Every > 0 && now.Sub(e.lastSave) >= p.Every)
	}
	return persist, e.version
}

// Persisted reports that the state of id under incarnation inc was
// written at rest with the new version.
func (c *Core) Persisted(id Identity, inc, version uint64, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.inc != inc {
		return
	}
	e.version, e.turns, e.lastSave = version, 0, now
	c.emit(Event{Type: EventPersisted, At: now, ID: id, Incarnation: inc})
}

// Version returns the store version the core last saw for id, or def
// when id has no entry.
func (c *Core) Version(id Identity, def uint64) uint64 {
	if e, ok := c.entries[id]; ok {
		return e.version
	}
	return def
}

// PersistFailed reports a failed write of the turn policy; the next
// turn tries again.
func (c *Core) PersistFailed(id Identity, inc uint64, err error, now time.Time) {
	c.emit(Event{Type: EventStoreError, At: now, ID: id, Incarnation: inc, Err: err})
}

// CommitFailed reports that a write of id's state under incarnation inc
// failed, or that the state could not be marshalled: the activation's
// memory is ahead of its state at rest, and what it answered since was
// not released. It is a fault (FaultCommit) remedied by Hydrate: the
// activation reloads its state at rest, same incarnation, after
// the kind's back-off. Restart intensity stretches the back-off but never
// escalates to Retire, which would drop the state at rest for a store
// error: past it the reload waits BackoffMax.
func (c *Core) CommitFailed(id Identity, inc uint64, err error, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.inc != inc || e.phase != phaseActive {
		return
	}
	c.activity.Remove(id)
	opts := e.kind.Options
	opts.Remedy = Hydrate
	d := Decide(opts, Fault{ID: id, Incarnation: inc, Cause: FaultCommit, Err: err}, e.history, now)
	if d.Escalated {
		d = Decision{Remedy: Hydrate, Delay: opts.BackoffMax, Recent: d.Recent}
	}
	c.emit(Event{Type: EventFault, At: now, ID: id, Incarnation: inc, Cause: FaultCommit, Remedy: Hydrate, Err: err})
	e.phase = phaseStopping
	c.planResume(id, e, d, now)
	c.out = append(c.out, Command{Op: OpStop, ID: id, Kind: e.kind, Incarnation: inc, Remedy: Hydrate})
}

// Fault reports a failed turn. Faults of an incarnation that is no
// longer current, or of an activation already being passivated, are
// ignored. The kind's remedy is decided (Decide): Restart and Hydrate
// take the actor out of service (OpStop) and bring it back after the
// back-off; Retire, chosen or escalated to, issues OpRetire.
//
// An abandoned turn (f.Abandoned) is reported with EventTurnAbandoned
// first. If it was the final turn of a passivation, that passivation
// ends without writing state (the final callback will never report):
// the state at rest stays what it was, and waiting mail activates the
// identity again from it.
func (c *Core) Fault(f Fault, now time.Time) {
	e, ok := c.entries[f.ID]
	if f.Abandoned {
		c.emit(Event{Type: EventTurnAbandoned, At: now, ID: f.ID, Incarnation: f.Incarnation, Cause: f.Cause, Err: f.Err})
		if ok && e.inc == f.Incarnation && e.phase == phasePassivating {
			// Out of memory, its state not written: the event says so
			// (a PassivateWait returns its Err).
			e.unsaved = fmt.Errorf("%w: the passivating turn of %s was abandoned past its budget: its state at rest was not written", actor.ErrNotCommitted, f.ID)
			c.Passivated(f.ID, e.version, false, now)
			return
		}
	}
	if !ok || e.inc != f.Incarnation || e.phase != phaseActive {
		return
	}
	c.activity.Remove(f.ID)
	d := Decide(e.kind.Options, f, e.history, now)
	c.emit(Event{Type: EventFault, At: now, ID: f.ID, Incarnation: e.inc, Cause: f.Cause, Remedy: d.Remedy, Err: f.Err})
	if d.Remedy == Retire {
		if d.Escalated {
			c.emit(Event{Type: EventEscalated, At: now, ID: f.ID, Incarnation: e.inc, Remedy: Retire})
		}
		e.phase = phaseRetiring
		c.out = append(c.out, Command{Op: OpRetire, ID: f.ID, Kind: e.kind,
			Incarnation: e.inc, Mint: e.inc + 1, Version: e.version})
		return
	}
	if d.Remedy == Restart {
		e.mint = e.inc + 1
	}
	e.phase = phaseStopping
	c.planResume(f.ID, e, d, now)
	c.out = append(c.out, Command{Op: OpStop, ID: f.ID, Kind: e.kind, Incarnation: e.inc, Remedy: d.Remedy})
}

// Stopped reports that OpStop of id finished. The identity comes back
// when its back-off ends (at once for a first restart).
func (c *Core) Stopped(id Identity, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseStopping {
		return
	}
	c.resume(id, e, now)
}

// Retired reports that OpRetire of id finished: its state at rest now
// holds only the next incarnation, version. If mail is waiting (here
// or reported earlier by a doorbell), a fresh activation starts.
func (c *Core) Retired(id Identity, version uint64, mailWaiting bool, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseRetiring {
		return
	}
	c.emit(Event{Type: EventRetired, At: now, ID: id, Incarnation: e.inc})
	c.afterRelease(id, e, mailWaiting, now)
}

// afterRelease drops the entry of a passivated or retired identity, or
// activates it again when mail is waiting.
func (c *Core) afterRelease(id Identity, e *entry, mailWaiting bool, now time.Time) {
	if (mailWaiting || e.mail) && !c.closing {
		// Keep the restart history: a crash loop through retire and
		// re-activation must still be seen.
		fresh := &entry{kind: e.kind, history: e.history}
		c.entries[id] = fresh
		c.admit(id, fresh, now)
		return
	}
	delete(c.entries, id)
}

// Tick drives time: it resumes faulted identities whose back-off ended,
// passivates identities idle past their kind's timeout, and sheds the
// least recently used when more than MaxActive are active.
func (c *Core) Tick(now time.Time) {
	for id := range c.backoff {
		e := c.entries[id]
		if e == nil || e.phase != phaseBackoff {
			delete(c.backoff, id)
			continue
		}
		if !now.Before(e.resumeAt) {
			delete(c.backoff, id)
			c.admit(id, e, now)
		}
	}
	c.scratch = c.activity.Idle(now, c.scratch[:0])
	for _, id := range c.scratch {
		if !c.refresh(id) {
			c.passivate(id, ReasonIdle, now)
		}
	}
	if c.cfg.LastUse != nil {
		// Refresh the would-be victims once so the shed below follows
		// real use.
		c.scratch = c.activity.Over(c.cfg.MaxActive, c.scratch[:0])
		for _, id := range c.scratch {
			c.refresh(id)
		}
	}
	c.shed(now)
}

// refresh moves id up the activity order if LastUse knows of a later
// use; it reports whether it did.
func (c *Core) refresh(id Identity) bool {
	if c.cfg.LastUse == nil {
		return false
	}
	t, ok := c.cfg.LastUse(id)
	e := c.entries[id]
	if !ok || e == nil || !c.activity.UsedBefore(id, t) {
		return false
	}
	c.activity.Touch(id, e.kind.Options.IdleTimeout, t)
	return true
}

// Touch records use of an active identity at now (cheaper than
// TurnDone: no persistence policy).
func (c *Core) Touch(id Identity, now time.Time) {
	if e, ok := c.entries[id]; ok && e.phase == phaseActive {
		c.activity.Touch(id, e.kind.Options.IdleTimeout, now)
	}
}

// NextDeadline returns the next time at which Tick has work (an idle
// timeout or a back-off ending), and false if there is none.
func (c *Core) NextDeadline() (time.Time, bool) {
	t, ok := c.activity.NextIdle()
	for id := range c.backoff {
		if e := c.entries[id]; e != nil && (!ok || e.resumeAt.Before(t)) {
			t, ok = e.resumeAt, true
		}
	}
	return t, ok
}

func (c *Core) shed(now time.Time) {
	c.scratch = c.activity.Over(c.cfg.MaxActive, c.scratch[:0])
	for _, id := range c.scratch {
		c.passivate(id, ReasonPressure, now)
	}
}

func (c *Core) passivate(id Identity, reason string, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseActive {
		return
	}
	c.activity.Remove(id)
	e.phase, e.passivate = phasePassivating, false
	c.emit(Event{Type: EventPassivating, At: now, ID: id, Incarnation: e.inc, Reason: reason})
	c.out = append(c.out, Command{Op: OpPassivate, ID: id, Kind: e.kind, Incarnation: e.inc,
		Version: e.version, Persist: e.kind.Options.Persistence.Persistent(), Reason: reason})
}

// Passivate asks for id to be passivated now (an operator or test
// request); it reports whether id was active.
func (c *Core) Passivate(id Identity, now time.Time) bool {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseActive {
		return false
	}
	c.passivate(id, ReasonRequested, now)
	return true
}

// PassivateSoon is Passivate for a caller that waits for id to leave
// memory: an identity not active yet (queued, loading, backing off or
// stopping after a fault) is passivated as soon as its activation is
// attached, instead of not at all. It reports whether id is in memory
// (false: nothing to wait for). The wait ends with the identity's
// EventPassivated, EventRetired or EventRejected.
func (c *Core) PassivateSoon(id Identity, now time.Time) bool {
	e, ok := c.entries[id]
	switch {
	case !ok:
		return false
	case e.phase == phaseActive:
		c.passivate(id, ReasonRequested, now)
	case e.phase != phasePassivating:
		e.passivate = true
	}
	return true
}

// UnwantPassivation withdraws PassivateSoon's request for id (its
// caller gave up waiting, and no other waits).
func (c *Core) UnwantPassivation(id Identity) {
	if e, ok := c.entries[id]; ok {
		e.passivate = false
	}
}

// Passivated reports that OpPassivate of id finished: the actor is
// detached and its state (if any) is at rest under version. The entry
// is dropped (the identity is dormant) unless mail is waiting, in which
// case the identity is hydrated again.
func (c *Core) Passivated(id Identity, version uint64, mailWaiting bool, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phasePassivating {
		return
	}
	c.emit(Event{Type: EventPassivated, At: now, ID: id, Incarnation: e.inc, Err: e.unsaved})
	e.unsaved = nil
	c.afterRelease(id, e, mailWaiting, now)
}

// PassivateFailed reports that the state of id could not be written;
// the actor stays attached and active, and a later tick tries again.
func (c *Core) PassivateFailed(id Identity, err error, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phasePassivating {
		return
	}
	c.emit(Event{Type: EventStoreError, At: now, ID: id, Incarnation: e.inc, Err: err})
	e.phase = phaseActive
	c.activity.Touch(id, e.kind.Options.IdleTimeout, now)
}

// Shutdown starts a graceful shutdown: every active identity is
// passivated (its state written at rest), queued activations are
// rejected, and later doorbells return ErrClosed (also those of an
// identity whose rejection the host has not reported yet). Identities being
// loaded or backing off are passivated when they report back.
func (c *Core) Shutdown(now time.Time) {
	if c.closing {
		return
	}
	c.closing = true
	for id, e := range c.entries {
		switch e.phase {
		case phaseActive:
			c.passivate(id, ReasonShutdown, now)
		case phaseQueued:
			c.reject(id, e, ErrClosed)
		case phaseBackoff:
			delete(c.backoff, id)
			c.reject(id, e, ErrClosed)
		}
	}
}

// Closing reports whether Shutdown was called.
func (c *Core) Closing() bool { return c.closing }

// Settled reports whether nothing is active or in progress (after
// Shutdown: the shell may close the store).
func (c *Core) Settled() bool { return len(c.entries) == 0 }

// Status answers the state of a reference to id pinned to incarnation
// pinned (0: a plain kind/key reference). When the answer depends on the
// state at rest (the identity has no entry, or has a fresh one whose
// incarnation is not known until its load has read the record: queued for
// or in its first hydration, or re-admitted after a passivation or
// retirement that found mail waiting), Status returns atRest true and the
// caller completes it with StatusAtRest, passing InMemory as active.
// Errors: ErrUnknownKind (State Unknown).
func (c *Core) Status(id Identity, pinned uint64) (st Status, atRest bool, err error) {
	if _, err := c.reg.Lookup(id.Kind); err != nil {
		return Status{State: actor.Unknown}, false, err
	}
	e, ok := c.entries[id]
	if !ok || (e.inc == 0 && e.mint == 0) {
		return Status{}, true, nil
	}
	return statusOf(pinned, max(e.inc, e.mint), true, e.phase == phaseActive || e.phase == phasePassivating), false, nil
}

// reject gives up on activating id: the host is to refuse the mail
// waiting for it (OpReject). The entry stays, rejecting, until the host
// reports that it did (Rejected): mail arriving meanwhile must not start
// an activation the host's refusal, still to come, would then stop.
func (c *Core) reject(id Identity, e *entry, err error) {
	e.phase, e.mail = phaseRejecting, false
	c.out = append(c.out, Command{Op: OpReject, ID: id, Kind: e.kind, Err: err})
}

// Rejected reports that the host carried out an OpReject of id: it
// refused the waiting mail and holds nothing of id. It emits
// EventRejected and drops the entry, or, if mail rang the doorbell while
// the rejection ran (it may have come after the host refused what was
// waiting), admits a fresh activation, with a fresh restart history: the
// mail that gave up was answered, and new mail gets a new try (once the
// core is closing, that mail is rejected in turn).
func (c *Core) Rejected(id Identity, err error, now time.Time) {
	e, ok := c.entries[id]
	if !ok || e.phase != phaseRejecting {
		return
	}
	c.emit(Event{Type: EventRejected, At: now, ID: id, Err: err})
	switch {
	case e.mail && c.closing:
		// Mail that rang before the shutdown began and may have come
		// after the host's refusal: refuse it too.
		c.reject(id, e, ErrClosed)
	case e.mail:
		fresh := &entry{kind: e.kind}
		c.entries[id] = fresh
		c.admit(id, fresh, now)
	default:
		delete(c.entries, id)
	}
}

// InMemory reports whether id has an entry, in any phase: an activation
// attached, or one queued for or in hydration, restarting, backing off,
// being passivated, retired or rejected. Only false means that nothing here can
// still change id's state at rest.
func (c *Core) InMemory(id Identity) bool {
	_, ok := c.entries[id]
	return ok
}

// Identities appends to dst every identity in memory, in any phase (see
// InMemory), and returns it.
func (c *Core) Identities(dst []Identity) []Identity {
	for id := range c.entries {
		dst = append(dst, id)
	}
	return dst
}

// StatusAtRest completes Status for an identity whose answer depends on
// its state at rest, from its record (found false: the store has none);
// active is whether it is in memory all the same (Core.InMemory).
func StatusAtRest(pinned uint64, rec Record, found bool, active bool) Status {
	cur := uint64(1) // an identity never activated will run as incarnation 1
	if found {
		cur = max(rec.Incarnation, 1)
	}
	return statusOf(pinned, cur, active, false)
}
