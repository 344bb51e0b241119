package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// lostView is a fakeView that lists more shards followed by its
// follower than the writes touch, and records what Shrink was given.
type lostView struct {
	*fakeView
	mu     sync.Mutex
	shrunk map[Shard]uint64
}

func (v *lostView) FollowedBy(string) map[Shard]uint64 {
	return map[Shard]uint64{{Index: 0}: 3, {Index: 9}: 3}
}

func (v *lostView) Shrink(ctx context.Context, f string, shards map[Shard]uint64) (int, error) {
	v.mu.Lock()
	v.shrunk = maps.Clone(shards)
	v.mu.Unlock()
	return v.fakeView.Shrink(ctx, f, shards)
}

// lostPair is pair with its owner seeing the views of lostView, and its
// replica having lost a record it acknowledged (failInBackground).
func lostPair(t *testing.T) (owner *Store, fv *fakeView, v *lostView) {
	t.Helper()
	owner, rep, fv, _ := pair(t, false)
	v = &lostView{fakeView: fv}
	owner.Attach(v, owner.att.Load().dial)
	failInBackground(t, rep)
	return owner, fv, v
}

// putOne writes counter/key (shard 0, as fakeView routes) on owner.
func putOne(t *testing.T, owner *Store, key string) error {
	_, err := owner.Put(t.Context(), prospero.Identity{Kind: "counter", Key: key}, 0, prospero.Record{Incarnation: 1, State: []byte("1")})
	return err
}

// failInBackground makes rep acknowledge to owner a a batch on receipt
// that then fails to be stored (an identity without a kind cannot be),
// as a write on a full disk does.
func failInBackground(t *testing.T, rep *Store) {
	t.Helper()
	bad := []Record{{Shard: Shard{Index: 9}, Replicated: prospero.Replicated{ID: prospero.Identity{Key: "x"}, Epoch: 3, Version: 1}}}
	if err := rep.apply.later("a", bad); err != nil {
		t.Fatal(err)
	}
	rep.apply.drain()
}

// A replica whose background write of an owner's records failed refuses
// that owner's next batch as ErrLostRecords, and the owner takes it out
// of every set it shares with it, not only the sets of the batch's
// shards: the records it lost may be of any of them, and a set that
// keeps it would let a failover promote it without them.
func TestLostRecordsTakeTheReplicaOutOfEverySet(t *testing.T) {
	owner, _, v := lostPair(t)
	id := prospero.Identity{Kind: "counter", Key: "y"} // shard 0, as fakeView routes
	if _, err := owner.Put(t.Context(), id, 0, prospero.Record{Incarnation: 1, State: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.shrunk[Shard{Index: 9}]; !ok {
		t.Fatalf("shrink of %v: want every shard the replica follows, shard 9 too", v.shrunk)
	}
}

// A catch-up confirms, before its follower joins, that the follower made
// every record it acknowledged durable: a background write that failed
// there refuses the confirmation.
func TestCatchUpConfirmationSeesALostWrite(t *testing.T) {
	owner, rep, _, _ := pair(t, false)
	a := owner.att.Load()
	if err := owner.confirm(t.Context(), a, "b", time.Second); err != nil {
		t.Fatalf("confirmation with nothing lost: %v", err)
	}
	failInBackground(t, rep)
	if err := owner.confirm(t.Context(), a, "b", time.Second); !errors.Is(err, ErrLostRecords) {
		t.Fatalf("confirmation after a lost write: %v, want ErrLostRecords", err)
	}
}

// The follower reports lost records once, to whichever stream asks
// first: when that is a catch-up's probe (or its confirmation), the
// owner takes the follower out of every set it shares with it too, as
// for a refused batch, since it may be in-sync for other shards.
func TestLostRecordsSeenByACatchUp(t *testing.T) {
	owner, _, v := lostPair(t)
	err := owner.CatchUp(t.Context(), "b", map[Shard]uint64{{Index: 0}: 3}, 0)
	if !errors.Is(err, ErrLostRecords) {
		t.Fatalf("catch-up: %v, want ErrLostRecords", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.shrunk[Shard{Index: 9}]; !ok {
		t.Fatalf("shrink of %v: want every shard the replica follows", v.shrunk)
	}
}

// The replica reports lost records once. When the removal that follows
// fails (no raft leader for a moment), this node remembers it owes one:
// the next write does not count the replica, and tries the removal
// again, and the replica is Suspect (not promoted) until it succeeds.
func TestLostRecordsRemovalRetried(t *testing.T) {
	owner, fv, v := lostPair(t)
	fv.mu.Lock()
	fv.refuse = errors.New("no raft leader")
	fv.mu.Unlock()
	put := func(key string) error { return putOne(t, owner, key) }
	if err := put("a"); err == nil {
		t.Fatal("a write committed although the replica that lost records could not be removed")
	}
	if !owner.Suspect("b") {
		t.Fatal("the replica is not suspect after a failed removal")
	}
	if err := put("b"); err == nil {
		t.Fatal("a second write committed counting the replica that lost records")
	}
	fv.mu.Lock()
	fv.refuse = nil
	fv.mu.Unlock()
	if err := put("c"); err != nil {
		t.Fatalf("a write once the removal succeeds: %v", err)
	}
	v.mu.Lock()
	_, removed := v.shrunk[Shard{Index: 9}]
	v.mu.Unlock()
	if !removed || owner.Suspect("b") {
		t.Fatalf("after the retry: removed %v, suspect %v", removed, owner.Suspect("b"))
	}
}

// A report of lost records read while this node's lease is lapsed (an
// election) cannot lead to a removal then, which goes through raft; the
// replica reports it only once, so this node remembers it owes one: the
// replica is Suspect, and the first write once the lease is back removes
// it from every set it shares with this node before committing.
func TestLostRecordsReportedDuringALapseAreRemembered(t *testing.T) {
	owner, fv, v := lostPair(t)
	fv.mu.Lock()
	fv.lapsed = true
	fv.mu.Unlock()
	put := func(key string) error { return putOne(t, owner, key) }
	if err := put("a"); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("a write during the lapse: %v, want ErrLeaseLapsed", err)
	}
	if !owner.Suspect("b") {
		t.Fatal("the report read during the lapse was forgotten: the replica is not suspect")
	}
	fv.mu.Lock()
	fv.lapsed = false
	fv.mu.Unlock()
	if err := put("c"); err != nil {
		t.Fatalf("a write once the lease is back: %v", err)
	}
	v.mu.Lock()
	_, removed := v.shrunk[Shard{Index: 9}]
	v.mu.Unlock()
	if !removed || owner.Suspect("b") {
		t.Fatalf("after the lapse: removed from every set %v, suspect %v", removed, owner.Suspect("b"))
	}
}

// heldAckConn is the owner's end of a stream whose reads give what the
// test feeds, whenever it feeds it, also after Close: a refusal the
// replica sent that the owner's reader takes in only after its stream
// was ended for another cause.
type heldAckConn struct {
	net.Conn // never used; the methods below are the conn
	feed     chan []byte
	written  chan struct{}
	reading  chan struct{}
	pending  []byte
}

func (c *heldAckConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		select {
		case c.reading <- struct{}{}:
		default:
		}
		c.pending = <-c.feed
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *heldAckConn) Write(p []byte) (int, error) {
	select {
	case c.written <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (c *heldAckConn) Close() error                     { return nil }
func (c *heldAckConn) SetDeadline(time.Time) error      { return nil }
func (c *heldAckConn) SetReadDeadline(time.Time) error  { return nil }
func (c *heldAckConn) SetWriteDeadline(time.Time) error { return nil }

// A report of lost records that the owner's reader takes in after the
// stream was ended for another cause (Failed: the table marked the
// replica down), and after the loop failed its batches for that cause,
// is not dropped with the stream: the removal from every set is still
// owed, and the replica is Suspect until it is made.
func TestLostRecordsReportReadAfterTheStreamEnded(t *testing.T) {
	owner := newStore(t, false)
	fv := &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}
	v := &lostView{fakeView: fv}
	conn := &heldAckConn{feed: make(chan []byte, 1), written: make(chan struct{}, 1), reading: make(chan struct{}, 1)}
	owner.Attach(v, func(context.Context, string) (net.Conn, error) { return conn, nil })
	done := make(chan error, 1)
	go func() {
		_, err := owner.Put(t.Context(), prospero.Identity{Kind: "counter", Key: "x"}, 0, prospero.Record{Incarnation: 1, State: []byte("1")})
		done <- err
	}()
	<-conn.written // batch 1 is in flight
	<-conn.reading // and the owner's reader waits for its answer
	owner.Failed("b")
	if err := <-done; err != nil {
		t.Fatalf("the write whose replica was marked down and removed: %v", err)
	}
	ack := appendAck([]byte{0, 0, 0, 0}, 1, ErrLostRecords)
	binary.BigEndian.PutUint32(ack, uint32(len(ack)-4))
	conn.feed <- ack
	for deadline := time.Now().Add(10 * time.Second); !owner.Suspect("b"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the report read after the stream ended was dropped: the replica is not suspect")
		}
	}
}
