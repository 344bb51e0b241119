package tempest

import (
	"context"
	"errors"
	"fmt"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/remind"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// localShard is the one shard of a standalone node's reminders.
const localShard = "local"

// Reminders is the node's durable reminder service. Actors use it in
// their turns (capture it in the kind's factory); operators list and
// cancel through it. See package reminders for the semantics.
type Reminders struct{ n *Node }

// Reminders returns the node's reminder service. It works once the node
// has started.
func (n *Node) Reminders() *Reminders { return &Reminders{n: n} }

func (r *Reminders) engine() (*reminders.Engine, error) {
	if r.n == nil {
		return nil, errNotMade // a Reminders is made by Node.Reminders
	}
	rn, err := r.n.running()
	if err != nil {
		return nil, err
	}
	return rn.rem, nil
}

// Register registers rem for the actor whose turn ctx is (replacing a
// reminder of the same name). It validates rem at once and returns its
// error (see reminders.Engine.PrepareRegister: ErrInvalid with the
// specific one, ErrNotOwner, ErrClosed), and otherwise returns without
// waiting for the store: the turn's reply and the mail it sent are held
// until the reminder's record is committed, and the turn's state for a
// kind persisted every turn, on the shard's replica set when the node
// replicates. If either is not committed they fail with
// actor.ErrNotCommitted naming the cause (the turn's askers get it as
// for a durable turn whose state was not committed: in a cluster, in the
// form it has once it crossed the wire), and the reminder does not fire (the
// name keeps what it held before the turn). The two are separate writes:
// when the reminder's record fails, the turn's state may be committed
// all the same, so the turn's outcome is unknown, as for any
// ErrNotCommitted, and a turn a caller may retry should be idempotent.
// The reminder fires once it is committed, never before. ErrNotHeld
// (checked first; the error wraps ariel.ErrNotHeld too): the kind was
// registered without KindOptions.Reminders (and is not persisted by its
// turns), so its turns cannot be held.
func (r *Reminders) Register(ctx actor.Context, rem reminders.Reminder) error {
	e, id, t, err := r.turn(ctx)
	if err == nil && t == nil {
		err = remind.CanStage(ctx, id)
	}
	if err != nil {
		return err
	}
	if rem.Payload != nil {
		// Ticked in the form its record decodes to after a restart, as
		// every message is delivered: a *T of a registered type as a T.
		if v, verr := r.n.wreg.Value(rem.Payload); verr == nil {
			rem.Payload = v
		}
	}
	var c reminders.Change
	err = r.owned(r.turnCtx(), ctx.Self(), e, func() (err error) {
		c, err = e.PrepareRegister(id, rem, t.Staged())
		return err
	})
	if err != nil {
		return err
	}
	return remind.Stage(ctx, e, id, t, c)
}

// ErrNotHeld: Reminders.Register or Unregister was called in a turn of a
// kind whose turns' outputs are not held (KindOptions.Reminders is not
// set and the kind is not persisted every turn or periodically). The
// errors they return wrap ariel.ErrNotHeld as well; this one names the
// option to set.
var ErrNotHeld = remind.ErrNotHeld

// turn returns the engine, the identity ctx's turn runs for and what of
// reminders the turn staged so far (nil: nothing).
func (r *Reminders) turn(ctx actor.Context) (*reminders.Engine, prospero.Identity, *remind.Turn, error) {
	e, err := r.engine()
	if err != nil {
		return nil, prospero.Identity{}, nil, err
	}
	if ctx == nil || !ctx.Self().IsVirtual() {
		return nil, prospero.Identity{}, nil, reminders.ErrNotInTurn
	}
	if r.n.kind(ctx.Self().Kind()) == nil {
		return nil, prospero.Identity{}, nil, fmt.Errorf("%w: %q", actor.ErrUnknownKind, ctx.Self().Kind())
	}
	return e, prospero.IdentityOf(ctx.Self()), remind.TurnOf(ctx), nil
}

// owned runs op and, when the engine does not hold the shard of ref
// although this node serves it (placement gave it the shard a moment ago
// and the reminder loop has not caught up), loads the shard, within ctx,
// and runs op again.
func (r *Reminders) owned(ctx context.Context, ref actor.Ref, e *reminders.Engine, op func() error) error {
	err := op()
	if !errors.Is(err, reminders.ErrNotOwner) || !ref.IsVirtual() {
		return err
	}
	epoch, ok := r.n.rt().ServedHere(ref)
	if !ok {
		return err
	}
	shard := r.n.reminderShard(prospero.IdentityOf(ref))
	rn := r.n.run.Load()
	if rn == nil || rn.hold == nil {
		return err // closing; or standalone, where the one shard is always held
	}
	if aerr := rn.hold.AcquireAt(ctx, shard, epoch); aerr != nil {
		return aerr
	}
	return op()
}

// turnCtx bounds what a call from a turn (which carries no context)
// does beyond op itself: the node's life, which ends when it closes.
func (r *Reminders) turnCtx() context.Context {
	return r.n.rt().Context() // Background on a standalone node, where owned loads nothing
}

// Unregister removes the reminder name of the actor whose turn ctx is.
// Like Register it validates at once (reminders.ErrNotFound, counting
// registrations of earlier turns not committed yet, ErrNotOwner,
// ErrClosed, ErrNotHeld) and does not wait for the store: from the end of
// the turn no tick of the reminder runs, also not one already queued or
// in flight, and the turn's outputs are held until the removal is
// committed. If it is not, they fail with actor.ErrNotCommitted, as a
// durable turn's outputs do, and the reminder stays.
func (r *Reminders) Unregister(ctx actor.Context, name string) error {
	e, id, t, err := r.turn(ctx)
	if err == nil && t == nil {
		err = remind.CanStage(ctx, id)
	}
	if err != nil {
		return err
	}
	var c reminders.Change
	err = r.owned(r.turnCtx(), ctx.Self(), e, func() (err error) {
		c, err = e.PrepareUnregister(id, name, t.Staged())
		return err
	})
	if err != nil {
		return err
	}
	return remind.Stage(ctx, e, id, t, c)
}

// List returns the reminders of the actor whose turn ctx is, as its
// turns made them: registrations not committed yet included
// (reminders.Info.Uncommitted).
func (r *Reminders) List(ctx actor.Context) ([]reminders.Info, error) {
	e, _, t, err := r.turn(ctx)
	if err != nil {
		return nil, err
	}
	var infos []reminders.Info
	err = r.owned(r.turnCtx(), ctx.Self(), e, func() (err error) {
		infos, err = e.List(ctx, t.Staged())
		return err
	})
	return infos, err
}

// ReminderList is the reminders of one identity as its owner holds them.
type ReminderList struct {
	Node      string           // the node that owns the identity and answered
	Reminders []reminders.Info // by name
}

// ListOf returns the reminders of ref, from any node of the cluster: a
// node that does not own ref asks the owner's supervisor over the
// federation protocol (docs/federation.md), and the answer and its
// errors are the same as on the owner. Errors: ErrInvalidKey,
// actor.ErrUnknownKind, reminders.ErrNotOwner (the owner has not loaded
// the shard's reminders yet, or is giving the shard up: retry),
// actor.ErrProcessUnavailable (the owner cannot be reached or cannot
// serve now), ErrNoQuorum, ErrClosed, ErrNotStarted, ctx's.
func (r *Reminders) ListOf(ctx context.Context, ref actor.Ref) (ReminderList, error) {
	e, err := r.checkRef(ctx, ref)
	if err != nil {
		return ReminderList{}, err
	}
	node, infos, err := r.n.rt().ListReminders(ctx, ref, func() ([]reminders.Info, error) { return r.listHere(ctx, e, ref) })
	if err != nil {
		return ReminderList{}, err
	}
	return ReminderList{Node: node, Reminders: infos}, nil
}

// Cancel removes the reminder name of ref, from any node of the cluster
// (as ListOf). After it returns nil no tick of it runs, also not one
// already on its way. Errors: those of ListOf, reminders.ErrBadName (a
// name no reminder can have), reminders.ErrNotFound,
// actor.ErrNotCommitted (the cancellation could not be made durable on
// the shard's replica set: the reminder stays), ctx's.
func (r *Reminders) Cancel(ctx context.Context, ref actor.Ref, name string) error {
	e, err := r.checkRef(ctx, ref)
	if err != nil {
		return err
	}
	if err := reminders.CheckName(name); err != nil {
		return err // here, as on the owner: no answer gives its identity back, or carries a name not UTF-8
	}
	return r.n.rt().CancelReminder(ctx, ref, name, func() error { return r.cancelHere(ctx, e, ref, name) })
}

// listHere is ListOf answered by this node's engine, for an identity
// this node owns (or any, standalone).
func (r *Reminders) listHere(ctx context.Context, e *reminders.Engine, ref actor.Ref) ([]reminders.Info, error) {
	var infos []reminders.Info
	err := r.owned(ctx, ref, e, func() (err error) {
		infos, err = e.ListOf(prospero.IdentityOf(ref))
		return err
	})
	return infos, closedErr(err)
}

// cancelHere is Cancel answered by this node's engine.
func (r *Reminders) cancelHere(ctx context.Context, e *reminders.Engine, ref actor.Ref, name string) error {
	return closedErr(r.owned(ctx, ref, e, func() error { return e.Cancel(ctx, prospero.IdentityOf(ref), name) }))
}

// closedErr gives an engine closed with its node the node's ErrClosed as
// well, the identity a peer's CLOSED answer has.
func closedErr(err error) error {
	if errors.Is(err, reminders.ErrClosed) && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

func (r *Reminders) checkRef(ctx context.Context, ref actor.Ref) (*reminders.Engine, error) {
	if err := ref.Check(); err != nil {
		return nil, err
	}
	if r.n == nil {
		return nil, errNotMade
	}
	if err := r.n.usable(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil { // as on every node, the owner's too
		return nil, err
	}
	if !ref.IsVirtual() {
		return nil, fmt.Errorf("%w: reminders belong to virtual actors, not %v", ErrInvalidKey, ref)
	}
	e, err := r.engine()
	if err != nil {
		return nil, err
	}
	if !r.n.hosted(ref.Kind()) {
		return nil, fmt.Errorf("%w: %q", actor.ErrUnknownKind, ref.Kind())
	}
	return e, nil
}

// Stats returns the reminder counters of this node (zero before Start).
func (r *Reminders) Stats() reminders.Stats {
	e, err := r.engine()
	if err != nil {
		return reminders.Stats{}
	}
	return e.Stats()
}

// startReminders builds the node's reminder engine over its state store
// and scheduler. A standalone node holds its one shard from the start; a
// cluster node holds the shards placement gives it (reminderLoop).
func (n *Node) startReminders(ctx context.Context) (*reminders.Engine, error) {
	cfg := n.cfg.Reminders
	cfg.Store = n.store
	if n.repl != nil {
		// Replicated with the shard's state (replView.Route), so that the
		// shard's next owner holds them after a crash of this node.
		cfg.Store = n.repl
	}
	if n.remStore != nil {
		cfg.Store = n.remStore(cfg.Store)
	}
	cfg.Codec = n.msgs
	cfg.Deliver = remind.Notifier{S: n.sched, Serves: n.rt().ServesReminder}
	cfg.ShardOf = n.reminderShard
	if n.repl != nil {
		// A replicated shard's records at rest here may hold writes that
		// never committed (docs/cluster.md, "Nothing is served from a
		// record that may not be committed"): they are written again
		// before its reminders fire, as an activation's record is before
		// its first turn. With one replica every record here committed.
		cfg.InDoubt = func(string) bool { return n.rt().RecordsInDoubt() }
	}
	if cfg.Logger == nil {
		cfg.Logger = n.log
	}
	if cfg.Clock == nil {
		cfg.Clock = n.cfg.Clock
	}
	e, err := reminders.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := e.Start(); err != nil {
		return nil, err
	}
	if n.eng == nil {
		if err := e.Acquire(ctx, localShard); err != nil {
			_ = e.Close(ctx)
			return nil, err
		}
	}
	return e, nil
}

func (n *Node) reminderShard(id prospero.Identity) string {
	if shard, ok := n.rt().ReminderShard(id); ok {
		return shard
	}
	return localShard
}

// noCodec and noDeliverer stand in for the node's own while a Config is
// validated.
type noCodec struct{}

func (noCodec) Encode(string, any) (string, []byte, error) {
	return "", nil, reminders.ErrUnknownPayload
}
func (noCodec) Decode(string, string, []byte) (any, error) { return nil, reminders.ErrUnknownPayload }

type noDeliverer struct{}

func (noDeliverer) Deliver(actor.Ref, reminders.Tick, func() bool, func(error)) error {
	return ErrNotStarted
}
