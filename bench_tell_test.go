package tempest_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

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
//
// Every case reports its time over the baseline's (x-untyped).
func BenchmarkNodeTell(b *testing.B) {
	var base float64 // ns per tell of the baseline
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
			b.StopTimer()
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if !bc.typed {
				base = ns
			} else if base > 0 {
				b.ReportMetric(ns/base, "x-untyped")
			}
		})
	}
}

// BenchmarkTellTypedInterleaved is BenchmarkNodeTell's typed case with its
// baseline interleaved: blocks of 64 tells, each until its actor handled
// them all, alternate between a kind that declares no message types and
// the same actor in a kind that declares its message type, so that both
// see the same machine load. It reports the time per tell of each and
// their ratio (typed-x-untyped).
func BenchmarkTellTypedInterleaved(b *testing.B) {
	n, err := tempest.New(tempest.Config{Name: "solo", DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	var handled [2]atomic.Int64
	sink := func(i int) func(string) actor.Actor {
		return func(string) actor.Actor {
			return actor.Func(func(_ actor.Context, msg any) {
				if _, ok := msg.(demo.EchoIn); ok {
					handled[i].Add(1)
				}
			})
		}
	}
	if err := n.Register("untyped", sink(0), tempest.KindOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := n.Register("typed", sink(1), tempest.KindOptions{
		Messages: []tempest.Message{tempest.SchemaMessage[demo.EchoIn]()}}); err != nil {
		b.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer n.Close(context.Background())
	refs := [2]actor.Ref{n.Ref("untyped", "k"), n.Ref("typed", "k")}
	msg := demo.EchoIn{Text: "benchmark"}
	const block = 64
	var spent [2]time.Duration
	var sent [2]int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		which := (i / block) % 2
		k := min(block, b.N-i)
		start := time.Now()
		for range k {
			for {
				err := n.Tell(refs[which], msg)
				if err == nil {
					break
				}
				if !errors.Is(err, actor.ErrRefused) {
					b.Fatal(err)
				}
				runtime.Gosched() // mailbox full: let the actor drain it
			}
		}
		sent[which] += int64(k)
		for handled[which].Load() < sent[which] {
			runtime.Gosched()
		}
		spent[which] += time.Since(start)
		i += k
	}
	b.StopTimer()
	if sent[0] > 0 && sent[1] > 0 {
		u := float64(spent[0].Nanoseconds()) / float64(sent[0])
		t := float64(spent[1].Nanoseconds()) / float64(sent[1])
		b.ReportMetric(u, "untyped-ns/tell")
		b.ReportMetric(t, "typed-ns/tell")
		b.ReportMetric(t/u, "typed-x-untyped")
	}
}
