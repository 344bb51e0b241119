package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
)

// fenceWhere asks an actor which node runs it; the reply names the node.
type fenceWhere struct{ Node string }

// fenceRuns counts the fenceWhere turns per node/key (under fenceMu).
var (
	fenceMu   sync.Mutex
	fenceRuns = map[string]int{}
)

// fenceNever is the message of a kind that no node can host.
type fenceNever struct{}

func fenceMessages() (where, never tempest.Message) {
	where = tempest.CodecOf[fenceWhere](2001, "FenceWhere",
		func(dst []byte, v fenceWhere) ([]byte, error) { return append(dst, v.Node...), nil },
		func(b []byte) (fenceWhere, error) { return fenceWhere{Node: string(b)}, nil })
	never = tempest.CodecOf[fenceNever](2002, "FenceNever",
		func(dst []byte, _ fenceNever) ([]byte, error) { return dst, nil },
		func([]byte) (fenceNever, error) { return fenceNever{}, nil })
	return where, never
}

// fenceCluster starts nodes n1..n<nodes> (BootstrapExpect nodes) with
// the manifest man gives each name and the kinds "fair" (requires
// Fairness) and "never" (requires Fairness and Admission) instead of the
// demo kinds, and returns at once: no cluster with a kind no node can
// host settles.
func fenceCluster(t *testing.T, nodes int, man func(name string) manifest.Manifest) *tempesttest.Cluster {
	t.Helper()
	where, never := fenceMessages()
	register := func(n *tempest.Node) error {
		tempest.SetManifest(n, man(n.Name()))
		name := n.Name()
		fair := func(key string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				if _, ok := msg.(fenceWhere); ok {
					fenceMu.Lock()
					fenceRuns[name+"/"+key]++
					fenceMu.Unlock()
					ctx.Reply(fenceWhere{Node: name})
				}
			})
		}
		if err := n.Register("fair", fair, tempest.KindOptions{
			KindOptions: prospero.KindOptions{RequiredClauses: []manifest.ClauseID{manifest.Fairness}},
			Messages:    []tempest.Message{where},
		}); err != nil {
			return err
		}
		return n.Register("never", fair, tempest.KindOptions{
			KindOptions: prospero.KindOptions{RequiredClauses: []manifest.ClauseID{manifest.Fairness, manifest.Admission}},
			Messages:    []tempest.Message{never},
		})
	}
	return tempesttest.New(t, tempesttest.Options{Nodes: nodes, Register: register, NoWait: true, Unpausable: true})
}

// TestClusterPlacesKindsByFullManifests: three nodes with three different
// manifests (so no digest matches the leader's). A kind that requires
// Fairness is placed on the two nodes that discharge it, never on the
// third, and answers from there; a kind that requires a clause pair no
// node discharges fails with ErrNoEligibleNode.
func TestClusterPlacesKindsByFullManifests(t *testing.T) {
	build := func(workers int, fair bool) manifest.Manifest {
		m := manifest.Build(manifest.Options{Capacities: manifest.Capacities{Workers: workers}})
		if fair {
			m.Clauses[manifest.Fairness] = manifest.Discharged
			m.Clauses[manifest.Admission] = manifest.Assumed(manifest.SubstrateHosted)
		}
		return m
	}
	mans := map[string]manifest.Manifest{"n1": build(2, true), "n2": build(3, true), "n3": build(2, false)}
	if mans["n1"].Digest() == mans["n2"].Digest() {
		t.Fatal("n1 and n2 must gossip different digests")
	}
	c := fenceCluster(t, 3, func(name string) manifest.Manifest { return mans[name] })
	nodes := map[string]*tempest.Node{}
	for _, n := range c.Nodes() {
		nodes[n.Name()] = n
	}
	const keys = 32
	// Every node's table records every node's full manifest, and every
	// "fair" key is placed on n1 or n2, with both used.
	why := ""
	waitFor(t, 60*time.Second, "fair keys placed on n1 and n2 only", func() bool {
		for _, n := range nodes {
			if !n.Ready() {
				why = n.Name() + " not ready"
				return false
			}
			tab := n.Table()
			if tab == nil {
				why = n.Name() + " has no table"
				return false
			}
			for name := range mans {
				// The node's manifest: the one set, with its kinds'
				// capacities added at Start.
				e, ok := tab.Nodes[name]
				if !ok || e.Manifest.Digest() != nodes[name].Manifest().Digest() {
					why = fmt.Sprintf("%s's table lacks %s's manifest", n.Name(), name)
					return false
				}
			}
		}
		used := map[string]int{}
		tab := nodes["n3"].Table()
		for k := 0; k < keys; k++ {
			loc, err := tab.Locate("fair", fmt.Sprintf("k%d", k))
			if err != nil || loc.Moving {
				why = fmt.Sprintf("locate k%d: %+v, %v", k, loc, err)
				return false
			}
			used[loc.Owner]++
		}
		why = fmt.Sprintf("owners %v", used)
		return used["n3"] == 0 && used["n1"] > 0 && used["n2"] > 0 && used[""] == 0
	}, &why)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, from := range []string{"n1", "n2", "n3"} {
		for k := 0; k < keys; k++ {
			ref := actor.Virtual("fair", fmt.Sprintf("k%d", k))
			got, err := nodes[from].Ask(ctx, ref, fenceWhere{})
			for errors.Is(err, actor.ErrProcessUnavailable) && ctx.Err() == nil {
				// A lease may lapse for a moment on a busy machine.
				time.Sleep(20 * time.Millisecond)
				got, err = nodes[from].Ask(ctx, ref, fenceWhere{})
			}
			if err != nil {
				t.Fatalf("%s asks %v: %v", from, ref, err)
			}
			if ran := got.(fenceWhere).Node; ran != "n1" && ran != "n2" {
				t.Fatalf("%v ran on %s, which does not discharge Fairness", ref, ran)
			}
		}
	}
	for _, from := range []string{"n1", "n3"} {
		if _, err := nodes[from].Ask(ctx, actor.Virtual("never", "x"), fenceNever{}); !errors.Is(err, actor.ErrNoEligibleNode) {
			t.Fatalf("%s asks a kind no node can host: %v, want ErrNoEligibleNode", from, err)
		}
	}
}

// TestClusterStaleEpochRefused: in a real cluster, mail stamped with an
// epoch other than the shard's current one (older: as if routed before
// the shard's last move; newer: crafted) reaches the owner and is refused
// NOT_OWNER without running; mail with the current stamp runs.
func TestClusterStaleEpochRefused(t *testing.T) {
	man := manifest.Build(manifest.Options{Capacities: manifest.Capacities{Workers: 2}})
	man.Clauses[manifest.Fairness] = manifest.Discharged
	fenceMu.Lock()
	clear(fenceRuns)
	fenceMu.Unlock()
	nodes := map[string]*tempest.Node{}
	ready := func(names ...string) func() bool {
		return func() bool {
			for _, name := range names {
				if !nodes[name].Ready() {
					return false
				}
			}
			return true
		}
	}
	// Two nodes form the cluster; the third joins later and takes shards
	// over through handoffs, so those shards have moved (epoch 2 or more)
	// and a stamp one below is stale, not unstamped.
	c := fenceCluster(t, 2, func(string) manifest.Manifest { return man })
	for _, n := range c.Nodes() {
		nodes[n.Name()] = n
	}
	waitFor(t, 60*time.Second, "n1 and n2 ready", ready("n1", "n2"))
	nodes["n3"] = c.Start("n3")
	var key, owner, why string
	var epoch uint64
	waitFor(t, 60*time.Second, "a key on a shard that moved", func() bool {
		if !ready("n1", "n2", "n3")() {
			why = "not all ready"
			return false
		}
		// Settled: no move in progress anywhere, so the owner judges the
		// stamps and not a handoff (it refuses mail for a moving shard
		// NOT_SERVING, whatever the stamp).
		if c.Unsettled() != "" {
			why = "moves in progress"
			return false
		}
		tab := nodes["n1"].Table()
		for k := 0; k < 256; k++ {
			loc, err := tab.Locate("fair", fmt.Sprintf("s%d", k))
			if err == nil && !loc.Moving && loc.Owner != "" && loc.Owner != "n1" && loc.Epoch >= 2 {
				key, owner, epoch = fmt.Sprintf("s%d", k), loc.Owner, loc.Epoch
				return true
			}
		}
		why = fmt.Sprintf("no moved shard among 256 keys; n3 owns %d shards", len(tab.Owned("n3")))
		return false
	}, &why)
	ref := actor.Virtual("fair", key)
	stale := []uint64{epoch - 1, epoch + 3}
	// Refused stamps count as NOT_OWNER, or as NOT_SERVING when the owner
	// could not judge them at that moment (its lease was being renewed
	// on a busy machine); either way they are not run, which runs() checks.
	refused := func() uint64 {
		r := nodes[owner].Stats().Mail.RefusedOut
		return r.NotOwner() + r.NotServing()
	}
	before := refused()
	for _, e := range stale {
		if err := tempest.TellStamped(nodes["n1"], owner, e, ref, fenceWhere{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "the stale tells refused", func() bool {
		return refused()-before == uint64(len(stale))
	})
	if err := tempest.TellStamped(nodes["n1"], owner, epoch, ref, fenceWhere{}); err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		fenceMu.Lock()
		defer fenceMu.Unlock()
		return fenceRuns[owner+"/"+key]
	}
	waitFor(t, 20*time.Second, "the current tell to run", func() bool { return runs() > 0 })
	if n := runs(); n != 1 {
		t.Fatalf("%s ran %d times at %s; only the tell stamped with the current epoch %d may run (stale %v)", ref, n, owner, epoch, stale)
	}
	t.Logf("%s on %s at epoch %d; refused stamps %v", ref, owner, epoch, stale)
}
