package peers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	proto "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/wire"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Remote benchmarks: two nodes in this process talking over loopback, a
// 100-byte payload, one-way throughput and request-reply latency.
//
//	tempest:    ariel schedulers, wire.Mailer envelopes over the QUIC
//	            transport with mutual TLS (the payload is a registered
//	            BARE message).
//	protoactor: protoactor-go's remote layer (gRPC streams over TCP, no
//	            TLS; the payload is a protobuf BytesValue).
//
// Reproduce: cd bench/peers && go test -run '^$' -bench 'Remote' -benchtime 2s

const remotePayload = 100

// remoteWindow bounds the one-way messages in flight, so neither side
// measures an unbounded queue (protoactor's writer queue drops beyond its
// size; Tempest's refuses).
const remoteWindow = 20000

// tempestMsg is the BARE struct { payload: data }, with the methods
// baregen would generate for it.
type tempestMsg struct{ Payload []byte }

func (v *tempestMsg) AppendBARE(dst []byte) ([]byte, error) {
	return bare.AppendData(dst, v.Payload), nil
}

func (v *tempestMsg) DecodeBARE(d *bare.Decoder) {
	if !d.Enter() {
		return
	}
	v.Payload = d.Data(v.Payload)
	d.Leave()
}

// tempestNode is a scheduler with a Mailer on a QUIC transport.
type tempestNode struct {
	s  *ariel.Scheduler
	m  *wire.Mailer
	tr *wire.QUIC
}

type tempestPKI struct {
	ca   *wire.CA
	pool *x509.CertPool
	mu   sync.Mutex
	addr map[string]string
}

func newTempestPKI(b *testing.B) *tempestPKI {
	ca, err := wire.NewCA("bench CA", time.Now(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tempestPKI{ca: ca, pool: pool, addr: map[string]string{}}
}

func (p *tempestPKI) resolve(_ context.Context, name string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.addr[name]; ok {
		return a, nil
	}
	return "", fmt.Errorf("no node %q", name)
}

// remoteRouter sends every virtual actor of kind "far" to peer.
type remoteRouter struct {
	local ariel.Router
	m     *wire.Mailer
	peer  string
}

func (r remoteRouter) Resolve(to actor.Ref) (*ariel.Cell, error) {
	if to.Kind() == "far" {
		return nil, nil
	}
	return r.local.Resolve(to)
}

func (r remoteRouter) Forward(o ariel.Outbound) error {
	if o.AskID != 0 {
		return r.m.Ask(r.peer, o.AskID, o.To, o.From, o.Msg, o.Deadline)
	}
	return r.m.Tell(r.peer, o.To, o.From, o.Msg)
}

func startTempest(b *testing.B, p *tempestPKI, name, peer string) *tempestNode {
	certPEM, keyPEM, err := p.ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	s, err := ariel.New(ariel.Config{Node: name, MailboxCapacity: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	reg := wire.NewRegistry()
	if err := wire.Register[tempestMsg](reg, 100); err != nil {
		b.Fatal(err)
	}
	m, err := wire.NewMailer(wire.MailConfig{
		Registry: reg, Local: wire.WithInboxes(s, s.Inbox),
		Complete: func(id uint64, v any, err error) { s.CompleteAsk(id, v, err) },
	})
	if err != nil {
		b.Fatal(err)
	}
	tr, err := wire.NewQUIC(wire.Config{
		Name: name, ListenAddr: "127.0.0.1:0", Certificate: cert, CAs: p.pool,
		Resolve: p.resolve, Handler: m.Handle, HandleBatch: m.HandleBatch, Events: m.LinkEvent,
	})
	if err != nil {
		b.Fatal(err)
	}
	m.Attach(tr)
	s.SetRouter(remoteRouter{local: s.LocalRouter(), m: m, peer: peer})
	p.mu.Lock()
	p.addr[name] = tr.Addr().String()
	p.mu.Unlock()
	b.Cleanup(func() {
		tr.Close()
		m.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return &tempestNode{s: s, m: m, tr: tr}
}

// startProto starts a protoactor system with remote on a free loopback port.
func startProto(b *testing.B) (*proto.ActorSystem, *remote.Remote) {
	sys := newProto()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	b.Cleanup(func() { r.Shutdown(false); sys.Shutdown() })
	return sys, r
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(p(0.50), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
}

// window lets a producer run at most remoteWindow messages ahead of the
// consumer's count.
type window struct {
	got  atomic.Int64
	mu   sync.Mutex
	cond *sync.Cond
}

func newWindow() *window { w := &window{}; w.cond = sync.NewCond(&w.mu); return w }

func (w *window) received() {
	if n := w.got.Add(1); n%1024 == 0 {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// wait blocks until fewer than remoteWindow of the first sent are unreceived.
func (w *window) wait(sent int64) {
	if sent-w.got.Load() < remoteWindow {
		return
	}
	w.mu.Lock()
	for sent-w.got.Load() >= remoteWindow {
		w.cond.Wait()
	}
	w.mu.Unlock()
}

// until waits for n messages, polling.
func (w *window) until(b *testing.B, n int64) {
	deadline := time.Now().Add(60 * time.Second)
	for w.got.Load() < n {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d", w.got.Load(), n)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// BenchmarkRemoteTell: one-way messages per second between two nodes.
func BenchmarkRemoteTell(b *testing.B) {
	b.Run("tempest", func(b *testing.B) {
		p := newTempestPKI(b)
		a := startTempest(b, p, "a", "b")
		far := startTempest(b, p, "b", "a")
		w := newWindow()
		if err := far.s.Register("far", func(string) actor.Actor {
			return actor.Func(func(_ actor.Context, msg any) {
				if _, ok := msg.(tempestMsg); ok {
					w.received()
				}
			})
		}, 0); err != nil {
			b.Fatal(err)
		}
		to := actor.Virtual("far", "sink")
		var msg any = tempestMsg{Payload: make([]byte, remotePayload)}
		ctx := b.Context()
		for a.m.TellWait(ctx, "b", to, actor.Ref{}, msg) != nil {
			time.Sleep(time.Millisecond) // first dial
		}
		w.until(b, 1)
		w.got.Store(0)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			w.wait(int64(i))
			if err := a.m.TellWait(ctx, "b", to, actor.Ref{}, msg); err != nil {
				b.Fatal(err)
			}
		}
		w.until(b, int64(b.N))
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	})
	b.Run("protoactor", func(b *testing.B) {
		sysA, _ := startProto(b)
		sysB, _ := startProto(b)
		w := newWindow()
		pid, err := sysB.Root.SpawnNamed(proto.PropsFromFunc(func(c proto.Context) {
			if _, ok := c.Message().(*wrapperspb.BytesValue); ok {
				w.received()
			}
		}), "sink")
		if err != nil {
			b.Fatal(err)
		}
		far := proto.NewPID(sysB.Address(), pid.Id)
		msg := &wrapperspb.BytesValue{Value: make([]byte, remotePayload)}
		sysA.Root.Send(far, msg)
		w.until(b, 1)
		w.got.Store(0)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		for i := range b.N {
			w.wait(int64(i))
			sysA.Root.Send(far, msg)
		}
		w.until(b, int64(b.N))
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	})
}

// BenchmarkRemoteAsk: request-reply round trips, one in flight.
func BenchmarkRemoteAsk(b *testing.B) {
	b.Run("tempest", func(b *testing.B) {
		p := newTempestPKI(b)
		a := startTempest(b, p, "a", "b")
		far := startTempest(b, p, "b", "a")
		if err := far.s.Register("far", func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				if m, ok := msg.(tempestMsg); ok {
					ctx.Reply(m)
				}
			})
		}, 0); err != nil {
			b.Fatal(err)
		}
		to := actor.Virtual("far", "echo")
		msg := tempestMsg{Payload: make([]byte, remotePayload)}
		ctx := b.Context()
		for deadline := time.Now().Add(30 * time.Second); ; {
			_, err := a.s.Ask(ctx, to, msg)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal(err)
			}
			time.Sleep(time.Millisecond) // first dial
		}
		lat := make([]time.Duration, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			if _, err := a.s.Ask(ctx, to, msg); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
	b.Run("protoactor", func(b *testing.B) {
		sysA, _ := startProto(b)
		sysB, _ := startProto(b)
		pid, err := sysB.Root.SpawnNamed(proto.PropsFromFunc(func(c proto.Context) {
			if m, ok := c.Message().(*wrapperspb.BytesValue); ok {
				c.Respond(m)
			}
		}), "echo")
		if err != nil {
			b.Fatal(err)
		}
		far := proto.NewPID(sysB.Address(), pid.Id)
		msg := &wrapperspb.BytesValue{Value: make([]byte, remotePayload)}
		if _, err := sysA.Root.RequestFuture(far, msg, 30*time.Second).Result(); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			if _, err := sysA.Root.RequestFuture(far, msg, 30*time.Second).Result(); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
}
