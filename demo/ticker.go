package demo

import (
	"errors"
	"fmt"
	"math"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// TickerReminder is the name of the ticker's reminder.
const TickerReminder = "tick"

// registerTicker registers the ticker kind: durable (every turn is
// persisted, replies after commit) and allowed to register reminders.
func registerTicker(n *tempest.Node, o Options) error {
	rem := n.Reminders()
	opts := tempest.KindOptions{
		KindOptions: prospero.KindOptions{IdleTimeout: o.IdleTimeout, Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}},
		Messages: []tempest.Message{
			tempest.SchemaMessage[Start](),
			tempest.SchemaMessage[Stop](),
			tempest.SchemaMessage[Get](),
			tempest.SchemaMessage[TickerStatus](),
		},
		Reminders: true,
		Gateway:   &tempest.Gateway{Schema: Schema, Input: "TickerIn", Reply: "TickerStatus"},
	}
	return n.Register(Ticker, func(string) actor.Actor { return &ticker{rem: rem} }, opts)
}

// ticker is the ticker kind's actor. Its state at rest is a TickerState
// in BARE; whether it runs, and when it ticks next, is its reminder's, as
// the node holds it.
type ticker struct {
	rem *tempest.Reminders
	st  TickerState
}

var _ prospero.Persistent = (*ticker)(nil)

func (t *ticker) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case reminders.Tick:
		t.tick(m)
	case Start:
		t.start(ctx, m)
	case *Start:
		t.start(ctx, *m)
	case Stop, *Stop:
		if err := t.rem.Unregister(ctx, TickerReminder); err != nil && !errors.Is(err, reminders.ErrNotFound) {
			ctx.ReplyError(err)
			return
		}
		ctx.Reply(t.status(false, 0, time.Time{}))
	case Get, *Get:
		t.get(ctx)
	}
}

// tick counts a tick once. Delivery is at least once across a failover,
// and a tick delivered again is the same occurrence, so a tick scheduled
// no later than the last one counted is not counted again. Nor is one
// scheduled before the last Start's first: until that Start's
// registration is committed the reminder it replaces may still fire.
func (t *ticker) tick(m reminders.Tick) {
	at := m.Scheduled.UnixMilli()
	if m.Name != TickerReminder || at < t.st.SinceMs || at <= t.st.LastScheduledMs {
		return
	}
	t.st.Ticks++
	t.st.LastSeq = m.Seq
	t.st.LastScheduledMs = at
}

// start registers the reminder, replacing a running one, and starts
// counting again. A registration the node refuses (a period below its
// minimum, an unknown policy) is answered with the node's error and
// changes nothing.
func (t *ticker) start(ctx actor.Context, m Start) {
	// A period beyond time.Duration's range is refused by the engine
	// (reminders.ErrTooFar), as any period over its horizon.
	r := reminders.Reminder{Name: TickerReminder, Period: time.Duration(math.MaxInt64)}
	if m.PeriodMs <= math.MaxInt64/uint64(time.Millisecond) {
		r.Period = time.Duration(m.PeriodMs) * time.Millisecond
	}
	if r.Period == 0 {
		ctx.ReplyError(fmt.Errorf("%w: periodMs must be set", reminders.ErrPeriodTooShort))
		return
	}
	if r.Period <= reminders.MaxHorizon {
		r.Due = ctx.Now().Add(r.Period) // the node's clock, as the engine's
	}
	if m.Catchup != nil {
		c, err := reminders.ParseCatchup(*m.Catchup)
		if err != nil {
			ctx.ReplyError(err)
			return
		}
		r.Catchup = c
	}
	if m.MaxCatchup != nil {
		r.MaxCatchup = int(*m.MaxCatchup)
	}
	if err := t.rem.Register(ctx, r); err != nil {
		ctx.ReplyError(err)
		return
	}
	t.st = TickerState{SinceMs: r.Due.UnixMilli()}
	ctx.Reply(t.status(true, r.Period, r.Due))
}

// status is the reply: the counts and the reminder as given.
func (t *ticker) status(running bool, period time.Duration, next time.Time) TickerStatus {
	s := TickerStatus{Running: running, Ticks: t.st.Ticks, LastSeq: t.st.LastSeq, LastScheduledMs: t.st.LastScheduledMs}
	if running {
		s.PeriodMs, s.NextMs = uint64(period/time.Millisecond), next.UnixMilli()
	}
	return s
}

// get replies the counts and the reminder as the node holds it (an
// operator may have cancelled it).
func (t *ticker) get(ctx actor.Context) {
	list, err := t.rem.List(ctx)
	if err != nil {
		ctx.ReplyError(err)
		return
	}
	for _, r := range list {
		if r.Name == TickerReminder {
			ctx.Reply(t.status(true, r.Period, r.Next))
			return
		}
	}
	ctx.Reply(t.status(false, 0, time.Time{}))
}

func (t *ticker) MarshalState() ([]byte, error) { return t.st.MarshalBARE() }

func (t *ticker) UnmarshalState(b []byte) error {
	var v TickerState
	if err := v.UnmarshalBARE(b); err != nil {
		return err
	}
	t.st = v
	return nil
}
