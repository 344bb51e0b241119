package reminders_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// seqLog records, per actor key, the sequence numbers of the ticks
// delivered, and every tick's lateness; only ticks scheduled before end
// (the run's length), not those that fire while the engines close.
type seqLog struct {
	clk  reminders.Clock
	end  time.Time
	mu   sync.Mutex
	seqs map[string][]uint64
	late []time.Duration
}

func (l *seqLog) Deliver(ref actor.Ref, t reminders.Tick, accept func() bool, failed func(error)) error {
	if !accept() {
		return nil
	}
	late := l.clk.Now().Sub(t.Scheduled)
	if !t.Scheduled.Before(l.end) {
		return nil
	}
	l.mu.Lock()
	l.seqs[ref.Key()] = append(l.seqs[ref.Key()], t.Seq)
	l.late = append(l.late, late)
	l.mu.Unlock()
	return nil
}

// TestMillionReminders holds one million reminders on three engines, the
// shards split between them as three nodes would hold them: 100 000 tick
// every second, spread over the second, the other 900 000 hourly, first
// due in an hour. It runs for five seconds and reports the heap per
// reminder held, the registration rate and the lateness of the ticks
// (p50, p99, max). It checks what does not depend on the machine's speed:
// no goroutine per reminder, every active reminder ticked with strictly
// increasing sequence numbers, no hourly one ticked.
//
// It is long (minutes on a loaded machine): it runs only with
// TEMPEST_SOAK_REMINDERS=1 (make soak sets it), without -race.
// TestMillionRemindersThreeNodes (root package) is the same on three
// real nodes.
func TestMillionReminders(t *testing.T) {
	if os.Getenv("TEMPEST_SOAK_REMINDERS") == "" {
		t.Skip("one million reminders: set TEMPEST_SOAK_REMINDERS=1 (make soak)")
	}
	const (
		total  = 1_000_000
		active = 100_000
		nodes  = 3
		run    = 5 * time.Second
	)
	clk := newPausedClock()
	log := &seqLog{clk: clk, seqs: map[string][]uint64{}}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	engines := make([]*reminders.Engine, nodes)
	for i := range engines {
		e, err := reminders.New(reminders.Config{Store: prospero.NewMemStore(), Codec: codec{}, Deliver: log,
			ShardOf: shardOf, MaxPerIdentity: 1, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		for s := i; s < benchShards; s += nodes {
			if err := e.Acquire(context.Background(), strconv.Itoa(s)); err != nil {
				t.Fatal(err)
			}
		}
		engines[i] = e
	}
	owner := func(id prospero.Identity) *reminders.Engine {
		s, _ := strconv.Atoi(shardOf(id))
		return engines[s%nodes]
	}

	start := clk.Now().Add(time.Second)
	log.end = start.Add(run)
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 { // registrations from 8 goroutines, like turns on several workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += 8 {
				id := prospero.Identity{Kind: "acct", Key: strconv.Itoa(i)}
				r := reminders.Reminder{Name: "r", Due: start.Add(time.Duration(i) * time.Second / active), Period: time.Second}
				if i >= active {
					r = reminders.Reminder{Name: "r", Due: start.Add(time.Hour + time.Duration(i)*time.Hour/total), Period: time.Hour}
				}
				if err := owner(id).RegisterFor(context.Background(), id, r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	regTime := time.Since(t0)
	runtime.GC()
	var held runtime.MemStats
	runtime.ReadMemStats(&held)
	if g := runtime.NumGoroutine(); g > goroutines+nodes+4 {
		t.Errorf("%d goroutines with %d reminders held (%d before): not one per reminder, one per engine", g, total, goroutines)
	}
	n := 0
	for _, e := range engines {
		n += e.Stats().Reminders
	}
	if n != total {
		t.Fatalf("engines hold %d reminders, want %d", n, total)
	}

	clk.resume()
	for d := start.Add(run).Sub(clk.Now()); d > 0; d = start.Add(run).Sub(clk.Now()) {
		time.Sleep(d) // the schedule's length: nothing here waits for a result
	}
	var skipped uint64
	for _, e := range engines {
		skipped += e.Stats().Skipped
	}
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.Close(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()

	log.mu.Lock()
	defer log.mu.Unlock()
	for i := range total {
		seqs := log.seqs[strconv.Itoa(i)]
		switch {
		case i >= active && len(seqs) > 0:
			t.Fatalf("hourly reminder %d ticked %v", i, seqs)
		case i < active && len(seqs) == 0:
			t.Fatalf("active reminder %d never ticked in %v", i, run)
		case !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs):
			t.Fatalf("reminder %d ticked %v: sequence numbers not strictly increasing", i, seqs)
		}
	}
	late := log.late
	slices.Sort(late)
	heap := float64(held.HeapAlloc-before.HeapAlloc) / total
	t.Logf("%d reminders on %d engines (%d active, period 1 s): registered in %v (%.0f/s), heap %.0f B per reminder held",
		total, nodes, active, regTime.Round(time.Millisecond), total/regTime.Seconds(), heap)
	t.Logf("%d ticks scheduled in %v: lateness p50 %v, p99 %v, max %v; %d occurrences skipped (catch-up after a late tick, to the end of the run)",
		len(late), run, late[len(late)/2], late[len(late)*99/100], late[len(late)-1], skipped)
	fmt.Fprintf(os.Stderr, "million: heap-B/reminder %.0f regs/s %.0f p50 %v p99 %v ticks %d\n",
		heap, total/regTime.Seconds(), late[len(late)/2], late[len(late)*99/100], len(late))
}
