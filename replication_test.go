package tempest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/replica"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire"
)

// addAll sends adds Adds of 1 to each counter key from every node in
// nodes, concurrently, and returns how many each key acknowledged and
// how many were sent.
func addAll(t *testing.T, nodes []*tempest.Node, keys []string, adds int) (acked, sent map[string]int) {
	t.Helper()
	var mu sync.Mutex
	acked, sent = map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	for _, n := range nodes {
		for _, key := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range adds {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := n.Ask(ctx, n.Ref(demo.Counter, key), demo.Add{N: 1})
					cancel()
					mu.Lock()
					sent[key]++
					if err == nil {
						acked[key]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return acked, sent
}

func counterValue(ctx context.Context, n *tempest.Node, key string) (int64, error) {
	got, err := n.Ask(ctx, n.Ref(demo.Counter, key), demo.Get{})
	if err != nil {
		return 0, err
	}
	return got.(demo.CounterValue).N, nil
}

// A counter's acknowledged Adds survive the crash of its owner: the new
// owner is a replica of the shard and hydrates from its own copy.
func TestReplicatedCounterSurvivesOwnerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	n1 := c.Node("n1")
	tb := n1.Table()
	for _, gn := range tb.GroupNames() {
		for i, s := range tb.Groups[gn].Shards {
			want := tb.WantReplicas(placement.ShardRef{Group: gn, Index: i})
			if len(s.Replicas) != 3 || s.Replicas[0] != s.Owner || !slices.Equal(slices.Sorted(slices.Values(s.Replicas)), slices.Sorted(slices.Values(want))) {
				t.Fatalf("shard %s/%d: owner %s set %v, want the three nodes", gn, i, s.Owner, s.Replicas)
			}
		}
	}
	// Keys owned by the victim, which is not the raft leader (its loss
	// would also elect a leader: that is failover timing's subject).
	leader := n1.Leader()
	var victim string
	for _, n := range c.Nodes() {
		if n.Name() != leader {
			victim = n.Name()
			break
		}
	}
	var keys []string
	for k := 0; len(keys) < 12; k++ {
		key := fmt.Sprintf("c%d", k)
		if owner, _, err := n1.Locate(n1.Ref(demo.Counter, key)); err == nil && owner == victim {
			keys = append(keys, key)
		}
	}
	// The last four are not asked after the crash: their new owners hold
	// them dormant, as a follower's records only.
	acked, sent := addAll(t, c.Nodes(), keys, 15)
	keys, dormant := keys[:8], keys[8:]
	total := 0
	for _, key := range keys {
		total += acked[key]
	}
	if total == 0 {
		t.Fatal("no Add acknowledged")
	}
	vst := c.Node(victim).ReplicationStats()
	if vst.Records == 0 || vst.Batches == 0 {
		t.Fatalf("owner %s replicated nothing: %+v", victim, vst)
	}
	t.Logf("%d Adds acknowledged to %d counters owned by %s; %d records in %d batches to replicas",
		total, len(keys), victim, vst.Records, vst.Batches)

	c.Kill(victim)
	survivors := c.Nodes()
	values := map[string]int64{}
	waitFor(t, 40*time.Second, "every counter answering on the survivors", func() bool {
		for _, key := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			v, err := counterValue(ctx, survivors[0], key)
			cancel()
			if err != nil {
				return false
			}
			values[key] = v
		}
		return true
	})
	for _, key := range keys {
		owner, _, _ := survivors[0].Locate(survivors[0].Ref(demo.Counter, key))
		if v := values[key]; v < int64(acked[key]) || v > int64(sent[key]) {
			t.Errorf("counter %s on %s after its owner's crash: %d, acknowledged %d (sent %d)", key, owner, v, acked[key], sent[key])
		}
	}
	// The new owners list the identities they took over, dormant, though
	// no index of theirs names them.
	for _, key := range dormant {
		var owner string
		waitFor(t, 40*time.Second, key+" owned by a survivor", func() bool {
			owner, _, _ = survivors[0].Locate(survivors[0].Ref(demo.Counter, key))
			return owner != "" && owner != victim
		})
		es, err := c.Node(owner).Actors(ctxT(t), demo.Counter, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(es, tempest.ActorEntry{Key: key}) {
			t.Errorf("%s, taken over by %s from %s's crash, is not in %s's dormant inventory: %+v", key, owner, victim, owner, es)
		}
	}
	checkSingleActivation(t, c)
}

// A follower that crashes leaves the in-sync set of its shards through
// raft before the owner commits without it, and Adds keep being
// acknowledged.
func TestReplicaShrinkBeforeCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	n1 := c.Node("n1")
	leader := n1.Leader()
	// A counter owned by the leader, and one of its followers to crash.
	var key string
	var ref placement.ShardRef
	for k := 0; key == ""; k++ {
		cand := fmt.Sprintf("s%d", k)
		if owner, _, err := n1.Locate(n1.Ref(demo.Counter, cand)); err == nil && owner == leader {
			key = cand
			ref, _ = n1.Table().RefOf(demo.Counter, key)
		}
	}
	owner := c.Node(leader)
	s, _ := owner.Table().Shard(ref)
	follower := s.Followers()[0]
	ctx := ctxT(t)
	if _, err := owner.Ask(ctx, owner.Ref(demo.Counter, key), demo.Add{N: 1}); err != nil {
		t.Fatal(err)
	}
	// The owner shows both followers of its shards, the one that
	// acknowledged the Add with nothing pending.
	lag := replicationOf(t, owner)
	i := slices.IndexFunc(lag, func(r httpapi.PlacementReplica) bool { return r.Follower == follower })
	if len(lag) != 2 || i < 0 || lag[i].Shards == 0 || lag[i].AckedRecords == 0 || lag[i].QueuedRecords+lag[i].InFlightRecords != 0 ||
		lag[i].LagSeconds != 0 || lag[i].LastAckSeconds < 0 {
		t.Fatalf("GET /v1/placement on %s: replication %+v, want both followers, %s having acknowledged", leader, lag, follower)
	}
	followed := lag[i].Shards
	before := owner.ReplicationStats()
	c.Kill(follower)
	// Adds right after the crash: the owner's stream to the follower
	// fails at once (its links closed), so the owner itself removes the
	// follower through raft, long before the leader sees the node down,
	// and only then acknowledges.
	acked := 1
	for range 20 {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := owner.Ask(actx, owner.Ref(demo.Counter, key), demo.Add{N: 1})
		cancel()
		if err != nil {
			t.Logf("Add after the crash: %v", err)
			continue
		}
		acked++
		if got, _ := owner.Table().Shard(ref); got.InSync(follower) {
			t.Fatalf("Add acknowledged after %s crashed while it is still in the set %v", follower, got.Replicas)
		}
	}
	got, _ := owner.Table().Shard(ref)
	st := owner.ReplicationStats()
	t.Logf("set %v after %s crashed; owner stats %+v", got.Replicas, follower, st)
	if got.InSync(follower) || st.Shrinks <= before.Shrinks {
		t.Fatalf("no shrink by the owner: set %v, shrinks %d then %d", got.Replicas, before.Shrinks, st.Shrinks)
	}
	for _, r := range replicationOf(t, owner) {
		if r.Follower == follower && r.Shards >= followed {
			t.Fatalf("GET /v1/placement on %s counts %d shards followed by %s after it left %s's set (%d before)", leader, r.Shards, follower, ref, followed)
		}
	}
	if acked < 15 {
		t.Fatalf("only %d of 21 Adds acknowledged", acked)
	}
	v, err := counterValue(ctx, owner, key)
	if err != nil || v < int64(acked) {
		t.Fatalf("counter %s = %d (%v), acknowledged %d", key, v, err, acked)
	}
}

// A follower that crashed and comes back on its data directory leaves
// the sets it followed, catches up with a bulk copy and joins them again
// through raft; then the owner's crash loses no acknowledged Add.
func TestReplicaRejoinsAfterRestartThenOwnerFails(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	n1 := c.Node("n1")
	leader := n1.Leader()
	// Counters owned by a node that is not the leader; the follower to
	// restart is the third node.
	var owner, follower string
	for _, n := range c.Nodes() {
		if n.Name() != leader && owner == "" {
			owner = n.Name()
		} else if n.Name() != leader {
			follower = n.Name()
		}
	}
	var keys []string
	for k := 0; len(keys) < 6; k++ {
		key := fmt.Sprintf("r%d", k)
		if o, _, err := n1.Locate(n1.Ref(demo.Counter, key)); err == nil && o == owner {
			keys = append(keys, key)
		}
	}
	acked1, sent1 := addAll(t, c.Nodes(), keys, 5)

	c.Kill(follower)
	// Adds while it is down: the owner commits them without it once it
	// left the sets.
	acked2, sent2 := addAll(t, c.Nodes(), keys, 5)
	c.Start(follower)
	on := c.Node(owner)
	waitFor(t, 40*time.Second, follower+" back in the sets of "+owner+"'s counters", func() bool {
		tb := on.Table()
		for _, key := range keys {
			ref, _ := tb.RefOf(demo.Counter, key)
			if s, _ := tb.Shard(ref); s.Owner != owner || !s.InSync(follower) {
				return false
			}
		}
		return true
	})
	// The table shows the join before the catch-up that proposed it
	// counts it.
	waitFor(t, 10*time.Second, "the catch-up counted", func() bool { return on.ReplicationStats().Joins > 0 })
	st := on.ReplicationStats()
	if st.CatchUps == 0 || st.Bulk == 0 {
		t.Fatalf("%s rejoined without a bulk copy: %+v", follower, st)
	}
	t.Logf("%s rejoined; owner %s stats %+v", follower, owner, st)
	acked3, sent3 := addAll(t, c.Nodes(), keys, 3)

	c.Kill(owner)
	survivors := c.Nodes()
	values := map[string]int64{}
	waitFor(t, 40*time.Second, "every counter answering on the survivors", func() bool {
		for _, key := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			v, err := counterValue(ctx, survivors[0], key)
			cancel()
			if err != nil {
				return false
			}
			values[key] = v
		}
		return true
	})
	for _, key := range keys {
		acked := acked1[key] + acked2[key] + acked3[key]
		sent := sent1[key] + sent2[key] + sent3[key]
		o, _, _ := survivors[0].Locate(survivors[0].Ref(demo.Counter, key))
		if v := values[key]; v < int64(acked) || v > int64(sent) {
			t.Errorf("counter %s on %s: %d, acknowledged %d (sent %d)", key, o, v, acked, sent)
		}
	}
	checkSingleActivation(t, c)
}

// A replica refuses, and never stores, a record with a bad checksum and
// one from a node that does not own its shard; it stores a good one from
// the owner (so the refusals are the checks', not the test's).
func TestReplicaRefusesBadRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	ctx := ctxT(t)
	n1 := c.Node("n1")
	id := prospero.Identity{Kind: demo.Counter, Key: "forged"}
	ref, err := n1.Table().RefOf(id.Kind, id.Key)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := n1.Table().Shard(ref)
	owner, follower := c.Node(s.Owner), c.Node(s.Followers()[0])
	var other *tempest.Node
	for _, n := range c.Nodes() {
		if n != owner && n != follower {
			other = n
		}
	}
	rec := &replica.Record{Shard: replica.Shard{Group: ref.Group, Index: ref.Index},
		Replicated: prospero.Replicated{ID: id, Epoch: s.Epoch, Version: 1 << 40, State: []byte("forged state")}}
	frame := replica.EncodeBatch(1, true, []*replica.Record{rec})
	bad := slices.Clone(frame)
	bad[len(bad)-8] ^= 0x5a // inside the state
	before := follower.ReplicationStats()

	err = tempest.SendReplicaFrame(ctx, owner, follower.Name(), bad)
	if err == nil || !strings.Contains(err.Error(), "checksum") || !strings.Contains(err.Error(), ref.String()) ||
		!strings.Contains(err.Error(), owner.Name()) {
		t.Fatalf("bad checksum answered %v, want a refusal naming the checksum, %s and %s", err, ref, owner.Name())
	}
	err = tempest.SendReplicaFrame(ctx, other, follower.Name(), frame)
	if err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("a record from %s, which does not own %s, answered %v", other.Name(), ref, err)
	}
	if _, err := tempest.StoredState(ctx, follower, id); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("a refused record was stored: %v", err)
	}
	if st := follower.ReplicationStats(); st.Refused < before.Refused+2 {
		t.Fatalf("refusals not counted: %+v then %+v", before, st)
	}
	if err := tempest.SendReplicaFrame(ctx, owner, follower.Name(), frame); err != nil {
		t.Fatalf("a good record from the owner: %v", err)
	}
	if got, err := tempest.StoredState(ctx, follower, id); err != nil || string(got.State) != "forged state" {
		t.Fatalf("the good record was not stored: %+v, %v", got, err)
	}
}

// MinInSync is enforced on real nodes: with it at 3, a shard whose set
// lost a follower refuses durable writes (the owner still holds a raft
// quorum, so the refusal is the minimum's, not the cluster's), the same
// from the owner and from another node, and accepts them again once the
// follower came back, caught up and joined.
func TestMinInSyncRefusesWritesWithTooFewReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3, Configure: func(_ string, cfg *tempest.Config) {
		cfg.Cluster.Replication.MinInSync = 3
	}})
	n1 := c.Node("n1")
	leader := n1.Leader()
	var key string
	var ref placement.ShardRef
	var follower string
	for k := 0; key == ""; k++ {
		cand := fmt.Sprintf("m%d", k)
		if owner, _, err := n1.Locate(n1.Ref(demo.Counter, cand)); err == nil && owner == leader {
			r, _ := n1.Table().RefOf(demo.Counter, cand)
			if s, _ := n1.Table().Shard(r); len(s.Replicas) == 3 {
				key, ref, follower = cand, r, s.Followers()[0]
			}
		}
	}
	owner := c.Node(leader)
	var other *tempest.Node
	for _, n := range c.Nodes() {
		if n.Name() != leader && n.Name() != follower {
			other = n
		}
	}
	ctx := ctxT(t)
	add := func(via *tempest.Node) error {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := via.Ask(actx, via.Ref(demo.Counter, key), demo.Add{N: 1})
		return err
	}
	if err := add(owner); err != nil {
		t.Fatalf("Add with the whole set: %v", err)
	}
	acked := int64(1)
	c.Kill(follower)
	// The first Add after the crash finds the follower gone and removes it
	// from the set; from then on the set has 2 of the 3 required.
	for i := range 4 {
		via := owner
		if i%2 == 1 {
			via = other
		}
		err := add(via)
		if err == nil {
			s, _ := owner.Table().Shard(ref)
			t.Fatalf("Add through %s acknowledged with %s crashed (set %v)", via.Name(), follower, s.Replicas)
		}
		if !errors.Is(err, prospero.ErrNotCommitted) {
			t.Fatalf("Add through %s with too few replicas: %v, want ErrNotCommitted", via.Name(), err)
		}
		// The same answer through the owner and through another node:
		// the not-committed error as it crosses the wire, naming why.
		var re *wire.RemoteError
		if i > 0 && (!errors.As(err, &re) || !strings.Contains(err.Error(), "required")) {
			t.Fatalf("Add through %s with too few replicas: %v (%T), want ErrNotCommitted as it crosses the wire, naming the shortfall", via.Name(), err, err)
		}
	}
	if s, _ := owner.Table().Shard(ref); s.InSync(follower) {
		t.Fatalf("%s still in the set %v", follower, s.Replicas)
	}

	// The follower returns: once it caught up and joined, Adds commit.
	c.Start(follower)
	waitFor(t, 60*time.Second, follower+" back in the set", func() bool {
		s, _ := owner.Table().Shard(ref)
		return s.InSync(follower) && s.Owner == leader
	})
	waitFor(t, 30*time.Second, "an Add that commits", func() bool { return add(owner) == nil })
	acked++
	v, err := counterValue(ctx, owner, key)
	if err != nil || v < acked {
		t.Fatalf("counter %s = %d (%v), acknowledged %d", key, v, err, acked)
	}
}

// replicationOf returns n's GET /v1/placement replication list, and
// checks that /metrics has a lag series for each follower in it.
func replicationOf(t *testing.T, n *tempest.Node) []httpapi.PlacementReplica {
	t.Helper()
	met := httpapi.NewMetrics("test")
	met.Attach(n)
	srv, err := httpapi.New(httpapi.Config{Node: n, Metrics: met, MetricsPublic: true})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) []byte {
		t.Helper()
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	var pb httpapi.PlacementBody
	if err := json.Unmarshal(get("/v1/placement"), &pb); err != nil {
		t.Fatal(err)
	}
	metrics := string(get("/metrics"))
	for _, r := range pb.Replication {
		for _, name := range []string{"tempest_replica_lag_seconds", "tempest_replica_pending_records"} {
			if series := fmt.Sprintf("%s{follower=%q}", name, r.Follower); !strings.Contains(metrics, series) {
				t.Fatalf("/metrics of %s lacks %s", n.Name(), series)
			}
		}
	}
	return pb.Replication
}

// A planned move to a follower in the shard's in-sync set is a
// promotion: the old owner ships none of the actors' state, the new
// owner serves from its own copy, no acknowledged Add is lost, and no
// counter is ever active on two nodes at once. Here every move is one:
// the owner leaves gracefully while Adds run, and with three replicas
// on three nodes both targets are in every set.
func TestPlannedMoveToInSyncFollowerIsAPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	n1 := c.Node("n1")
	leader := n1.Leader()
	var leaving string
	for _, n := range c.Nodes() {
		if n.Name() != leader {
			leaving = n.Name()
			break
		}
	}
	var keys []string
	for k := 0; len(keys) < 8; k++ {
		key := fmt.Sprintf("p%d", k)
		if owner, _, err := n1.Locate(n1.Ref(demo.Counter, key)); err == nil && owner == leaving {
			keys = append(keys, key)
		}
	}
	var askers []*tempest.Node
	for _, n := range c.Nodes() {
		if n.Name() != leaving {
			askers = append(askers, n)
		}
	}
	old := c.Node(leaving)
	tb := old.Table()
	owned := len(tb.Owned(leaving))
	for _, ref := range tb.Owned(leaving) {
		if s, _ := tb.Shard(ref); len(s.Replicas) != 3 {
			t.Fatalf("%s of %s has the set %v before the leave, want three replicas", ref, leaving, s.Replicas)
		}
	}
	// Adds before and during the leave.
	acked, sent := addAll(t, askers, keys, 5)
	before := old.FederationStats().HandoffsPromoted // moves of the cluster's start
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		more = map[string][2]map[string]int{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, s := addAll(t, askers, keys, 20)
		mu.Lock()
		more["during"] = [2]map[string]int{a, s}
		mu.Unlock()
	}()
	if err := c.Close(leaving); err != nil {
		t.Fatalf("graceful close of %s: %v", leaving, err)
	}
	wg.Wait()
	for key, n := range more["during"][0] {
		acked[key] += n
	}
	for key, n := range more["during"][1] {
		sent[key] += n
	}
	promoted := old.FederationStats().HandoffsPromoted - before
	// A shard with a write that landed on the old owner without
	// committing (its lease lapsed on a loaded machine, say) ships its
	// state instead: its followers may lack that write.
	uncommitted := 0
	for _, ref := range tb.Owned(leaving) {
		if tempest.ReplicaUncommitted(old, ref) {
			uncommitted++
		}
	}
	t.Logf("%s owned %d shards; %d handed off by promotion as it left, %d had an uncommitted write", leaving, owned, promoted, uncommitted)
	if promoted != uint64(owned-uncommitted) {
		t.Errorf("%s promoted %d of its %d shards' moves as it left, want every one without an uncommitted write (%d; each target is in the shard's in-sync set)",
			leaving, promoted, owned, owned-uncommitted)
	}
	c.WaitSettled()
	for _, key := range keys {
		ctx := ctxT(t)
		v, err := counterValue(ctx, n1, key)
		owner, _, _ := n1.Locate(n1.Ref(demo.Counter, key))
		if err != nil || v < int64(acked[key]) || v > int64(sent[key]) {
			t.Errorf("counter %s on %s after the move: %d (%v), acknowledged %d, sent %d", key, owner, v, err, acked[key], sent[key])
		}
	}
	checkSingleActivation(t, c)
}

// A node whose state store cannot write (its disk full) gives up its
// places in replica sets and its shards, so every set keeps three copies
// while the disk is full; no acknowledged Add is lost, and once its
// writes work again it takes shards and places back. The counters here
// are owned by the other nodes: the victim learns of the failure as their
// follower (an owner's own failed commit of writes it sent ahead damages
// its store instead, and the agent exits so that its shards fail over).
func TestStoreFailingNodeHandsOffItsShards(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 4})
	n1 := c.Node("n1")
	var victim string
	for _, n := range c.Nodes() {
		if n.Name() != n1.Leader() {
			victim = n.Name()
		}
	}
	v := c.Node(victim)
	var keys []string
	for k := 0; len(keys) < 8; k++ {
		key := fmt.Sprintf("f%d", k)
		tb := n1.Table()
		ref, _ := tb.RefOf(demo.Counter, key)
		if s, ok := tb.Shard(ref); ok && s.Owner != victim && slices.Contains(s.Replicas, victim) {
			keys = append(keys, key)
		}
	}
	var askers []*tempest.Node
	for _, n := range c.Nodes() {
		if n.Name() != victim {
			askers = append(askers, n)
		}
	}
	acked, sent := addAll(t, askers, keys, 3)
	merge := func(a, s map[string]int) {
		for k, n := range a {
			acked[k] += n
		}
		for k, n := range s {
			sent[k] += n
		}
	}
	tempest.FailStoreWrites(v, errors.New("no space left on device"), 2*time.Second)
	settledWithout := func() bool {
		tb := n1.Table()
		if tb.Nodes[victim] == nil || tb.Nodes[victim].StoreFailing == "" || len(tb.Owned(victim)) > 0 || len(tb.UnderReplicated()) > 0 {
			return false
		}
		for _, gn := range tb.GroupNames() {
			for _, s := range tb.Groups[gn].Shards {
				if slices.Contains(s.Replicas, victim) || s.MovingTo != "" {
					return false
				}
			}
		}
		return true
	}
	// Writes find the failure: the batches the victim receives.
	waitFor(t, 60*time.Second, victim+" owning and following nothing, every set whole without it", func() bool {
		merge(addAll(t, askers, keys, 1))
		return settledWithout()
	})
	merge(addAll(t, askers, keys, 3))
	tempest.FailStoreWrites(v, nil, 0)
	waitFor(t, 60*time.Second, victim+" owning shards again", func() bool {
		tb := n1.Table()
		return tb.Nodes[victim] != nil && tb.Nodes[victim].StoreFailing == "" && len(tb.Owned(victim)) > 0 && len(tb.UnderReplicated()) == 0
	})
	c.WaitSettled()
	for _, key := range keys {
		v, err := counterValue(ctxT(t), n1, key)
		if err != nil || v < int64(acked[key]) || v > int64(sent[key]) {
			t.Errorf("counter %s: %d (%v), acknowledged %d, sent %d", key, v, err, acked[key], sent[key])
		}
	}
	checkSingleActivation(t, c)
}
