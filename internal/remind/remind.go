// Package remind joins a node's reminder engine (package reminders) to
// its scheduler (package ariel): the reminder changes an actor makes in a
// turn are staged with the turn and committed once it has ended, its
// outputs held until then instead of the worker; and ticks reach their
// actors through the scheduler's system lane.
//
// The model: Prepare* on the engine validates a change at once, against
// what the turn staged before it (TurnOf); Stage adds it to the turn's
// Turn, an ariel.Effect whose Settle commits every change of the turn
// in one write and releases the turn's reply and mail with the outcome
// (a *prospero.CommitError when it is not committed). The root package's
// Reminders is the public API over this.
package remind

import (
	"errors"
	"fmt"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// ErrNotHeld: reminders were changed in a turn of a kind whose turns'
// outputs are not held. The errors that say so wrap ariel.ErrNotHeld as
// well; this one names the option to set.
var ErrNotHeld = errors.New("tempest: the kind's turns cannot wait for reminder commits (set KindOptions.Reminders)")

// Turn is the reminder changes one turn made, staged with the turn (an
// ariel.Effect): when the turn has ended they are committed, and its
// outputs wait for that instead of the worker.
type Turn struct {
	e       *reminders.Engine
	id      prospero.Identity
	changes []reminders.Change
}

// TurnOf returns what the turn ctx is staged so far (nil: nothing).
func TurnOf(ctx actor.Context) *Turn {
	var t *Turn
	for _, eff := range ariel.Staged(ctx) {
		if rt, ok := eff.(*Turn); ok {
			t = rt
		}
	}
	return t
}

// Staged returns the turn's changes so far (none for a nil Turn).
func (t *Turn) Staged() []reminders.Change {
	if t == nil {
		return nil
	}
	return t.changes
}

// Stage adds c, a change of id's reminders on e, to the turn ctx is; t is
// what TurnOf returned.
func Stage(ctx actor.Context, e *reminders.Engine, id prospero.Identity, t *Turn, c reminders.Change) error {
	if t == nil {
		t = &Turn{e: e, id: id}
		if err := ariel.Stage(ctx, t); err != nil {
			return notHeld(err, id)
		}
	}
	t.changes = append(t.changes, c)
	return nil
}

// CanStage returns ErrNotHeld when the turn ctx is cannot stage its
// reminder changes: checked before they are validated (and their shard
// loaded), for nothing could come of them.
func CanStage(ctx actor.Context, id prospero.Identity) error {
	return notHeld(ariel.CanStage(ctx), id)
}

// notHeld returns err, wrapped with ErrNotHeld and the kind when it is
// ariel.ErrNotHeld.
func notHeld(err error, id prospero.Identity) error {
	if errors.Is(err, ariel.ErrNotHeld) {
		return fmt.Errorf("%w: kind %q (%w)", ErrNotHeld, id.Kind, err)
	}
	return err
}

// Settle implements ariel.Effect.
func (t *Turn) Settle(h ariel.Hold) {
	release := h.Wait()
	c := t.e.Commit(t.changes, func(err error) {
		if err != nil {
			err = &prospero.CommitError{ID: t.id, Err: err}
		}
		release(err)
	})
	// The turn's outcome, not the reminders' records alone, decides
	// whether they stand: its state write may fail where they did not.
	h.Released(func(err error) { c.Finish(err == nil) })
}

// Notifier delivers ticks through the scheduler's system lane: a dormant
// identity is hydrated to receive one. Serves, when set, says why this
// node may not run a tick of ref now (nil: it may); it is asked at the
// tick's turn, before the engine's own acceptance, so that a tick queued
// on a node that has since lost the shard (its lease lapsed, the shard
// moved or began to move, the node was marked down) does not run there
// before the reminder loop has paused or released the shard: it fails
// back to the engine, which fires it again after its RetryAfter.
type Notifier struct {
	S      *ariel.Scheduler
	Serves func(ref actor.Ref) error
}

// Deliver implements reminders.Deliverer.
func (d Notifier) Deliver(ref actor.Ref, t reminders.Tick, accept func() bool, failed func(error)) error {
	return d.DeliverDone(ref, t, accept, nil, failed)
}

// DeliverDone implements reminders.DoneDeliverer: the tick counts as
// delivered once its turn's outputs are released (for a kind persisted
// every turn, once its state committed).
func (d Notifier) DeliverDone(ref actor.Ref, t reminders.Tick, accept func() bool, done, failed func(error)) error {
	if d.Serves != nil {
		engine := accept
		accept = func() bool {
			if err := d.Serves(ref); err != nil {
				failed(err)
				return false
			}
			return engine()
		}
	}
	return d.S.NotifyDone(ref, t, accept, done, failed)
}
