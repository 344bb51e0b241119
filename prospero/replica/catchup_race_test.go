package replica

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
)

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
	owner, rep := newStore(t, false), newStore(t, false)
	fv := &fakeView{owner: "a", epoch: 3}
	v := &stallView{fakeView: fv, routed: make(chan struct{}), release: make(chan struct{})}
	owner.Attach(v, func(ctx context.Context, peer string) (net.Conn, error) {
		c1, c2 := net.Pipe()
		go func() { _ = rep.Serve(c2, "a") }()
		return c1, nil
	})
	rep.Attach(fv, nil)
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
