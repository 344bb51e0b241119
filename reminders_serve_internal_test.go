package tempest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/remind"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/reminders"
)

// TestTickNotRunWhereTheShardIsNotServed: a tick reaching its turn on a
// node that may not serve the identity's shard now (here: its lease
// lapsed) neither runs nor is accepted by the engine; it fails back with
// the cause, so the engine fires it again. Once the node may serve, the
// next tick runs.
func TestTickNotRunWhereTheShardIsNotServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := New(Config{Name: "n1", DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var seen []uint64
		if err := n.Register("biller", func(string) actor.Actor {
			return actor.Func(func(_ actor.Context, msg any) {
				if tk, ok := msg.(reminders.Tick); ok {
					mu.Lock()
					seen = append(seen, tk.Seq)
					mu.Unlock()
				}
			})
		}, KindOptions{Reminders: true}); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer n.Close(context.Background())

		var refusal error = placement.ErrLeaseExpired
		d := remind.Notifier{S: n.sched, Serves: func(actor.Ref) error { return refusal }}
		ref := n.Ref("biller", "a")
		accepted := 0
		var failed []error
		deliver := func(seq uint64) {
			t.Helper()
			err := d.Deliver(ref, reminders.Tick{Name: "bill", Seq: seq},
				func() bool { accepted++; return true },
				func(err error) { failed = append(failed, err) })
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		deliver(1)
		if accepted != 0 || len(failed) != 1 || !errors.Is(failed[0], placement.ErrLeaseExpired) {
			t.Fatalf("not served: accepted %d, failed %v; want 0 and the lease's error once", accepted, failed)
		}
		refusal = nil
		deliver(2)
		mu.Lock()
		defer mu.Unlock()
		if accepted != 1 || len(failed) != 1 || len(seen) != 1 || seen[0] != 2 {
			t.Fatalf("served again: accepted %d, failed %v, ticks run %v; want 1, the one failure, [2]", accepted, failed, seen)
		}
	})
}
