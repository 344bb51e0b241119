package cluster

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/reminders"
)

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
	ref, err := h.c.ownedRef(m.Actor, m.Epoch)
	if err != nil {
		return federation.ReminderListReply{}, err
	}
	infos, err := h.c.h.ListReminders(ctx, ref)
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
	ref, err := h.c.ownedRef(m.Actor, m.Epoch)
	if err != nil {
		return err
	}
	return h.c.h.CancelReminder(ctx, ref, m.Name)
}

// reminderLoop keeps the engine's shards equal to the shards this node
// owns and that are not moving away, firing those it may serve now
// (lease fresh, not marked down) and pausing the others. A shard moving
// away is released by the handoff itself (shipShard), before its record
// ships.
func (c *Engine) reminderLoop() {
	defer c.wg.Done()
	for {
		c.SyncReminders()
		if err := c.awaitChange(c.ctx, 250*time.Millisecond); err != nil {
			return
		}
	}
}

// SyncReminders makes one pass of the reminder loop: it reads which
// shards this node keeps (owned, not moving away) and may serve now, and
// has the reminder holder make the engine's shards match
// (reminders.Holder.Sync).
func (c *Engine) SyncReminders() {
	r, err := c.h.Running()
	if err != nil || c.pl == nil {
		return
	}
	// One read of the table, as placement.Node.Check makes for each
	// shard: checked at the epoch read, so a table applied since that
	// moved the shard away and back cannot vouch for this one.
	fresh := c.pl.LeaseFresh(c.cfg.Clock.Now())
	keep, owned := map[string]reminders.Kept{}, map[string]uint64{}
	c.pl.FSM().Read(func(tb *placement.Table) {
		for _, ref := range tb.Owned(c.name) {
			sh := ShardKey(ref)
			s, _ := tb.Shard(ref)
			owned[sh] = s.Epoch
			if s.MovingTo == "" {
				keep[sh] = reminders.Kept{Epoch: s.Epoch, Serve: placement.CheckOwnership(tb, c.name, ref, s.Epoch, fresh) == nil}
			}
		}
	})
	r.Sync(c.ctx, keep, owned, c.run.Store.Damaged() == nil)
}

// isReserved reports whether id is one of the node's own records (shard
// index, reminders), not an actor.
func isReserved(id prospero.Identity) bool { return strings.HasPrefix(id.Kind, ReservedKindPrefix) }

// ShardKey names a shard as the reminder engine does.
func ShardKey(s placement.ShardRef) string { return s.Group + "#" + strconv.Itoa(s.Index) }

// ReminderShard is the reminder shard of id; ok is false while placement
// is not running (before Start: the node's own shard then).
func (c *Engine) ReminderShard(id prospero.Identity) (shard string, ok bool) {
	pl := c.Placement()
	if pl == nil {
		return "", false
	}
	loc, err := pl.Locate(id.Kind, id.Key)
	if err != nil && loc.Shard == (placement.ShardRef{}) {
		return "", true // no shard: held by nobody, so refused as not owned
	}
	return ShardKey(loc.Shard), true
}

// ServesReminder is nil when this node may run a tick of ref now: the
// shard of ref is still this node's at the epoch its reminders were
// acquired in, and servable (lease fresh, not moving, not marked down).
// Nil while placement is not running.
func (c *Engine) ServesReminder(ref actor.Ref) error {
	pl := c.Placement()
	if pl == nil {
		return nil
	}
	loc, err := pl.Locate(ref.Kind(), ref.Key())
	if err != nil && loc.Shard == (placement.ShardRef{}) {
		return err
	}
	r, err := c.h.Running()
	if err != nil {
		return ErrClosed // closing: nothing the holder noted can vouch for the tick
	}
	return pl.Check(loc.Shard, r.EpochOf(ShardKey(loc.Shard)), c.cfg.Clock.Now())
}

// ServedHere returns the epoch of ref's shard when this node owns it and
// may serve it now (ok false otherwise, and while placement is not running).
func (c *Engine) ServedHere(ref actor.Ref) (epoch uint64, ok bool) {
	if c.Placement() == nil {
		return 0, false
	}
	_, epoch, local, err := c.locateAt(ref)
	return epoch, err == nil && local
}

// RecordsInDoubt reports whether records at rest here may hold writes
// that never committed: a replicated shard's may (docs/cluster.md,
// "Nothing is served from a record that may not be committed"); with one
// replica every record here committed.
func (c *Engine) RecordsInDoubt() bool {
	pl := c.Placement()
	if pl == nil {
		return true
	}
	replicas := 0
	pl.FSM().Read(func(t *placement.Table) { replicas = t.Replication() })
	return replicas != 1
}

// Context ends when the engine stops (Background before Start).
func (c *Engine) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// ListReminders is tempest.Reminders.ListOf: here runs it on this node
// when it owns ref, otherwise the owner is asked. It returns the node
// that answered.
func (c *Engine) ListReminders(ctx context.Context, ref actor.Ref, here func() ([]reminders.Info, error)) (string, []reminders.Info, error) {
	var node string
	var out []reminders.Info
	_, err := c.onOwner(ctx, federation.DefaultBudget, ref, func() error {
		infos, err := here()
		node, out = c.name, infos
		return err
	}, func(ctx context.Context, owner string, epoch uint64) error {
		rep, err := c.fed.ReminderList(ctx, owner, &federation.ReminderListRequest{Epoch: epoch, Actor: fedActor(ref)})
		if err != nil {
			return err
		}
		node, out = owner, make([]reminders.Info, 0, len(rep.Reminders))
		for _, in := range rep.Reminders {
			out = append(out, infoFromFed(ref, in))
		}
		return nil
	})
	if err != nil {
		return "", nil, c.whyUnanswered(err)
	}
	return node, out, nil
}

// CancelReminder is tempest.Reminders.Cancel, as ListReminders.
func (c *Engine) CancelReminder(ctx context.Context, ref actor.Ref, name string, here func() error) error {
	_, err := c.onOwner(ctx, 30*time.Second, ref, here, func(ctx context.Context, owner string, epoch uint64) error {
		return c.fed.Call(ctx, owner, &federation.ReminderCancelRequest{Epoch: epoch, Actor: fedActor(ref),
			Name: name, BudgetNs: budgetOf(ctx, 0)})
	})
	return c.whyUnanswered(err)
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
func (c *Engine) releaseReminders(ctx context.Context, shard placement.ShardRef) ([]shipped, error) {
	if r, err := c.h.Running(); err == nil {
		if err := r.Release(ctx, ShardKey(shard)); err != nil {
			return nil, err
		}
	}
	recs, err := reminders.Records(ctx, c.run.Store, ShardKey(shard))
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
