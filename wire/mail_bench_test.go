package wire

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
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
//	tempest-mail (tell): Mailer.TellWait -> link -> Mailer.HandleBatch
//	    (a run of frames per call, grouped by recipient) -> the
//	    recipient's cached ariel.Inbox -> a counting actor. At most
//	    benchWindow tells are in flight (sent, not yet handled by the
//	    actor), below the mailbox capacity: the rate is of mail handled,
//	    and a run with any refusal fails.
//	tempest-mail-perframe (tell): the same through Mailer.Handle, one
//	    frame per call and one mailbox admission per tell: the layer
//	    tempest-mail's run hand-off replaces, in the same run.
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

// benchWindow bounds the tells in flight (sent, not yet handled by the
// far actor) below the far mailbox's capacity, so a run measures mail
// handled, never mail refused or queued without bound.
const benchWindow = 20000

// window lets a producer run at most benchWindow messages ahead of the
// consumer's count.
type window struct {
	got   atomic.Int64
	limit int64 // set with setLimit
	step  int64 // handled messages between wake-ups of the producer, below limit
	mu    sync.Mutex
	cond  *sync.Cond
}

func newWindow() *window {
	w := &window{}
	w.cond = sync.NewCond(&w.mu)
	w.setLimit(benchWindow)
	return w
}

// setLimit bounds the unhandled messages to n (before the run).
func (w *window) setLimit(n int64) { w.limit, w.step = n, max(1, min(1024, n/4)) }

func (w *window) handled() {
	if n := w.got.Add(1); n%w.step == 0 {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// wait blocks until fewer than w.limit of the first sent are unhandled.
func (w *window) wait(sent int64) {
	if sent-w.got.Load() < w.limit {
		return
	}
	w.mu.Lock()
	for sent-w.got.Load() >= w.limit {
		w.cond.Wait()
	}
	w.mu.Unlock()
}

// until waits (bounded) for n handled messages.
func (w *window) until(b *testing.B, n int64, stats func() string) {
	deadline := time.Now().Add(waitTimeout)
	for w.got.Load() < n {
		if time.Now().After(deadline) {
			b.Fatalf("handled %d of %d; %s", w.got.Load(), n, stats())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// mailPair starts two QUIC nodes with Mailers; a's local side is
// localA, b's is localB.
func mailPair(b *testing.B, localA, localB LocalDelivery, completeA func(uint64, any, error)) (ma, mb *Mailer) {
	return mailPairRuns(b, localA, localB, completeA, true)
}

// mailPairRuns is mailPair whose transports hand the Mailers runs of
// frames (HandleBatch), or one frame per call (Handle) when runs is false.
func mailPairRuns(b *testing.B, localA, localB LocalDelivery, completeA func(uint64, any, error), runs bool) (ma, mb *Mailer) {
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
	if runs {
		cfgA.HandleBatch, cfgB.HandleBatch = ma.HandleBatch, mb.HandleBatch
	}
	ma.Attach(c.start(b, cfgA))
	mb.Attach(c.start(b, cfgB))
	return ma, mb
}

func benchTellMail(b *testing.B)         { benchTellMailRuns(b, true) }
func benchTellMailPerFrame(b *testing.B) { benchTellMailRuns(b, false) }

func benchTellMailRuns(b *testing.B, runs bool) {
	sb := benchScheduler(b, "b")
	w := newWindow()
	if err := sb.Register("sink", func(string) actor.Actor {
		return actor.Func(func(_ actor.Context, msg any) {
			if _, ok := msg.(benchMsg); ok {
				w.handled()
			}
		})
	}, 0); err != nil {
		b.Fatal(err)
	}
	ma, mb := mailPairRuns(b, nopLocal{}, WithInboxes(sb, sb.Inbox), func(uint64, any, error) {}, runs)
	stats := func() string { return fmt.Sprintf("%+v", mb.Stats()) }
	to := actor.Virtual("sink", "1")
	var msg any = benchMsg{Payload: make([]byte, benchPayload)}
	ctx := b.Context()
	for {
		if err := ma.TellWait(ctx, "b", to, actor.Ref{}, msg); err == nil {
			break
		}
		time.Sleep(time.Millisecond) // the first dial may be in back-off
	}
	w.until(b, 1, stats)
	w.got.Store(0)
	refused := mb.Stats().RefusalsSent
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		w.wait(int64(i))
		if err := ma.TellWait(ctx, "b", to, actor.Ref{}, msg); err != nil {
			b.Fatal(err)
		}
	}
	w.until(b, int64(b.N), stats)
	el := time.Since(start)
	b.StopTimer()
	if r := mb.Stats().RefusalsSent - refused; r != 0 {
		b.Fatalf("%d tells refused: the run did not measure handled mail", r)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "msg/s")
	if st := ma.transport().(*QUIC).Stats(); st.Writes > 0 {
		b.ReportMetric(float64(st.FramesSent)/float64(st.Writes), "frames/write")
	}
}

// benchRouter sends kind "echo" to node b through the Mailer.
type benchRouter struct {
	local ariel.Router
	m     *Mailer
	chain []actor.Ref // sent with every ask in place of the message's own
}

func (r benchRouter) Resolve(to actor.Ref) (*ariel.Cell, error) {
	if to.Kind() == "echo" {
		return nil, nil
	}
	return r.local.Resolve(to)
}

func (r benchRouter) Forward(o ariel.Outbound) error {
	if o.AskID != 0 {
		return r.m.AskChain("b", o.AskID, 0, o.To, o.From, o.Msg, o.Deadline, r.chain)
	}
	return r.m.Tell("b", o.To, o.From, o.Msg)
}

func benchAskActor(b *testing.B) { benchAskActorChain(b, 0) }

// BenchmarkRemoteAskChain measures what an ask's call chain costs on a
// cross-node ask over QUIC: the same actor ask with no chain (the
// baseline, as from program code), one link (an ask made in a turn) and
// four links (a call four actors deep), in one run.
func BenchmarkRemoteAskChain(b *testing.B) {
	for _, n := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("links=%d", n), func(b *testing.B) { benchAskActorChain(b, n) })
	}
}

func benchAskActorChain(b *testing.B, links int) {
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
	var chain []actor.Ref
	for i := range links {
		chain = append(chain, actor.Virtual("caller", fmt.Sprintf("c%d", i)).WithIncarnation(1))
	}
	sa.SetRouter(benchRouter{local: sa.LocalRouter(), m: ma, chain: chain})
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

// countInbox is an Inbox that only counts, to time the Mailer alone.
type countInbox struct{ n atomic.Int64 }

func (c *countInbox) Tell(actor.Ref, any) error { c.n.Add(1); return nil }
func (c *countInbox) Live() bool                { return true }

type countDelivery struct {
	nopLocal
	in *countInbox
}

func (d countDelivery) Inbox(actor.Ref) (Inbox, error) { return d.in, nil }

// BenchmarkMailHandleTell times the receiving Mailer's share of a tell
// (decode, recipient lookup, body decode, admission to a counting inbox),
// without a network; the baseline decodes the same frame with the
// generated envelope code and the registry.
func BenchmarkMailHandleTell(b *testing.B) {
	reg := benchRegistry(b)
	frame, err := MarshalEnvelope(&Tell{To: ActorIDOf(actor.Virtual("sink", "1")), Tag: 100,
		Body: bare.AppendData(nil, make([]byte, benchPayload))})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("mailer", func(b *testing.B) {
		in := &countInbox{}
		m, err := NewMailer(MailConfig{Registry: reg, Local: countDelivery{in: in}, Complete: func(uint64, any, error) {}})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := m.Handle("a", 1, frame); err != nil {
				b.Fatal(err)
			}
		}
		if in.n.Load() == 0 {
			b.Fatal("nothing delivered")
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			env, err := UnmarshalEnvelope(frame)
			if err != nil {
				b.Fatal(err)
			}
			t := env.(*Tell)
			if _, err := RefOf(&t.To); err != nil {
				b.Fatal(err)
			}
			if _, err := reg.Decode(t.Tag, t.Body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMailHandleRun isolates what the run hand-off saves on the
// receiving node: runs of 64 tell frames, as a lane reader collects them,
// handed to Mailer.Handle one frame at a time (the baseline) and to
// Mailer.HandleBatch at once, for a real actor of an ariel scheduler,
// with one recipient and with four interleaved. Reported per message.
func BenchmarkMailHandleRun(b *testing.B) {
	const run = 64
	for _, rcpts := range []int{1, 4} {
		for _, batch := range []bool{false, true} {
			name := fmt.Sprintf("rcpts=%d/per-frame", rcpts)
			if batch {
				name = fmt.Sprintf("rcpts=%d/run", rcpts)
			}
			b.Run(name, func(b *testing.B) {
				sb := benchScheduler(b, "b")
				w := newWindow()
				if err := sb.Register("sink", func(string) actor.Actor {
					return actor.Func(func(_ actor.Context, msg any) {
						if _, ok := msg.(benchMsg); ok {
							w.handled()
						}
					})
				}, 0); err != nil {
					b.Fatal(err)
				}
				m, err := NewMailer(MailConfig{Registry: benchRegistry(b), Local: WithInboxes(sb, sb.Inbox),
					Complete: func(uint64, any, error) {}})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				frames := make([][]byte, run)
				for i := range frames {
					f, err := MarshalEnvelope(&Tell{To: ActorIDOf(actor.Virtual("sink", fmt.Sprint(i%rcpts))), Tag: 100,
						Body: bare.AppendData(nil, make([]byte, benchPayload))})
					if err != nil {
						b.Fatal(err)
					}
					frames[i] = f
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				sent := int64(0)
				for range (b.N + run - 1) / run {
					w.wait(sent)
					if batch {
						if err := m.HandleBatch("a", 1, frames); err != nil {
							b.Fatal(err)
						}
					} else {
						for _, f := range frames {
							if err := m.Handle("a", 1, f); err != nil {
								b.Fatal(err)
							}
						}
					}
					sent += run
				}
				w.until(b, sent, func() string { return fmt.Sprintf("%+v", m.Stats()) })
				b.StopTimer()
				if r := m.Stats().RefusalsSent; r != 0 {
					b.Fatalf("%d tells refused", r)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(sent), "ns/msg")
				// CPU time of the process (the handler and the actor's
				// worker) per message: what the layer costs, less moved by
				// other work on the machine than the wall clock.
				b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(sent), "cpu-ns/msg")
			})
		}
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
