package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// BenchmarkRemoteTellScale shows how a remote tell's cost grows with the
// message and with the recipients: tempest-mail (as in BenchmarkRemoteTell:
// envelopes, registry, Mailer runs, real actors) with 100 B, 4 KiB and
// 64 KiB payloads to 1, 1,000 and 100,000 virtual actors on the far node
// (each activated before the timer starts, tells spread round-robin over
// them), and for each payload the rawquic baseline of the same frames in
// the same run; x-raw is the mail case's msg/s over its size's baseline.
// Run it at several GOMAXPROCS with -cpu:
//
//	go test -run '^$' -bench RemoteTellScale -benchtime 20000x -cpu 1,2 ./wire/
func BenchmarkRemoteTellScale(b *testing.B) {
	for _, size := range []int{100, 4 << 10, 64 << 10} {
		raw := map[int]float64{} // msg/s of this size's baseline, by GOMAXPROCS (-cpu)
		b.Run(fmt.Sprintf("size=%s/rawquic", sizeName(size)), func(b *testing.B) {
			b.SetBytes(int64(size))
			raw[runtime.GOMAXPROCS(0)] = benchTellRawSize(b, size)
		})
		for _, rcpts := range []int{1, 1000, 100_000} {
			b.Run(fmt.Sprintf("size=%s/actors=%d/tempest-mail", sizeName(size), rcpts), func(b *testing.B) {
				rate := benchTellMailScale(b, size, rcpts)
				if r := raw[runtime.GOMAXPROCS(0)]; r > 0 {
					b.ReportMetric(rate/r, "x-raw")
				}
			})
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// scaleWindow bounds the bytes in flight to about 32 MiB (and the tells
// to benchWindow), below the far mailboxes' capacity.
func scaleWindow(size int) int64 { return min(benchWindow, max(64, (32<<20)/int64(size))) }

// benchTellMailScale is benchTellMailRuns with size-byte payloads spread
// over rcpts recipients; it returns msg/s.
func benchTellMailScale(b *testing.B, size, rcpts int) float64 {
	sb := benchScheduler(b, "b")
	w := newWindow()
	w.setLimit(scaleWindow(size))
	if err := sb.Register("sink", func(string) actor.Actor {
		return actor.Func(func(_ actor.Context, msg any) {
			if _, ok := msg.(benchMsg); ok {
				w.handled()
			}
		})
	}, 0); err != nil {
		b.Fatal(err)
	}
	ma, mb := mailPairRuns(b, nopLocal{}, WithInboxes(sb, sb.Inbox), func(uint64, any, error) {}, true)
	stats := func() string { return fmt.Sprintf("%+v", mb.Stats()) }
	to := make([]actor.Ref, rcpts)
	for i := range to {
		to[i] = actor.Virtual("sink", fmt.Sprint(i))
	}
	var msg any = benchMsg{Payload: make([]byte, size)}
	ctx := b.Context()
	for {
		if err := ma.TellWait(ctx, "b", to[0], actor.Ref{}, msg); err == nil {
			break
		}
		time.Sleep(time.Millisecond) // the first dial may be in back-off
	}
	// Activate every recipient before timing, with empty payloads (not
	// for the one-message run that only sizes b.N).
	var empty any = benchMsg{}
	warm := 1
	if b.N > 1 {
		warm = rcpts
	}
	for i := 1; i < warm; i++ {
		w.wait(int64(i))
		if err := ma.TellWait(ctx, "b", to[i], actor.Ref{}, empty); err != nil {
			b.Fatal(err)
		}
	}
	w.until(b, int64(warm), stats)
	w.got.Store(0)
	refused := mb.Stats().RefusalsSent
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		w.wait(int64(i))
		if err := ma.TellWait(ctx, "b", to[i%rcpts], actor.Ref{}, msg); err != nil {
			b.Fatal(err)
		}
	}
	w.until(b, int64(b.N), stats)
	el := time.Since(start)
	b.StopTimer()
	if r := mb.Stats().RefusalsSent - refused; r != 0 {
		b.Fatalf("%d tells refused: the run did not measure handled mail", r)
	}
	rate := float64(b.N) / el.Seconds()
	b.ReportMetric(rate, "msg/s")
	return rate
}

// benchTellRawSize sends size-byte frames over a raw QUIC stream, the
// baseline of the remote tell benchmarks; it returns msg/s.
func benchTellRawSize(b *testing.B, size int) float64 {
	rp := newRawPair(b)
	st, err := rp.client.OpenUniStreamSync(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, size)
	w := bufio.NewWriterSize(st, 64<<10)
	w.Write(appendFrame(nil, payload)) // makes the stream visible
	w.Flush()
	rs, err := rp.server.AcceptUniStream(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan int, 1)
	n := b.N
	go func() {
		fr := newFrameReader(rs, 64<<10, DefaultMaxFrameSize)
		fr.next()
		count := 0
		for count < n {
			if _, err := fr.next(); err != nil {
				break
			}
			count++
		}
		got <- count
	}()
	hdr := binary.AppendUvarint(nil, uint64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range n {
		w.Write(hdr)
		w.Write(payload)
	}
	w.Flush()
	if c := <-got; c != n {
		b.Fatalf("received %d of %d", c, n)
	}
	el := time.Since(start)
	b.StopTimer()
	st.Close()
	rate := float64(n) / el.Seconds()
	b.ReportMetric(rate, "msg/s")
	return rate
}
