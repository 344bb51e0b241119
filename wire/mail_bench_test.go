package wire

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Sub-benchmarks through the mail layer: the same 100-byte payload, now a
// registered BARE message (a struct with one data field, coded like
// baregen's output) in a Tell or Ask envelope, decoded on the far node and
// handed to a real actor of an ariel scheduler.
//
//	tempest-mail (tell): Mailer.TellWait -> link -> Mailer.Handle ->
//	    Scheduler.Deliver -> a counting actor.
//	tempest-actor (ask): Scheduler.Ask on the near node -> its router ->
//	    Mailer.Ask -> link -> Scheduler.Deliver -> an actor that replies
//	    -> Reply -> Scheduler.CompleteAsk.

// benchMsg is the BARE struct { payload: data }, with the methods baregen
// would generate for it.
type benchMsg struct{ Payload []byte }

func (v *benchMsg) AppendBARE(dst []byte) ([]byte, error) {
	return bare.AppendData(dst, v.Payload), nil
}

func (v *benchMsg) DecodeBARE(d *bare.Decoder) {
	if !d.Enter() {
		return
	}
	v.Payload = d.Data(v.Payload)
	d.Leave()
}

func benchRegistry(b *testing.B) *Registry {
	reg := NewRegistry()
	if err := Register[benchMsg](reg, 100); err != nil {
		b.Fatal(err)
	}
	return reg
}

func benchScheduler(b *testing.B, name string) *ariel.Scheduler {
	s, err := ariel.New(ariel.Config{Node: name, MailboxCapacity: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// nopLocal refuses everything: the near node hosts no remote-addressed actors.
type nopLocal struct{}

func (nopLocal) Deliver(actor.Ref, actor.Ref, any, time.Time, func(any, error)) error {
	return actor.ErrProcessUnavailable
}

// countingLocal delivers through a scheduler and counts refusals as done,
// so a run ends even if the far mailbox overflows (reported as refused/op).
type countingLocal struct {
	s       *ariel.Scheduler
	refused atomic.Int64
	onDone  func()
}

func (c *countingLocal) Deliver(to, from actor.Ref, msg any, deadline time.Time, reply func(any, error)) error {
	err := c.s.Deliver(to, from, msg, deadline, reply)
	if err != nil {
		c.refused.Add(1)
		c.onDone()
	}
	return err
}

// mailPair starts two QUIC nodes with Mailers; a's local side is
// localA, b's is localB.
func mailPair(b *testing.B, localA, localB LocalDelivery, completeA func(uint64, any, error)) (ma, mb *Mailer) {
	c := newQUICCluster(b)
	reg := benchRegistry(b)
	var err error
	if ma, err = NewMailer(MailConfig{Registry: reg, Local: localA, Complete: completeA}); err != nil {
		b.Fatal(err)
	}
	if mb, err = NewMailer(MailConfig{Registry: reg, Local: localB, Complete: func(uint64, any, error) {}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ma.Close(); mb.Close() })
	cfgA := c.config(b, "a", newSink(), nil)
	cfgA.Handler, cfgA.Events = ma.Handle, ma.LinkEvent
	cfgB := c.config(b, "b", newSink(), nil)
	cfgB.Handler, cfgB.Events = mb.Handle, mb.LinkEvent
	ma.Attach(c.start(b, cfgA))
	mb.Attach(c.start(b, cfgB))
	return ma, mb
}

func benchTellMail(b *testing.B) {
	sb := benchScheduler(b, "b")
	var n, target atomic.Int64
	done := make(chan struct{}, 1)
	hit := func() {
		if n.Add(1) == target.Load() {
			done <- struct{}{}
		}
	}
	if err := sb.Register("sink", func(string) actor.Actor {
		return actor.Func(func(_ actor.Context, msg any) {
			if _, ok := msg.(benchMsg); ok {
				hit()
			}
		})
	}, 0); err != nil {
		b.Fatal(err)
	}
	local := &countingLocal{s: sb, onDone: hit}
	ma, mb := mailPair(b, nopLocal{}, local, func(uint64, any, error) {})
	to := actor.Virtual("sink", "1")
	var msg any = benchMsg{Payload: make([]byte, benchPayload)}
	ctx := b.Context()
	target.Store(1)
	for {
		if err := ma.TellWait(ctx, "b", to, actor.Ref{}, msg); err == nil {
			break
		}
		time.Sleep(time.Millisecond) // the first dial may be in back-off
	}
	<-done
	n.Store(0)
	local.refused.Store(0)
	target.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := ma.TellWait(ctx, "b", to, actor.Ref{}, msg); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msg/s")
	b.ReportMetric(float64(local.refused.Load())/float64(b.N), "refused/op")
	if st := ma.transport().(*QUIC).Stats(); st.Writes > 0 {
		b.ReportMetric(float64(st.FramesSent)/float64(st.Writes), "frames/write")
	}
	_ = mb
}

// benchRouter sends kind "echo" to node b through the Mailer.
type benchRouter struct {
	local ariel.Router
	m     *Mailer
}

func (r benchRouter) Resolve(to actor.Ref) (*ariel.Cell, error) {
	if to.Kind() == "echo" {
		return nil, nil
	}
	return r.local.Resolve(to)
}

func (r benchRouter) Forward(o ariel.Outbound) error {
	if o.AskID != 0 {
		return r.m.Ask("b", o.AskID, o.To, o.From, o.Msg, o.Deadline)
	}
	return r.m.Tell("b", o.To, o.From, o.Msg)
}

func benchAskActor(b *testing.B) {
	sa, sb := benchScheduler(b, "a"), benchScheduler(b, "b")
	if err := sb.Register("echo", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if m, ok := msg.(benchMsg); ok {
				ctx.Reply(m)
			}
		})
	}, 0); err != nil {
		b.Fatal(err)
	}
	ma, _ := mailPair(b, nopLocal{}, sb, func(id uint64, v any, err error) { sa.CompleteAsk(id, v, err) })
	sa.SetRouter(benchRouter{local: sa.LocalRouter(), m: ma})
	to := actor.Virtual("echo", "1")
	msg := benchMsg{Payload: make([]byte, benchPayload)}
	ctx := b.Context()
	for deadline := time.Now().Add(waitTimeout); ; {
		_, err := sa.Ask(ctx, to, msg)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond) // the first dial may be in back-off
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := sa.Ask(ctx, to, msg); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportLatency(b, lat)
}
