package tempest_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// benchCounter is a durable counter: every turn changes its state.
type benchCounter struct{ n uint64 }

func (c *benchCounter) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(string); ok {
		c.n++
		ctx.Reply(c.n)
	}
}

func (c *benchCounter) MarshalState() ([]byte, error) { return binary.AppendUvarint(nil, c.n), nil }

func (c *benchCounter) UnmarshalState(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return fmt.Errorf("bad counter state")
	}
	c.n = n
	return nil
}

// benchRegistrar registers (or replaces) its reminder at every ask.
type benchRegistrar struct{ rem *tempest.Reminders }

func (a *benchRegistrar) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(string); !ok {
		return
	}
	if err := a.rem.Register(ctx, reminders.Reminder{Name: "r", Period: time.Hour}); err != nil {
		ctx.ReplyError(err)
		return
	}
	ctx.Reply("ok")
}

// BenchmarkRegisterInTurn measures reminder registrations made by actors
// in their turns on one standalone node (bbolt, the scheduler's default
// workers), from 32×GOMAXPROCS concurrent askers spread over 4096 actors:
// each ask's turn registers a reminder and is answered once its record
// is committed. The baseline, in the same run, is the same load on a
// kind persisted every turn (a counter whose every turn changes its
// state, answered after its commit: the reply-after-commit path of
// durable state); "register" reports its rate over the baseline's
// (x-durable).
func BenchmarkRegisterInTurn(b *testing.B) {
	n, err := tempest.New(tempest.Config{Name: "n1", DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	rem := n.Reminders()
	if err := n.Register("durable", func(string) actor.Actor { return &benchCounter{} }, tempest.KindOptions{
		KindOptions: prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}}}); err != nil {
		b.Fatal(err)
	}
	if err := n.Register("registrar", func(string) actor.Actor { return &benchRegistrar{rem: rem} },
		tempest.KindOptions{Reminders: true}); err != nil {
		b.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer n.Close(context.Background())
	const actors = 4096
	var base float64 // asks per second of the baseline
	for _, kind := range []string{"durable", "registrar"} {
		name := map[string]string{"durable": "baseline-durable-state", "registrar": "register"}[kind]
		b.Run(name, func(b *testing.B) {
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprint(next.Add(1) % actors)
					if _, err := n.Ask(context.Background(), n.Ref(kind, key), "go"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "asks/s")
			if kind == "durable" {
				base = rate
			} else if base > 0 {
				b.ReportMetric(rate/base, "x-durable")
			}
		})
	}
}
