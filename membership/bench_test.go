package membership_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/membership"
)

// BenchmarkDetection measures how long the survivors of a three-node
// cluster take to report a member gone: after a crash (Halt) with each
// timing profile, and after a graceful leave as the baseline. One LAN
// iteration takes several seconds by design; -benchtime 1x is enough.
func BenchmarkDetection(b *testing.B) {
	for _, tc := range []struct {
		name   string
		timing membership.Timing
		crash  bool
	}{
		{"leave-baseline/fast", membership.FastTiming(), false},
		{"crash/fast", membership.FastTiming(), true},
		{"leave-baseline/lan", membership.LANTiming(), false},
		{"crash/lan", membership.LANTiming(), true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if testing.Short() {
				b.Skip("takes seconds per iteration")
			}
			// The timer keeps running through cluster setup on purpose:
			// with it stopped, the framework would see a fast op and run
			// hundreds of multi-second iterations. Read ms-to-event.
			var total time.Duration
			for i := 0; i < b.N; i++ {
				total += detectOnce(b, tc.timing, tc.crash, i)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-event")
		})
	}
}

func detectOnce(b *testing.B, timing membership.Timing, crash bool, iter int) time.Duration {
	b.Helper()
	ctx := context.Background()
	var nodes []*membership.Membership
	for j := range 3 {
		cfg := nodeConfig(fmt.Sprintf("d%d-%d", iter, j))
		cfg.Timing = timing
		if j > 0 {
			cfg.Seeds = []string{nodes[0].Local().Addr.String()}
		}
		m, err := membership.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, waitFor)
		err = m.WaitJoined(wctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, m)
	}
	defer func() {
		for _, m := range nodes {
			_ = m.Close(ctx)
		}
	}()
	observer, victim := nodes[0], nodes[2]
	deadline := time.Now().Add(waitFor)
	for len(observer.Members()) != 3 {
		if time.Now().After(deadline) {
			b.Fatal("cluster did not form")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sub := observer.Subscribe()
	defer sub.Close()
	start := time.Now()
	if crash {
		victim.Halt()
	} else if err := victim.Close(ctx); err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*waitFor)
	defer cancel()
	for {
		ev, err := sub.Next(wctx)
		if err != nil {
			b.Fatalf("no departure event: %v", err)
		}
		if ev.Member.Name == victim.LocalName() && ev.Member.Status.Gone() {
			return time.Since(start)
		}
	}
}

// BenchmarkMetaCodec compares the gossip metadata encoding with JSON of
// the same record (the baseline).
func BenchmarkMetaCodec(b *testing.B) {
	meta := membership.Meta{
		Name: "tempest-2", QUICAddr: "10.0.3.17:7947", HTTPAddr: "127.0.0.1:7948",
		ManifestDigest: "sha256:9f2c4e1b7a", Kinds: []string{"account", "cart", "counter", "session"},
		Version: "v0.4.0", BootID: 0x1234567890,
	}
	b.Run("gossip", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			enc, dec := membership.MetaCodecForBench(meta)
			n = enc
			_ = dec
		}
		b.ReportMetric(float64(n), "bytes")
	})
	b.Run("json-baseline", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			enc, err := json.Marshal(meta)
			if err != nil {
				b.Fatal(err)
			}
			var out membership.Meta
			if err := json.Unmarshal(enc, &out); err != nil {
				b.Fatal(err)
			}
			n = len(enc)
		}
		b.ReportMetric(float64(n), "bytes")
	})
}
