package tempest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/tempesttest"
)

// switchSampler is a sampler whose ratio the benchmark changes between
// runs, so one traced cluster serves every sampling rate.
type switchSampler struct {
	s atomic.Pointer[sdktrace.Sampler]
}

func (w *switchSampler) set(ratio float64) {
	s := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	w.s.Store(&s)
}

func (w *switchSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return (*w.s.Load()).ShouldSample(p)
}

func (w *switchSampler) Description() string { return "switch" }

// discardExporter drops what the batcher hands it: the benchmark
// measures the node's cost of tracing, not a collector's.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// tellWindow is how many tells BenchmarkTracing's tell cases send before
// one ask to the same actor, whose answer says they were all handled (the
// link and the mailbox keep their order): so no tell is refused for a
// full queue, and the time covers their handling on the owner.
const tellWindow = 64

// BenchmarkTracing compares the cost of tracing on a cross-node ask and a
// cross-node tell (two-node clusters on loopback, QUIC with mTLS):
//
//   - off: no tracer provider (the default), on its own cluster;
//   - 0pct, 1pct, 100pct: a cluster whose nodes trace with the
//     OpenTelemetry SDK at that sampling ratio (ParentBased(TraceIDRatio),
//     spans batched, then discarded: the node's cost, not a collector's);
//   - compiled-out: only in a build with -tags tempest_notrace, which has
//     no tracing hooks at all, instead of the cases above.
//
// The traced cases report x-off, their time per message over off's in the
// same run. A build's compiled-out case is compared with another build's
// off case by running both, interleaved: see docs/BENCHMARKS.md,
// "Tracing", for the command. A tell case sends tellWindow tells, then
// one ask to the same actor (included in the time: 1/64 of an ask per
// tell), so every tell was handled when the time is read.
func BenchmarkTracing(b *testing.B) {
	samp := &switchSampler{}
	samp.set(1)
	type mode struct {
		name  string
		c     *tempesttest.Cluster
		ratio float64
	}
	var modes []mode
	if !tempest.TracingBuilt {
		// A second cluster idles beside the measured one, as the traced
		// one does beside off's in the other build: both builds measure
		// with four nodes' background work (gossip, raft) on the machine.
		tempesttest.New(b, tempesttest.Options{Nodes: 2, Register: registerHops})
		modes = []mode{{"compiled-out", tempesttest.New(b, tempesttest.Options{Nodes: 2, Register: registerHops}), 0}}
	} else {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(samp))
		defer tp.Shutdown(context.Background())
		off := tempesttest.New(b, tempesttest.Options{Nodes: 2, Register: registerHops})
		on := tempesttest.New(b, tempesttest.Options{Nodes: 2, Register: registerHops,
			Configure: func(_ string, cfg *tempest.Config) { cfg.TracerProvider = tp }})
		modes = []mode{{"off", off, 0}, {"0pct", on, 0}, {"1pct", on, 0.01}, {"100pct", on, 1}}
	}
	remoteKey := func(c *tempesttest.Cluster) string {
		for i := 0; ; i++ {
			key := fmt.Sprintf("k%d", i)
			if c.Owner(actor.Virtual("hopR", key)).Name() == "n2" {
				return key
			}
		}
	}
	ctx := context.Background()
	for _, path := range []string{"ask", "tell"} {
		var offNs float64
		for _, m := range modes {
			b.Run(path+"/"+m.name, func(b *testing.B) {
				samp.set(m.ratio)
				n1 := m.c.Node("n1")
				ref := actor.Virtual("hopR", remoteKey(m.c))
				if _, err := n1.Ask(ctx, ref, hopR("")); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for i := range b.N {
					if path == "tell" {
						if err := n1.Tell(ref, hopR("")); err != nil {
							b.Fatal(err)
						}
						if (i+1)%tellWindow != 0 && i+1 != b.N {
							continue
						}
					}
					if _, err := n1.Ask(ctx, ref, hopR("")); err != nil {
						b.Fatal(err)
					}
				}
				ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
				if m.name == "off" {
					offNs = ns
				} else if offNs > 0 {
					b.ReportMetric(ns/offNs, "x-off")
				}
			})
		}
	}
}
