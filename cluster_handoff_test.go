package tempest_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire"
)

// threeNodes starts n1..n3 hosting the demo kinds and waits for a
// settled table.
func threeNodes(t *testing.T) *tempesttest.Cluster {
	t.Helper()
	return demoCluster(t, tempesttest.Options{Nodes: 3})
}

// counterOn returns a counter key whose shard owner is (or, with not,
// is not) node by via's table, skipping keys in skip's shard.
func counterOn(t *testing.T, via *tempest.Node, owner string, not bool, prefix string) (actor.Ref, placement.Location) {
	t.Helper()
	tab := via.Table()
	for k := range 1000 {
		key := fmt.Sprintf("%s%d", prefix, k)
		loc, err := tab.Locate(demo.Counter, key)
		if err == nil && !loc.Moving && (loc.Owner == owner) != not {
			return via.Ref(demo.Counter, key), loc
		}
	}
	t.Fatalf("no counter key with owner %s (not %v)", owner, not)
	return actor.Ref{}, placement.Location{}
}

func add(t *testing.T, ctx context.Context, n *tempest.Node, ref actor.Ref, times int) int64 {
	t.Helper()
	var v int64
	for range times {
		got, err := n.Ask(ctx, ref, demo.Add{N: 1})
		if err != nil {
			t.Fatalf("add to %v: %v", ref, err)
		}
		v = got.(demo.CounterValue).N
	}
	return v
}

func get(t *testing.T, ctx context.Context, n *tempest.Node, ref actor.Ref) int64 {
	t.Helper()
	got, err := n.Ask(ctx, ref, demo.Get{})
	if err != nil {
		t.Fatalf("get %v: %v", ref, err)
	}
	return got.(demo.CounterValue).N
}

// TestClusterLateTransferRefused: the state of a handoff that reaches the
// new owner after its table moved on (here: a transfer for the shard's
// current epoch, from a node that is not its owner, as a late or
// replayed one would be) is refused and does not overwrite the state the
// owner acknowledged meanwhile.
func TestClusterLateTransferRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := threeNodes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	dst, loc := counterOn(t, n1, "n1", true, "late")
	owner := c.Node(loc.Owner)
	src, srcLoc := counterOn(t, n1, loc.Owner, true, "old")
	sender := c.Node(srcLoc.Owner)

	if v := add(t, ctx, n1, dst, 5); v != 5 {
		t.Fatalf("dst = %d after 5 adds", v)
	}
	add(t, ctx, n1, src, 1)
	if err := sender.Passivate(ctx, src); err != nil {
		t.Fatal(err)
	}
	// The sender ships its record of src (a counter at 1) as dst's state,
	// announcing the epoch dst's shard already has.
	stale := owner.FederationStats().Answered[federation.CodeStaleMove]
	err := tempest.ShipStateAs(ctx, sender, owner.Name(), src, dst, loc.Epoch)
	var fe *federation.Error
	if !errors.As(err, &fe) || fe.Code != federation.CodeStaleMove {
		t.Errorf("a transfer for %s at its current epoch %d from %s (owner %s): %v, want refused STALE_MOVE", loc.Shard, loc.Epoch, sender.Name(), owner.Name(), err)
	}
	if got := owner.FederationStats().Answered[federation.CodeStaleMove]; got != stale+1 {
		t.Errorf("stale handoffs refused by %s: %d -> %d, want one more", owner.Name(), stale, got)
	}
	if err := owner.Passivate(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if v := get(t, ctx, n1, dst); v != 5 {
		t.Fatalf("dst = %d after the late transfer, acknowledged 5", v)
	}
}

// TestClusterMoveRequestHonoursLeaderBudget: the old owner works on a
// move request only within the budget the leader gave it, never a longer
// one of its own, so that it cannot ship after the leader gave up.
func TestClusterMoveRequestHonoursLeaderBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := threeNodes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	_, loc := counterOn(t, n1, "n1", true, "budget")
	// A move the table never shows: the owner waits for it to be applied,
	// but only for the budget.
	m := placement.Move{Shard: loc.Shard, From: loc.Owner, Epoch: loc.Epoch, To: "n1"}
	answer, err := tempest.RequestMove(ctx, n1, loc.Owner, m, 300*time.Millisecond)
	if err != nil {
		t.Fatalf("no answer from %s before the test's deadline: %v", loc.Owner, err)
	}
	if answer == nil {
		t.Fatalf("%s shipped a move its table does not show", loc.Owner)
	}
	t.Logf("answer: %v", answer)
}

// TestClusterBadIndexEntryIsolated: an entry of a shard's index that does
// not decode (a key with invalid UTF-8, as older versions accepted) is
// isolated at the handoff: the rest of the shard moves with its state,
// and the old owner's Close reports the identity it could not ship.
func TestClusterBadIndexEntryIsolated(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := threeNodes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var leaver, stay *tempest.Node
	for _, n := range c.Nodes() {
		if leaver == nil && n.Name() != n.Leader() {
			leaver = n
		} else if stay == nil && n != leaver {
			stay = n
		}
	}
	// Counters of one shard the leaver owns.
	first, loc := counterOn(t, stay, leaver.Name(), false, "bad")
	refs := []actor.Ref{first}
	tab := stay.Table()
	for k := 0; len(refs) < 3 && k < 5000; k++ {
		key := fmt.Sprintf("same%d", k)
		if l, err := tab.Locate(demo.Counter, key); err == nil && l.Shard == loc.Shard {
			refs = append(refs, stay.Ref(demo.Counter, key))
		}
	}
	want := map[actor.Ref]int64{}
	for i, ref := range refs {
		want[ref] = add(t, ctx, stay, ref, i+2)
	}
	if err := tempest.PlantIndexEntry(ctx, leaver, first, demo.Counter, "\xff\xfe"); err != nil {
		t.Fatal(err)
	}
	err := c.Close(leaver.Name())
	if !errors.Is(err, tempest.ErrHandoffIncomplete) {
		t.Errorf("Close of the old owner = %v, want ErrHandoffIncomplete naming the isolated identity", err)
	}
	t.Logf("close: %v", err)
	c.WaitSettled()
	for ref, v := range want {
		if got := get(t, ctx, stay, ref); got != v {
			t.Errorf("%v = %d after the handoff, acknowledged %d", ref, got, v)
		}
	}
}

// TestClusterActivationFencedOffOwner: mail that reaches a node's
// mailbox for an identity the node does not own (admitted by a route
// taken just before the shard moved away, after the handoff read the
// state it ships) does not activate the identity there: it fails with a
// NOT_OWNER refusal naming the owner, and the owner's state is all that
// counts. Without the fence the node hydrated its own stale record, ran
// the Add and acknowledged it, and the new owner never saw it.
func TestClusterActivationFencedOffOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := threeNodes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	ref, loc := counterOn(t, n1, "n1", true, "fence")
	if v := add(t, ctx, n1, ref, 2); v != 2 {
		t.Fatalf("counter = %d after 2 adds", v)
	}
	got, err := tempest.DeliverHere(ctx, n1, ref, demo.Add{N: 1})
	var re *wire.RefusedError
	if !errors.As(err, &re) || re.Reason != wire.RefusedReasonNotOwner || re.OwnerHint != loc.Owner {
		t.Fatalf("an Add delivered on n1 for a counter %s owns = %v, %v; want refused NOT_OWNER naming %s", loc.Owner, got, err, loc.Owner)
	}
	if v := get(t, ctx, n1, ref); v != 2 {
		t.Fatalf("counter = %d, acknowledged 2", v)
	}
}

// plantRecord writes kind/key (which need not be a valid identity) into
// the state store at path, as an older version that accepted it did.
// The store must be closed.
func plantRecord(t *testing.T, path, kind, key string, state []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(kind))
		if err != nil {
			return err
		}
		v := binary.BigEndian.AppendUint64(nil, 1<<40) // version
		v = binary.AppendUvarint(v, 1)                 // incarnation
		if err := b.Put([]byte(key), append(v, state...)); err != nil {
			return err
		}
		// The file as an upgrade leaves it: its records from before
		// carry no checksum (prospero's formatSomeSummed).
		eb, err := tx.CreateBucketIfNotExists([]byte("/epochs"))
		if err != nil {
			return err
		}
		return eb.Put([]byte("/format"), []byte{1})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClusterInvalidRecordAtRestIsolated: a record at rest whose key is
// not valid UTF-8 (written before keys were checked, then the cluster
// upgraded) does not stall the moves of its shard: its owner isolates
// it (refused, counted, reported by Close), the rest of the shard moves
// with its state, and Close ends instead of retrying the handoff until
// it times out.
func TestClusterInvalidRecordAtRestIsolated(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := threeNodes(t)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	const badKey = "\xff\xfeold"
	// Every node holds the record, as owner or replica, whichever owns
	// its shard later.
	for _, name := range []string{"n1", "n2", "n3"} {
		c.Kill(name)
		plantRecord(t, filepath.Join(c.Config(name).DataDir, tempest.StateFile), demo.Counter, badKey, []byte("7"))
		if got := c.Start(name).Stats().InvalidAtRest; got != 1 {
			t.Errorf("%s counts %d invalid records at rest, want 1", name, got)
		}
		c.WaitSettled()
	}
	var stay *tempest.Node
	for _, n := range c.Nodes() {
		stay = n
		break
	}
	loc, err := stay.Table().Locate(demo.Counter, badKey)
	if err != nil {
		t.Fatal(err)
	}
	var refs []actor.Ref
	tab := stay.Table()
	for k := 0; len(refs) < 3 && k < 20000; k++ {
		key := fmt.Sprintf("beside%d", k)
		if l, err := tab.Locate(demo.Counter, key); err == nil && l.Shard == loc.Shard {
			refs = append(refs, stay.Ref(demo.Counter, key))
		}
	}
	if len(refs) == 0 {
		t.Fatal("no key found in the shard")
	}
	if stay.Name() == loc.Owner {
		for _, n := range c.Nodes() {
			if n.Name() != loc.Owner {
				stay = n
				break
			}
		}
	}
	want := map[actor.Ref]int64{}
	for i, ref := range refs {
		want[ref] = add(t, ctx, stay, ref, i+2)
	}
	err = c.Close(loc.Owner)
	if !errors.Is(err, tempest.ErrHandoffIncomplete) || !strings.Contains(err.Error(), fmt.Sprintf("%q", demo.Counter+"/"+badKey)) {
		t.Errorf("Close of the owner = %v, want ErrHandoffIncomplete naming %q", err, demo.Counter+"/"+badKey)
	}
	t.Logf("close: %v", err)
	c.WaitSettled()
	for ref, v := range want {
		if got := get(t, ctx, stay, ref); got != v {
			t.Errorf("%v = %d after the handoff, acknowledged %d", ref, got, v)
		}
	}
}

// TestClusterHandoffOfALargeShard: a shard of more actors than one batch
// of the new owner's writes holds (512) moves through a graceful leave
// with every counter's state: the records are stored in several
// transactions, each counted only once stored, and none is dropped or
// stored twice across the batches' boundaries. Replication is off, so
// the handoff ships every record rather than promoting a follower.
func TestClusterHandoffOfALargeShard(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3, Configure: func(_ string, cfg *tempest.Config) {
		cfg.Cluster.Placement.Shards = 4
		cfg.Cluster.Placement.Replicas = 1
	}})
	n1 := c.Node("n1")
	var victim string
	var shard placement.ShardRef
	for _, name := range []string{"n2", "n3"} {
		if owned := n1.Table().Owned(name); len(owned) > 0 {
			victim, shard = name, owned[0]
			break
		}
	}
	if victim == "" {
		t.Fatal("neither n2 nor n3 owns a shard")
	}
	const actors = 1200
	var keys []string
	tab := n1.Table()
	for k := 0; len(keys) < actors; k++ {
		key := fmt.Sprintf("big%d", k)
		if loc, err := tab.Locate(demo.Counter, key); err == nil && loc.Shard == shard {
			keys = append(keys, key)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 16 {
				if _, err := n1.Ask(ctx, n1.Ref(demo.Counter, keys[i]), demo.Add{N: int64(i + 1)}); err != nil {
					errs <- fmt.Errorf("add to %s: %w", keys[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := c.Close(victim); err != nil {
		t.Fatalf("graceful close of %s: %v", victim, err)
	}
	c.WaitSettled()
	if owner, _, err := n1.Locate(n1.Ref(demo.Counter, keys[0])); err != nil || owner == victim {
		t.Fatalf("after %s left, %s is located at %q (%v)", victim, shard, owner, err)
	}
	for i, key := range keys {
		got, err := n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Get{})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if v := got.(demo.CounterValue).N; v != int64(i+1) {
			t.Fatalf("after the handoff %s = %d, want %d", key, v, i+1)
		}
	}
}
