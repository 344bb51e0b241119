package reminders_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/tempest-actors/tempest/clock"
	"hash/fnv"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/replica"
	"github.com/tempest-actors/tempest/reminders"
)

const benchShards = 1024

func shardOf(id prospero.Identity) string {
	h := fnv.New32a()
	h.Write([]byte(id.Key))
	return fmt.Sprint(h.Sum32() % benchShards)
}

// accepting delivers every tick at once, recording its lateness by clk
// (nil: the wall clock).
type accepting struct {
	clk  reminders.Clock
	mu   sync.Mutex
	late []time.Duration
}

func (a *accepting) Deliver(_ actor.Ref, t reminders.Tick, accept func() bool, _ func(error)) error {
	if accept() {
		now := time.Now()
		if a.clk != nil {
			now = a.clk.Now()
		}
		d := now.Sub(t.Scheduled)
		a.mu.Lock()
		a.late = append(a.late, d)
		a.mu.Unlock()
	}
	return nil
}

// pausedClock is the wall clock, stopped at its creation until resume:
// reminders are registered while no time passes, so their schedule is
// exactly the one asked for however long registering takes, and then
// time runs at the wall clock's rate from where it stopped. Its timers
// are the runtime's.
type pausedClock struct {
	clock.Real // the methods the engine does not call
	mu         sync.Mutex
	at         time.Time
	paused     bool
	shift      time.Duration
}

func newPausedClock() *pausedClock { return &pausedClock{at: time.Now(), paused: true} }

func (c *pausedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return c.at
	}
	return time.Now().Add(-c.shift)
}

func (c *pausedClock) resume() {
	c.mu.Lock()
	c.shift, c.paused = time.Since(c.at), false
	c.mu.Unlock()
}

func (c *pausedClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func benchEngine(b *testing.B, store prospero.StateStore, d reminders.Deliverer) *reminders.Engine {
	return benchEngineClock(b, store, d, nil)
}

func benchEngineClock(b *testing.B, store prospero.StateStore, d reminders.Deliverer, clk reminders.Clock) *reminders.Engine {
	b.Helper()
	e, err := reminders.New(reminders.Config{Store: store, Codec: codec{}, Deliver: d, ShardOf: shardOf,
		MaxPerIdentity: 1, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Start(); err != nil {
		b.Fatal(err)
	}
	for i := range benchShards {
		if err := e.Acquire(context.Background(), fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func boltStore(b *testing.B) prospero.StateStore {
	s, err := prospero.NewBoltStore(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkRegister measures durable registrations per second from 64
// concurrent callers, each returning once its reminder is at rest. The
// baseline writes one record per registration straight into the same
// store (what a reminder stored alone, without group commit, costs).
func BenchmarkRegister(b *testing.B) {
	for _, st := range []struct {
		name string
		mk   func(*testing.B) prospero.StateStore
	}{{"mem", func(*testing.B) prospero.StateStore { return prospero.NewMemStore() }}, {"bolt", boltStore}} {
		b.Run("baseline-put-per-reminder/"+st.name, func(b *testing.B) {
			store := st.mk(b)
			var n atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := store.Put(context.Background(), prospero.Identity{Kind: "r", Key: fmt.Sprint(i)}, 0,
						prospero.Record{State: make([]byte, 48)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "regs/s")
		})
		b.Run("engine/"+st.name, func(b *testing.B) {
			e := benchEngine(b, st.mk(b), &accepting{})
			var n atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if err := e.RegisterFor(context.Background(), prospero.Identity{Kind: "acct", Key: fmt.Sprint(i)},
						reminders.Reminder{Name: "r", Period: time.Hour}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "regs/s")
		})
	}
}

// BenchmarkLateness runs 100 000 active reminders with a period of one
// second, spread over the second, for three seconds, and reports the
// lateness of their ticks (dispatch to the deliverer minus scheduled
// time). The baseline is the same schedule on one runtime timer per
// reminder (time.AfterFunc re-armed each period).
func BenchmarkLateness(b *testing.B) {
	const active = 100_000
	const run = 3 * time.Second
	b.Run("baseline-timer-per-reminder", func(b *testing.B) {
		for range b.N {
			var mu sync.Mutex
			var late []time.Duration
			start := time.Now().Add(time.Second)
			stop := start.Add(run)
			var wg sync.WaitGroup
			for i := range active {
				due := start.Add(time.Duration(i) * time.Second / active)
				wg.Add(1)
				var fire func()
				fire = func() {
					now := time.Now()
					mu.Lock()
					late = append(late, now.Sub(due))
					mu.Unlock()
					due = due.Add(time.Second)
					if due.After(stop) {
						wg.Done()
						return
					}
					time.AfterFunc(time.Until(due), fire)
				}
				time.AfterFunc(time.Until(due), fire)
			}
			wg.Wait()
			report(b, late)
		}
	})
	b.Run("engine", func(b *testing.B) {
		for range b.N {
			clk := newPausedClock()
			d := &accepting{clk: clk}
			e := benchEngineClock(b, prospero.NewMemStore(), d, clk)
			// Registered while the engine's clock stands still (see
			// pausedClock), so the first is due a second after it resumes
			// however long registering took on a loaded machine.
			start := clk.Now().Add(time.Second)
			for i := range active {
				if err := e.RegisterFor(context.Background(), prospero.Identity{Kind: "acct", Key: fmt.Sprint(i)},
					reminders.Reminder{Name: "r", Due: start.Add(time.Duration(i) * time.Second / active), Period: time.Second}); err != nil {
					b.Fatal(err)
				}
			}
			clk.resume()
			for clk.Now().Before(start.Add(run)) {
				time.Sleep(time.Until(time.Now().Add(start.Add(run).Sub(clk.Now()))))
			}
			_ = e.Close(context.Background())
			d.mu.Lock()
			report(b, d.late)
			d.mu.Unlock()
		}
	})
}

func report(b *testing.B, late []time.Duration) {
	slices.Sort(late)
	if len(late) == 0 {
		b.Fatal("no ticks")
	}
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(len(late)), "ticks")
}

// oneFollower is the placement of replicatedStore: every identity in one
// shard at epoch 1, owned by "owner" with the one in-sync follower "f".
type oneFollower struct{}

func (oneFollower) Route(prospero.Identity) (replica.Route, error) {
	return replica.Route{Replicated: true, Shard: replica.Shard{Group: "g"}, Epoch: 1, Followers: []string{"f"}}, nil
}
func (oneFollower) Shrink(context.Context, string, map[replica.Shard]uint64) (int, error) {
	return 0, errors.New("the follower stays in the set")
}
func (oneFollower) Accept(string, replica.Shard, uint64) error { return nil }
func (oneFollower) Fresh() bool                                { return true }
func (oneFollower) LeftSet(string, replica.Shard, uint64) bool { return false }
func (oneFollower) Down(string) bool                           { return false }

// replicatedStore is a node's replicated store (bbolt with fsync) whose
// shard has one in-sync follower, also bbolt, over an in-memory stream:
// a write commits once fsync'd here and received there.
func replicatedStore(b *testing.B) prospero.StateStore {
	mk := func(name string) *replica.Store {
		l, err := prospero.NewBoltStore(filepath.Join(b.TempDir(), name+".db"))
		if err != nil {
			b.Fatal(err)
		}
		s, err := replica.New(replica.Config{Local: l})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	owner, follower := mk("owner"), mk("follower")
	follower.Attach(oneFollower{}, nil)
	var serving sync.WaitGroup
	owner.Attach(oneFollower{}, func(context.Context, string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		serving.Go(func() { _ = follower.Serve(c2, "owner") })
		return c1, nil
	})
	b.Cleanup(func() {
		_ = owner.Close()
		serving.Wait()
		_ = follower.Close()
	})
	return owner
}

var benchStores = []struct {
	name string
	mk   func(*testing.B) prospero.StateStore
}{
	{"mem", func(*testing.B) prospero.StateStore { return prospero.NewMemStore() }},
	{"bolt", boltStore},
	{"replicated", replicatedStore},
}

// BenchmarkUnregister measures durable cancellations per second from
// 32×GOMAXPROCS concurrent callers, each returning once its reminder's
// record is deleted at rest (and, replicated, the deletion acknowledged
// by the follower); the reminders are registered before the timer
// starts. The baseline deletes one record per call straight from the
// same store (Delete: on bbolt its own transaction and fsync).
func BenchmarkUnregister(b *testing.B) {
	for _, st := range benchStores {
		b.Run("baseline-delete-per-reminder/"+st.name, func(b *testing.B) {
			store := st.mk(b)
			ids := make([]prospero.Identity, b.N)
			vs := make([]uint64, b.N)
			each(b, b.N, func(i int) error {
				ids[i] = prospero.Identity{Kind: "r", Key: fmt.Sprint(i)}
				var err error
				vs[i], err = store.Put(context.Background(), ids[i], 0, prospero.Record{State: make([]byte, 48)})
				return err
			})
			var n atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1) - 1
					if err := store.Delete(context.Background(), ids[i], vs[i]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cancels/s")
		})
		b.Run("engine/"+st.name, func(b *testing.B) {
			e := benchEngine(b, st.mk(b), &accepting{})
			id := func(i int64) prospero.Identity { return prospero.Identity{Kind: "acct", Key: fmt.Sprint(i)} }
			each(b, b.N, func(i int) error {
				return e.RegisterFor(context.Background(), id(int64(i)), reminders.Reminder{Name: "r", Period: time.Hour})
			})
			var n atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := e.Cancel(context.Background(), id(n.Add(1)-1), "r"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cancels/s")
		})
	}
}

// each runs op(0..n-1) from 64 goroutines, outside the timer.
func each(b *testing.B, n int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
