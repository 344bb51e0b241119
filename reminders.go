package tempest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
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
// replicates. If either is not committed they fail with a
// *prospero.CommitError (actor.ErrNotCommitted), as for a durable turn
// whose state was not committed, and the reminder does not fire (the
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
		err = canStage(ctx, id)
	}
	if err != nil {
		return err
	}
	var c reminders.Change
	err = r.owned(r.turnCtx(), ctx.Self(), e, func() (err error) {
		c, err = e.PrepareRegister(id, rem, t.staged())
		return err
	})
	if err != nil {
		return err
	}
	return r.stage(ctx, e, id, t, c)
}

// ErrNotHeld: Reminders.Register or Unregister was called in a turn of a
// kind whose turns' outputs are not held (KindOptions.Reminders is not
// set and the kind is not persisted every turn or periodically). The
// errors they return wrap ariel.ErrNotHeld as well; this one names the
// option to set.
var ErrNotHeld = errors.New("tempest: the kind's turns cannot wait for reminder commits (set KindOptions.Reminders)")

// turn returns the engine, the identity ctx's turn runs for and what of
// reminders the turn staged so far (nil: nothing).
func (r *Reminders) turn(ctx actor.Context) (*reminders.Engine, prospero.Identity, *reminderTurn, error) {
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
	var t *reminderTurn
	for _, eff := range ariel.Staged(ctx) {
		if rt, ok := eff.(*reminderTurn); ok {
			t = rt
		}
	}
	return e, prospero.IdentityOf(ctx.Self()), t, nil
}

// stage adds c to what the turn ctx is commits once it has ended.
func (r *Reminders) stage(ctx actor.Context, e *reminders.Engine, id prospero.Identity, t *reminderTurn, c reminders.Change) error {
	if t == nil {
		t = &reminderTurn{e: e, id: id}
		if err := ariel.Stage(ctx, t); err != nil {
			return notHeld(err, id)
		}
	}
	t.changes = append(t.changes, c)
	return nil
}

// canStage returns ErrNotHeld when the turn ctx is cannot stage its
// reminder changes: checked before they are validated (and their shard
// loaded), for nothing could come of them.
func canStage(ctx actor.Context, id prospero.Identity) error {
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

// reminderTurn is the reminder changes one turn made, staged with the
// turn (an ariel.Effect): when the turn has ended they are committed,
// and its outputs wait for that instead of the worker.
type reminderTurn struct {
	e       *reminders.Engine
	id      prospero.Identity
	changes []reminders.Change
}

func (t *reminderTurn) staged() []reminders.Change {
	if t == nil {
		return nil
	}
	return t.changes
}

// Settle implements ariel.Effect.
func (t *reminderTurn) Settle(h ariel.Hold) {
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

// owned runs op and, when the engine does not hold the shard of ref
// although this node serves it (placement gave it the shard a moment ago
// and the reminder loop has not caught up), loads the shard, within ctx,
// and runs op again.
func (r *Reminders) owned(ctx context.Context, ref actor.Ref, e *reminders.Engine, op func() error) error {
	err := op()
	if !errors.Is(err, reminders.ErrNotOwner) || !ref.IsVirtual() || r.n.cl == nil || r.n.cl.pl == nil {
		return err
	}
	_, epoch, local, lerr := r.n.cl.locateAt(ref)
	if lerr != nil || !local {
		return err
	}
	shard := r.n.reminderShard(prospero.IdentityOf(ref))
	if aerr := e.Acquire(ctx, shard); aerr != nil {
		return aerr
	}
	if rn := r.n.run.Load(); rn != nil {
		rn.hold.Acquired(shard, epoch)
	}
	return op()
}

// turnCtx bounds what a call from a turn (which carries no context)
// does beyond op itself: the node's life, which ends when it closes.
func (r *Reminders) turnCtx() context.Context {
	if r.n.cl != nil {
		return r.n.cl.ctx
	}
	return context.Background() // owned loads nothing on a standalone node
}

// Unregister removes the reminder name of the actor whose turn ctx is.
// Like Register it validates at once (reminders.ErrNotFound, counting
// registrations of earlier turns not committed yet, ErrNotOwner,
// ErrClosed, ErrNotHeld) and does not wait for the store: from the end of
// the turn no tick of the reminder runs, also not one already queued or
// in flight, and the turn's outputs are held until the removal is
// committed. If it is not, they fail with a *prospero.CommitError and the
// reminder stays.
func (r *Reminders) Unregister(ctx actor.Context, name string) error {
	e, id, t, err := r.turn(ctx)
	if err == nil && t == nil {
		err = canStage(ctx, id)
	}
	if err != nil {
		return err
	}
	var c reminders.Change
	err = r.owned(r.turnCtx(), ctx.Self(), e, func() (err error) {
		c, err = e.PrepareUnregister(id, name, t.staged())
		return err
	})
	if err != nil {
		return err
	}
	return r.stage(ctx, e, id, t, c)
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
		infos, err = e.List(ctx, t.staged())
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
	e, err := r.checkRef(ref)
	if err != nil {
		return ReminderList{}, err
	}
	if r.n.cl == nil {
		infos, err := r.listHere(ctx, e, ref)
		return ReminderList{Node: r.n.cfg.Name, Reminders: infos}, err
	}
	c := r.n.cl
	var out ReminderList
	_, err = c.onOwner(ctx, ref, func() error {
		infos, err := r.listHere(ctx, e, ref)
		out = ReminderList{Node: c.name, Reminders: infos}
		return err
	}, func(owner string, epoch uint64) error {
		ctx, cancel := bounded(ctx, federation.DefaultBudget)
		defer cancel()
		rep, err := c.fed.ReminderList(ctx, owner, &federation.ReminderListRequest{Epoch: epoch, Actor: fedActor(ref)})
		if err != nil {
			return err
		}
		out = ReminderList{Node: owner, Reminders: make([]reminders.Info, 0, len(rep.Reminders))}
		for _, in := range rep.Reminders {
			out.Reminders = append(out.Reminders, infoFromFed(ref, in))
		}
		return nil
	})
	if err != nil {
		return ReminderList{}, c.whyUnanswered(err)
	}
	return out, nil
}

// Cancel removes the reminder name of ref, from any node of the cluster
// (as ListOf). After it returns nil no tick of it runs, also not one
// already on its way. Errors: those of ListOf, reminders.ErrNotFound,
// actor.ErrNotCommitted (the cancellation could not be made durable on
// the shard's replica set: the reminder stays), ctx's.
func (r *Reminders) Cancel(ctx context.Context, ref actor.Ref, name string) error {
	e, err := r.checkRef(ref)
	if err != nil {
		return err
	}
	if r.n.cl == nil {
		return r.cancelHere(ctx, e, ref, name)
	}
	c := r.n.cl
	_, err = c.onOwner(ctx, ref, func() error { return r.cancelHere(ctx, e, ref, name) },
		func(owner string, epoch uint64) error {
			ctx, cancel := bounded(ctx, 30*time.Second)
			defer cancel()
			return c.fed.Call(ctx, owner, &federation.ReminderCancelRequest{Epoch: epoch, Actor: fedActor(ref),
				Name: name, BudgetNs: budgetOf(ctx, 0)})
		})
	return c.whyUnanswered(err)
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

func (r *Reminders) checkRef(ref actor.Ref) (*reminders.Engine, error) {
	if err := ref.Check(); err != nil {
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

func fedActor(ref actor.Ref) federation.Actor {
	return federation.Actor{Kind: ref.Kind(), Key: ref.Key(), Incarnation: ref.Incarnation()}
}

var toFedCatchup = map[reminders.Catchup]federation.Catchup{
	reminders.FireOnce: federation.CatchupFireOnce,
	reminders.Skip:     federation.CatchupSkip,
	reminders.FireUpTo: federation.CatchupFireUpTo,
}

func infoToFed(in reminders.Info) federation.ReminderInfo {
	return federation.ReminderInfo{Name: in.Name, DueUnixNs: in.Due.UnixNano(), PeriodNs: int64(in.Period),
		Catchup: toFedCatchup[in.Catchup], MaxCatchup: uint64(in.MaxCatchup), NextUnixNs: in.Next.UnixNano(),
		LastSeq: in.LastSeq, Outstanding: in.Outstanding, PayloadType: in.PayloadType}
}

func infoFromFed(ref actor.Ref, in federation.ReminderInfo) reminders.Info {
	var pol reminders.Catchup
	for c, f := range toFedCatchup {
		if f == in.Catchup {
			pol = c
		}
	}
	return reminders.Info{ID: prospero.IdentityOf(ref), Name: in.Name, Due: time.Unix(0, in.DueUnixNs),
		Period: time.Duration(in.PeriodNs), Catchup: pol, MaxCatchup: int(min(in.MaxCatchup, math.MaxInt32)),
		Next: time.Unix(0, in.NextUnixNs), LastSeq: in.LastSeq, Outstanding: in.Outstanding, PayloadType: in.PayloadType}
}

// ReminderList answers a peer's ReminderListRequest for an actor this
// node owns.
func (h fedHandler) ReminderList(ctx context.Context, _ string, m *federation.ReminderListRequest) (federation.ReminderListReply, error) {
	if err := h.c.starting(); err != nil {
		return federation.ReminderListReply{}, err
	}
	ref, err := h.c.ownedRef(m.Actor, m.Epoch)
	if err != nil {
		return federation.ReminderListReply{}, err
	}
	rem := h.c.n.Reminders()
	e, err := rem.engine()
	if err != nil {
		return federation.ReminderListReply{}, err
	}
	infos, err := rem.listHere(ctx, e, ref)
	if err != nil {
		return federation.ReminderListReply{}, err
	}
	out := federation.ReminderListReply{Reminders: make([]federation.ReminderInfo, 0, len(infos))}
	for _, in := range infos {
		out.Reminders = append(out.Reminders, infoToFed(in))
	}
	return out, nil
}

// ReminderCancel cancels a reminder of an actor this node owns for a
// peer, answering once the cancellation is at rest.
func (h fedHandler) ReminderCancel(ctx context.Context, _ string, m *federation.ReminderCancelRequest) error {
	if err := h.c.starting(); err != nil {
		return err
	}
	ref, err := h.c.ownedRef(m.Actor, m.Epoch)
	if err != nil {
		return err
	}
	rem := h.c.n.Reminders()
	e, err := rem.engine()
	if err != nil {
		return err
	}
	return rem.cancelHere(ctx, e, ref, m.Name)
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
	cfg.Codec = messageCodec{n.msgs}
	cfg.Deliver = notifier{s: n.sched, serves: n.reminderServes}
	cfg.ShardOf = n.reminderShard
	if n.cl != nil && n.repl != nil {
		// A replicated shard's records at rest here may hold writes that
		// never committed (docs/cluster.md, "Nothing is served from a
		// record that may not be committed"): they are written again
		// before its reminders fire, as an activation's record is before
		// its first turn. With one replica every record here committed.
		cfg.InDoubt = func(string) bool {
			if n.cl.pl == nil {
				return true
			}
			replicas := 0
			n.cl.pl.FSM().Read(func(t *placement.Table) { replicas = t.Replication() })
			return replicas != 1
		}
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
	if n.cl == nil {
		if err := e.Acquire(ctx, localShard); err != nil {
			_ = e.Close(ctx)
			return nil, err
		}
	}
	return e, nil
}

func (n *Node) reminderShard(id prospero.Identity) string {
	if n.cl == nil || n.cl.pl == nil {
		return localShard
	}
	loc, err := n.cl.pl.Locate(id.Kind, id.Key)
	if err != nil && loc.Shard == (placement.ShardRef{}) {
		return "" // no shard: held by nobody, so refused as not owned
	}
	return shardKey(loc.Shard)
}

func shardKey(s placement.ShardRef) string { return s.Group + "#" + strconv.Itoa(s.Index) }

// notifier delivers ticks through the scheduler's system lane: a dormant
// identity is hydrated to receive one. serves, when set, says why this
// node may not run a tick of ref now (nil: it may); it is asked at the
// tick's turn, before the engine's own acceptance, so that a tick queued
// on a node that has since lost the shard (its lease lapsed, the shard
// moved or began to move, the node was marked down) does not run there
// before the reminder loop has paused or released the shard: it fails
// back to the engine, which fires it again after its RetryAfter.
type notifier struct {
	s      *ariel.Scheduler
	serves func(ref actor.Ref) error
}

func (d notifier) Deliver(ref actor.Ref, t reminders.Tick, accept func() bool, failed func(error)) error {
	if d.serves != nil {
		engine := accept
		accept = func() bool {
			if err := d.serves(ref); err != nil {
				failed(err)
				return false
			}
			return engine()
		}
	}
	return d.s.Notify(ref, t, accept, failed)
}

// reminderServes is the cluster's notifier.serves: the shard of ref must
// still be this node's at the epoch its reminders were acquired in, and
// servable now (lease fresh, not moving, not marked down).
func (n *Node) reminderServes(ref actor.Ref) error {
	c := n.cl
	if c == nil || c.pl == nil {
		return nil
	}
	loc, err := c.pl.Locate(ref.Kind(), ref.Key())
	if err != nil && loc.Shard == (placement.ShardRef{}) {
		return err
	}
	r := n.run.Load()
	if r == nil {
		return closedError{} // closing: nothing the holder noted can vouch for the tick
	}
	return c.pl.Check(loc.Shard, r.hold.EpochOf(shardKey(loc.Shard)), n.cfg.Clock.Now())
}

// messageCodec stores a payload as one of its kind's declared messages.
type messageCodec struct{ t *messageTable }

func (c messageCodec) Encode(kind string, p any) (string, []byte, error) {
	m := c.t.byType[reflect.TypeOf(p)]
	if m == nil || m.kind != kind {
		return "", nil, fmt.Errorf("%w: %T is not a message of kind %q (declare it in KindOptions.Messages)",
			reminders.ErrUnknownPayload, p, kind)
	}
	b, err := m.marshal(p)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", reminders.ErrUnknownPayload, err)
	}
	return strconv.FormatUint(uint64(m.Tag), 10), b, nil
}

func (c messageCodec) Decode(kind, name string, b []byte) (any, error) {
	tag, err := strconv.ParseUint(name, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("%w: stored as %q", reminders.ErrUnknownPayload, name)
	}
	m := c.t.byTag[uint32(tag)]
	if m == nil || m.kind != kind {
		return nil, fmt.Errorf("%w: tag %d is not a message of kind %q", reminders.ErrUnknownPayload, tag, kind)
	}
	return m.unmarshal(b)
}

// reminderLoop keeps the engine's shards equal to the shards this node
// owns and that are not moving away, firing those it may serve now
// (lease fresh, not marked down) and pausing the others. A shard moving
// away is released by the handoff itself (shipShard), before its record
// ships.
func (c *cluster) reminderLoop() {
	defer c.wg.Done()
	for {
		c.syncReminders()
		if err := c.awaitChange(c.ctx, 250*time.Millisecond); err != nil {
			return
		}
	}
}

// syncReminders makes one pass of the reminder loop: it reads which
// shards this node keeps (owned, not moving away) and may serve now, and
// has the reminder holder make the engine's shards match
// (reminders.Holder.Sync).
func (c *cluster) syncReminders() {
	r := c.n.run.Load()
	if r == nil || c.pl == nil {
		return
	}
	// One read of the table, as placement.Node.Check makes for each
	// shard: checked at the epoch read, so a table applied since that
	// moved the shard away and back cannot vouch for this one.
	fresh := c.pl.LeaseFresh(c.n.cfg.Clock.Now())
	keep, owned := map[string]reminders.Kept{}, map[string]uint64{}
	c.pl.FSM().Read(func(tb *placement.Table) {
		for _, ref := range tb.Owned(c.name) {
			sh := shardKey(ref)
			s, _ := tb.Shard(ref)
			owned[sh] = s.Epoch
			if s.MovingTo == "" {
				keep[sh] = reminders.Kept{Epoch: s.Epoch, Serve: placement.CheckOwnership(tb, c.name, ref, s.Epoch, fresh) == nil}
			}
		}
	})
	r.hold.Sync(c.ctx, keep, owned, c.n.store.Damaged() == nil)
}

// isReserved reports whether id is one of the node's own records (shard
// index, reminders), not an actor.
func isReserved(id prospero.Identity) bool { return strings.HasPrefix(id.Kind, reservedKindPrefix) }

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

// releaseReminders stops the reminders of shard on this node ahead of a
// handoff and returns their records to ship: the progress record and one
// per reminder, each with its version in this node's store (the new owner
// stores them at this node's epoch and that version, as it stores the
// shard's actor records). The new owner deletes the copies it holds of
// records not shipped (dropStaleReminders). A release that cannot write what the
// shard has not at rest fails the handoff and leaves the reminders held
// here for the next attempt (the reminder loop, which also releases a
// shard moving away, pauses one whose release failed): what the store
// holds then may lack a change a caller was told of
// (reminders.Engine.Release).
func (c *cluster) releaseReminders(ctx context.Context, shard placement.ShardRef) ([]shipped, error) {
	if r := c.n.run.Load(); r != nil {
		if err := r.hold.Release(ctx, shardKey(shard)); err != nil {
			return nil, err
		}
	}
	recs, err := reminders.Records(ctx, c.n.store, shardKey(shard))
	if err != nil {
		return nil, err
	}
	out := make([]shipped, 0, len(recs))
	for _, r := range recs {
		out = append(out, shipped{id: prospero.Identity{Kind: reminders.RecordKind, Key: r.Key}, inc: r.Incarnation, state: r.State,
			version: r.Version})
	}
	return out, nil
}

// reminderRecordShard returns the shard whose reminder record id is.
func reminderRecordShard(id prospero.Identity) (placement.ShardRef, bool) {
	if id.Kind != reminders.RecordKind {
		return placement.ShardRef{}, false
	}
	shard := reminders.ShardOfRecord(id.Key)
	i := strings.LastIndexByte(shard, '#')
	if i < 0 {
		return placement.ShardRef{}, false
	}
	n, err := strconv.Atoi(shard[i+1:])
	if err != nil || n < 0 {
		return placement.ShardRef{}, false
	}
	return placement.ShardRef{Group: shard[:i], Index: n}, true
}
