package tempest_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
)

// BenchmarkNodeTell measures Node.Tell to one actor on a standalone node,
// until the actor has handled every message. "untyped" is the baseline: a
// kind that declares no message types, so the node delivers mail as sent.
// "typed" declares its message type, so every tell is vetted and
// normalised (the form a remote sender's mail arrives in); "typed-pointer"
// sends *T, which is delivered as a T copy.
func BenchmarkNodeTell(b *testing.B) {
	for _, bc := range []struct {
		name  string
		typed bool
		msg   any
	}{
		{"untyped", false, demo.EchoIn{Text: "benchmark"}},
		{"typed", true, demo.EchoIn{Text: "benchmark"}},
		{"typed-pointer", true, &demo.EchoIn{Text: "benchmark"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n, err := tempest.New(tempest.Config{Name: "solo", DataDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			var handled atomic.Int64
			opts := tempest.KindOptions{}
			if bc.typed {
				opts.Messages = []tempest.Message{tempest.MessageOf[demo.EchoIn](1, "EchoIn")}
			}
			sink := func(string) actor.Actor {
				return actor.Func(func(_ actor.Context, msg any) {
					if _, ok := msg.(demo.EchoIn); ok {
						handled.Add(1)
					} else if _, ok := msg.(*demo.EchoIn); ok {
						handled.Add(1)
					}
				})
			}
			if err := n.Register("sink", sink, opts); err != nil {
				b.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer n.Close(context.Background())
			ref := n.Ref("sink", "k")
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for {
					err := n.Tell(ref, bc.msg)
					if err == nil {
						break
					}
					if !errors.Is(err, actor.ErrRefused) {
						b.Fatal(err)
					}
					runtime.Gosched() // mailbox full: let the actor drain it
				}
			}
			for handled.Load() < int64(b.N) {
				runtime.Gosched()
			}
		})
	}
}
