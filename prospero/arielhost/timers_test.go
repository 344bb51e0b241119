package arielhost_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
)

// account accrues interest once per tick of its own timer, the way an
// application developer writes it: the chain is armed in Started. With
// periodic set it uses one Every timer instead of a chain of After.
type account struct {
	balance  uint64
	periodic bool
	keep     bool
}

type accrue struct{}

func (a *account) Receive(ctx actor.Context, msg any) {
	var opts []actor.TimerOption
	if a.keep {
		opts = append(opts, actor.KeepAlive())
	}
	switch msg.(type) {
	case actor.Started:
		if a.periodic {
			ctx.Every(time.Second, accrue{}, opts...)
		} else {
			ctx.After(time.Second, accrue{}, opts...)
		}
	case accrue:
		a.balance++
		if !a.periodic {
			ctx.After(time.Second, accrue{}, opts...) // deliberately never cancelled
		}
	case string:
		ctx.Reply(a.balance)
	}
}

func (a *account) MarshalState() ([]byte, error) { return binary.AppendUvarint(nil, a.balance), nil }

func (a *account) UnmarshalState(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 || k != len(b) {
		return errors.New("account: bad state")
	}
	a.balance = n
	return nil
}

type timerNode struct {
	sup    *prospero.Supervisor
	sched  *ariel.Scheduler
	events *eventLog
}

// newTimerNode runs a supervisor over a scheduler on the bubble's fake
// clock (both use the real clock, which synctest fakes).
func newTimerNode(t *testing.T, kind prospero.KindOptions, mk func() *account) *timerNode {
	t.Helper()
	n := &timerNode{events: &eventLog{signal: make(chan struct{}, 1)}}
	sup, err := prospero.NewSupervisor(prospero.Config{Store: prospero.NewMemStore(), Events: n.events,
		TickInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Register("account", func(string) actor.Actor { return mk() }, kind); err != nil {
		t.Fatal(err)
	}
	sched, err := ariel.New(ariel.Config{Workers: 2, Activator: arielhost.Activator(sup), Faults: arielhost.Faults(sup)})
	if err != nil {
		t.Fatal(err)
	}
	if err := arielhost.Start(sup, sched); err != nil {
		t.Fatal(err)
	}
	n.sup, n.sched = sup, sched
	t.Cleanup(func() {
		ctx := context.Background()
		if err := sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close: %v", err)
		}
		if err := sched.Close(ctx); err != nil {
			t.Errorf("scheduler Close: %v", err)
		}
	})
	return n
}

func (n *timerNode) balance(t *testing.T, ref actor.Ref) uint64 {
	t.Helper()
	v, err := n.sched.Ask(context.Background(), ref, "balance")
	if err != nil {
		t.Fatalf("ask %v: %v", ref, err)
	}
	return v.(uint64)
}

var persistModes = []prospero.PersistMode{prospero.PersistOnPassivation, prospero.PersistEveryTurn}

// The reported defect: an uncancelled After fired after passivation,
// woke the actor again, whose Started armed a second chain, so interest
// accrued twice per second. A timer belongs to its activation: after
// passivation nothing wakes the actor, and the next activation runs one
// chain.
func TestTimerEndsWithItsActivation(t *testing.T) {
	for _, mode := range persistModes {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newTimerNode(t, prospero.KindOptions{IdleTimeout: prospero.NeverIdle,
					Persistence: prospero.Persistence{Mode: mode}}, func() *account { return &account{} })
				ref := actor.Virtual("account", "a")
				id := prospero.IdentityOf(ref)
				n.balance(t, ref)
				time.Sleep(2500 * time.Millisecond)
				if !n.sup.Passivate(ref) {
					t.Fatal("account was not active")
				}
				synctest.Wait()
				if got := n.events.count(prospero.EventPassivated, id); got != 1 {
					t.Fatalf("passivated %d times, want 1", got)
				}
				time.Sleep(10 * time.Second)
				synctest.Wait()
				if got := n.events.count(prospero.EventHydrated, id); got != 0 {
					t.Fatalf("a timer of the passivated activation woke it: %d hydrations", got)
				}
				before := n.balance(t, ref) // hydrates it: one chain from here
				if before != 2 {
					t.Fatalf("balance at passivation %d, want 2", before)
				}
				time.Sleep(10*time.Second + time.Millisecond)
				if got := n.balance(t, ref) - before; got != 10 {
					t.Fatalf("accrued %d in 10 s, want 10 (one timer chain)", got)
				}
			})
		})
	}
}

// The second reported defect: timer ticks counted as activity, so an
// account with a periodic timer never idled out. By default they do not;
// KeepAlive opts in.
func TestTimerTicksAreNotActivity(t *testing.T) {
	for _, mode := range persistModes {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/keepalive=%v", mode, keep), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					n := newTimerNode(t, prospero.KindOptions{IdleTimeout: 2500 * time.Millisecond,
						Persistence: prospero.Persistence{Mode: mode}},
						func() *account { return &account{periodic: true, keep: keep} })
					ref := actor.Virtual("account", "b")
					id := prospero.IdentityOf(ref)
					n.balance(t, ref)
					time.Sleep(7500 * time.Millisecond)
					synctest.Wait()
					passivated := n.events.count(prospero.EventPassivated, id)
					if keep && passivated != 0 {
						t.Fatalf("a keep-alive timer did not keep the account active")
					}
					if !keep && passivated != 1 {
						t.Fatalf("passivated %d times in 7.5 s with a 2.5 s idle timeout, want 1", passivated)
					}
					if got, want := n.balance(t, ref), map[bool]uint64{false: 2, true: 7}[keep]; got != want {
						t.Fatalf("balance %d, want %d", got, want)
					}
				})
			})
		}
	}
}
