package tempest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/placement"
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
	rn, err := r.n.running()
	if err != nil {
		return nil, err
	}
	return rn.rem, nil
}

// Register stores rem for the actor whose turn ctx is (replacing a
// reminder of the same name) and returns once it is at rest. See
// reminders.Engine.Register for the errors.
func (r *Reminders) Register(ctx actor.Context, rem reminders.Reminder) error {
	e, err := r.engine()
	if err != nil {
		return err
	}
	if ctx != nil && r.n.kind(ctx.Self().Kind()) == nil {
		return fmt.Errorf("%w: %q", actor.ErrUnknownKind, ctx.Self().Kind())
	}
	return r.owned(ctx, e, func() error { return e.Register(ctx, rem) })
}

// owned runs op and, when the engine does not hold the shard of the
// actor whose turn ctx is although this node serves it (placement gave
// it the shard a moment ago and the reminder loop has not caught up),
// loads the shard and runs op again.
func (r *Reminders) owned(ctx actor.Context, e *reminders.Engine, op func() error) error {
	err := op()
	if !errors.Is(err, reminders.ErrNotOwner) || ctx == nil || r.n.cl == nil || r.n.cl.pl == nil {
		return err
	}
	ref := ctx.Self()
	if _, local, lerr := r.n.cl.locate(ref); lerr != nil || !local {
		return err
	}
	if aerr := e.Acquire(context.Background(), r.n.reminderShard(prospero.IdentityOf(ref))); aerr != nil {
		return aerr
	}
	return op()
}

// Unregister removes the reminder name of the actor whose turn ctx is;
// after it returns nil no tick of it runs, also not one in flight.
func (r *Reminders) Unregister(ctx actor.Context, name string) error {
	e, err := r.engine()
	if err != nil {
		return err
	}
	return r.owned(ctx, e, func() error { return e.Unregister(ctx, name) })
}

// List returns the reminders of the actor whose turn ctx is.
func (r *Reminders) List(ctx actor.Context) ([]reminders.Info, error) {
	e, err := r.engine()
	if err != nil {
		return nil, err
	}
	var infos []reminders.Info
	err = r.owned(ctx, e, func() (err error) {
		infos, err = e.List(ctx)
		return err
	})
	return infos, err
}

// ListOf returns the reminders of ref, which this node must own
// (reminders.ErrNotOwner otherwise; ask the owner's HTTP API).
func (r *Reminders) ListOf(ref actor.Ref) ([]reminders.Info, error) {
	e, err := r.checkRef(ref)
	if err != nil {
		return nil, err
	}
	return e.ListOf(prospero.IdentityOf(ref))
}

// Cancel removes the reminder name of ref, which this node must own.
// After it returns nil no tick of it runs.
func (r *Reminders) Cancel(ctx context.Context, ref actor.Ref, name string) error {
	e, err := r.checkRef(ref)
	if err != nil {
		return err
	}
	return e.Cancel(ctx, prospero.IdentityOf(ref), name)
}

func (r *Reminders) checkRef(ref actor.Ref) (*reminders.Engine, error) {
	e, err := r.engine()
	if err != nil {
		return nil, err
	}
	if !ref.IsVirtual() {
		return nil, fmt.Errorf("%w: reminders belong to virtual actors, not %v", ErrInvalidKey, ref)
	}
	if r.n.kind(ref.Kind()) == nil {
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
	cfg.Codec = messageCodec{n.msgs}
	cfg.Deliver = notifier{n.sched}
	cfg.ShardOf = n.reminderShard
	if cfg.Logger == nil {
		cfg.Logger = n.log
	}
	if cfg.Clock == nil {
		cfg.Clock = timerClock{n.cfg.Clock}
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
// identity is hydrated to receive one.
type notifier struct{ s *ariel.Scheduler }

func (d notifier) Deliver(ref actor.Ref, t reminders.Tick, accept func() bool) error {
	return d.s.Notify(ref, t, accept)
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
// serves: owned, not moving away, lease fresh. A shard moving away is
// released by the handoff itself (shipShard), before its record ships.
func (c *cluster) reminderLoop() {
	defer c.wg.Done()
	for {
		c.syncReminders()
		if err := c.awaitChange(c.ctx, 250*time.Millisecond); err != nil {
			return
		}
	}
}

func (c *cluster) syncReminders() {
	r := c.n.run.Load()
	if r == nil || c.pl == nil {
		return
	}
	tb := c.pl.Table()
	if tb == nil {
		return
	}
	now := c.n.cfg.Clock.Now()
	want := map[string]bool{}
	for _, ref := range tb.Owned(c.name) {
		s, _ := tb.Shard(ref)
		if s.MovingTo == "" && c.pl.Check(ref, 0, now) == nil {
			want[shardKey(ref)] = true
		}
	}
	for _, sh := range r.rem.Shards() {
		if !want[sh] {
			if err := r.rem.Release(c.ctx, sh); err != nil && !errors.Is(err, reminders.ErrClosed) {
				c.log.Warn("releasing the reminders of a shard", "shard", sh, "error", err)
			}
		}
	}
	for sh := range want {
		if !r.rem.Held(sh) {
			if err := r.rem.Acquire(c.ctx, sh); err != nil && !errors.Is(err, reminders.ErrClosed) {
				c.log.Warn("loading the reminders of a shard", "shard", sh, "error", err)
			}
		}
	}
}

// isReserved reports whether id is one of the node's own records (shard
// index, reminders), not an actor.
func isReserved(id prospero.Identity) bool { return strings.HasPrefix(id.Kind, reservedKindPrefix) }

// timerClock gives the engine the node's clock.
type timerClock struct{ c Clock }

func (t timerClock) Now() time.Time { return t.c.Now() }

func (t timerClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	ch := make(chan time.Time, 1)
	tm := t.c.AfterFunc(d, func() { ch <- t.c.Now() })
	return ch, tm.Stop
}

// noCodec and noDeliverer stand in for the node's own while a Config is
// validated.
type noCodec struct{}

func (noCodec) Encode(string, any) (string, []byte, error) {
	return "", nil, reminders.ErrUnknownPayload
}
func (noCodec) Decode(string, string, []byte) (any, error) { return nil, reminders.ErrUnknownPayload }

type noDeliverer struct{}

func (noDeliverer) Deliver(actor.Ref, reminders.Tick, func() bool) error { return ErrNotStarted }

// releaseReminders stops the reminders of shard on this node ahead of a
// handoff and returns the identity of their record and the record to
// ship (nil when the shard has none).
func (c *cluster) releaseReminders(ctx context.Context, shard placement.ShardRef) (prospero.Identity, *shipped, error) {
	id := reminders.RecordID(shardKey(shard))
	if r := c.n.run.Load(); r != nil {
		if err := r.rem.Release(ctx, shardKey(shard)); err != nil {
			return id, nil, err
		}
	}
	rec, err := c.n.store.Get(ctx, id)
	switch {
	case errors.Is(err, prospero.ErrNotFound):
		return id, nil, nil
	case err != nil:
		return id, nil, err
	}
	return id, &shipped{id: id, inc: rec.Incarnation, state: rec.State}, nil
}

// reminderRecordShard returns the shard whose reminder record id is.
func reminderRecordShard(id prospero.Identity) (placement.ShardRef, bool) {
	if id.Kind != reminders.RecordKind {
		return placement.ShardRef{}, false
	}
	g, i, ok := strings.Cut(id.Key, "#")
	n, err := strconv.Atoi(i)
	if !ok || err != nil || n < 0 {
		return placement.ShardRef{}, false
	}
	return placement.ShardRef{Group: g, Index: n}, true
}
