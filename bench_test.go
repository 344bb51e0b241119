package tempest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/tempesttest"
)

// BenchmarkAsk compares an ask whose actor lives on the asking node
// (direct: scheduler only) with one forwarded to the owner on another
// node (QUIC round trip, encoding, the owner's fence and scheduler), in
// one two-node cluster on loopback. The baseline, run first, is an ask on
// a standalone node to a kind that declares no message types
// (standalone-untyped: nothing vetted, no cluster routing); "standalone"
// is the demo echo kind, whose declared types every ask is vetted and
// normalised against. Every case reports its time over the baseline's
// (x-untyped); a cluster case also reports the reads of each node's
// placement table per ask (n1-lookups/op on the caller, n2-lookups/op).
func BenchmarkAsk(b *testing.B) {
	solo, err := tempest.New(tempest.Config{Name: "solo", DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	if err := demo.Register(solo, demo.Options{}); err != nil {
		b.Fatal(err)
	}
	rawEcho := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) { ctx.Reply(msg) })
	}
	if err := solo.Register("raw-echo", rawEcho, tempest.KindOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := solo.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer solo.Close(context.Background())

	c := demoCluster(b, tempesttest.Options{Nodes: 2})
	n1 := c.Node("n1")
	direct, forwarded := "", ""
	for k := 0; direct == "" || forwarded == ""; k++ {
		key := fmt.Sprintf("k%d", k)
		owner, _, err := n1.Locate(n1.Ref(demo.Echo, key))
		if err != nil {
			b.Fatal(err)
		}
		if owner == "n1" && direct == "" {
			direct = key
		} else if owner == "n2" && forwarded == "" {
			forwarded = key
		}
	}
	// Every read of each cluster node's applied placement table, so that
	// a cluster case reports its lookups per ask on the caller (n1) and
	// on n2, the owner of the forwarded case (the nodes' background loops
	// add a little, spread over b.N asks).
	var reads [2]atomic.Int64
	tempest.ObservePlacementReads(n1, func() { reads[0].Add(1) })
	tempest.ObservePlacementReads(c.Node("n2"), func() { reads[1].Add(1) })
	ctx := context.Background()
	msg := demo.EchoIn{Text: "benchmark"}
	var base float64 // ns per ask of the baseline
	for _, bc := range []struct {
		name string
		n    *tempest.Node
		kind string
		key  string
	}{
		{"standalone-untyped", solo, "raw-echo", "k"},
		{"standalone", solo, demo.Echo, "k"},
		{"cluster-direct", n1, demo.Echo, direct},
		{"cluster-forwarded", n1, demo.Echo, forwarded},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ref := bc.n.Ref(bc.kind, bc.key)
			if _, err := bc.n.Ask(ctx, ref, msg); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			before := [2]int64{reads[0].Load(), reads[1].Load()}
			b.ResetTimer()
			for range b.N {
				if _, err := bc.n.Ask(ctx, ref, msg); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if bc.n == n1 {
				b.ReportMetric(float64(reads[0].Load()-before[0])/float64(b.N), "n1-lookups/op")
				b.ReportMetric(float64(reads[1].Load()-before[1])/float64(b.N), "n2-lookups/op")
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if bc.kind == "raw-echo" {
				base = ns
			} else if base > 0 {
				b.ReportMetric(ns/base, "x-untyped")
			}
		})
	}
}

// BenchmarkAskTypedInterleaved measures the typed layer of an ask on a
// standalone node with its baseline interleaved: blocks of 64 asks
// alternate between a kind that declares no message types (nothing
// vetted) and the same actor in a kind that declares its message type
// (vetted and normalised), so that both see the same machine load. It
// reports the time per ask of each and their ratio (typed-x-untyped).
func BenchmarkAskTypedInterleaved(b *testing.B) {
	n, err := tempest.New(tempest.Config{Name: "solo", DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	echo := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) { ctx.Reply(msg) })
	}
	if err := n.Register("untyped", echo, tempest.KindOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := n.Register("typed", echo, tempest.KindOptions{
		Messages: []tempest.Message{tempest.SchemaMessage[demo.EchoIn]()}}); err != nil {
		b.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer n.Close(context.Background())
	ctx := context.Background()
	msg := demo.EchoIn{Text: "benchmark"}
	refs := [2]actor.Ref{n.Ref("untyped", "k"), n.Ref("typed", "k")}
	for _, ref := range refs {
		if _, err := n.Ask(ctx, ref, msg); err != nil {
			b.Fatal(err)
		}
	}
	const block = 64
	var spent [2]time.Duration
	var asks [2]int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		which := (i / block) % 2
		k := min(block, b.N-i)
		start := time.Now()
		for range k {
			if _, err := n.Ask(ctx, refs[which], msg); err != nil {
				b.Fatal(err)
			}
		}
		spent[which] += time.Since(start)
		asks[which] += k
		i += k
	}
	b.StopTimer()
	if asks[0] > 0 && asks[1] > 0 {
		u := float64(spent[0].Nanoseconds()) / float64(asks[0])
		t := float64(spent[1].Nanoseconds()) / float64(asks[1])
		b.ReportMetric(u, "untyped-ns/ask")
		b.ReportMetric(t, "typed-ns/ask")
		b.ReportMetric(t/u, "typed-x-untyped")
	}
}

// BenchmarkFailover measures the time from killing a node (no leave)
// until every actor it owned answers again on the survivors, with the
// test timing and with the default timing (run with -benchtime 1x).
func BenchmarkFailover(b *testing.B) {
	testGossip, testPlacement := tempesttest.FastTiming()
	for _, tc := range []struct {
		name   string
		gossip membership.Timing
		place  placement.Config
	}{
		{"test-timing", testGossip, testPlacement},
		{"default-timing", membership.Timing{}, placement.Config{Shards: 64}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += failoverOnce(b, tc.gossip, tc.place)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func failoverOnce(b *testing.B, gossip membership.Timing, place placement.Config) time.Duration {
	b.StopTimer()
	c := demoCluster(b, tempesttest.Options{Nodes: 3, Configure: func(_ string, cfg *tempest.Config) {
		cfg.Cluster.GossipTiming, cfg.Cluster.Placement = gossip, place
	}})
	n1 := c.Node("n1")
	var keys []string
	for k := 0; len(keys) < 8; k++ {
		key := fmt.Sprintf("k%d", k)
		if owner, _, _ := n1.Locate(n1.Ref(demo.Echo, key)); owner == "n3" {
			keys = append(keys, key)
		}
	}
	ctx := context.Background()
	for _, key := range keys {
		if _, err := n1.Ask(ctx, n1.Ref(demo.Echo, key), demo.EchoIn{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	killed := time.Now()
	c.Kill("n3")
	waitForB(b, 120*time.Second, func() bool {
		for _, key := range keys {
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := n1.Ask(actx, n1.Ref(demo.Echo, key), demo.EchoIn{})
			cancel()
			if err != nil {
				return false
			}
		}
		return true
	})
	d := time.Since(killed)
	b.StopTimer()
	c.KillAll()
	return d
}

func waitForB(b *testing.B, d time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %v", d)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising
	}
}

// BenchmarkDurableAskCluster compares, in one two-node cluster on
// loopback, an ask forwarded to an actor on the other node that persists
// nothing (echo, the baseline) with a forwarded Add to the demo counter,
// which is durable by default (reply after commit on the owner's disk),
// serially and with 32 clients on 32 counters (group commit on the
// owner). Every case reports p50 and p99; the counter's also as a ratio
// to the baseline's p50.
func BenchmarkDurableAskCluster(b *testing.B) {
	c := demoCluster(b, tempesttest.Options{Nodes: 2})
	n1 := c.Node("n1")
	remote := func(kind string, n int) []string {
		var keys []string
		for k := 0; len(keys) < n; k++ {
			key := fmt.Sprintf("%s%d", kind, k)
			if owner, _, err := n1.Locate(n1.Ref(kind, key)); err != nil {
				b.Fatal(err)
			} else if owner == "n2" {
				keys = append(keys, key)
			}
		}
		return keys
	}
	ctx := context.Background()
	var baseP50 float64
	for _, bc := range []struct {
		name    string
		kind    string
		msg     any
		clients int
	}{
		{"forwarded-echo/serial", demo.Echo, demo.EchoIn{Text: "benchmark"}, 1},
		{"forwarded-durable-add/serial", demo.Counter, demo.Add{N: 1}, 1},
		{"forwarded-echo/32-clients", demo.Echo, demo.EchoIn{Text: "benchmark"}, 32},
		{"forwarded-durable-add/32-clients", demo.Counter, demo.Add{N: 1}, 32},
	} {
		b.Run(bc.name, func(b *testing.B) {
			keys := remote(bc.kind, bc.clients)
			for _, key := range keys {
				if _, err := n1.Ask(ctx, n1.Ref(bc.kind, key), bc.msg); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([][]time.Duration, bc.clients)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i, key := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ref := n1.Ref(bc.kind, key)
					for next.Add(1) <= int64(b.N) {
						t := time.Now()
						if _, err := n1.Ask(ctx, ref, bc.msg); err != nil {
							b.Error(err)
							return
						}
						lat[i] = append(lat[i], time.Since(t))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			if len(all) == 0 {
				return
			}
			slices.Sort(all)
			p50 := float64(all[len(all)/2].Nanoseconds())
			b.ReportMetric(p50, "p50-ns")
			b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "asks/s")
			if bc.kind == demo.Echo {
				baseP50 = p50
			} else if baseP50 > 0 {
				b.ReportMetric(p50/baseP50, "p50-x-echo")
			}
		})
	}
}

// BenchmarkReplicatedDurableAsk compares, on three-node clusters on
// loopback, asks forwarded from n1 to actors owned by another node: echo
// (nothing persisted; the baseline of each cluster), a durable Add to
// the demo counter with one replica per shard (reply after commit on the
// owner's disk only), with three replicas (the default: committed once
// both followers received it), and with three replicas and
// SyncReplicas (committed once both fsync'd it). Serially, with 32
// clients on 32 counters and with 128 on 128. Each case reports p50, p99,
// asks/s and its p50 over the echo baseline's measured on the same
// cluster with as many clients.
func BenchmarkReplicatedDurableAsk(b *testing.B) {
	for _, cl := range []struct {
		name     string
		replicas int
		sync     bool
	}{
		{"local-bolt-only", 1, false},
		{"replicated", 3, false},
		{"replicated-fsync", 3, true},
	} {
		b.Run(cl.name, func(b *testing.B) {
			c := demoCluster(b, tempesttest.Options{Nodes: 3, Configure: func(_ string, cfg *tempest.Config) {
				cfg.Cluster.Placement.Replicas = cl.replicas
				cfg.Cluster.Replication.SyncReplicas = cl.sync
			}})
			n1 := c.Node("n1")
			waitForB(b, 60*time.Second, func() bool {
				if c.Unsettled() != "" {
					return false
				}
				// Every set complete (catch-ups done) before measuring.
				tb := n1.Table()
				for _, gn := range tb.GroupNames() {
					for _, s := range tb.Groups[gn].Shards {
						if len(s.Replicas) != cl.replicas {
							return false
						}
					}
				}
				return true
			})
			var baseP50 float64
			for _, bc := range []struct {
				name    string
				kind    string
				msg     any
				clients int
			}{
				{"echo/serial", demo.Echo, demo.EchoIn{Text: "benchmark"}, 1},
				{"durable-add/serial", demo.Counter, demo.Add{N: 1}, 1},
				{"echo/32-clients", demo.Echo, demo.EchoIn{Text: "benchmark"}, 32},
				{"durable-add/32-clients", demo.Counter, demo.Add{N: 1}, 32},
				{"echo/128-clients", demo.Echo, demo.EchoIn{Text: "benchmark"}, 128},
				{"durable-add/128-clients", demo.Counter, demo.Add{N: 1}, 128},
			} {
				b.Run(bc.name, func(b *testing.B) {
					p50 := measureForwarded(b, c.Nodes(), bc.kind, bc.msg, bc.clients)
					if bc.kind == demo.Echo {
						baseP50 = p50
					} else if baseP50 > 0 {
						b.ReportMetric(p50/baseP50, "p50-x-echo")
					}
				})
			}
		})
	}
}

// measureForwarded runs b.N asks from n1 to clients actors of kind not
// owned by n1, from clients goroutines, and reports p50, p99, asks/s and
// the process's CPU time per ask (all three nodes and the clients:
// cpu-us/op), and the nodes' group commits per ask (commits/op) and
// records per commit (records/commit); it returns the p50 in ns. nodes[0]
// sends.
func measureForwarded(b *testing.B, nodes []*tempest.Node, kind string, msg any, clients int) float64 {
	ctx, n1 := context.Background(), nodes[0]
	commits := func() (groups, records uint64) {
		for _, n := range nodes {
			st := n.Stats().Supervisor.Store
			groups, records = groups+st.Groups, records+st.Writes+st.Replicated
		}
		return groups, records
	}
	var keys []string
	for k := 0; len(keys) < clients; k++ {
		key := fmt.Sprintf("%s%d", kind, k)
		if owner, _, err := n1.Locate(n1.Ref(kind, key)); err != nil {
			b.Fatal(err)
		} else if owner != n1.Name() {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		if _, err := n1.Ask(ctx, n1.Ref(kind, key), msg); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([][]time.Duration, clients)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := cpuPerOp(b)
	groups0, records0 := commits()
	start := time.Now()
	for i, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := n1.Ref(kind, key)
			for next.Add(1) <= int64(b.N) {
				t := time.Now()
				if _, err := n1.Ask(ctx, ref, msg); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	cpu(len(all))
	if len(all) == 0 {
		return 0
	}
	if groups, records := commits(); groups > groups0 {
		b.ReportMetric(float64(groups-groups0)/float64(len(all)), "commits/op")
		b.ReportMetric(float64(records-records0)/float64(groups-groups0), "records/commit")
	}
	slices.Sort(all)
	p50 := float64(all[len(all)/2].Nanoseconds())
	b.ReportMetric(p50, "p50-ns")
	b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "asks/s")
	return p50
}
