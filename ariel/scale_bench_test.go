package ariel_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// scaleMsg is a local message with a payload. Local mail carries the
// reference: the payload is never copied, so its size shows only in what
// the handler touches (here its first and last byte).
type scaleMsg struct{ b []byte }

// scaleRun is one timed run of BenchmarkTellScale.
type scaleRun struct {
	left atomic.Int64
	sum  atomic.Int64
	done chan struct{}
}

// BenchmarkTellScale shows how a local tell's cost grows with the number
// of actors it is spread over: one sender actor whose turns each send
// 1,024 tells to consecutive recipients of 1,000, 100,000 or 1,000,000
// spawned actors (round-robin over all of them, so with many actors
// every tell reaches a cold mailbox), with 100 B and 64 KiB payloads.
// ns/op is per tell; cpu-ns/op is the process's CPU per tell. Run it at
// several GOMAXPROCS with -cpu:
//
//	go test -run '^$' -bench TellScale -benchtime 2000000x -cpu 1,2 ./ariel/
func BenchmarkTellScale(b *testing.B) {
	for _, n := range []int{1000, 100_000, 1_000_000} {
		// Built by the first sub-benchmark of n that runs, closed after
		// the last: spawning a million actors is not repeated per run.
		var s *ariel.Scheduler
		var cur atomic.Pointer[scaleRun]
		var refs []actor.Ref
		setup := func(b *testing.B) {
			if s != nil {
				return
			}
			var err error
			if s, err = ariel.New(ariel.Config{}); err != nil {
				b.Fatal(err)
			}
			recv := actor.Func(func(ctx actor.Context, msg any) {
				if m, ok := msg.(*scaleMsg); ok {
					r := cur.Load()
					r.sum.Add(int64(m.b[0]) + int64(m.b[len(m.b)-1]))
					if r.left.Add(-1) == 0 {
						close(r.done)
					}
				}
			})
			refs = make([]actor.Ref, n)
			for i := range refs {
				if refs[i], err = s.Spawn(recv); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := s.WaitIdle(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, size := range []int{100, 64 << 10} {
			m := &scaleMsg{b: make([]byte, size)}
			name := fmt.Sprintf("actors=%d/size=%dB", n, size)
			if size >= 1<<10 {
				name = fmt.Sprintf("actors=%d/size=%dKiB", n, size>>10)
			}
			b.Run(name, func(b *testing.B) {
				if b.N == 0 {
					return
				}
				setup(b)
				r := &scaleRun{done: make(chan struct{})}
				r.left.Store(int64(b.N))
				cur.Store(r)
				sent, next := 0, 0
				src, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
					if _, ok := msg.(more); !ok {
						return
					}
					for i := 0; i < 1024 && sent < b.N; i++ {
						if ctx.Tell(refs[next], m) == nil {
							sent++
							if next++; next == n {
								next = 0
							}
						}
					}
					if sent < b.N {
						_ = ctx.Tell(ctx.Self(), more{})
					}
				}))
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuPerOp(b)
				_ = s.Tell(src, more{})
				<-r.done
				cpu()
				b.StopTimer()
				s.Stop(src)
			})
		}
		if s != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = s.Close(ctx)
			cancel()
		}
	}
}
