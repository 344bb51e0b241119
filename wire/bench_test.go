package wire

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// The benchmarks run two nodes on loopback and move 100-byte payloads.
// Each has its baseline as a sub-benchmark in the same run:
//
//	tempest: frames through Transport.Send (lanes, coalesced writer).
//	tempest-mail, tempest-actor: through envelopes, the registry, the
//	         Mailer and real actors (see mail_bench_test.go).
//	rawquic: the same length-prefixed frames written through a 64 KiB
//	         bufio.Writer straight to one quic-go stream, the practical
//	         ceiling for one-way traffic; for request-reply, one frame
//	         written and one read per round trip on a raw stream.
//
// Reproduce: go test -run '^$' -bench 'Remote' -benchtime 2s ./wire/

const benchPayload = 100

func BenchmarkRemoteTell(b *testing.B) {
	b.Run("tempest", benchTellTempest)
	b.Run("tempest-mail", benchTellMail)
	b.Run("tempest-mail-perframe", benchTellMailPerFrame)
	b.Run("rawquic", benchTellRaw)
}

func BenchmarkRemoteAsk(b *testing.B) {
	b.Run("tempest", benchAskTempest)
	b.Run("tempest-actor", benchAskActor)
	b.Run("rawquic", benchAskRaw)
}

// counter is a handler that counts frames and signals at a target.
type counter struct {
	n      atomic.Int64
	target atomic.Int64
	done   chan struct{}
}

func (c *counter) handle(string, Lane, []byte) error {
	if c.n.Add(1) == c.target.Load() {
		c.done <- struct{}{}
	}
	return nil
}

func benchTellTempest(b *testing.B) {
	c := newQUICCluster(b)
	cnt := &counter{done: make(chan struct{}, 1)}
	a := c.start(b, c.config(b, "a", newSink(), nil))
	cfgB := c.config(b, "b", newSink(), nil)
	cfgB.Handler = cnt.handle
	c.start(b, cfgB)
	payload := make([]byte, benchPayload)
	// Warm the link up.
	cnt.target.Store(1)
	sendRetry(b, a, "b", 1, payload)
	<-cnt.done
	cnt.n.Store(0)
	cnt.target.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	ctx := b.Context()
	for range b.N {
		// SendWait parks the producer while the lane is full, as the raw
		// baseline parks in its stream write.
		if err := a.SendWait(ctx, "b", 1, payload); err != nil {
			b.Fatal(err)
		}
	}
	<-cnt.done
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msg/s")
	st := a.Stats()
	if st.Writes > 0 {
		b.ReportMetric(float64(st.FramesSent)/float64(st.Writes), "frames/write")
	}
}

// rawPair is a raw quic-go client and server using the test PKI.
type rawPair struct {
	srv, cli *quic.Transport
	ln       *quic.Listener
	client   *quic.Conn
	server   *quic.Conn
}

func newRawPair(b *testing.B) *rawPair {
	p := newPKI(b)
	mk := func() *quic.Transport {
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		tr := &quic.Transport{Conn: udp}
		b.Cleanup(func() { tr.Close(); udp.Close() })
		return tr
	}
	rp := &rawPair{srv: mk(), cli: mk()}
	qc := &quic.Config{MaxIdleTimeout: time.Minute}
	ln, err := rp.srv.Listen(serverTLS(staticCreds(p.cert(b, "s"), p.pool), time.Now, nil), qc)
	if err != nil {
		b.Fatal(err)
	}
	rp.ln = ln
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rp.client, err = rp.cli.Dial(ctx, rp.srv.Conn.LocalAddr(), clientTLS(staticCreds(p.cert(b, "c"), p.pool), time.Now, "s"), qc)
	if err != nil {
		b.Fatal(err)
	}
	rp.server, err = ln.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		rp.client.CloseWithError(0, "")
		rp.server.CloseWithError(0, "")
		ln.Close()
	})
	return rp
}

func benchTellRaw(b *testing.B) { benchTellRawSize(b, benchPayload) }

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	p := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(p(0.50), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
}

func benchAskTempest(b *testing.B) {
	c := newQUICCluster(b)
	replies := make(chan struct{}, 1)
	cfgA := c.config(b, "a", newSink(), nil)
	cfgA.Handler = func(string, Lane, []byte) error { replies <- struct{}{}; return nil }
	a := c.start(b, cfgA)
	cfgB := c.config(b, "b", newSink(), nil)
	var bt *QUIC
	cfgB.Handler = func(from string, _ Lane, f []byte) error { return bt.Send(from, 1, f) }
	bt = c.start(b, cfgB)
	payload := make([]byte, benchPayload)
	if err := a.Send("b", 1, payload); err != nil {
		b.Fatal(err)
	}
	<-replies
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := a.Send("b", 1, payload); err != nil {
			b.Fatal(err)
		}
		<-replies
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportLatency(b, lat)
}

func benchAskRaw(b *testing.B) {
	rp := newRawPair(b)
	cs, err := rp.client.OpenStreamSync(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	frame := appendFrame(nil, make([]byte, benchPayload))
	cs.Write(frame)
	ss, err := rp.server.AcceptStream(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	echoDone := make(chan struct{})
	go func() {
		defer close(echoDone)
		fr := newFrameReader(ss, 64<<10, DefaultMaxFrameSize)
		out := make([]byte, 0, 256)
		for {
			f, err := fr.next()
			if err != nil {
				return
			}
			out = appendFrame(out[:0], f)
			if _, err := ss.Write(out); err != nil {
				return
			}
		}
	}()
	fr := newFrameReader(cs, 64<<10, DefaultMaxFrameSize)
	if _, err := fr.next(); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := cs.Write(frame); err != nil {
			b.Fatal(err)
		}
		if _, err := fr.next(); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportLatency(b, lat)
	cs.Close()
	rp.client.CloseWithError(0, "")
	<-echoDone
}
