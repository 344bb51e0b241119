package tempest

import (
	"context"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/crashhook"
	"github.com/tempest-actors/tempest/internal/tracing"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// FailStoreWrites makes every commit of n's state store fail with err,
// as a full disk would; nil ends it. hold is how long its writes must
// work again before n reports them working (0: the default).
func FailStoreWrites(n *Node, err error, hold time.Duration) {
	if hold > 0 {
		n.eng.SetStoreHold(hold)
	}
	crashhook.FailWrites(n.store, err)
}

// Halt stops n as a crash would, as far as the cluster can tell.
func Halt(ctx context.Context, n *Node) error { return n.close(ctx, false) }

const TracingBuilt = tracing.Built

// RegisterReminderOn registers r for ref on n, which must own ref, as a
// turn of ref would (the scale test registers a million reminders this
// way, without activating a million actors).
func RegisterReminderOn(ctx context.Context, n *Node, ref actor.Ref, r reminders.Reminder) error {
	e, err := n.Reminders().engine()
	if err != nil {
		return err
	}
	return n.Reminders().owned(ctx, ref, e, func() error { return e.RegisterFor(ctx, prospero.IdentityOf(ref), r) })
}

// Queued returns how many messages wait in ref's mailbox on n.
func Queued(n *Node, ref actor.Ref) int {
	r := n.run.Load()
	if r == nil {
		return 0
	}
	return r.sched.Queued(ref)
}
