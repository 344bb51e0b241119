package prospero_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkDormantMemory shows that dormant identities cost the
// supervisor nothing: a million identities are activated and passivated
// through the core, and the heap it retains afterwards is measured per
// identity. The baseline keeps the same identities active. One op is
// the whole million.
func BenchmarkDormantMemory(b *testing.B) {
	const identities = 1_000_000
	ids := make([]prospero.Identity, identities)
	for i := range ids {
		ids[i] = prospero.Identity{Kind: "counter", Key: fmt.Sprint(i)}
	}
	for _, dormant := range []bool{false, true} {
		name := "baseline-active-1M"
		if dormant {
			name = "dormant-1M"
		}
		b.Run(name, func(b *testing.B) {
			var perID float64
			for b.Loop() {
				reg := prospero.NewRegistry()
				if _, err := reg.Register("counter", prospero.KindOptions{}); err != nil {
					b.Fatal(err)
				}
				before := heapInUse()
				core := prospero.NewCore(reg, prospero.CoreConfig{})
				now := time.Unix(0, 0)
				var cmds []prospero.Command
				for _, id := range ids {
					if err := core.Doorbell(id, now); err != nil {
						b.Fatal(err)
					}
					cmds = core.Drain(cmds[:0])
					core.Loaded(id, cmds[0].LoadIncarnation(prospero.Record{}), 0, false, now)
					if dormant {
						core.Passivate(id, now)
						core.Drain(cmds[:0])
						core.Passivated(id, 0, false, now)
					}
				}
				after := heapInUse()
				if want := identities; !dormant && core.Entries() != want || dormant && core.Entries() != 0 {
					b.Fatalf("%d entries", core.Entries())
				}
				perID = float64(int64(after)-int64(before)) / identities
				runtime.KeepAlive(core)
			}
			b.ReportMetric(perID, "heap-B/identity")
		})
	}
}
