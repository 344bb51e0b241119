package httpapi

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/reminders"
)

// The reminder metrics an operator scrapes follow the node's engine: a
// reminder held, its ticks fired, and each tick's lateness observed
// (the agent sets the node's lateness observer as here).
func TestReminderMetricsFollowTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics("test")
		cfg := tempest.Config{Name: "n1", DataDir: t.TempDir()}
		cfg.Reminders.Lateness = m.ObserveReminderLateness
		n, err := tempest.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rem := n.Reminders()
		if err := n.Register("biller", func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				if _, ok := msg.(string); ok {
					if err := rem.Register(ctx, reminders.Reminder{Name: "bill", Period: time.Second}); err != nil {
						ctx.ReplyError(err)
						return
					}
					ctx.Reply("ok")
				}
			})
		}, tempest.KindOptions{Reminders: true}); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer n.Close(context.Background())
		m.Attach(n)
		if _, err := n.Ask(context.Background(), n.Ref("biller", "a"), "start"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3*time.Second + 500*time.Millisecond)
		synctest.Wait()

		families, err := m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				switch {
				case s.GetCounter() != nil:
					got[f.GetName()] = s.GetCounter().GetValue()
				case s.GetGauge() != nil:
					got[f.GetName()] = s.GetGauge().GetValue()
				case s.GetHistogram() != nil:
					got[f.GetName()] = float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
		for name, want := range map[string]float64{
			"tempest_reminders":                          1,
			"tempest_reminder_ticks_fired_total":         3,
			"tempest_reminder_lateness_seconds":          3,
			"tempest_reminder_ticks_skipped_total":       0,
			"tempest_reminder_ticks_failed_total":        0,
			"tempest_reminder_shards_paused":             0,
			"tempest_reminder_records_recommitted_total": 0, // a standalone node commits what it holds
		} {
			if v, ok := got[name]; !ok || v != want {
				t.Errorf("%s = %v (exposed %v), want %v", name, v, ok, want)
			}
		}
	})
}
