package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// tickLog records the reminder ticks an actor kind received, and whether
// the activation that got each one had just been hydrated.
type tickLog struct {
	mu    sync.Mutex
	ticks []reminders.Tick
}

func (l *tickLog) add(t reminders.Tick) {
	l.mu.Lock()
	l.ticks = append(l.ticks, t)
	l.mu.Unlock()
}

func (l *tickLog) seqs() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for _, t := range l.ticks {
		out = append(out, t.Seq)
	}
	return out
}

// register is the message that makes a biller register its reminder.
type register struct{ r reminders.Reminder }

type unregister struct{ name string }

// biller registers a reminder when told and records its ticks.
type biller struct {
	rem *tempest.Reminders
	log *tickLog
}

func (b *biller) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case register:
		if err := b.rem.Register(ctx, m.r); err != nil {
			ctx.ReplyError(err)
			return
		}
		ctx.Reply("ok")
	case unregister:
		if err := b.rem.Unregister(ctx, m.name); err != nil {
			ctx.ReplyError(err)
			return
		}
		ctx.Reply("ok")
	case string:
		infos, err := b.rem.List(ctx)
		if err != nil {
			ctx.ReplyError(err)
			return
		}
		ctx.Reply(infos)
	case reminders.Tick:
		b.log.add(m)
	}
}

type remNode struct {
	*tempest.Node
	log    *tickLog
	events *eventCounter
}

type eventCounter struct {
	mu sync.Mutex
	n  map[prospero.EventType]int
}

func (c *eventCounter) add(e prospero.Event) {
	c.mu.Lock()
	c.n[e.Type]++
	c.mu.Unlock()
}

func (c *eventCounter) get(t prospero.EventType) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[t]
}

// startRemNode runs a standalone node with the biller kind, idle after
// idle, on dir.
func startRemNode(t *testing.T, dir string, idle time.Duration, log *tickLog) *remNode {
	t.Helper()
	ev := &eventCounter{n: map[prospero.EventType]int{}}
	cfg := tempest.Config{Name: "n1", DataDir: dir, Events: ev.add}
	cfg.Scheduler.Workers = 2
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rem := n.Reminders()
	if err := n.Register("biller", func(string) actor.Actor { return &biller{rem: rem, log: log} },
		tempest.KindOptions{KindOptions: prospero.KindOptions{IdleTimeout: idle}, Reminders: true}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &remNode{Node: n, log: log, events: ev}
}

func (n *remNode) close(t *testing.T) {
	t.Helper()
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A reminder fires on schedule while its actor is dormant: each tick
// hydrates it (the idle timeout is shorter than the period), and ticks
// carry their sequence number and scheduled time.
func TestReminderFiresWhileDormant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startRemNode(t, t.TempDir(), 300*time.Millisecond, &tickLog{})
		defer n.close(t)
		ref := n.Ref("biller", "a")
		start := time.Now()
		if _, err := n.Ask(context.Background(), ref, register{reminders.Reminder{Name: "bill", Period: time.Second}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5*time.Second + 500*time.Millisecond)
		synctest.Wait()
		if got := fmt.Sprint(n.log.seqs()); got != "[1 2 3 4 5]" {
			t.Fatalf("ticks %s, want [1 2 3 4 5]", got)
		}
		for i, tk := range n.log.ticks {
			if want := start.Add(time.Duration(i+1) * time.Second); !tk.Scheduled.Equal(want) {
				t.Fatalf("tick %d scheduled %v, want %v", tk.Seq, tk.Scheduled, want)
			}
		}
		// Dormant between ticks: passivated after each, hydrated for each.
		act := n.events.get(prospero.EventActivated) + n.events.get(prospero.EventHydrated)
		if p := n.events.get(prospero.EventPassivated); p < 5 || act < 6 {
			t.Fatalf("passivated %d, activated %d times; want one activation per tick", p, act)
		}
		st, err := n.Status(context.Background(), ref)
		if err != nil || st.Active {
			t.Fatalf("status %+v, %v: want dormant between ticks", st, err)
		}
	})
}

// A reminder survives passivation and a restart of its node; after the
// restart each catch-up policy decides what happens to the occurrences
// missed while the node was down.
func TestReminderSurvivesNodeRestart(t *testing.T) {
	for _, tc := range []struct {
		pol  reminders.Catchup
		maxN int
		want string // ticks after the restart, before the next occurrence
	}{
		{reminders.Skip, 0, "[]"},
		{reminders.FireOnce, 0, "[8]"},
		{reminders.FireUpTo, 3, "[6 7 8]"},
	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				n := startRemNode(t, dir, prospero.NeverIdle, &tickLog{})
				ref := n.Ref("biller", "b")
				if _, err := n.Ask(context.Background(), ref, register{reminders.Reminder{Name: "r", Period: time.Second,
					Catchup: tc.pol, MaxCatchup: tc.maxN}}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2*time.Second + 500*time.Millisecond)
				if err := n.Passivate(context.Background(), ref); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second) // tick 3 hydrates it again
				n.close(t)
				if got := fmt.Sprint(n.log.seqs()); got != "[1 2 3]" {
					t.Fatalf("before the restart: %s", got)
				}
				time.Sleep(5 * time.Second) // down over occurrences 4..8

				n2 := startRemNode(t, dir, prospero.NeverIdle, &tickLog{})
				defer n2.close(t)
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				if got := fmt.Sprint(n2.log.seqs()); got != tc.want {
					t.Fatalf("after the restart: %s, want %s", got, tc.want)
				}
				time.Sleep(time.Second)
				got := n2.log.seqs()
				if len(got) == 0 || got[len(got)-1] != 9 {
					t.Fatalf("then %v, want occurrence 9 on schedule", got)
				}
			})
		})
	}
}

// Registration errors reach the actor at once, typed; an unregistered
// reminder fires no more. (A tick already queued or in flight when the
// reminder is removed: TestCancelRacingTicks and
// TestFiresOnScheduleAndCancelStopsInFlightTicks in the reminders
// package.)
func TestReminderErrorsAndUnregister(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startRemNode(t, t.TempDir(), prospero.NeverIdle, &tickLog{})
		defer n.close(t)
		ref := n.Ref("biller", "c")
		ctx := context.Background()
		_, err := n.Ask(ctx, ref, register{reminders.Reminder{Name: "x", Period: time.Second, Payload: struct{}{}}})
		if !errors.Is(err, reminders.ErrUnknownPayload) {
			t.Fatalf("undeclared payload: %v", err)
		}
		_, err = n.Ask(ctx, ref, register{reminders.Reminder{Name: "x", Period: time.Millisecond}})
		if !errors.Is(err, reminders.ErrPeriodTooShort) {
			t.Fatalf("short period: %v", err)
		}
		if _, err := n.Ask(ctx, ref, register{reminders.Reminder{Name: "r", Period: time.Second}}); err != nil {
			t.Fatal(err)
		}
		v, err := n.Ask(ctx, ref, "list")
		if infos, _ := v.([]reminders.Info); err != nil || len(infos) != 1 || infos[0].Name != "r" {
			t.Fatalf("list: %v, %v", v, err)
		}
		time.Sleep(2*time.Second + 500*time.Millisecond)
		if _, err := n.Ask(ctx, ref, unregister{"r"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if got := fmt.Sprint(n.log.seqs()); got != "[1 2]" {
			t.Fatalf("ticks %s, want [1 2]", got)
		}
		if _, err := n.Ask(ctx, ref, unregister{"r"}); !errors.Is(err, reminders.ErrNotFound) {
			t.Fatalf("second unregister: %v", err)
		}
		if _, err := n.Reminders().ListOf(t.Context(), actor.Virtual("nosuchkind", "k")); !errors.Is(err, actor.ErrUnknownKind) {
			t.Fatalf("ListOf an unknown kind: %v", err)
		}
	})
}

// A payload registered as a *T of a registered message type is ticked
// as a T, as every message is delivered, before and after a restart
// (which decodes it from its record). It used to tick as the *T given
// until the node restarted, then as a T: a handler with only a *T case
// stopped seeing it.
func TestReminderPayloadTicksAsAValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		var mu sync.Mutex
		var got []any
		start := func() *tempest.Node {
			n, err := tempest.New(tempest.Config{Name: "n1", DataDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			rem := n.Reminders()
			if err := n.Register("pinger", func(string) actor.Actor {
				return actor.Func(func(ctx actor.Context, msg any) {
					switch m := msg.(type) {
					case demo.EchoIn:
						ctx.ReplyError(rem.Register(ctx, reminders.Reminder{Name: "p", Period: time.Second, Payload: &demo.EchoIn{Text: m.Text}}))
					case reminders.Tick:
						mu.Lock()
						got = append(got, m.Payload)
						mu.Unlock()
					}
				})
			}, tempest.KindOptions{Reminders: true, Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")}}); err != nil {
				t.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return n
		}
		n := start()
		if _, err := n.Ask(context.Background(), n.Ref("pinger", "a"), demo.EchoIn{Text: "pp"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		n = start()
		defer n.Close(context.Background())
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 2 {
			t.Fatalf("%d ticks, want one before and one after the restart", len(got))
		}
		for i, p := range got {
			if p != (demo.EchoIn{Text: "pp"}) {
				t.Fatalf("tick %d carried %#v, want the value demo.EchoIn{Text: \"pp\"}", i, p)
			}
		}
	})
}
