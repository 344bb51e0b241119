package replica

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// fakeView routes every identity to shard 0 at epoch, owned by owner,
// with followers; Shrink removes a follower, or fails when refuse is set.
type fakeView struct {
	mu        sync.Mutex
	owner     string
	epoch     uint64
	followers []string
	refuse    error
	joinErr   error
	shrunk    []string
	lapsed    bool // Fresh reports false
	down      map[string]bool
	routeErr  error // Route fails with it (this node does not own the shard)
	// shrinking, when set, is closed by a Shrink that then blocks until
	// its context ends, as a removal forwarded to a leader this node
	// cannot reach does.
	shrinking chan struct{}
}

func (v *fakeView) LeftSet(f string, _ Shard, epoch uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return epoch == v.epoch && !slices.Contains(v.followers, f)
}

func (v *fakeView) Down(node string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.down[node]
}

func (v *fakeView) Fresh() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.lapsed
}

func (v *fakeView) Route(prospero.Identity) (Route, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.routeErr != nil {
		return Route{}, v.routeErr
	}
	return Route{Replicated: true, Shard: Shard{Index: 0}, Epoch: v.epoch, Followers: append([]string(nil), v.followers...)}, nil
}

func (v *fakeView) Shrink(ctx context.Context, f string, _ map[Shard]uint64) (int, error) {
	v.mu.Lock()
	if ch := v.shrinking; ch != nil {
		v.shrinking = nil
		v.mu.Unlock()
		close(ch)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	defer v.mu.Unlock()
	if v.refuse != nil {
		return 0, v.refuse
	}
	if !slices.Contains(v.followers, f) {
		return 0, nil
	}
	v.shrunk = append(v.shrunk, f)
	var keep []string
	for _, x := range v.followers {
		if x != f {
			keep = append(keep, x)
		}
	}
	v.followers = keep
	return 1, nil
}

func (v *fakeView) ShardOf(prospero.Identity) (Shard, bool) { return Shard{Index: 0}, true }

func (v *fakeView) Join(_ context.Context, f string, _ map[Shard]uint64) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.joinErr != nil {
		return 0, v.joinErr
	}
	if !slices.Contains(v.followers, f) {
		v.followers = append(v.followers, f)
	}
	return 1, nil
}

func (v *fakeView) Accept(from string, _ Shard, epoch uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if epoch < v.epoch || (epoch == v.epoch && from != v.owner) {
		return ErrStale
	}
	return nil
}

func newStore(t *testing.T, sync bool) *Store {
	t.Helper()
	b, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Local: b, SyncReplicas: sync, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// pair is an owner and a replica joined by in-memory streams.
func pair(t *testing.T, syncReplicas bool) (owner, rep *Store, v *fakeView, serveErr chan error) {
	owner, rep = newStore(t, syncReplicas), newStore(t, false)
	v = &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	serveErr = make(chan error, 16)
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		go func() { serveErr <- rep.Serve(c2, "a") }()
		return c1, nil
	})
	rep.Attach(v, nil)
	return owner, rep, v, serveErr
}

func TestWritesReachTheReplicaBeforeCommit(t *testing.T) {
	for _, mode := range []bool{false, true} {
		owner, rep, _, _ := pair(t, mode)
		ctx := t.Context()
		id := prospero.Identity{Kind: "counter", Key: "x"}
		var v uint64
		for i := range 50 {
			var err error
			v, err = owner.Put(ctx, id, v, prospero.Record{Incarnation: 1, State: []byte{byte(i)}})
			if err != nil {
				t.Fatal(err)
			}
		}
		if mode {
			// fsync'd before the acknowledgement: on the replica's disk now.
			got, err := rep.Local().Get(ctx, id)
			if err != nil || got.Version != v || got.State[0] != 49 {
				t.Fatalf("sync mode: replica holds %+v, %v; want version %d", got, err, v)
			}
		}
		rep.apply.drain()
		got, err := rep.Get(ctx, id)
		if err != nil || got.Version != v || got.State[0] != 49 {
			t.Fatalf("replica holds %+v, %v; want version %d", got, err, v)
		}
		if st := owner.Stats(); st.Records != 50 || st.Batches == 0 {
			t.Fatalf("owner stats %+v", st)
		}
		// The supervisor reports the group commits of a store that counts
		// them (and the node exports them as metrics): the replicated store
		// counts those of its local one, where its writes commit.
		// The last write was released on the replica's receipt and may
		// not have committed here yet: a read of it waits for its commit.
		if _, err := owner.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
		cc, ok := prospero.StateStore(owner).(prospero.CommitCounter)
		if !ok {
			t.Fatal("the replicated store does not report its group commits")
		}
		if st := cc.CommitStats(); st != owner.Local().CommitStats() || st.Groups == 0 || st.Writes < 50 {
			t.Fatalf("owner's commit stats %+v, local store's %+v", st, owner.Local().CommitStats())
		}
		// The replica stored the batches in its own group commits, where
		// its own writes would have shared their transactions.
		if st := rep.Local().CommitStats(); st.Replicated == 0 || st.Groups == 0 {
			t.Fatalf("replica's commit stats %+v: the batches did not go through its group commit", st)
		}
		// A deletion is committed on the replica too.
		if err := owner.Delete(ctx, id, prospero.AnyVersion); err != nil {
			t.Fatal(err)
		}
		rep.apply.drain()
		if _, err := rep.Local().Get(ctx, id); !errors.Is(err, prospero.ErrNotFound) {
			t.Fatalf("deleted on the owner, replica: %v", err)
		}
		// The replica's own later writes (once it owns the shard) keep
		// versions increasing past the owner's.
		nv, err := rep.Local().Put(ctx, id, 0, prospero.Record{State: []byte("next")})
		if err != nil || nv <= v {
			t.Fatalf("replica's own write: version %d (%v) after %d", nv, err, v)
		}
	}
}

// The owner's own copy of a write is stored under the epoch it owns the
// shard at, as its followers store it: a late copy of an older owner, at
// a higher version of that owner's sequence, replaces neither.
func TestOwnerCopyCarriesTheShardsEpoch(t *testing.T) {
	owner, rep, _, _ := pair(t, false)
	ctx := t.Context()
	id := prospero.Identity{Kind: "counter", Key: "x"}
	v, err := owner.Put(ctx, id, 0, prospero.Record{State: []byte("mine")})
	if err != nil {
		t.Fatal(err)
	}
	rep.apply.drain()
	for name, s := range map[string]*Store{"owner": owner, "replica": rep} {
		got, err := s.Local().Get(ctx, id)
		if err != nil || got.Epoch != 3 || got.Version != v {
			t.Fatalf("%s holds %+v, %v; want epoch 3, version %d", name, got, err, v)
		}
		late := []prospero.Replicated{{ID: id, Epoch: 2, Version: v + 1000, State: []byte("late")}}
		if n, err := s.Local().ApplyReplicated(late); err != nil || n != 0 {
			t.Fatalf("%s: a copy of epoch 2 applied (%d, %v) over the write of epoch 3", name, n, err)
		}
	}
	// A write stored under an epoch the shard has since left (an abort
	// raised it while the write was on its way) is not sent under the
	// new one: it fails as stale.
	r := &Record{Replicated: prospero.Replicated{ID: id, Epoch: 2, Version: v + 1, State: []byte("late")}}
	errc := make(chan error, 1)
	owner.replicate(r, func(err error) { errc <- err })
	if err := <-errc; !errors.Is(err, ErrStale) || !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("a write of epoch 2 sent at epoch 3: %v; want ErrStale and ErrNotCommitted", err)
	}
}

// Deletions queued with DeleteAsync share the owner's commits and reach
// the replica before they commit, as Delete's do; one that fails (a
// stale version) is not sent.
func TestAsyncDeletionsReachTheReplica(t *testing.T) {
	owner, rep, _, _ := pair(t, true)
	ctx := t.Context()
	const n = 20
	vs := make([]uint64, n)
	id := func(i int) prospero.Identity { return prospero.Identity{Kind: "counter", Key: fmt.Sprint(i)} }
	for i := range n {
		var err error
		if vs[i], err = owner.Put(ctx, id(i), 0, prospero.Record{State: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := owner.Local().CommitStats()
	errs := make(chan error, n+1)
	for i := range n {
		expected := vs[i]
		if i == 0 {
			expected = prospero.AnyVersion
		}
		owner.DeleteAsync(id(i), expected, func(err error) { errs <- err })
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	owner.DeleteAsync(id(0), vs[0], func(err error) { errs <- err }) // deleted already
	if err := <-errs; !errors.Is(err, prospero.ErrVersionConflict) {
		t.Fatalf("DeleteAsync of a deleted version: %v, want ErrVersionConflict", err)
	}
	if st := owner.Local().CommitStats(); st.Groups-before.Groups >= n {
		t.Fatalf("%d deletions took %d local commits", n+1, st.Groups-before.Groups)
	}
	for i := range n {
		if _, err := rep.Local().Get(ctx, id(i)); !errors.Is(err, prospero.ErrNotFound) {
			t.Fatalf("deleted on the owner, the replica holds %s: %v", id(i), err)
		}
	}
	if st := owner.Stats(); st.Records != 2*n {
		t.Fatalf("owner sent %d records, want %d writes and %d deletions", st.Records, n, n)
	}
}

// frame encodes recs as one batch frame.
func frame(seq uint64, flags uint8, recs ...*Record) []byte {
	b := appendBatch([]byte{0, 0, 0, 0}, seq, flags, recs)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func TestBadChecksumAndTruncationRefused(t *testing.T) {
	rep := newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3}
	rep.Attach(v, nil)
	id := prospero.Identity{Kind: "counter", Key: "x"}
	good := &Record{Shard: Shard{Index: 7}, Replicated: prospero.Replicated{ID: id, Epoch: 3, Version: 9, State: []byte("state")}}

	bad := frame(1, flagSync, good)
	bad[len(bad)-6] ^= 0xff // a byte of the state
	c1, c2 := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- rep.Serve(c2, "a") }()
	if _, err := c1.Write(bad); err != nil {
		t.Fatal(err)
	}
	ack, err := readFrame(bufio.NewReader(c1))
	if err != nil {
		t.Fatal(err)
	}
	if _, refused, _ := decodeAck(ack); refused == nil {
		t.Fatal("bad checksum acknowledged")
	}
	err = <-done
	var se *StreamError
	if !errors.As(err, &se) || !errors.Is(err, ErrBadRecord) || se.Node != "a" || se.Shard == nil || se.Shard.Index != 7 {
		t.Fatalf("bad checksum: %v, want a StreamError naming node a and shard 7", err)
	}
	if _, err := rep.Local().Get(t.Context(), id); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("a record with a bad checksum was stored: %v", err)
	}

	// A stream cut inside a frame: an error naming the node, nothing stored.
	c1, c2 = net.Pipe()
	go func() { done <- rep.Serve(c2, "a") }()
	whole := frame(1, flagSync, good)
	if _, err := c1.Write(whole[:len(whole)-3]); err != nil {
		t.Fatal(err)
	}
	_ = c1.Close()
	err = <-done
	if !errors.As(err, &se) || se.Node != "a" {
		t.Fatalf("truncated stream: %v", err)
	}
	if _, err := rep.Local().Get(t.Context(), id); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("a truncated record was stored: %v", err)
	}
	if st := rep.Stats(); st.Refused != 2 || st.Applied != 0 {
		t.Fatalf("replica stats %+v", st)
	}
}

func TestStaleEpochRefusedNewestWins(t *testing.T) {
	rep := newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3}
	rep.Attach(v, nil)
	ctx := t.Context()
	id := prospero.Identity{Kind: "counter", Key: "x"}
	send := func(from string, recs ...*Record) string {
		c1, c2 := net.Pipe()
		go func() { _ = rep.Serve(c2, from) }()
		defer c1.Close()
		if _, err := c1.Write(frame(1, flagSync, recs...)); err != nil {
			t.Fatal(err)
		}
		ack, err := readFrame(bufio.NewReader(c1))
		if err != nil {
			t.Fatal(err)
		}
		_, refused, _ := decodeAck(ack)
		if refused == nil {
			return ""
		}
		return refused.Error()
	}
	rec := func(epoch, version uint64, state string) *Record {
		return &Record{Replicated: prospero.Replicated{ID: id, Epoch: epoch, Version: version, State: []byte(state)}}
	}
	if msg := send("a", rec(3, 10, "a10")); msg != "" {
		t.Fatal(msg)
	}
	// An older version under the same owner does not win.
	if msg := send("a", rec(3, 8, "a8")); msg != "" {
		t.Fatal(msg)
	}
	if got, _ := rep.Local().Get(ctx, id); string(got.State) != "a10" {
		t.Fatalf("older version won: %q", got.State)
	}
	// A new owner at a newer epoch wins, even at a smaller version.
	v.mu.Lock()
	v.owner, v.epoch = "b", 4
	v.mu.Unlock()
	if msg := send("b", rec(4, 2, "b2")); msg != "" {
		t.Fatal(msg)
	}
	if got, _ := rep.Local().Get(ctx, id); string(got.State) != "b2" {
		t.Fatalf("new owner's record lost: %q", got.State)
	}
	// The old owner's leftovers are refused, never applied.
	if msg := send("a", rec(3, 11, "a11")); msg == "" {
		t.Fatal("a record from an older epoch was accepted")
	}
	if got, _ := rep.Local().Get(ctx, id); string(got.State) != "b2" {
		t.Fatalf("stale record applied: %q", got.State)
	}
}

func TestFailedReplicaLeavesTheSetBeforeCommit(t *testing.T) {
	owner := newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		return nil, errors.New("unreachable")
	})
	id := prospero.Identity{Kind: "counter", Key: "x"}
	ver, err := owner.Put(t.Context(), id, 0, prospero.Record{State: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.shrunk) != 1 || v.shrunk[0] != "b" || owner.Stats().Shrinks != 1 {
		t.Fatalf("committed without shrinking: shrunk %v stats %+v", v.shrunk, owner.Stats())
	}
	// Once out of the set, writes commit without it.
	if _, err := owner.Put(t.Context(), id, ver, prospero.Record{State: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	// When the set cannot be changed, nothing commits.
	v.mu.Lock()
	v.followers, v.refuse = []string{"c"}, errors.New("no quorum")
	v.mu.Unlock()
	_, err = owner.Put(t.Context(), id, ver+1, prospero.Record{State: []byte("3")})
	if !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("write with a failed replica that could not be removed: %v, want ErrNotCommitted", err)
	}
}

// A follower the placement table marks down does not hold the owner's
// writes until the replication timeout: Failed ends the dial in flight
// to it, the write removes it from the set (through the view's Shrink)
// before it commits, and a write queued for it meanwhile commits
// without dialling it again, since it has left the set.
func TestDownReplicaLeavesTheSetWithoutWaitingOutTheTimeout(t *testing.T) {
	b, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 10 * time.Minute // never reached in this test
	owner, err := New(Config{Local: b, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Close() })
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}, down: map[string]bool{}}
	dialing := make(chan struct{}, 16)
	var dials atomic.Int32
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		// b is gone: a dial never completes; it ends with its context.
		dials.Add(1)
		dialing <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	put := func(id prospero.Identity) chan error {
		ch := make(chan error, 1)
		owner.PutAsync(id, 0, prospero.Record{State: []byte("1")}, func(_ uint64, err error) { ch <- err })
		return ch
	}
	first := put(prospero.Identity{Kind: "counter", Key: "x"})
	<-dialing
	// Queued behind the dial in flight, for b, which is still in the set.
	second := put(prospero.Identity{Kind: "counter", Key: "y"})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ls := owner.Lags(); len(ls) == 1 && ls[0].Queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second write did not queue for b: %+v", owner.Lags())
		}
		time.Sleep(time.Millisecond)
	}
	v.mu.Lock()
	v.down["b"] = true
	v.mu.Unlock()
	owner.Failed("b")
	for i, ch := range []chan error{first, second} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("write %d after b was marked down: %v", i+1, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("write %d still waits for b, marked down, a minute after Failed (replication timeout %s)", i+1, timeout)
		}
	}
	v.mu.Lock()
	shrunk := slices.Clone(v.shrunk)
	v.mu.Unlock()
	if !slices.Equal(shrunk, []string{"b"}) || owner.Stats().Shrinks != 1 {
		t.Fatalf("committed with b marked down: shrunk %v, stats %+v; want b removed once, before the commit", shrunk, owner.Stats())
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("b was dialled %d times, want once: the write queued for it commits once b has left the set", n)
	}
	// A write to a shard whose set still has b, marked down, removes it
	// without dialling it.
	v.mu.Lock()
	v.followers = []string{"b"}
	v.mu.Unlock()
	if err := <-put(prospero.Identity{Kind: "counter", Key: "z"}); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 || owner.Stats().Shrinks != 2 {
		t.Fatalf("a write with b marked down: %d dials, stats %+v; want no new dial and a second removal", n, owner.Stats())
	}
}

// Records queued for a follower that has left their shard's set since
// (here: a write before them failed to reach it and removed it) commit
// without being sent: the follower is not dialled again for them.
func TestRecordsQueuedForAFollowerThatLeftCommitUnsent(t *testing.T) {
	owner := newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	dialing, release := make(chan struct{}, 16), make(chan struct{})
	var dials atomic.Int32
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		dials.Add(1)
		dialing <- struct{}{}
		<-release
		return nil, errors.New("unreachable")
	})
	put := func(id prospero.Identity) chan error {
		ch := make(chan error, 1)
		owner.PutAsync(id, 0, prospero.Record{State: []byte("1")}, func(_ uint64, err error) { ch <- err })
		return ch
	}
	first := put(prospero.Identity{Kind: "counter", Key: "x"})
	<-dialing
	second := put(prospero.Identity{Kind: "counter", Key: "y"})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ls := owner.Lags(); len(ls) == 1 && ls[0].Queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second write did not queue for b: %+v", owner.Lags())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for i, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	if n := dials.Load(); n != 1 || owner.Stats().Shrinks != 1 {
		t.Fatalf("b dialled %d times, stats %+v; want one dial and one removal", n, owner.Stats())
	}
	// While the first was dialled, it showed in flight; now nothing
	// waits for b.
	if ls := owner.Lags(); len(ls) != 1 || ls[0].Queued != 0 || ls[0].InFlight != 0 || ls[0].Oldest != 0 {
		t.Fatalf("lags once nothing waits for b: %+v", ls)
	}
}

func TestCatchUpCopiesThenJoins(t *testing.T) {
	owner, rep, v, _ := pair(t, false)
	ctx := t.Context()
	v.mu.Lock()
	v.followers = nil // b is not in the set yet
	v.mu.Unlock()
	var ids []prospero.Identity
	for i := range 20 {
		id := prospero.Identity{Kind: "counter", Key: string(rune('a' + i))}
		if _, err := owner.Put(ctx, id, 0, prospero.Record{State: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// A stale leftover of an older owner on the replica is replaced.
	if _, err := rep.Local().ApplyReplicated([]prospero.Replicated{{ID: ids[0], Epoch: 2, Version: 1000, State: []byte("old")}}); err != nil {
		t.Fatal(err)
	}
	if err := owner.CatchUp(ctx, "b", map[Shard]uint64{{Index: 0}: 3}, 1<<30); err != nil {
		t.Fatal(err)
	}
	rep.apply.drain()
	for i, id := range ids {
		got, err := rep.Local().Get(ctx, id)
		if err != nil || len(got.State) != 1 || got.State[0] != byte(i) {
			t.Fatalf("%s on the replica after catch-up: %+v, %v", id, got, err)
		}
	}
	v.mu.Lock()
	joined := slices.Contains(v.followers, "b")
	v.mu.Unlock()
	if st := owner.Stats(); !joined || st.CatchUps != 1 || st.Bulk != 20 || st.Joins != 1 || st.CatchUpFails != 0 {
		t.Fatalf("joined %v, stats %+v", joined, st)
	}
}

func TestCatchUpAbortsWithoutJoining(t *testing.T) {
	owner := newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3}
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		return nil, errors.New("unreachable")
	})
	id := prospero.Identity{Kind: "counter", Key: "x"}
	if _, err := owner.Put(t.Context(), id, 0, prospero.Record{State: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := owner.CatchUp(t.Context(), "b", map[Shard]uint64{{Index: 0}: 3}, 0); err == nil {
		t.Fatal("catch-up to an unreachable follower succeeded")
	}
	if slices.Contains(v.followers, "b") || owner.Stats().Joins != 0 {
		t.Fatalf("joined after a failed bulk copy: %v", v.followers)
	}
	if n := owner.Stats().CatchUpFails; n != 1 {
		t.Fatalf("CatchUpFails = %d, want 1", n)
	}
	// One ended by its context (the node shutting down) is no failure.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := owner.CatchUp(ctx, "b", map[Shard]uint64{{Index: 0}: 3}, 0); err == nil {
		t.Fatal("catch-up with a cancelled context succeeded")
	}
	if n := owner.Stats().CatchUpFails; n != 1 {
		t.Fatalf("CatchUpFails = %d after a cancelled catch-up, want 1", n)
	}
}

// With MinInSync 2 a write commits only once a follower of the in-sync set
// holds it: not after the only follower failed and left the set, and not
// while the set is the owner alone.
func TestMinInSyncRefusesWritesOnOneDisk(t *testing.T) {
	strict := func(t *testing.T, v *fakeView, dial Dialer) *Store {
		b, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Local: b, Timeout: time.Second, MinInSync: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		s.Attach(v, dial)
		return s
	}
	id := prospero.Identity{Kind: "counter", Key: "x"}

	rep := newStore(t, false)
	shared := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	rep.Attach(shared, nil)
	owner := strict(t, shared, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		go func() { _ = rep.Serve(c2, "a") }()
		return c1, nil
	})
	if _, err := owner.Put(t.Context(), id, 0, prospero.Record{State: []byte("1")}); err != nil {
		t.Fatalf("write with an in-sync follower: %v", err)
	}

	// The only follower fails: it leaves the set first, and the write is
	// not committed, because only the owner holds it.
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	lone := strict(t, v, func(context.Context, string) (net.Conn, error) { return nil, errors.New("unreachable") })
	ver, err := lone.Put(t.Context(), id, 0, prospero.Record{State: []byte("1")})
	if !errors.Is(err, ErrUnderReplicated) || !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("write after the only follower failed: %d, %v; want ErrUnderReplicated and ErrNotCommitted", ver, err)
	}
	if len(v.shrunk) != 1 || v.shrunk[0] != "b" {
		t.Fatalf("the failed follower was not removed first: shrunk %v", v.shrunk)
	}
	// The set is the owner alone now: refused too.
	cur, err := lone.Local().Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lone.Put(t.Context(), id, cur.Version, prospero.Record{State: []byte("2")}); !errors.Is(err, ErrUnderReplicated) {
		t.Fatalf("write with the owner alone in the set: %v, want ErrUnderReplicated", err)
	}

	// The default (1) commits on the owner alone.
	plain := newStore(t, false)
	plain.Attach(&fakeView{owner: "a", epoch: 3}, func(context.Context, string) (net.Conn, error) {
		return nil, errors.New("unreachable")
	})
	if _, err := plain.Put(t.Context(), id, 0, prospero.Record{State: []byte("1")}); err != nil {
		t.Fatalf("MinInSync 1 with the owner alone: %v", err)
	}
}

// TestLagShowsWhatAFollowerHasNotAcknowledged: while a follower holds a
// batch unanswered, its lag names the records in flight and their age;
// once it answers, nothing is pending and its last acknowledgement is
// recent.
func TestLagShowsWhatAFollowerHasNotAcknowledged(t *testing.T) {
	owner := newStore(t, false)
	rep := newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	rep.Attach(v, nil)
	release := make(chan struct{})
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		// The replica reads nothing until released: the batch stays in flight.
		go func() { <-release; _ = rep.Serve(c2, "a") }()
		return c1, nil
	})
	if l := owner.Lags(); len(l) != 0 {
		t.Fatalf("lags before any write: %+v", l)
	}
	id := prospero.Identity{Kind: "counter", Key: "x"}
	done := make(chan error, 1)
	go func() {
		_, err := owner.Put(t.Context(), id, 0, prospero.Record{Incarnation: 1, State: []byte("1")})
		done <- err
	}()
	var l Lag
	for deadline := time.Now().Add(5 * time.Second); ; {
		ls := owner.Lags()
		if len(ls) == 1 && ls[0].Queued+ls[0].InFlight == 1 && ls[0].Oldest >= 20*time.Millisecond {
			l = ls[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag of a follower holding a batch: %+v", ls)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if l.Follower != "b" || l.SinceAck != -1 || l.Acked != 0 {
		t.Fatalf("lag before the first acknowledgement: %+v", l)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ls := owner.Lags()
	if len(ls) != 1 || ls[0].Queued != 0 || ls[0].InFlight != 0 || ls[0].Oldest != 0 || ls[0].Acked != 1 ||
		ls[0].SinceAck < 0 || ls[0].SinceAck > time.Second {
		t.Fatalf("lag after the acknowledgement: %+v", ls)
	}
}

// An owner whose lease lapsed must not hold its writes (and with them
// its activations) for the replication timeout: a round trip to a
// replica that never answers ends at the second Interrupt after it
// began, and does not remove the replica from the set: nothing says it
// failed.
func TestLapsedLeaseEndsReplicaWaitsAtOnce(t *testing.T) {
	b, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	// A timeout the test would notice waiting out.
	owner, err := New(Config{Local: b, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Close() })
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	received := make(chan struct{}, 16)
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		go func() { // a replica that reads and never acknowledges
			buf := make([]byte, 4096)
			for {
				if _, err := c2.Read(buf); err != nil {
					return
				}
				select {
				case received <- struct{}{}:
				default:
				}
			}
		}()
		return c1, nil
	})
	id := prospero.Identity{Kind: "counter", Key: "x"}
	res := make(chan error, 1)
	owner.PutAsync(id, 0, prospero.Record{State: []byte("1")}, func(_ uint64, err error) { res <- err })
	<-received // the batch is in flight
	lapseAndInterrupt(t, owner, v, res, "the replica")
	if len(v.shrunk) != 0 || owner.Stats().Shrinks != 0 || owner.Stats().ShrinkFail != 0 {
		t.Fatalf("the replica was treated as failed: shrunk %v, stats %+v", v.shrunk, owner.Stats())
	}
	if got := v.followers; len(got) != 1 || got[0] != "b" {
		t.Fatalf("followers %v, want [b]", got)
	}
}

// TestCatchUpRemovesWhatTheOwnerDeleted: a follower that was away while
// the owner deleted identities loses them in its catch-up, and keeps
// every record the owner still has, a write sent during the catch-up
// included.
func TestCatchUpRemovesWhatTheOwnerDeleted(t *testing.T) {
	owner, rep, v, _ := pair(t, false)
	ctx := t.Context()
	id := func(i int) prospero.Identity { return prospero.Identity{Kind: "counter", Key: string(rune('a' + i))} }
	versions := map[int]uint64{}
	for i := range 6 {
		ver, err := owner.Put(ctx, id(i), 0, prospero.Record{State: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		versions[i] = ver
	}
	rep.apply.drain()
	// b leaves the set; meanwhile the owner deletes a, b and c.
	v.mu.Lock()
	v.followers = nil
	v.mu.Unlock()
	for i := range 3 {
		if err := owner.Delete(ctx, id(i), versions[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The replica also holds a record of an older owner the owner never had.
	if _, err := rep.Local().ApplyReplicated([]prospero.Replicated{{ID: id(9), Epoch: 2, Version: 7, State: []byte("old")}}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 2, 9} {
		if _, err := rep.Local().Get(ctx, id(i)); err != nil {
			t.Fatalf("%s on the replica before the catch-up: %v", id(i), err)
		}
	}
	if err := owner.CatchUp(ctx, "b", map[Shard]uint64{{Index: 0}: 3}, 1<<30); err != nil {
		t.Fatal(err)
	}
	rep.apply.drain()
	for _, i := range []int{0, 1, 2, 9} {
		if got, err := rep.Local().Get(ctx, id(i)); !errors.Is(err, prospero.ErrNotFound) {
			t.Fatalf("%s, deleted on the owner, on the replica after the catch-up: %+v, %v", id(i), got, err)
		}
	}
	for i := 3; i < 6; i++ {
		if got, err := rep.Local().Get(ctx, id(i)); err != nil || got.State[0] != byte(i) {
			t.Fatalf("%s on the replica after the catch-up: %+v, %v", id(i), got, err)
		}
	}
	if st := owner.Stats(); st.BulkDeleted != 4 {
		t.Fatalf("deletions sent by the catch-up: %d, want 4 (stats %+v)", st.BulkDeleted, st)
	}
}

// A deletion removes the copy it names, (DeletesEpoch, Version), or an
// older one by (epoch, version), whatever epoch it was sent under.
func TestDeletionRemovesOnlyItsCopyOrOlder(t *testing.T) {
	for _, c := range []struct {
		name           string
		epoch, version uint64 // the stored copy
		removed        bool
	}{
		{"the copy", 2, 10, true},
		{"an older version", 2, 5, true},
		{"an older epoch at a higher version", 1, 20, true},
		{"a newer version", 2, 11, false},
		{"a newer epoch at a lower version", 3, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := newStore(t, false)
			id := prospero.Identity{Kind: "counter", Key: "x"}
			if _, err := rep.Local().ApplyReplicated([]prospero.Replicated{{ID: id, Epoch: c.epoch, Version: c.version, State: []byte("s")}}); err != nil {
				t.Fatal(err)
			}
			n, err := rep.Local().ApplyReplicated([]prospero.Replicated{{ID: id, Epoch: 3, Version: 10, Deleted: true, DeletesEpoch: 2}})
			if err != nil {
				t.Fatal(err)
			}
			_, gerr := rep.Local().Get(t.Context(), id)
			if gone := errors.Is(gerr, prospero.ErrNotFound); gone != c.removed || (n == 1) != c.removed {
				t.Fatalf("copy (%d, %d) after a deletion of (2, 10): removed %v (applied %d, %v), want %v", c.epoch, c.version, gone, n, gerr, c.removed)
			}
		})
	}
}

// A record naming a deleted copy's epoch that is not a deletion, or a
// deletion of a copy newer than the epoch it was sent under, is a bad
// record, refused whole.
func TestDeletionEpochChecked(t *testing.T) {
	id := prospero.Identity{Kind: "counter", Key: "x"}
	for _, r := range []prospero.Replicated{
		{ID: id, Epoch: 3, Version: 1, State: []byte("s"), DeletesEpoch: 2},
		{ID: id, Epoch: 3, Version: 1, Deleted: true, DeletesEpoch: 4},
	} {
		b := appendBatch(nil, 1, 0, []*Record{{Shard: Shard{Index: 2}, Replicated: r}})
		_, _, _, sh, err := decodeBatch(b)
		if !errors.Is(err, ErrBadRecord) || sh == nil || sh.Index != 2 {
			t.Fatalf("%+v: decoded with %v (shard %v), want ErrBadRecord naming shard 2", r, err, sh)
		}
	}
}

// A deletion a catch-up sends for a follower's old copy does not remove
// a newer version of the record the owner wrote meanwhile.
func TestCatchUpDeletionSparesANewerRecord(t *testing.T) {
	rep := newStore(t, false)
	id := prospero.Identity{Kind: "counter", Key: "x"}
	recs := []prospero.Replicated{{ID: id, Epoch: 3, Version: 5, State: []byte("new")}}
	if _, err := rep.Local().ApplyReplicated(recs); err != nil {
		t.Fatal(err)
	}
	// The deletion of the copy the follower listed earlier (epoch 2, version 4).
	if _, err := rep.Local().ApplyReplicated([]prospero.Replicated{{ID: id, Epoch: 3, Version: 4, Deleted: true, DeletesEpoch: 2}}); err != nil {
		t.Fatal(err)
	}
	if got, err := rep.Local().Get(t.Context(), id); err != nil || string(got.State) != "new" {
		t.Fatalf("after a deletion of an older copy: %+v, %v", got, err)
	}
}

// gatedConn holds the first write of a batch that carries a deletion
// until release is closed, after closing reached.
type gatedConn struct {
	net.Conn
	once             *sync.Once
	reached, release chan struct{}
}

func (c gatedConn) Write(b []byte) (int, error) {
	if len(b) > 4 && b[4] == frameBatch {
		if _, _, recs, _, err := decodeBatch(b[4:]); err == nil && slices.ContainsFunc(recs, func(r Record) bool { return r.Deleted }) {
			c.once.Do(func() {
				close(c.reached)
				<-c.release
			})
		}
	}
	return c.Conn.Write(b)
}

// TestCatchUpDeletionSparesARecreatedRecord: a catch-up finds that the
// owner no longer has x, which the follower holds as an older owner's
// copy at a high version, and sends a deletion of that copy. The owner
// re-creates x before the deletion is sent, at a lower version of its
// own (newer) epoch, and the re-creation reaches the follower first.
// The deletion must remove only the copy it was sent for (or an older
// one), never the re-created record.
func TestCatchUpDeletionSparesARecreatedRecord(t *testing.T) {
	store := func() *Store {
		b, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Local: b, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	owner, rep := store(), store()
	v := &fakeView{owner: "a", epoch: 3}
	rep.Attach(v, nil)
	gate := gatedConn{once: new(sync.Once), reached: make(chan struct{}), release: make(chan struct{})}
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(gate.release) }) })
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		go func() { _ = rep.Serve(c2, "a") }()
		g := gate
		g.Conn = c1
		return g, nil
	})
	ctx := t.Context()
	// The follower holds more copies of an older owner (epoch 2) than one
	// chunk of deletions, x last: x's deletion goes in the second chunk,
	// after every listed copy was checked against the owner's store.
	x := prospero.Identity{Kind: "counter", Key: "x"}
	var old []prospero.Replicated
	for i := range 1100 {
		old = append(old, prospero.Replicated{ID: prospero.Identity{Kind: "counter", Key: fmt.Sprintf("a%04d", i)}, Epoch: 2, Version: 10, State: []byte("old")})
	}
	old = append(old, prospero.Replicated{ID: x, Epoch: 2, Version: 10, State: []byte("old")})
	if _, err := rep.Local().ApplyReplicated(old); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- owner.CatchUp(ctx, "b", map[Shard]uint64{{Index: 0}: 3}, 1<<30) }()
	select {
	case <-gate.reached:
	case err := <-done:
		t.Fatalf("catch-up ended before it sent a deletion: %v", err)
	}
	// The first chunk of deletions is on its way. Re-create x on the owner;
	// its write queues for the catching-up follower among or behind that
	// chunk (it is sent before its local commit) and before x's deletion.
	recreated := make(chan error, 1)
	owner.PutAsync(x, 0, prospero.Record{State: []byte("new")}, func(ver uint64, err error) {
		if err == nil && ver >= 10 {
			err = fmt.Errorf("re-created at version %d, want below the follower's 10", ver)
		}
		recreated <- err
	})
	queuedLast := func() bool {
		owner.mu.Lock()
		p := owner.peers["b"]
		owner.mu.Unlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		return slices.ContainsFunc(p.queue, func(w pending) bool { return w.r.ID == x && !w.r.Deleted })
	}
	for deadline := time.Now().Add(10 * time.Second); !queuedLast(); {
		if time.Now().After(deadline) {
			t.Fatalf("the re-creation did not queue for the follower: %+v", owner.Lags())
		}
		time.Sleep(time.Millisecond)
	}
	released.Do(func() { close(gate.release) })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-recreated; err != nil {
		t.Fatal(err)
	}
	if err := rep.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, err := rep.Local().Get(ctx, x); err != nil || string(got.State) != "new" {
		t.Fatalf("re-created record on the follower after the catch-up: %+v, %v", got, err)
	}
	if _, err := rep.Local().Get(ctx, old[0].ID); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("an older owner's copy the owner does not have survived the catch-up: %v", err)
	}
	if st := owner.Stats(); st.BulkDeleted != uint64(len(old)) {
		t.Fatalf("deletions sent: %d, want %d", st.BulkDeleted, len(old))
	}
}

// TestWriteOfANonOwnerLeavesItsReplicaCopyAlone: a node that no longer
// owns a shard but still holds an actor of it (its passivation is on
// its way) may try to write that actor's state. The write fails, and it
// must not land in the local store first: there it would replace the
// copy this node holds as the shard's replica with state nobody
// committed, at a version of this node's own sequence that can stay
// ahead of the owner's next records, so that a promotion of this replica
// would serve it and lose what the owner committed.
func TestWriteOfANonOwnerLeavesItsReplicaCopyAlone(t *testing.T) {
	s := newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	s.Attach(v, nil)
	id := prospero.Identity{Kind: "counter", Key: "k"}
	if _, err := s.Local().ApplyReplicated([]prospero.Replicated{{ID: id, Epoch: 3, Version: 5, State: []byte("owner's")}}); err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.routeErr = errors.New("this node does not own the shard")
	v.mu.Unlock()

	ctx := context.Background()
	intact := func(after string) {
		t.Helper()
		rec, err := s.Get(ctx, id)
		if err != nil || rec.Version != 5 || string(rec.State) != "owner's" {
			t.Fatalf("the replica's copy after a refused %s: %+v, %v; want the owner's, version 5", after, rec, err)
		}
	}
	if _, err := s.Put(ctx, id, 5, prospero.Record{State: []byte("stale actor's")}); !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("Put by a non-owner: %v, want ErrNotCommitted", err)
	}
	intact("Put")
	deleted := make(chan error, 1)
	s.DeleteAsync(id, prospero.AnyVersion, func(err error) { deleted <- err })
	if err := <-deleted; !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("DeleteAsync by a non-owner: %v, want ErrNotCommitted", err)
	}
	intact("DeleteAsync")
	if err := s.Delete(ctx, id, prospero.AnyVersion); !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("Delete by a non-owner: %v, want ErrNotCommitted", err)
	}
	intact("Delete")
	// The owner's next record still replaces it.
	if n, err := s.Local().ApplyReplicated([]prospero.Replicated{{ID: id, Epoch: 3, Version: 6, State: []byte("owner's next")}}); err != nil || n != 1 {
		t.Fatalf("the owner's next record: applied %d, %v", n, err)
	}
}

// TestLapsedLeaseEndsARemovalInFlight: a replica that failed is removed
// from the in-sync set through raft before the writes it did not
// acknowledge commit. An owner cut off from the raft leader cannot get
// that removal committed, and its lease lapses meanwhile: the removal
// must end like a round trip in flight does (at the second Interrupt
// after it began), failing the writes with ErrLeaseLapsed, instead of
// holding them, and the activations whose passivation waits on them, for
// four replication timeouts, while a new owner may take over.
func TestLapsedLeaseEndsARemovalInFlight(t *testing.T) {
	b, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	owner, err := New(Config{Local: b, Timeout: time.Hour}) // a wait the test would notice
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Close() })
	shrinking := make(chan struct{})
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}, shrinking: shrinking}
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		return nil, errors.New("disconnected") // the replica failed
	})
	id := prospero.Identity{Kind: "counter", Key: "x"}
	res := make(chan error, 1)
	owner.PutAsync(id, 0, prospero.Record{State: []byte("1")}, func(_ uint64, err error) { res <- err })
	<-shrinking // the removal is on its way to a leader that does not answer
	lapseAndInterrupt(t, owner, v, res, "the removal")
}

// lapseAndInterrupt marks v's lease lapsed and interrupts owner twice:
// the write whose outcome res gets, waiting for what (begun before the
// first call), must go on after the first and fail with ErrNotCommitted
// wrapping ErrLeaseLapsed after the second.
func lapseAndInterrupt(t *testing.T, owner *Store, v *fakeView, res <-chan error, what string) {
	t.Helper()
	v.mu.Lock()
	v.lapsed = true
	v.mu.Unlock()
	owner.Interrupt() // what waits began after no earlier call: it goes on
	select {
	case err := <-res:
		t.Fatalf("ended by the first Interrupt after %s began: %v", what, err)
	default:
	}
	owner.Interrupt()
	var err error
	select {
	case err = <-res:
	case <-time.After(time.Minute):
		t.Fatalf("the write still waits for %s a minute after the second Interrupt", what)
	}
	if !errors.Is(err, prospero.ErrNotCommitted) || !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("write behind %s, interrupted: %v, want ErrNotCommitted wrapping ErrLeaseLapsed", what, err)
	}
}

// A link whose stream ended while it was idle (the transport dropped it
// with its connection: a partition that healed, a peer that came back)
// is found out only by the next write, which fails at once. Nothing of
// that batch reached the replica, so it goes again on a new link, once:
// the replica, which never failed, stays in the set. A write that fails
// on the new link too removes it as before.
func TestIdleLinkEndedUnderneathIsRedialled(t *testing.T) {
	owner, rep := newStore(t, false), newStore(t, false)
	v := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	var (
		mu    sync.Mutex
		conns []net.Conn
		dead  bool // dials return a stream that is closed already
	)
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		mu.Lock()
		defer mu.Unlock()
		if dead {
			c1.Close()
			c2.Close()
			return c1, nil
		}
		conns = append(conns, c1, c2)
		go func() { _ = rep.Serve(c2, "a") }()
		return c1, nil
	})
	rep.Attach(v, nil)
	dropStreams := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	ctx := t.Context()
	id := prospero.Identity{Kind: "counter", Key: "x"}
	ver, err := owner.Put(ctx, id, 0, prospero.Record{State: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	dropStreams() // idle now: nothing in flight
	if ver, err = owner.Put(ctx, id, ver, prospero.Record{State: []byte("2")}); err != nil {
		t.Fatalf("write after the idle link's stream ended: %v", err)
	}
	if st := owner.Stats(); len(v.shrunk) != 0 || st.Shrinks != 0 || st.ShrinkFail != 0 {
		t.Fatalf("the replica left the set over a stream that ended while idle: shrunk %v, stats %+v", v.shrunk, st)
	}
	rep.apply.drain()
	if got, err := rep.Local().Get(ctx, id); err != nil || got.Version != ver || string(got.State) != "2" {
		t.Fatalf("replica holds %+v, %v; want version %d, state 2", got, err, ver)
	}
	dropStreams()
	mu.Lock()
	dead = true
	mu.Unlock()
	if _, err := owner.Put(ctx, id, ver, prospero.Record{State: []byte("3")}); err != nil {
		t.Fatal(err)
	}
	if st := owner.Stats(); !slices.Equal(v.shrunk, []string{"b"}) || st.Shrinks != 1 {
		t.Fatalf("a write failing on the new link too: shrunk %v, stats %+v; want b removed once", v.shrunk, st)
	}
}
