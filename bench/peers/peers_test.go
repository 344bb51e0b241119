package peers

import (
	"context"
	"log/slog"
	"testing"
	"time"

	proto "github.com/asynkron/protoactor-go/actor"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

type ball struct{}

type more struct{}

// item is a fan-in message; from names the sender for the credit scheme.
type item struct{ from int }

const (
	fanInSenders = 8
	fanInBurst   = 64
	fanInWindow  = 2 // bursts in flight per sender: 8*2*64 = Ariel's default mailbox
)

func share(n, i int) int {
	s := n / fanInSenders
	if i == 0 {
		s += n % fanInSenders
	}
	return s
}

func newAriel(b *testing.B) *ariel.Scheduler {
	s, err := ariel.New(ariel.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func newProto() *proto.ActorSystem {
	return proto.NewActorSystem(proto.WithLoggerFactory(func(*proto.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
}

// BenchmarkPingPong: ns per round trip, one message in flight.
func BenchmarkPingPong(b *testing.B) {
	b.Run("ariel", func(b *testing.B) {
		s := newAriel(b)
		pong, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(*ball); ok {
				_ = ctx.Tell(ctx.Sender(), msg)
			}
		}))
		left := b.N
		done := make(chan struct{})
		ping, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(*ball); ok {
				if left == 0 {
					close(done)
					return
				}
				left--
				_ = ctx.Tell(pong, msg)
			}
		}))
		b.ReportAllocs()
		b.ResetTimer()
		_ = s.Tell(ping, &ball{})
		<-done
	})
	b.Run("protoactor", func(b *testing.B) {
		sys := newProto()
		defer sys.Shutdown()
		// pong answers a known PID with Send (no Request envelope): the
		// cheapest protoactor path.
		var ping *proto.PID
		pong := sys.Root.Spawn(proto.PropsFromFunc(func(ctx proto.Context) {
			if _, ok := ctx.Message().(*ball); ok {
				ctx.Send(ping, ctx.Message())
			}
		}))
		left := b.N
		done := make(chan struct{})
		ping = sys.Root.Spawn(proto.PropsFromFunc(func(ctx proto.Context) {
			if _, ok := ctx.Message().(*ball); ok {
				if left == 0 {
					close(done)
					return
				}
				left--
				ctx.Send(pong, ctx.Message())
			}
		}))
		b.ReportAllocs()
		b.ResetTimer()
		sys.Root.Send(ping, &ball{})
		<-done
		b.StopTimer()
		sys.Root.Stop(ping)
		sys.Root.Stop(pong)
	})
	b.Run("chan", func(b *testing.B) {
		ping, pong := make(chan *ball), make(chan *ball)
		go func() {
			for m := range pong {
				ping <- m
			}
		}()
		m := &ball{}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			pong <- m
			<-ping
		}
		b.StopTimer()
		close(pong)
	})
}

// BenchmarkFanIn: ns per message, 8 sender actors to one receiver with
// credit-based flow control (a credit per 64-message burst, two bursts in
// flight per sender). chan: 8 goroutines to one goroutine over a 1024-slot
// channel (blocking sends are its flow control).
func BenchmarkFanIn(b *testing.B) {
	b.Run("ariel", func(b *testing.B) {
		if b.N == 0 {
			return
		}
		s := newAriel(b)
		var n int
		var per [fanInSenders]int
		var senders []actor.Ref
		done := make(chan struct{})
		sink, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if m, ok := msg.(*item); ok {
				if n++; n == b.N {
					close(done)
				}
				if per[m.from]++; per[m.from]%fanInBurst == 0 {
					_ = ctx.Tell(senders[m.from], more{})
				}
			}
		}))
		for i := 0; i < fanInSenders; i++ {
			left, m := share(b.N, i), &item{from: i}
			r, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
				if _, ok := msg.(more); ok {
					for k := 0; k < fanInBurst && left > 0; k++ {
						if ctx.Tell(sink, m) != nil {
							panic("refused inside the credit window")
						}
						left--
					}
				}
			}))
			senders = append(senders, r)
		}
		_ = s.WaitIdle(context.Background())
		b.ReportAllocs()
		b.ResetTimer()
		for _, r := range senders {
			for w := 0; w < fanInWindow; w++ {
				_ = s.Tell(r, more{})
			}
		}
		<-done
	})
	b.Run("protoactor", func(b *testing.B) {
		if b.N == 0 {
			return
		}
		sys := newProto()
		defer sys.Shutdown()
		var n int
		var per [fanInSenders]int
		var senders []*proto.PID
		done := make(chan struct{})
		sink := sys.Root.Spawn(proto.PropsFromFunc(func(ctx proto.Context) {
			if m, ok := ctx.Message().(*item); ok {
				if n++; n == b.N {
					close(done)
				}
				if per[m.from]++; per[m.from]%fanInBurst == 0 {
					ctx.Send(senders[m.from], more{})
				}
			}
		}))
		for i := 0; i < fanInSenders; i++ {
			left, m := share(b.N, i), &item{from: i}
			senders = append(senders, sys.Root.Spawn(proto.PropsFromFunc(func(ctx proto.Context) {
				if _, ok := ctx.Message().(more); ok {
					for k := 0; k < fanInBurst && left > 0; k++ {
						ctx.Send(sink, m)
						left--
					}
				}
			})))
		}
		b.ReportAllocs()
		b.ResetTimer()
		for _, r := range senders {
			for w := 0; w < fanInWindow; w++ {
				sys.Root.Send(r, more{})
			}
		}
		<-done
	})
	b.Run("chan", func(b *testing.B) {
		ch := make(chan *item, 1024)
		done := make(chan struct{})
		go func() {
			for i := 0; i < b.N; i++ {
				<-ch
			}
			close(done)
		}()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < fanInSenders; i++ {
			left, m := share(b.N, i), &item{from: i}
			go func() {
				for ; left > 0; left-- {
					ch <- m
				}
			}()
		}
		<-done
	})
}
