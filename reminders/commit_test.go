package reminders_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// A failed turn gives each name back what it held before the turn. Here
// one turn unregisters r and registers it anew: the turn fails, and the
// original r stays, in memory and at rest.
func TestFailedTurnRestoresWhatTheNameHeldBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		e := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e)
		if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
			t.Fatal(err)
		}
		rm, err := e.PrepareUnregister(acct, "r", nil)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: 5 * time.Second}, []reminders.Change{rm})
		if err != nil {
			t.Fatal(err)
		}
		c, err := commit(e, rm, reg)
		if err != nil {
			t.Fatal(err)
		}
		c.Finish(false)
		wantOne(t, e, store, time.Second)
	})
}

// Turn 2 re-registers r while turn 1's registration of r is still being
// committed; turn 1 commits, turn 2 fails: turn 1's registration, whose
// asker was told it is committed, is armed and stays at rest.
func TestFailedTurnKeepsAnEarlierTurnsRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		e := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e)
		a1, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: time.Second}, nil)
		c1, _ := commit(e, a1)
		a2, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: 2 * time.Second}, nil)
		c2, _ := commit(e, a2)
		c1.Finish(true)
		c2.Finish(false)
		wantOne(t, e, store, time.Second)
	})
}

// As above, but turn 2's outcome is known first: turn 1's registration
// goes back to being committed, and is armed once it is.
func TestFailedTurnPutsAnEarlierTurnsRegistrationBackInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		e := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e)
		a1, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: time.Second}, nil)
		c1, _ := commit(e, a1)
		a2, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: 2 * time.Second}, nil)
		c2, _ := commit(e, a2)
		c2.Finish(false)
		if infos, err := e.ListOf(acct); err != nil || len(infos) != 0 {
			t.Errorf("before turn 1 committed: %+v, %v; want nothing armed", infos, err)
		}
		if _, err := e.PrepareUnregister(acct, "r", nil); err != nil {
			t.Errorf("turn 1's registration is not counted: %v", err)
		}
		c1.Finish(true)
		wantOne(t, e, store, time.Second)
	})
}

// r is armed at 1 s; turn 1 re-registers it at 5 s and commits; turn 2,
// whose removal of r was made before turn 1's outcome was known, fails:
// the 5 s registration is armed, not the 1 s one it replaced.
func TestFailedRemovalRestoresTheCommittedReRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := prospero.NewMemStore()
		e := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e)
		if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
			t.Fatal(err)
		}
		a1, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: 5 * time.Second}, nil)
		c1, _ := commit(e, a1)
		rm, _ := e.PrepareUnregister(acct, "r", nil)
		c2, _ := commit(e, rm)
		c1.Finish(true)
		if infos, err := e.ListOf(acct); err != nil || len(infos) != 0 {
			t.Errorf("while turn 2's removal is pending: %+v, %v; want nothing armed", infos, err)
		}
		c2.Finish(false)
		wantOne(t, e, store, 5*time.Second)
	})
}

// Turn 1 unregisters r, turn 2 registers r anew; both fail, in either
// order: r is back as it was.
func TestFailedTurnsOverARemovalRestoreTheOriginal(t *testing.T) {
	for _, order := range []string{"removal first", "registration first"} {
		t.Run(order, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := prospero.NewMemStore()
				e := newEngine(t, store, &deliverer{})
				defer closeEngine(t, e)
				if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: time.Second}); err != nil {
					t.Fatal(err)
				}
				rm, _ := e.PrepareUnregister(acct, "r", nil)
				c1, _ := commit(e, rm)
				if _, err := e.PrepareUnregister(acct, "r", nil); !errors.Is(err, reminders.ErrNotFound) {
					t.Errorf("unregister while removed: %v, want ErrNotFound", err)
				}
				reg, err := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: 5 * time.Second}, nil)
				if err != nil {
					t.Fatal(err)
				}
				c2, _ := commit(e, reg)
				if order == "removal first" {
					c1.Finish(false)
					c2.Finish(false)
				} else {
					c2.Finish(false)
					c1.Finish(false)
				}
				wantOne(t, e, store, time.Second)
			})
		})
	}
}

// wantOne checks that acct holds one reminder, of period per, armed and
// at rest once flushed.
func wantOne(t *testing.T, e *reminders.Engine, store *prospero.MemStore, per time.Duration) {
	t.Helper()
	if infos, err := e.ListOf(acct); err != nil || len(infos) != 1 || infos[0].Period != per {
		t.Errorf("armed: %+v, %v; want one reminder of period %v", infos, err, per)
	}
	if err := e.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := reminders.Records(context.Background(), store, "s0")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Key != reminders.RecordID("s0").Key {
			n++
		}
	}
	if n != 1 {
		t.Errorf("records at rest: %d, want 1", n)
	}
	// The record at rest is the one armed: a new engine loads it.
	e2 := newEngine(t, store, &deliverer{})
	defer closeEngine(t, e2)
	if infos, err := e2.ListOf(acct); err != nil || len(infos) != 1 || infos[0].Period != per {
		t.Errorf("loaded from rest: %+v, %v; want one reminder of period %v", infos, err, per)
	}
}

// With a limit of one reminder, a removal whose outcome is still pending
// keeps counting: it may fail and put the reminder back.
func TestLimitCountsRemovalsNotCommittedYet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := reminders.New(reminders.Config{Store: prospero.NewMemStore(), Codec: codec{}, Deliver: &deliverer{}, MaxPerIdentity: 1,
			ShardOf: func(prospero.Identity) string { return "s0" }})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		defer closeEngine(t, e)
		if err := e.Acquire(t.Context(), "s0"); err != nil {
			t.Fatal(err)
		}
		a, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "a", Period: time.Second}, nil)
		c, _ := commit(e, a)
		c.Finish(true)
		rm, _ := e.PrepareUnregister(acct, "a", nil)
		c1, _ := commit(e, rm)
		if _, err := e.PrepareRegister(acct, reminders.Reminder{Name: "b", Period: time.Second}, nil); !errors.Is(err, reminders.ErrTooMany) {
			t.Errorf("register b while a's removal is pending: %v, want ErrTooMany", err)
		}
		if _, err := e.PrepareRegister(acct, reminders.Reminder{Name: "a", Period: time.Second}, nil); err != nil {
			t.Errorf("register a again while its removal is pending: %v", err)
		}
		c1.Finish(false)
		if infos, _ := e.ListOf(acct); len(infos) != 1 {
			t.Errorf("after the removal failed: %+v, want a", infos)
		}
		rm, _ = e.PrepareUnregister(acct, "a", nil)
		c2, _ := commit(e, rm)
		c2.Finish(true)
		if _, err := e.PrepareRegister(acct, reminders.Reminder{Name: "b", Period: time.Second}, nil); err != nil {
			t.Errorf("register b once a's removal committed: %v", err)
		}
	})
}

// hangStore fails or holds the writes of reminder records, as set.
type hangStore struct {
	*prospero.MemStore
	mode atomic.Int32 // 0 pass, 1 fail, 2 hold until the write's ctx ends
	hung chan struct{}
}

func (s *hangStore) hold(ctx context.Context, id prospero.Identity) (bool, error) {
	if id.Kind != reminders.RecordKind {
		return false, nil
	}
	switch s.mode.Load() {
	case 1:
		return true, errInjected
	case 2:
		select {
		case s.hung <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return true, ctx.Err()
	}
	return false, nil
}

func (s *hangStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	if held, err := s.hold(ctx, id); held {
		return 0, err
	}
	return s.MemStore.Put(ctx, id, expected, rec)
}

func (s *hangStore) Delete(ctx context.Context, id prospero.Identity, expected uint64) error {
	if held, err := s.hold(ctx, id); held {
		return err
	}
	return s.MemStore.Delete(ctx, id, expected)
}

// Close returns by its ctx even while a periodic flush's write of a
// record is held by the store and a turn's commit of the same record
// waits behind it. (Without that, the commit's goroutine blocks on the
// record's lock, which the bubble's fake clock does not see as durable:
// the test then hangs until the test binary's timeout.)
func TestCloseHonoursItsContextWithACommitBehindAFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hangStore{MemStore: prospero.NewMemStore(), hung: make(chan struct{}, 1)}
		e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: &deliverer{}, FlushInterval: 50 * time.Millisecond,
			ShardOf: func(prospero.Identity) string { return "s0" }})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		if err := e.Acquire(context.Background(), "s0"); err != nil {
			t.Fatal(err)
		}
		store.mode.Store(1)
		a, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: time.Hour}, nil)
		c, err := commit(e, a)
		if err == nil {
			t.Fatal("the registration's write did not fail")
		}
		c.Finish(false) // its record is pending: the periodic flush writes it
		store.mode.Store(2)
		<-store.hung
		a2, _ := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: time.Hour}, nil)
		c2 := e.Commit([]reminders.Change{a2}, func(error) {})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := e.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: %v, want its ctx's deadline (the store holds every write)", err)
		}
		c2.Finish(false)
	})
}

// Turns of one actor change one name, their commits overlapping and
// their outcomes known in any order: once every outcome is known, the
// name holds what the last turn that committed left it with (or what it
// held before them all), armed and at rest. Seeded, so a failure
// replays.
func TestOverlappingTurnsLeaveTheLastCommittedChange(t *testing.T) {
	for seed := range int64(300) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 1))
			store := prospero.NewMemStore()
			e := newEngine(t, store, &deliverer{})
			defer closeEngine(t, e)
			var want time.Duration // the model: the period r has, 0 none
			if rng.IntN(2) == 0 {
				want = time.Second
				if err := e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: want}); err != nil {
					t.Fatal(err)
				}
			}
			type turn struct {
				i   int
				per time.Duration // what the turn leaves r with, 0 none
				c   *reminders.Commit
			}
			var pending []turn
			var log []string
			last := -1 // the last turn that committed
			turns := 1 + rng.IntN(5)
			for next := 0; next < turns || len(pending) > 0; {
				if next < turns && (len(pending) == 0 || rng.IntN(2) == 0) {
					var staged []reminders.Change
					per := time.Duration(next+2) * time.Second
					switch rng.IntN(3) {
					case 0: // remove
						per = 0
						fallthrough
					case 1: // remove, then register anew
						rm, err := e.PrepareUnregister(acct, "r", nil)
						if err == nil {
							staged = append(staged, rm)
						} else if per == 0 {
							next++
							continue // nothing to remove: the turn changes nothing
						}
					}
					if per != 0 {
						reg, err := e.PrepareRegister(acct, reminders.Reminder{Name: "r", Period: per}, staged)
						if err != nil {
							t.Fatal(err)
						}
						staged = append(staged, reg)
					}
					c, err := commit(e, staged...)
					if err != nil {
						t.Fatal(err)
					}
					pending = append(pending, turn{i: next, per: per, c: c})
					log = append(log, fmt.Sprintf("turn %d leaves %v", next, per))
					next++
					continue
				}
				j := rng.IntN(len(pending))
				tu := pending[j]
				pending = slices.Delete(pending, j, j+1)
				ok := rng.IntN(2) == 0
				tu.c.Finish(ok)
				log = append(log, fmt.Sprintf("turn %d ok=%v", tu.i, ok))
				if ok && tu.i > last {
					last, want = tu.i, tu.per
				}
			}
			infos, err := e.ListOf(acct)
			if err != nil {
				t.Fatal(err)
			}
			if got := periodOf(infos); got != want {
				t.Fatalf("seed %d: r armed with %v, want %v; %s", seed, got, want, strings.Join(log, ", "))
			}
			if err := e.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			e2 := newEngine(t, store, &deliverer{})
			defer closeEngine(t, e2)
			infos, err = e2.ListOf(acct)
			if err != nil {
				t.Fatal(err)
			}
			if got := periodOf(infos); got != want {
				t.Fatalf("seed %d: r at rest with %v, want %v; %s", seed, got, want, strings.Join(log, ", "))
			}
		})
	}
}

// periodOf returns the period of the one reminder in infos, 0 if none.
func periodOf(infos []reminders.Info) time.Duration {
	if len(infos) == 0 {
		return 0
	}
	return infos[0].Period
}

// slowStore completes every write 10 ms (of the bubble's clock) after it
// was made, as a replicated store does once its followers answered.
type slowStore struct{ *prospero.MemStore }

func (s slowStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	time.Sleep(10 * time.Millisecond)
	return s.MemStore.Put(ctx, id, expected, rec)
}

// Two writers of one reminder's record: the second waits for the first,
// whose write needs time to pass. In a bubble (the simulation of a
// cluster) time passes only while every goroutine is durably blocked, so
// the second writer's wait must be one (it was a sync.Mutex, and a run
// of the simulation hung there once: the registration's write waited
// for its followers, the periodic flush of the same record for the
// lock, and the bubble's clock for both).
func TestWritersOfOneRecordWaitDurably(t *testing.T) {
	// On the code before, the bubble hung for good; fail with a clear
	// message rather than at the package's timeout.
	watchdog := time.AfterFunc(30*time.Second, func() {
		panic("two writers of one reminder record did not finish: the second's wait for the first stopped the bubble's clock")
	})
	defer watchdog.Stop()
	synctest.Test(t, func(t *testing.T) {
		store := slowStore{prospero.NewMemStore()}
		e := newEngine(t, store, &deliverer{})
		defer closeEngine(t, e)
		errs := make(chan error, 2)
		for _, p := range []time.Duration{time.Second, 2 * time.Second} {
			go func() {
				errs <- e.RegisterFor(context.Background(), acct, reminders.Reminder{Name: "r", Period: p})
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		infos, err := e.ListOf(acct)
		if err != nil || len(infos) != 1 {
			t.Fatalf("after both registrations: %+v, %v; want one reminder", infos, err)
		}
		wantOne(t, e, store.MemStore, infos[0].Period)
	})
}
