package prospero

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/tempest-actors/tempest/actor"
)

// Holder is the scheduler's handle on the turn an after-turn call is made
// for (ariel.Hold implements it). Wait keeps the turn's outputs — its
// reply, the mail it sent — back until release is called; release(nil)
// lets them go, release(err) fails them with err.
type Holder interface {
	Wait() (release func(err error))
}

// Abandoner is implemented by a Holder whose turn the host may abandon
// past its budget (ariel.Hold): Abandoned reports whether it was, so that
// a state marshalled by that turn is not written.
type Abandoner interface {
	Abandoned() bool
}

// chain orders the writes of one activation's state at rest. At most one
// write of an identity is in flight: each is conditional on the version
// the previous one produced. Turn writes that queue behind the one in
// flight are coalesced (only the newest state is written; every turn
// that waits for it is released by it), so an actor busier than its
// store writes less often, never falls behind by more than one write,
// and still releases every turn in order. Writes of many identities are
// in flight at once and share the store's group commits.
//
// Guarded by the supervisor's mutex.
type chain struct {
	inc     uint64
	actor   actor.Actor // the value attached: a turn of another one ran on a value a remedy replaced
	durable bool        // PersistEveryTurn: turns wait for their write (reply after commit)
	version uint64      // version of the newest committed write: the next one expects it
	last    []byte      // newest state submitted or loaded; a turn leaving it unchanged writes nothing
	// inflight is the write the store has; queue waits for it.
	inflight *write
	queue    []*write
	// failed: a write failed (or the actor faulted). Until the identity
	// is reloaded, its turns write nothing and fail their outputs with it.
	failed error
}

// write is one conditional write of a chain.
type write struct {
	rec      Record
	expected uint64
	// state: the write carries the activation's state (a turn's or the
	// final one of a passivation), so it is not made after a failed one.
	state bool
	// unchanged: the write's state is the newest one submitted before it
	// (the final write of a passivation whose last turns were still being
	// written). Once those writes committed there is nothing left to
	// write: it finishes with the chain's version instead of writing
	// the same state again.
	unchanged bool
	releases  []func(error)
	// done, if set, runs under the supervisor's lock when the write
	// finished (passivation, retirement). After a failure of the chain a
	// turn-state write is not made: done gets the chain's version and
	// errSkipped.
	done func(version uint64, err error)
}

// errReplaced fails the outputs of a turn that ran on a replaced value.
var errReplaced = errors.New("the turn ran on an actor value that a remedy replaced")

// sameActor reports whether a and b are the same actor value. Values of a
// type that cannot be compared (a func, a struct holding a slice) are
// taken as the same: persistent actors are pointers in practice, since
// UnmarshalState must change them.
func sameActor(a, b actor.Actor) bool {
	if a == nil || b == nil {
		return a == b
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta != tb {
		return false
	}
	if !ta.Comparable() {
		return true
	}
	return a == b
}

// errSkipped tells a state write's done that the write was not made
// because the chain failed: the state at rest stays at the version given.
var errSkipped = errors.New("prospero: write skipped after a failed commit")

// toRelease is work a chain leaves for after the supervisor's lock: a
// write to hand to the store, and outputs to release.
type toRelease struct {
	issue    *write
	ch       *chain
	id       Identity
	releases []func(error)
	err      error
}

// after carries out what a chain operation left, outside the lock.
func (s *Supervisor) after(t toRelease) {
	for _, r := range t.releases {
		r(t.err)
	}
	if w := t.issue; w != nil {
		ch, id := t.ch, t.id
		s.put(id, w.expected, w.rec, func(v uint64, err error) { s.committed(id, ch, w, v, err) })
	}
}

// newChainLocked starts the write chain of an activation that was just
// attached from rec (the zero Record: none).
func (s *Supervisor) newChainLocked(id Identity, k *Kind, a actor.Actor, inc, version uint64, state []byte) {
	if !k.Options.Persistence.Persistent() {
		return
	}
	s.chains[id] = &chain{inc: inc, actor: a, version: version, last: state,
		durable: k.Options.Persistence.Mode == PersistEveryTurn}
}

// submitLocked queues w on ch. A turn write while the chain failed is
// not made: its outputs fail, its done (if any) is told errSkipped. An
// unchanged write whose turn comes is not made either: the writes before
// it committed its state, so it is done with their version.
func (s *Supervisor) submitLocked(id Identity, ch *chain, w *write) toRelease {
	if ch.failed != nil && w.state {
		if w.done != nil {
			w.done(ch.version, errSkipped)
		}
		return toRelease{releases: w.releases, err: ch.failed}
	}
	if ch.inflight == nil {
		w.expected = ch.version
		if w.unchanged {
			if w.done != nil {
				w.done(ch.version, nil)
			}
			return toRelease{releases: w.releases}
		}
		ch.inflight = w
		return toRelease{issue: w, ch: ch, id: id}
	}
	if n := len(ch.queue); n > 0 && w.state && w.done == nil && ch.queue[n-1].state && ch.queue[n-1].done == nil {
		last := ch.queue[n-1]
		last.rec = w.rec
		last.releases = append(last.releases, w.releases...)
		return toRelease{}
	}
	ch.queue = append(ch.queue, w)
	return toRelease{}
}

// committed finishes a write: records the new version, releases (or
// fails) the turns that waited for it, and hands the next write to the
// store. A failed write fails every turn write queued behind it too
// (their state contains the lost one) and reloads the activation from
// its state at rest, which load commits again before serving it (the
// failed write may have landed: see doubtful).
func (s *Supervisor) committed(id Identity, ch *chain, w *write, v uint64, err error) {
	s.mu.Lock()
	now := s.clock.Now()
	var out []toRelease
	var rerr error
	if err != nil {
		s.commitFailures++
		s.doubtful[id] = struct{}{}
		delete(s.trusted, id)
		rerr = commitError(id, err)
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "state not committed",
			slog.String("actor", id.String()), slog.Any("error", err))
		s.core.PersistFailed(id, ch.inc, err, now)
		if ch.failed == nil {
			ch.failed = rerr
			s.core.CommitFailed(id, ch.inc, err, now)
		}
	} else {
		s.commits++
		ch.version = v
		if w.state && w.done == nil {
			s.core.Persisted(id, ch.inc, v, now)
		}
	}
	out = append(out, toRelease{releases: w.releases, err: rerr})
	if w.done != nil {
		w.done(v, err)
	}
	ch.inflight = nil
	for len(ch.queue) > 0 && ch.inflight == nil {
		next := ch.queue[0]
		ch.queue[0] = nil
		ch.queue = ch.queue[1:]
		out = append(out, s.submitLocked(id, ch, next))
	}
	if ch.inflight == nil {
		s.idle.Broadcast()
	}
	s.dispatchLocked()
	s.mu.Unlock()
	for _, t := range out {
		s.after(t)
	}
}

// turnWrite applies a turn-driven persistence policy after a turn of
// id's incarnation inc that ended normally (see AfterTurn).
func (s *Supervisor) turnWrite(id Identity, inc uint64, a actor.Actor, activity bool, h Holder) {
	s.mu.Lock()
	now := s.clock.Now()
	var persist bool
	if activity {
		persist, _ = s.core.TurnDone(id, inc, now)
	} else {
		persist, _ = s.core.TickDone(id, inc, now)
	}
	ch := s.chains[id]
	if ch == nil || ch.inc != inc || !sameActor(ch.actor, a) {
		// A turn of a value that is not the activation's any more: a
		// Restart or Hydrate remedy attached another one, and the
		// scheduler runs the old one's last turns before the swap. What
		// it changed is not written, so what it answered must not leave.
		durable := false
		if k, err := s.reg.Lookup(id.Kind); err == nil {
			durable = k.Options.Persistence.Mode == PersistEveryTurn
		}
		s.mu.Unlock()
		if durable && h != nil {
			h.Wait()(&CommitError{ID: id, Err: errReplaced})
		}
		return
	}
	durable, failed := ch.durable && h != nil, ch.failed
	s.mu.Unlock()
	if failed != nil {
		if durable {
			h.Wait()(failed)
		}
		return
	}
	p, ok := a.(Persistent)
	if !persist || !ok {
		return
	}
	state, err := marshalState(p)
	s.mu.Lock()
	if ab, ok := h.(Abandoner); ok && ab.Abandoned() {
		// The turn was abandoned while it marshalled (its outputs are
		// dropped with it): its state is stale and must not be written.
		s.stale++
		s.mu.Unlock()
		return
	}
	if err != nil {
		err = fmt.Errorf("marshal state: %w", err)
		rerr := &CommitError{ID: id, Err: err}
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "state not committed",
			slog.String("actor", id.String()), slog.Any("error", err))
		s.core.PersistFailed(id, inc, err, now)
		if ch.failed == nil {
			ch.failed = rerr
			s.core.CommitFailed(id, inc, err, now)
			s.dispatchLocked()
		}
		s.mu.Unlock()
		if durable {
			h.Wait()(rerr)
		}
		return
	}
	if bytes.Equal(state, ch.last) {
		// Nothing changed: nothing to write. The scheduler still keeps
		// the turn's outputs behind those of earlier turns held.
		s.mu.Unlock()
		return
	}
	ch.last = state
	w := &write{rec: Record{Incarnation: inc, State: state}, state: true}
	if durable {
		w.releases = []func(error){h.Wait()}
	}
	t := s.submitLocked(id, ch, w)
	s.mu.Unlock()
	s.after(t)
}

// markFailedLocked fails the rest of the activation's turns after a fault
// of incarnation inc: the remedy reloads or re-mints from the state at
// rest, so what those turns change is lost and must not be acknowledged.
func (s *Supervisor) markFailedLocked(id Identity, inc uint64, err error) {
	if ch := s.chains[id]; ch != nil && ch.durable && ch.inc == inc && ch.failed == nil {
		ch.failed = &CommitError{ID: id, Err: fmt.Errorf("the activation faulted and is being restored from its state at rest: %w", err)}
	}
}

// waitIdleLocked waits until no write of id is in flight (before its state
// at rest is read again).
func (s *Supervisor) waitIdleLocked(id Identity) {
	for {
		ch := s.chains[id]
		if ch == nil || ch.inflight == nil {
			return
		}
		s.idle.Wait()
	}
}
