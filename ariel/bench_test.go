package ariel_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

func benchSched(b *testing.B, cfg ariel.Config) *ariel.Scheduler {
	b.Helper()
	s, err := ariel.New(cfg)
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

type ball struct{ n int }

// pinger and ponger bounce one ball; pinger stops after b.N round trips.
type pinger struct {
	peer actor.Ref
	left int
	done chan struct{}
}

func (p *pinger) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(*ball); !ok {
		return
	}
	if p.left == 0 {
		close(p.done)
		return
	}
	p.left--
	_ = ctx.Tell(p.peer, msg)
}

type ponger struct{}

func (ponger) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(*ball); ok {
		_ = ctx.Tell(ctx.Sender(), msg)
	}
}

// BenchmarkPingPong: ns per round trip between two actors (ariel) and two
// goroutines over unbuffered channels (chan).
func BenchmarkPingPong(b *testing.B) {
	b.Run("ariel", func(b *testing.B) {
		s := benchSched(b, ariel.Config{})
		pong, _ := s.Spawn(ponger{})
		p := &pinger{peer: pong, left: b.N, done: make(chan struct{})}
		ping, _ := s.Spawn(p)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuPerOp(b)
		if err := s.Tell(ping, &ball{}); err != nil {
			b.Fatal(err)
		}
		<-p.done
		cpu()
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
		cpu := cpuPerOp(b)
		for i := 0; i < b.N; i++ {
			pong <- m
			<-ping
		}
		cpu()
		b.StopTimer()
		close(pong)
	})
}

const (
	fanInSenders = 8
	fanInBurst   = 64
	fanInWindow  = 2 // bursts in flight per sender: 8*2*64 = the default mailbox
)

// item is a fan-in message; from names the sender for the credit scheme.
type item struct{ from int }

// sink counts messages, returns a credit to the sender after each burst,
// and closes done at want.
type sink struct {
	n       int
	want    int
	per     [fanInSenders]int
	senders []actor.Ref
	done    chan struct{}
}

func (k *sink) Receive(ctx actor.Context, msg any) {
	if m, ok := msg.(*item); ok {
		k.n++
		if k.n == k.want {
			close(k.done)
		}
		k.per[m.from]++
		if k.per[m.from]%fanInBurst == 0 {
			_ = ctx.Tell(k.senders[m.from], more{})
		}
	}
}

// burstSender sends one burst of its share per credit (flow control: a
// sender never has more than fanInWindow bursts in flight).
type burstSender struct {
	to   actor.Ref
	left int
	m    *item
}

type more struct{}

func (s *burstSender) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(more); !ok {
		return
	}
	for i := 0; i < fanInBurst && s.left > 0; i++ {
		if ctx.Tell(s.to, s.m) != nil {
			panic("refused within the credit window")
		}
		s.left--
	}
}

// BenchmarkFanIn: ns per message, 8 senders to one receiver. ariel: 8
// sender actors to one actor; chan: 8 goroutines to one goroutine with a
// 1024-slot channel. ariel-program: 8 goroutines calling Scheduler.Tell.
func BenchmarkFanIn(b *testing.B) {
	b.Run("ariel", func(b *testing.B) {
		s := benchSched(b, ariel.Config{})
		k := &sink{want: b.N, done: make(chan struct{})}
		if b.N == 0 {
			return
		}
		to, _ := s.Spawn(k)
		refs := make([]actor.Ref, fanInSenders)
		for i := range refs {
			share := b.N / fanInSenders
			if i == 0 {
				share += b.N % fanInSenders
			}
			refs[i], _ = s.Spawn(&burstSender{to: to, left: share, m: &item{from: i}})
		}
		k.senders = refs
		if err := s.WaitIdle(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuPerOp(b)
		for _, r := range refs {
			for w := 0; w < fanInWindow; w++ {
				_ = s.Tell(r, more{})
			}
		}
		<-k.done
		cpu()
		b.StopTimer()
		st := s.Stats()
		b.ReportMetric(float64(st.Parks)/float64(b.N)*1000, "parks/kmsg")
		b.ReportMetric(float64(st.Steals)/float64(b.N)*1000, "steals/kmsg")
		b.ReportMetric(float64(st.BudgetYields)/float64(b.N)*1000, "yields/kmsg")
	})
	b.Run("ariel-program", func(b *testing.B) {
		s := benchSched(b, ariel.Config{})
		var n int
		done := make(chan struct{})
		if b.N == 0 {
			return
		}
		to, _ := s.Spawn(actor.Func(func(_ actor.Context, msg any) {
			if _, ok := msg.(*ball); ok {
				if n++; n == b.N {
					close(done)
				}
			}
		}))
		m := &ball{}
		b.ReportAllocs()
		b.ResetTimer()
		var wg sync.WaitGroup
		for i := 0; i < fanInSenders; i++ {
			share := b.N / fanInSenders
			if i == 0 {
				share += b.N % fanInSenders
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < share; j++ {
					for s.Tell(to, m) != nil {
						runtime.Gosched()
					}
				}
			}()
		}
		wg.Wait()
		<-done
	})
	b.Run("chan", func(b *testing.B) {
		ch := make(chan *ball, 1024)
		done := make(chan struct{})
		go func() {
			for i := 0; i < b.N; i++ {
				<-ch
			}
			close(done)
		}()
		m := &ball{}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuPerOp(b)
		for i := 0; i < fanInSenders; i++ {
			share := b.N / fanInSenders
			if i == 0 {
				share += b.N % fanInSenders
			}
			go func() {
				for j := 0; j < share; j++ {
					ch <- m
				}
			}()
		}
		<-done
		cpu()
	})
}

const fanOut = 1000

// BenchmarkFanOut: one sender to 1,000 receivers; ns per message.
// ariel-unshared is the scheduler without recruiting (RecruitWork < 0):
// the sending worker runs every group it seized itself.
func BenchmarkFanOut(b *testing.B) {
	b.Run("ariel", func(b *testing.B) { benchFanOut(b, ariel.Config{}, 0) })
	b.Run("ariel-unshared", func(b *testing.B) { benchFanOut(b, ariel.Config{RecruitWork: -1}, 0) })
	b.Run("chan", func(b *testing.B) { benchFanOutChan(b, 0) })
}

// BenchmarkFanOutWork is BenchmarkFanOut with work in every turn (spin
// rounds; about 1 and 5µs on the reference machine): the fan-out a worker
// shares with idle ones once each turn carries enough of it.
func BenchmarkFanOutWork(b *testing.B) {
	for _, work := range []int{400, 4000} {
		b.Run(fmt.Sprintf("spin=%d", work), func(b *testing.B) {
			b.Run("ariel", func(b *testing.B) { benchFanOut(b, ariel.Config{}, work) })
			b.Run("ariel-unshared", func(b *testing.B) { benchFanOut(b, ariel.Config{RecruitWork: -1}, work) })
			b.Run("chan", func(b *testing.B) { benchFanOutChan(b, work) })
		})
	}
}

var spinSink atomic.Uint64

// spin does n rounds of arithmetic the compiler cannot drop.
func spin(n int) {
	if n == 0 {
		return
	}
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	spinSink.Add(x & 1)
}

func benchFanOut(b *testing.B, cfg ariel.Config, work int) {
	s := benchSched(b, cfg)
	var left atomic.Int64
	left.Store(int64(b.N))
	done := make(chan struct{})
	recv := actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(*ball); ok {
			spin(work)
			if left.Add(-1) == 0 {
				close(done)
			}
		}
	})
	refs := make([]actor.Ref, fanOut)
	for i := range refs {
		refs[i], _ = s.Spawn(recv)
	}
	m := &ball{}
	sent := 0
	src, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(more); !ok {
			return
		}
		// One round over every receiver per turn.
		for i := 0; i < fanOut && sent < b.N; i++ {
			if ctx.Tell(refs[i], m) == nil {
				sent++
			}
		}
		if sent < b.N {
			_ = ctx.Tell(ctx.Self(), more{})
		}
	}))
	if b.N == 0 {
		return
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuPerOp(b)
	_ = s.Tell(src, more{})
	<-done
	cpu()
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.Seized)/float64(b.N)*1000, "seized/kmsg")
	b.ReportMetric(float64(st.Recruited)/float64(b.N)*1000, "recruited/kmsg")
	b.ReportMetric(float64(st.Shares)/float64(b.N)*1000, "shares/kmsg")
}

func benchFanOutChan(b *testing.B, work int) {
	chans := make([]chan *ball, fanOut)
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(b.N))
	done := make(chan struct{})
	for i := range chans {
		chans[i] = make(chan *ball, 1024)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range chans[i] {
				spin(work)
				if left.Add(-1) == 0 {
					close(done)
				}
			}
		}()
	}
	m := &ball{}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuPerOp(b)
	for i := 0; i < b.N; i++ {
		chans[i%fanOut] <- m
	}
	if b.N > 0 {
		<-done
	}
	cpu()
	b.StopTimer()
	for _, c := range chans {
		close(c)
	}
	wg.Wait()
}

// skynet spawns ten children per level down to size 1, each leaf answers
// its id, each parent sums its children's answers to its parent.
type skynet struct {
	num, size int
	parent    actor.Ref
	sum       int
	pending   int
	result    chan int
}

type skyResult struct{ v int }

func (k *skynet) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case actor.Started:
		if k.size == 1 {
			k.report(ctx, k.num)
			return
		}
		sub := k.size / 10
		k.pending = 10
		for i := 0; i < 10; i++ {
			_, _ = ctx.Spawn(&skynet{num: k.num + i*sub, size: sub, parent: ctx.Self()})
		}
	case skyResult:
		k.sum += m.v
		k.pending--
		if k.pending == 0 {
			k.report(ctx, k.sum)
		}
	}
}

func (k *skynet) report(ctx actor.Context, v int) {
	if k.result != nil {
		k.result <- v
	} else {
		_ = ctx.Tell(k.parent, skyResult{v})
	}
	ctx.Stop(ctx.Self())
}

// BenchmarkSkynet spawns a tree of 1,000,000 actors that sum their ids.
func BenchmarkSkynet(b *testing.B) {
	s := benchSched(b, ariel.Config{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		res := make(chan int, 1)
		if _, err := s.Spawn(&skynet{num: 0, size: 1_000_000, result: res}); err != nil {
			b.Fatal(err)
		}
		if got := <-res; got != 499999500000 {
			b.Fatalf("skynet sum = %d", got)
		}
	}
}

type idle struct{ _ [0]byte }

func (idle) Receive(actor.Context, any) {}

// BenchmarkIdleActors reports the memory held per idle actor with
// 1,000,000 actors spawned (user state: a zero-size value).
func BenchmarkIdleActors(b *testing.B) {
	const n = 1_000_000
	for i := 0; i < b.N; i++ {
		s := benchSched(b, ariel.Config{})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		a := idle{}
		for j := 0; j < n; j++ {
			if _, err := s.Spawn(a); err != nil {
				b.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := s.WaitIdle(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/actor")
		runtime.KeepAlive(s)
	}
}

// BenchmarkTell: allocations and ns of one local tell from program code in
// steady state (the receiver drains concurrently).
func BenchmarkTell(b *testing.B) {
	s := benchSched(b, ariel.Config{MailboxCapacity: 1 << 20})
	ref, _ := s.Spawn(actor.Func(func(actor.Context, any) {}))
	m := &ball{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for s.Tell(ref, m) != nil {
			runtime.Gosched()
		}
	}
}

const (
	interleavedRecipients = 8
	interleavedRounds     = 64
)

// BenchmarkFanOutInterleaved: one sender whose turns send round-robin
// over 8 recipients, 64 rounds a turn (every recipient's sends are
// interleaved with the others'); ns per message. chan: one goroutine
// sending round-robin to 8 goroutines over 1024-slot channels.
func BenchmarkFanOutInterleaved(b *testing.B) {
	b.Run("ariel", func(b *testing.B) {
		s := benchSched(b, ariel.Config{MailboxCapacity: 1 << 16})
		var left atomic.Int64
		left.Store(int64(b.N))
		done := make(chan struct{})
		recv := actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(*ball); ok && left.Add(-1) == 0 {
				close(done)
			}
		})
		refs := make([]actor.Ref, interleavedRecipients)
		for i := range refs {
			refs[i], _ = s.Spawn(recv)
		}
		m := &ball{}
		sent := 0
		src, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(more); !ok {
				return
			}
			for r := 0; r < interleavedRounds && sent < b.N; r++ {
				for i := 0; i < interleavedRecipients && sent < b.N; i++ {
					if ctx.Tell(refs[i], m) == nil {
						sent++
					}
				}
			}
			if sent < b.N {
				_ = ctx.Tell(ctx.Self(), more{})
			}
		}))
		if b.N == 0 {
			return
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuPerOp(b)
		_ = s.Tell(src, more{})
		<-done
		cpu()
	})
	b.Run("chan", func(b *testing.B) {
		chans := make([]chan *ball, interleavedRecipients)
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(int64(b.N))
		done := make(chan struct{})
		for i := range chans {
			chans[i] = make(chan *ball, 1024)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range chans[i] {
					if left.Add(-1) == 0 {
						close(done)
					}
				}
			}()
		}
		m := &ball{}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuPerOp(b)
		for i := 0; i < b.N; i++ {
			chans[i%interleavedRecipients] <- m
		}
		if b.N > 0 {
			<-done
		}
		cpu()
		b.StopTimer()
		for _, c := range chans {
			close(c)
		}
		wg.Wait()
	})
}
