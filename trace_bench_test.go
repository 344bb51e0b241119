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

// BenchmarkAskTracing compares a cross-node ask on a two-node cluster
// without a tracer provider (tracing off, the default) with the same ask
// on a two-node cluster that traces at 1 % and 100 % sampling (spans
// batched and discarded). The traced cases report x-off: their time per
// ask over the untraced one measured in the same run.
func BenchmarkAskTracing(b *testing.B) {
	samp := &switchSampler{}
	samp.set(1)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(samp))
	defer tp.Shutdown(context.Background())
	off := tempesttest.New(b, tempesttest.Options{Nodes: 2, Register: registerHops})
	on := tempesttest.New(b, tempesttest.Options{Nodes: 2, Register: registerHops,
		Configure: func(_ string, cfg *tempest.Config) { cfg.TracerProvider = tp }})
	remoteKey := func(c *tempesttest.Cluster) string {
		for i := 0; ; i++ {
			key := fmt.Sprintf("k%d", i)
			if c.Owner(actor.Virtual("hopR", key)).Name() == "n2" {
				return key
			}
		}
	}
	ctx := context.Background()
	var offNs float64
	for _, bc := range []struct {
		name  string
		c     *tempesttest.Cluster
		ratio float64
	}{{"off", off, 0}, {"sampled-1pct", on, 0.01}, {"sampled-100pct", on, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			samp.set(bc.ratio)
			n1 := bc.c.Node("n1")
			ref := actor.Virtual("hopR", remoteKey(bc.c))
			if _, err := n1.Ask(ctx, ref, hopR("")); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if _, err := n1.Ask(ctx, ref, hopR("")); err != nil {
					b.Fatal(err)
				}
			}
			ns := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			if bc.c == off {
				offNs = ns
			} else if offNs > 0 {
				b.ReportMetric(ns/offNs, "x-off")
			}
		})
	}
}
