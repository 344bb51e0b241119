package replica

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
)

// catchUpPair is an owner "a" seeing the table through view (fv, with
// hooks) and a replica "b" seeing fv, joined by in-memory streams: b is
// in no set yet, for a catch-up to bring it in.
func catchUpPair(t *testing.T, fv *fakeView, view View) (owner, rep *Store) {
	owner, rep = newStore(t, false), newStore(t, false)
	owner.Attach(view, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		go func() { _ = rep.Serve(c2, "a") }()
		return c1, nil
	})
	rep.Attach(fv, nil)
	return owner, rep
}

// stallView holds one Route call after it read the table (the writing
// goroutine preempted there) and runs a hook inside Join, before the join
// is applied.
type stallView struct {
	*fakeView
	routeCalls atomic.Int32
	stallOn    atomic.Int32
	routed     chan struct{} // closed when the held Route has read the table
	release    chan struct{} // the held Route returns then
	onJoin     func()
}

func (v *stallView) Route(id prospero.Identity) (Route, error) {
	r, err := v.fakeView.Route(id)
	if n := v.routeCalls.Add(1); n == v.stallOn.Load() {
		close(v.routed)
		<-v.release
	}
	return r, err
}

func (v *stallView) Join(ctx context.Context, f string, sh map[Shard]uint64) (int, error) {
	if v.onJoin != nil {
		v.onJoin()
	}
	return v.fakeView.Join(ctx, f, sh)
}

// A write reads its shard's route (the in-sync followers) and the
// followers catching up. It read the route first: a write whose route
// was read just before a catch-up's join was applied, and whose list of
// catching followers was read just after that catch-up ended, went to
// neither, and committed while the follower, now in the set, lacked it
// (a failover or a promotion to it then lost an acknowledged write).
func TestWriteRacingAJoinReachesTheJoiningFollower(t *testing.T) {
	fv := &fakeView{owner: "a", epoch: 3}
	v := &stallView{fakeView: fv, routed: make(chan struct{}), release: make(chan struct{})}
	owner, rep := catchUpPair(t, fv, v)
	ctx := t.Context()
	id := prospero.Identity{Kind: "counter", Key: "x"}
	if _, err := owner.Put(ctx, id, 0, prospero.Record{State: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	v.onJoin = func() {
		// The bulk copy is done, the join not applied: a write now sees
		// the owner alone in the set and b catching up. Its second
		// Route (the replication's) is held once it read the table.
		v.stallOn.Store(v.routeCalls.Load() + 2)
		go func() {
			_, err := owner.Put(context.Background(), id, 1, prospero.Record{State: []byte("v2")})
			written <- err
		}()
		<-v.routed
	}
	if err := owner.CatchUp(ctx, "b", map[Shard]uint64{{Index: 0}: 3}, 1<<30); err != nil {
		t.Fatal(err)
	}
	close(v.release) // the join is applied and the catch-up has ended
	if err := <-written; err != nil {
		t.Fatalf("the write racing the join: %v", err)
	}
	rep.apply.drain()
	fv.mu.Lock()
	inSet := slices.Contains(fv.followers, "b")
	fv.mu.Unlock()
	got, err := rep.Local().Get(ctx, id)
	if !inSet {
		t.Fatal("b did not join the set")
	}
	if err != nil || string(got.State) != "v2" {
		t.Fatalf("b is in the in-sync set and holds %q (%v), not the committed write v2", got.State, err)
	}
}

// unsettledView's first Join is proposed and then loses its lease before
// it sees the outcome (ErrJoinUnsettled); raft applies that join later,
// when the test says (applyLate). Its later Joins see it applied.
type unsettledView struct {
	*fakeView
	joins   atomic.Int32
	pending chan struct{} // closed by the first Join
}

func (v *unsettledView) Join(ctx context.Context, f string, sh map[Shard]uint64) (int, error) {
	if v.joins.Add(1) == 1 {
		v.mu.Lock()
		v.lapsed = true
		v.mu.Unlock()
		close(v.pending)
		return 0, fmt.Errorf("%w: lease lapsed", ErrJoinUnsettled)
	}
	return v.fakeView.Join(ctx, f, sh)
}

// applyLate applies the pending join and ends the lapse.
func (v *unsettledView) applyLate(f string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !slices.Contains(v.followers, f) {
		v.followers = append(v.followers, f)
	}
	v.lapsed = false
}

// A join whose outcome is unknown (the owner's lease lapsed while it was
// on its way) may still be applied. The catch-up used to end there, and
// writes stopped reaching the follower: those committed before the join
// was applied were missing on a member of the set. The follower now stays
// registered until the owner's table settles the join.
func TestWritesReachAFollowerWhoseJoinIsUnsettled(t *testing.T) {
	fv := &fakeView{owner: "a", epoch: 3}
	v := &unsettledView{fakeView: fv, pending: make(chan struct{})}
	owner, rep := catchUpPair(t, fv, v)
	ctx := t.Context()
	id := prospero.Identity{Kind: "counter", Key: "x"}
	if _, err := owner.Put(ctx, id, 0, prospero.Record{State: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	caughtUp := make(chan error, 1)
	go func() { caughtUp <- owner.CatchUp(ctx, "b", map[Shard]uint64{{Index: 0}: 3}, 1<<30) }()
	<-v.pending
	// The join is on its way, its outcome unknown: a write now commits
	// (the set is the owner alone) and must reach b all the same.
	if _, err := owner.Put(ctx, id, 1, prospero.Record{State: []byte("v2")}); err != nil {
		t.Fatalf("write while the join is unsettled: %v", err)
	}
	v.applyLate("b")
	if err := <-caughtUp; err != nil {
		t.Errorf("catch-up: %v", err)
	}
	rep.apply.drain()
	got, err := rep.Local().Get(ctx, id)
	if err != nil || string(got.State) != "v2" {
		t.Fatalf("b joined the in-sync set holding %q (%v), not the committed write v2", got.State, err)
	}
}

// A write to the follower fails while its join is unsettled: the
// follower lacks a write that then commits, so it must not be joined
// again once the lease is back; the join that may have been applied
// meanwhile is undone (Shrink) instead.
func TestAbortedCatchUpWithAnUnsettledJoinDoesNotJoinAgain(t *testing.T) {
	fv := &fakeView{owner: "a", epoch: 3}
	v := &unsettledView{fakeView: fv, pending: make(chan struct{})}
	owner, _ := catchUpPair(t, fv, v)
	ctx := t.Context()
	caughtUp := make(chan error, 1)
	go func() { caughtUp <- owner.CatchUp(ctx, "b", map[Shard]uint64{{Index: 0}: 3}, 1<<30) }()
	<-v.pending
	owner.mu.Lock() // a write to b failed (peer.fail marks the catch-up so)
	owner.catching["b"].aborted = true
	owner.mu.Unlock()
	v.applyLate("b") // the unsettled join was applied, and the lease is back
	if err := <-caughtUp; !errors.Is(err, ErrCatchUpAborted) {
		t.Fatalf("catch-up: %v, want ErrCatchUpAborted", err)
	}
	if n := v.joins.Load(); n != 1 {
		t.Errorf("%d joins proposed, want 1 (not again after the abort)", n)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if slices.Contains(fv.followers, "b") || !slices.Contains(fv.shrunk, "b") {
		t.Fatalf("followers %v, shrunk %v: want b taken out of the set", fv.followers, fv.shrunk)
	}
}
