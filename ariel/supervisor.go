package ariel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// Outcome is how a turn ended, from the scheduler's side.
type Outcome uint8

const (
	// Suspended: the turn returned; the actor waits for its next message.
	Suspended Outcome = iota
	// Completed: the actor stopped cleanly; it and its state retire together.
	Completed
	// BudgetExhausted: the turn ran past the turn budget — a fault, never a
	// scheduling event.
	BudgetExhausted
	// Panicked: the handler panicked; the panic was recovered at the
	// invocation.
	Panicked
)

func (o Outcome) String() string {
	switch o {
	case Suspended:
		return "Suspended"
	case Completed:
		return "Completed"
	case BudgetExhausted:
		return "BudgetExhausted"
	case Panicked:
		return "Panicked"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// ErrBudgetExhausted is the error of a BudgetExhausted fault.
var ErrBudgetExhausted = errors.New("tempest: turn budget exhausted")

// Fault describes a turn that failed.
type Fault struct {
	Ref         actor.Ref // the actor, pinned to the failing incarnation
	Incarnation uint64
	Outcome     Outcome // Panicked or BudgetExhausted
	Err         error   // ErrBudgetExhausted, or the panic as an error matching actor.ErrPanicked
	Panic       any     // the recovered value for Panicked
	Stack       []byte  // the panicking goroutine's stack for Panicked
	// Abandoned: the turn (BudgetExhausted) was taken away from its
	// goroutine, which may never return. The actor value is already out
	// of the cell (a spawned actor is stopped); a virtual actor's cell
	// keeps its mail and incarnation and waits for a value.
	Abandoned bool
}

// FaultHook receives faults. Fault is called on the failing worker right
// after a panic (the actor's run-token is still held, so no turn of it runs
// until Fault returns): to act, call Restart, Retire (Stop), Passivate or
// Detach; they are queued in the actor's system lane and run before any
// further user mail (the rest of the batch the failed turn was taken
// with goes back to the mailbox, behind them), never concurrently with a
// turn, and doing nothing resumes the actor with its next message.
//
// A BudgetExhausted fault is reported on the watchdog goroutine after the
// turn was abandoned (Fault.Abandoned): the remedy takes effect at once,
// without waiting for the stuck goroutine. The value is already detached;
// Restart, RestartAt or Replace attach the next one to the waiting mail,
// Retire or Reject answer that mail. A virtual actor left without a value
// rings the Activator when the hook returns.
type FaultHook interface {
	Fault(f Fault)
}

// LogFaults is the default FaultHook: it logs each fault at error level and
// counts it. The actor resumes.
type LogFaults struct {
	Logger *slog.Logger
	Count  atomic.Uint64
}

var _ FaultHook = (*LogFaults)(nil)

// Fault logs f.
func (l *LogFaults) Fault(f Fault) {
	l.Count.Add(1)
	if l.Logger != nil {
		l.Logger.LogAttrs(context.Background(), slog.LevelError, "actor turn failed",
			slog.String("actor", f.Ref.String()), slog.String("outcome", f.Outcome.String()),
			slog.Any("error", f.Err))
	}
}

// Activator is rung when mail arrives for a cell that has no actor
// attached: once per transition from "inactive" to "has mail", not per
// message. It runs on the sender's goroutine and must not block; it
// typically starts hydration and later calls Scheduler.Attach.
type Activator interface {
	Ring(ref actor.Ref)
}

// FactoryActivator is the default Activator: it attaches a new actor from
// the factory registered for the kind (Register), at once.
type FactoryActivator struct{ S *Scheduler }

var _ Activator = FactoryActivator{}

// Ring attaches factory(key) to a virtual actor's cell.
func (f FactoryActivator) Ring(ref actor.Ref) {
	if !ref.IsVirtual() {
		return
	}
	info, ok := f.S.kind(ref.Kind())
	if !ok {
		return
	}
	if err := f.S.Attach(ref, info.factory(ref.Key())); err != nil && !errors.Is(err, ErrActive) {
		f.S.log.LogAttrs(context.Background(), slog.LevelDebug, "activation failed",
			slog.String("actor", ref.String()), slog.Any("error", err))
	}
}

// SetTurnBudget sets the turn budget of the virtual actors of kind: a
// turn of theirs that runs longer is abandoned (BudgetExhausted). 0 goes
// back to the scheduler's TurnBudget. It applies to turns that start
// afterwards, so call it right after Register.
func (s *Scheduler) SetTurnBudget(kind string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("ariel: turn budget %v of kind %q is negative", d, kind)
	}
	s.kindsMu.Lock()
	defer s.kindsMu.Unlock()
	k, ok := s.kinds[kind]
	if !ok {
		return fmt.Errorf("%w: %q", actor.ErrUnknownKind, kind)
	}
	k.budget = d
	s.kinds[kind] = k
	least := s.cfg.TurnBudget
	for _, k := range s.kinds {
		if k.budget > 0 && k.budget < least {
			least = k.budget
		}
	}
	if s.minBudget.Swap(int64(least)) != int64(least) {
		select {
		case s.rearm <- struct{}{}:
		default:
		}
	}
	return nil
}

// SetAskTimeouts sets the deadline policy of kind's virtual actors: def
// is the deadline of an ask that sets none (0: actor.DefaultAskTimeout),
// max the longest an ask to them may wait (0: no maximum). An ask asking
// for more is clamped to max, wherever it is made: program-code and
// in-turn asks on this node, and asks arriving from other nodes, whose
// remaining time is clamped on arrival. See AskDeadline.
func (s *Scheduler) SetAskTimeouts(kind string, def, max time.Duration) error {
	if def < 0 || max < 0 || (max > 0 && def > max) {
		return fmt.Errorf("ariel: ask timeouts of kind %q: default %v, maximum %v", kind, def, max)
	}
	return s.setKind(kind, func(k *kindInfo) { k.askDefault, k.askMax = def, max })
}

// setKind applies set to kind's settings under kindsMu.
func (s *Scheduler) setKind(kind string, set func(*kindInfo)) error {
	s.kindsMu.Lock()
	defer s.kindsMu.Unlock()
	k, ok := s.kinds[kind]
	if !ok {
		return fmt.Errorf("%w: %q", actor.ErrUnknownKind, kind)
	}
	set(&k)
	s.kinds[kind] = k
	return nil
}

// TurnBudget returns the turn budget of kind's virtual actors (the
// scheduler's for a kind without its own, or not registered).
func (s *Scheduler) TurnBudget(kind string) time.Duration {
	if k, ok := s.kind(kind); ok && k.budget > 0 {
		return k.budget
	}
	return s.cfg.TurnBudget
}

// AfterTurn is a hook run on the actor's turn thread (its run-token held,
// no other turn of it running) after each turn of a virtual actor that
// ended normally: user messages, continuations, Undelivered and
// ReceiveTimeout notices, timer ticks; not lifecycle turns, and not a
// turn that panicked. inc is the incarnation the turn ran under and a the
// actor value. activity is false for the tick of a timer armed without
// actor.KeepAlive: such a turn must not refresh the actor's idle clock.
// The hook runs before the turn's outputs (its reply, the mail it sent)
// leave, and h.Wait keeps them back until the hook's work is done (reply
// after commit). It must not block: the worker waits for it.
type AfterTurn func(ref actor.Ref, inc uint64, a actor.Actor, activity bool, h Hold)

// The methods below are for the supervisor only (Prospero and the node's
// wiring). Actor code never calls them.

// SetAfterTurn installs fn as the after-turn hook of the virtual actors of
// kind (nil removes it). Only cells made afterwards carry it, so call it
// right after Register, before mail flows. Kinds without a hook pay
// nothing for the mechanism.
func (s *Scheduler) SetAfterTurn(kind string, fn AfterTurn) error {
	return s.setKind(kind, func(k *kindInfo) { k.after = fn })
}

// SetHoldOutputs makes the turns of kind's virtual actors keep their
// outputs (reply, tells, asks) until the turn has ended, as a kind with
// an after-turn hook does, so that an Effect the turn stages can hold
// them (Stage). Like SetAfterTurn it changes how such a turn's sends
// leave (see the package documentation), and only cells made afterwards
// carry it: call it right after Register.
func (s *Scheduler) SetHoldOutputs(kind string) error {
	return s.setKind(kind, func(k *kindInfo) { k.holds = true })
}

// SetReentrancy sets the Reentrancy of the virtual actors of kind. Like
// SetAfterTurn, only cells made afterwards carry it: call it right after
// Register.
func (s *Scheduler) SetReentrancy(kind string, r actor.Reentrancy) error {
	if r > actor.NonReentrant {
		return fmt.Errorf("ariel: unknown reentrancy %v", r)
	}
	return s.setKind(kind, func(k *kindInfo) { k.reent = r })
}

// EnsureCell creates the cell (mailbox, system lane, run-token) of the
// virtual actor ref without an actor value, so mail can be admitted before
// the actor exists ("the mailbox precedes the actor"). incarnation sets the
// cell's incarnation when it is created (0 means 1); mailbox bounds it (0:
// the kind's or the default bound). It is a no-op for an existing cell.
func (s *Scheduler) EnsureCell(ref actor.Ref, incarnation uint64, mailbox int) error {
	if !ref.IsVirtual() {
		return errors.New("ariel: EnsureCell needs a virtual reference")
	}
	info, _ := s.kind(ref.Kind())
	if mailbox == 0 {
		mailbox = info.mailbox
	}
	c := s.newCell(ref, mailbox, info)
	c.inc.Store(max(incarnation, 1))
	if got := s.storeCell(vkey{ref.Kind(), ref.Key()}, c); got.gone() {
		s.forget(got)
		s.storeCell(vkey{ref.Kind(), ref.Key()}, c)
	}
	return nil
}

func (s *Scheduler) cellOf(ref actor.Ref) (*Cell, error) {
	if ref.IsVirtual() {
		v, ok := s.virtual.Load(vkey{ref.Kind(), ref.Key()})
		if !ok {
			return nil, actor.ErrActorTerminated
		}
		return v.(*Cell), nil
	}
	if ref.Node() != s.cfg.Node {
		return nil, actor.ErrProcessUnavailable
	}
	if c := s.ids.get(ref.ID()); c != nil {
		return c, nil
	}
	return nil, actor.ErrActorTerminated
}

// State reports what ref resolves to on this node: Valid (an actor is
// attached), Dormant (a cell without an actor), ActorTerminated (no such
// identity or a stale incarnation), Unknown for other nodes.
func (s *Scheduler) State(ref actor.Ref) actor.ReferenceState {
	c, err := s.cellOf(ref)
	switch {
	case errors.Is(err, actor.ErrProcessUnavailable):
		return actor.Unknown
	case err != nil:
		if ref.IsVirtual() {
			if _, ok := s.kind(ref.Kind()); ok {
				return actor.Dormant
			}
		}
		return actor.ActorTerminated
	}
	if !c.pinMatches(ref.Incarnation()) {
		return actor.ActorTerminated
	}
	switch c.state.Load() {
	case stStopped:
		return actor.ActorTerminated
	case stDetached, stPending, stGone:
		return actor.Dormant
	}
	return actor.Valid
}

// Queued returns how many messages wait in the mailbox of ref on this
// node (user and system mail, not the one a running turn handles); 0
// when ref has no cell here. A gauge for tools and tests.
func (s *Scheduler) Queued(ref actor.Ref) int {
	c, err := s.cellOf(ref)
	if err != nil || c == nil {
		return 0
	}
	return int(c.pend.Load())
}

// Attach gives the cell of ref (created if needed) the actor value a and
// releases it for dispatch: a receives actor.Started, then the mail that
// waited, in order. It fails with ErrActive when an actor is attached. A
// cell Attach creates takes ref's pinned incarnation; an existing cell
// keeps its own (see AttachAt).
func (s *Scheduler) Attach(ref actor.Ref, a actor.Actor) error {
	return s.attach(ref, 0, a)
}

// AttachAt is Attach with an explicit incarnation inc (> 0): the cell,
// which must have no actor, runs a under inc from now on, whatever
// incarnation it had. The supervisor uses it to restore the incarnation
// kept with the state at rest, so incarnations stay monotonic across
// passivation, retirement and process restarts.
func (s *Scheduler) AttachAt(ref actor.Ref, inc uint64, a actor.Actor) error {
	if inc == 0 {
		return errors.New("ariel: AttachAt needs an incarnation")
	}
	return s.attach(ref, inc, a)
}

func (s *Scheduler) attach(ref actor.Ref, inc uint64, a actor.Actor) error {
	if a == nil {
		return errors.New("ariel: Attach of a nil actor")
	}
	if s.closing.Load() {
		return ErrClosed
	}
	for {
		c, err := s.cellOf(ref)
		if err != nil && ref.IsVirtual() {
			if err := s.EnsureCell(ref, max(inc, ref.Incarnation()), 0); err != nil {
				return err
			}
			c, err = s.cellOf(ref)
		}
		if err != nil {
			return err
		}
		c.mu.Lock()
		st := c.state.Load()
		if st == stGone {
			c.mu.Unlock()
			s.forget(c)
			continue
		}
		if st != stDetached && st != stPending {
			c.mu.Unlock()
			if st == stStopped {
				return actor.ErrActorTerminated
			}
			return ErrActive
		}
		switch {
		case inc != 0:
			c.inc.Store(inc)
		case c.inc.Load() == 0:
			c.inc.Store(max(ref.Incarnation(), 1))
		}
		c.act = a
		if s.traces() {
			c.attachedAt.Store(s.clock.Now().UnixNano())
		}
		c.owed = c.n // the mail that waited runs before a later passivation
		c.sys = append([]envelope{{kind: kStart}}, c.sys...)
		c.pend.Add(1)
		c.state.Store(stReady)
		c.mu.Unlock()
		s.activeInc()
		s.enqueue(c, nil)
		return nil
	}
}

// Passivate puts the actor of ref to rest: it receives actor.Passivating as
// a final system turn, then final (if not nil) is called inside that same
// turn with the actor value (to write its state at rest), and the cell
// becomes inactive; an empty one leaves the scheduler's memory. Mail that
// arrives afterwards rings the Activator again.
//
// A Passivate while an earlier one is still queued joins it: the actor
// receives Passivating once, and every caller's final runs in that turn.
// Mail that waited for the actor's activation is handled before the next
// passivation, so repeated passivations cannot starve it.
//
// Passivate fails with ErrNotAttached when the cell has no actor (the
// watchdog may have just taken it out of service, see Config.Faults); a
// passivation queued when the watchdog does that ends with the actor
// value it was for, without running final.
//
// After Close, the final turn runs at once on a goroutine of its own (no
// worker is left to run it; the caller may hold a lock final needs), or
// Passivate fails with ErrClosed when a turn of the actor is still
// running; it never waits.
func (s *Scheduler) Passivate(ref actor.Ref, final func(actor.Actor)) error {
	c, err := s.cellOf(ref)
	if err != nil {
		return err
	}
	if s.closing.Load() {
		return s.passivateClosed(c, final)
	}
	if err := c.pushPassivate(final, false); err != nil {
		return err
	}
	s.wakeAttached(c)
	if s.closing.Load() {
		// Close raced the push: if no worker took it, Close's sweep or
		// the next line runs it.
		s.runStranded(c)
	}
	return nil
}

// Detach takes the actor value of ref out of service before any further
// user mail, like Passivate but without a final turn: the actor receives
// no Passivating, final (if not nil) is called with the value, and the
// cell keeps its mail and waits for Restart, RestartAt or Replace to
// attach a value (or Retire to answer the mail). A FaultHook calls it
// for a value that failed (a panic): queued in the system lane from the
// hook, it runs before the mail behind the failed turn. It fails with
// ErrNotAttached when the cell has no actor, and with ErrClosed once the
// scheduler is closing.
func (s *Scheduler) Detach(ref actor.Ref, final func(actor.Actor)) error {
	c, err := s.cellOf(ref)
	if err != nil {
		return err
	}
	if s.closing.Load() {
		return ErrClosed
	}
	if err := c.pushPassivate(final, true); err != nil {
		return err
	}
	s.wakeAttached(c)
	if s.closing.Load() {
		s.runStranded(c)
	}
	return nil
}

// passivateClosed runs the passivation of c inline, the scheduler being
// closed.
func (s *Scheduler) passivateClosed(c *Cell, final func(actor.Actor)) error {
	for {
		st := c.state.Load()
		switch st {
		case stIdle, stReady:
			if !c.state.CompareAndSwap(st, stRunning) {
				continue
			}
			if st == stIdle {
				s.activeInc()
			}
			go s.runClosed(c, envelope{kind: kPassivate, msg: final})
			return nil
		case stRunning:
			return ErrClosed
		default:
			return actor.ErrActorTerminated
		}
	}
}

// runStranded runs a passivation or a retirement (RetireThen) queued in
// c's system lane that no worker will run any more (the scheduler
// closed).
func (s *Scheduler) runStranded(c *Cell) {
	for {
		st := c.state.Load()
		if st != stIdle && st != stReady {
			return
		}
		if !c.state.CompareAndSwap(st, stRunning) {
			continue
		}
		if st == stIdle {
			s.activeInc()
		}
		c.mu.Lock()
		var fin *envelope
		for i := range c.sys {
			if c.sys[i].kind == kPassivate || isRetire(&c.sys[i]) {
				e := c.sys[i]
				fin = &e
				if r, _ := e.msg.(*passReq); r != nil && r == c.passq {
					c.passq = nil
				}
				c.sys = append(c.sys[:i], c.sys[i+1:]...)
				c.pend.Add(-1)
				break
			}
		}
		c.mu.Unlock()
		if fin == nil { // nothing to run: put it back as it was
			c.state.Store(st)
			if st == stIdle {
				s.activeDec()
			}
			return
		}
		go s.runClosed(c, *fin)
		return
	}
}

// runClosed runs one system envelope of c, whose run-token the caller
// took, after Close. It ends with the turn.
func (s *Scheduler) runClosed(c *Cell, e envelope) {
	ex := &executor{s: s, cnt: &counters{}, budget: s.cfg.FairnessMessages, gen: c.gen.Load() + 1, pos: -1}
	ex.turn(c, &e)
}

// finishStranded runs, after the workers stopped, the passivations and
// retirements that were queued but never ran, so a supervisor waiting for
// them is answered.
func (s *Scheduler) finishStranded() {
	s.virtual.Range(func(_, v any) bool {
		c := v.(*Cell)
		c.mu.Lock()
		has := false
		for i := range c.sys {
			if c.sys[i].kind == kPassivate || isRetire(&c.sys[i]) {
				has = true
				break
			}
		}
		c.mu.Unlock()
		if has {
			s.runStranded(c)
		}
		return true
	})
}

// Restart replaces the actor value of ref with a (between turns, never
// during one) and re-mints the identity: the incarnation grows by one, so
// references pinned to the old incarnation read ActorTerminated. a
// receives actor.Started; queued mail is kept.
func (s *Scheduler) Restart(ref actor.Ref, a actor.Actor) error {
	return s.replace(ref, a, &restartMsg{a: a})
}

// RestartAt is Restart to the explicit incarnation inc (> 0) instead of
// the old one plus one. On a cell with no actor it attaches a under inc.
func (s *Scheduler) RestartAt(ref actor.Ref, inc uint64, a actor.Actor) error {
	if inc == 0 {
		return errors.New("ariel: RestartAt needs an incarnation")
	}
	return s.replace(ref, a, &restartMsg{a: a, inc: inc})
}

// Replace swaps the actor value of ref for a between two turns without
// re-minting: the incarnation stays, references pinned to it stay Valid,
// a receives actor.Started and then the queued mail. It is queued in the
// system lane, so it runs after the current turn (the supervisor's
// Hydrate remedy: reload the last state at rest). On a cell with no
// actor it attaches a under ref's pinned incarnation (if any).
func (s *Scheduler) Replace(ref actor.Ref, a actor.Actor) error {
	return s.replace(ref, a, &restartMsg{a: a, keep: true})
}

func (s *Scheduler) replace(ref actor.Ref, a actor.Actor, m *restartMsg) error {
	if a == nil {
		return errors.New("ariel: Restart with a nil actor")
	}
	if s.closing.Load() {
		return ErrClosed
	}
	c, err := s.cellOf(ref)
	if err != nil {
		if ref.IsVirtual() && errors.Is(err, actor.ErrActorTerminated) {
			return s.attach(ref, max(m.inc, ref.Incarnation()), a)
		}
		return err
	}
	c.mu.Lock()
	switch c.state.Load() {
	case stStopped:
		c.mu.Unlock()
		return actor.ErrActorTerminated
	case stDetached, stPending, stGone:
		c.mu.Unlock()
		if !ref.IsVirtual() {
			return actor.ErrActorTerminated
		}
		return s.attach(ref, max(m.inc, ref.Incarnation()), a)
	}
	c.sys = append(c.sys, envelope{kind: kRestart, msg: m})
	c.pend.Add(1)
	c.mu.Unlock()
	s.wakeAttached(c)
	return nil
}

// Retire stops the actor of ref and releases its cell (see Stop). A cell
// with no actor is released at once: its waiting mail is answered
// (asks with ErrActorTerminated, tells from actors come back as
// Undelivered).
func (s *Scheduler) Retire(ref actor.Ref) error {
	return s.stopCell(ref, nil, nil)
}

// RetireThen is Retire that calls released once the cell is released:
// the actor's Stopping turn ran, the mail queued for it was answered and
// the identity left the scheduler's memory, so that mail sent afterwards
// gets a fresh cell and rings the Activator. Until then mail still lands
// in the retiring cell and is answered ErrActorTerminated. The
// supervisor reports a retirement done only after released, or the next
// activation could be refused by a cell that is about to stop.
//
// released runs once, on the worker that ran the stop (on the caller's
// goroutine when the cell had no actor, before RetireThen returns); it
// must not block. It is not called when RetireThen returns an error (no
// cell, or one already stopped: nothing is left to release). After
// Close the stop runs at once on a goroutine of its own, or RetireThen
// fails with ErrClosed while a turn of the actor is still running.
func (s *Scheduler) RetireThen(ref actor.Ref, released func()) error {
	return s.stopCell(ref, nil, released)
}

// stopReq is the payload of a kStop that reports its release.
type stopReq struct {
	err      error
	released func()
}

// isRetire reports whether e is a kStop that reports its release.
func isRetire(e *envelope) bool {
	_, ok := e.msg.(*stopReq)
	return e.kind == kStop && ok
}

// stopOf returns the error a kStop answers queued mail with (nil:
// ErrActorTerminated) and its release callback (nil: none).
func stopOf(e *envelope) (error, func()) {
	switch m := e.msg.(type) {
	case error:
		return m, nil
	case *stopReq:
		return m.err, m.released
	}
	return nil, nil
}

// Reject answers the mail waiting for ref with err, for an identity the
// supervisor will not activate (it is closing, or the state could not be
// loaded, or this node may not serve it now): asks fail with err, tells
// from actors come back to them as actor.Undelivered. Mail that waited
// for an activation never ran, so a Router that implements Resender is
// handed that mail first, as one batch in mailbox order (all but mail
// that arrived from another node), to send it again. A cell with no
// actor stays (or, when empty, leaves the scheduler's memory); the next
// mail rings the Activator again. A cell whose actor is still attached (a
// faulted value awaiting a remedy that will not come) is stopped, its
// queued mail answered with err.
func (s *Scheduler) Reject(ref actor.Ref, err error) error {
	if err == nil {
		err = actor.ErrActorTerminated
	}
	return s.stopCell(ref, err, nil)
}

// resendable builds the Outbound of e, a message for ref that waited for
// an activation Reject refused, for a Resender's batch: ok false for
// mail not offered (system mail, mail from another node, an ask whose
// turn started or that was answered). An ask is registered under the
// Outbound's AskID (forgetAsks undoes it if the batch is declined).
func (s *Scheduler) resendable(ref actor.Ref, e *envelope) (m Outbound, ok bool) {
	if e.kind != kUser || e.fromPeer() {
		return Outbound{}, false
	}
	p := e.ask
	if p != nil && (p.fn != nil || p.turn.Load() != askQueued || p.done.Load()) {
		return Outbound{}, false
	}
	m = Outbound{To: ref.Unpinned(), Msg: e.msg, Chain: e.chain.Refs()}
	switch {
	case e.from != nil:
		m.From = e.from.Ref()
	default:
		m.From = e.remoteSender() // a sender named by DeliverRouted
	}
	if tr := e.tellTrace(); tracingBuilt && tr != nil {
		m.Trace = tr.trace
	}
	if p != nil {
		if m.AskID = p.id.Load(); m.AskID == 0 {
			m.AskID = s.registerAsk(p)
		}
		m.Deadline = time.Unix(0, e.deadline)
		if tracingBuilt && p.trace != nil {
			m.Trace = p.trace.trace
		}
	}
	return m, true
}

// resendBatch hands the Resender, if the Router is one, the mail of c
// that Reject refused with err and that it may send again; it runs with
// c's lock held (see Resender), so that mail admitted afterwards cannot
// overtake the batch. It reports which of mail the Router took (nil:
// none).
func (s *Scheduler) resendBatch(c *Cell, mail []envelope, err error) (taken []bool) {
	rs, ok := s.route().(Resender)
	if !ok || len(mail) == 0 {
		return nil
	}
	var batch []Outbound
	var regs []uint64 // asks registered here for the batch
	taken = make([]bool, len(mail))
	for i := range mail {
		had := mail[i].ask != nil && mail[i].ask.id.Load() != 0
		m, ok := s.resendable(c.ref, &mail[i])
		if !ok {
			continue
		}
		if m.AskID != 0 && !had {
			regs = append(regs, m.AskID)
		}
		batch = append(batch, m)
		taken[i] = true
	}
	if len(batch) == 0 || !rs.ResendAll(batch, err) {
		for _, id := range regs {
			s.asks.Delete(id)
		}
		return nil
	}
	return taken
}

// stopCell is Retire (err nil) or Reject; released (Retire only) is
// called once the cell is released.
func (s *Scheduler) stopCell(ref actor.Ref, err error, released func()) error {
	c, cerr := s.cellOf(ref)
	if cerr != nil {
		return cerr
	}
	if released != nil && s.closing.Load() {
		return s.retireClosed(c, released)
	}
	removable := s.removable(c)
	c.mu.Lock()
	switch st := c.state.Load(); st {
	case stStopped, stGone:
		c.mu.Unlock()
		return actor.ErrActorTerminated
	case stDetached, stPending:
		mail := c.takeUserLocked()
		var taken []bool
		if err == nil {
			// Retire: the cell goes for good, its system lane too.
			c.stop()
			mail = append(mail, c.sys...)
			c.pend.Store(0)
			c.sys = nil
		} else {
			// Handed over before the cell takes mail again: mail sent
			// after the batch queues behind it.
			taken = s.resendBatch(c, mail, err)
			// Notices that waited for the refused activation are failed
			// back to their senders, which send them again when they
			// choose. Whatever else the system lane holds waits for the
			// next activation, which the next mail rings for: the cell
			// must not stay pending, with nobody activating it.
			mail = append(mail, c.takeNoticesLocked()...)
			switch {
			case len(c.sys) == 0 && removable:
				c.state.Store(stGone)
			default:
				c.state.Store(stDetached)
			}
		}
		gone := c.state.Load() == stGone || c.state.Load() == stStopped
		c.mu.Unlock()
		if gone {
			s.forget(c)
		}
		derr := err
		if derr == nil {
			derr = actor.ErrActorTerminated
		}
		// An activation refused because its state could not be committed
		// again answers its asks as a turn whose commit failed does (see
		// heldBatch.deliver): in the form an asker on another node gets.
		aerr := derr
		if s.vetErr != nil && c.ref.IsVirtual() && errors.Is(derr, actor.ErrNotCommitted) {
			aerr = s.vetErr(c.ref, derr)
		}
		for i := range mail {
			if i < len(taken) && taken[i] {
				continue
			}
			if mail[i].ask != nil {
				s.drop(&mail[i], aerr)
			} else {
				s.drop(&mail[i], derr)
			}
		}
		releaseAll(mail, released)
		return nil
	}
	if released != nil {
		c.sys = append(c.sys, envelope{kind: kStop, msg: &stopReq{err: err, released: released}})
	} else {
		c.sys = append(c.sys, envelope{kind: kStop, msg: err})
	}
	c.pend.Add(1)
	c.mu.Unlock()
	s.wakeAttached(c)
	if released != nil && s.closing.Load() {
		// Close raced the push: if no worker took it, Close's sweep or
		// the next line runs it.
		s.runStranded(c)
	}
	return nil
}

// retireClosed runs the retirement of c inline, the scheduler being
// closed (see passivateClosed).
func (s *Scheduler) retireClosed(c *Cell, released func()) error {
	for {
		st := c.state.Load()
		switch st {
		case stIdle, stReady:
			if !c.state.CompareAndSwap(st, stRunning) {
				continue
			}
			if st == stIdle {
				s.activeInc()
			}
			go s.runClosed(c, envelope{kind: kStop, msg: &stopReq{released: released}})
			return nil
		case stDetached, stPending:
			if !s.retireDetached(c, released, true) {
				continue
			}
			return nil
		case stRunning:
			return ErrClosed
		default:
			return actor.ErrActorTerminated
		}
	}
}

// retireDetached releases c, which has no actor, at once: its mail is
// answered ErrActorTerminated (system lane too) and the identity leaves
// the map; then released and the release callbacks of the retirements
// queued in c are called. Unless always, it does so only when a
// retirement is queued in c. It reports whether it released c.
func (s *Scheduler) retireDetached(c *Cell, released func(), always bool) bool {
	c.mu.Lock()
	st := c.state.Load()
	if (st != stDetached && st != stPending) ||
		(!always && !slices.ContainsFunc(c.sys, func(e envelope) bool { return isRetire(&e) })) {
		c.mu.Unlock()
		return false
	}
	c.stop()
	mail := append(c.takeUserLocked(), c.sys...)
	c.pend.Store(0)
	c.sys = nil
	c.mu.Unlock()
	s.forget(c)
	for i := range mail {
		s.drop(&mail[i], actor.ErrActorTerminated)
	}
	releaseAll(mail, released)
	return true
}

// releaseAll calls released (if not nil) and the release callbacks of
// the kStop envelopes among dropped, whose cell is released.
func releaseAll(dropped []envelope, released func()) {
	for i := range dropped {
		if dropped[i].kind == kStop {
			if _, r := stopOf(&dropped[i]); r != nil {
				r()
			}
		}
	}
	if released != nil {
		released()
	}
}

// Exec runs fn with the actor value of ref as a system turn of that actor
// (no other turn of it runs meanwhile). The actor value may be nil for an
// inactive cell; Exec then runs fn when the cell is next activated.
func (s *Scheduler) Exec(ref actor.Ref, fn func(a actor.Actor)) error {
	for {
		c, err := s.cellOf(ref)
		if err != nil {
			return err
		}
		if !c.pushSys(envelope{kind: kFunc, msg: fn}) {
			if c.gone() {
				s.forget(c)
				if ref.IsVirtual() {
					if _, err := s.local.Resolve(ref.Unpinned()); err != nil {
						return err
					}
				}
				continue
			}
			return actor.ErrActorTerminated
		}
		s.wake(c, nil)
		return nil
	}
}

// NotifyUndelivered posts n to the system lane of the local actor from
// (the sender of a tell that could not be delivered, for example refused
// by another node): it is never refused by a full mailbox and runs before
// the actor's queued user mail. It fails with ErrActorTerminated when
// from has no actor attached here (a notice for an actor at rest would
// only wake it to be dropped), and with ErrClosed after Close.
func (s *Scheduler) NotifyUndelivered(from actor.Ref, n actor.Undelivered) error {
	if s.closing.Load() {
		return ErrClosed
	}
	c, err := s.cellOf(from)
	if err != nil {
		return err
	}
	if !c.pinMatches(from.Incarnation()) {
		return actor.ErrActorTerminated
	}
	if !c.pushSysLive(envelope{kind: kUndelivered, msg: n}) {
		return actor.ErrActorTerminated
	}
	s.wake(c, nil)
	return nil
}

// stack returns the current goroutine's stack.
func stack() []byte { return debug.Stack() }
