package replica

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// heldFollower is an owner ("a") and a follower ("b") joined by a
// loopback TCP stream, whose kernel buffers take what the owner writes
// while the follower reads nothing: the follower is handed its end when
// the test is ready (serve).
type heldFollower struct {
	owner *Store
	view  *fakeView
	conns chan net.Conn
}

func newHeldFollower(t *testing.T, sync bool) *heldFollower {
	t.Helper()
	store := func(sync bool) *Store {
		b, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Local: b, SyncReplicas: sync, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	h := &heldFollower{owner: store(sync), view: &fakeView{owner: "a", epoch: 3, followers: []string{"b"}}, conns: make(chan net.Conn, 4)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			h.conns <- c
		}
	}()
	h.owner.Attach(h.view, func(ctx context.Context, peer string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
	return h
}

// put writes key on the owner in the background.
func (h *heldFollower) put(t *testing.T, key string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := h.owner.Put(t.Context(), prospero.Identity{Kind: "counter", Key: key}, 0,
			prospero.Record{Incarnation: 1, State: []byte(key)})
		done <- err
	}()
	return done
}

// lagIs waits until the follower's lag shows queued records not sent
// and inFlight records sent and not acknowledged.
func (h *heldFollower) lagIs(t *testing.T, queued, inFlight int) {
	t.Helper()
	var ls []Lag
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if ls = h.owner.Lags(); len(ls) == 1 && ls[0].Queued == queued && ls[0].InFlight == inFlight {
			return
		}
	}
	t.Fatalf("want %d queued and %d in flight, lags %+v", queued, inFlight, ls)
}

// A record written while the batch before it waits for its
// acknowledgement leaves at once, in a batch of its own, instead of
// waiting for that round trip: up to the window, batches are in flight
// together on the follower's stream, and each commits on its own
// acknowledgement. With SyncReplicas one batch is in flight at a time
// (each costs the follower an fsync; what queues meanwhile shares the
// next one).
func TestBatchesInFlightTogether(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "sync"}[sync], func(t *testing.T) {
			h := newHeldFollower(t, sync)
			rep := newStore(t, false)
			rep.Attach(h.view, nil)
			var dones []<-chan error
			for i, key := range []string{"x", "y", "z"} {
				dones = append(dones, h.put(t, key))
				if sync {
					h.lagIs(t, i, 1)
				} else {
					h.lagIs(t, 0, i+1)
				}
			}
			go func() { _ = rep.Serve(<-h.conns, "a") }()
			for _, d := range dones {
				if err := <-d; err != nil {
					t.Fatal(err)
				}
			}
			h.lagIs(t, 0, 0)
			want := uint64(3)
			if sync {
				want = 2 // y and z shared the second batch
			}
			if st := h.owner.Stats(); st.Batches != want || st.Records != 3 {
				t.Fatalf("owner stats %+v, want %d batches of 3 records", st, want)
			}
			rep.apply.drain()
			for _, key := range []string{"x", "y", "z"} {
				if got, err := rep.Local().Get(t.Context(), prospero.Identity{Kind: "counter", Key: key}); err != nil || string(got.State) != key {
					t.Fatalf("replica holds %q: %+v, %v", key, got, err)
				}
			}
		})
	}
}

// A follower whose stream breaks with several batches in flight fails
// them all as one: it leaves the set once (one removal through the
// view), before any of their writes commits without it.
func TestBatchesInFlightFailTogether(t *testing.T) {
	h := newHeldFollower(t, false)
	var dones []<-chan error
	for i, key := range []string{"x", "y", "z"} {
		dones = append(dones, h.put(t, key))
		h.lagIs(t, 0, i+1)
	}
	_ = (<-h.conns).Close()
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	h.view.mu.Lock()
	shrunk := slices.Clone(h.view.shrunk)
	h.view.mu.Unlock()
	if !slices.Equal(shrunk, []string{"b"}) || h.owner.Stats().Shrinks != 1 {
		t.Fatalf("removals %v, stats %+v: want b removed once", shrunk, h.owner.Stats())
	}
	if ls := h.owner.Lags(); len(ls) != 1 || ls[0].InFlight != 0 || ls[0].Queued != 0 || ls[0].Acked != 0 {
		t.Fatalf("lags after the failure: %+v", ls)
	}
}

// While a follower whose stream broke is being removed from its sets
// (through raft, which may take long), the records waiting on it are
// still counted in flight: Lags must not show it owing nothing then.
func TestLagShowsRecordsWaitingOnARemoval(t *testing.T) {
	h := newHeldFollower(t, false)
	shrinking := make(chan struct{})
	h.view.mu.Lock()
	h.view.shrinking = shrinking
	h.view.mu.Unlock()
	var dones []<-chan error
	for i, key := range []string{"x", "y"} {
		dones = append(dones, h.put(t, key))
		h.lagIs(t, 0, i+1)
	}
	_ = (<-h.conns).Close()
	<-shrinking // the removal waits for a leader that does not answer
	h.lagIs(t, 0, 2)
	if ls := h.owner.Lags(); ls[0].Oldest <= 0 {
		t.Fatalf("lag during the removal: %+v, want the age of the oldest record", ls)
	}
	h.view.mu.Lock()
	h.view.lapsed = true
	h.view.mu.Unlock()
	for range 3 {
		h.owner.Interrupt()
	}
	for _, d := range dones {
		if err := <-d; !errors.Is(err, ErrLeaseLapsed) {
			t.Fatalf("a write behind an interrupted removal: %v, want ErrLeaseLapsed", err)
		}
	}
	h.lagIs(t, 0, 0)
}

// A replica that reports records it acknowledged as lost reports it
// once. A batch for it that finds it marked down fails alone, without
// ending the stream, so the report for the batch in flight before it is
// still read, and the owner, unable to remove the replica, keeps it
// suspect (a planned move does not promote it).
func TestLostRecordsReportSurvivesADownReplica(t *testing.T) {
	h := newHeldFollower(t, false)
	rep := newStore(t, false)
	h.view.mu.Lock()
	h.view.down = map[string]bool{}
	h.view.mu.Unlock()
	first := h.put(t, "x")
	h.lagIs(t, 0, 1)
	conn := <-h.conns
	b, err := readFrame(bufio.NewReader(conn))
	if err != nil {
		t.Fatal(err)
	}
	seq, _, _, _, err := decodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	h.view.mu.Lock()
	h.view.down["b"] = true
	h.view.refuse = errors.New("no quorum") // the replica cannot be removed
	h.view.mu.Unlock()
	if err := <-h.put(t, "y"); !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("a write for a replica marked down that cannot be removed: %v, want ErrNotCommitted", err)
	}
	if err := rep.writeAck(conn, nil, seq, ErrLostRecords); err != nil {
		t.Fatal(err)
	}
	if err := <-first; !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("the write the replica refused: %v, want ErrNotCommitted", err)
	}
	if !h.owner.Suspect("b") {
		t.Fatal("the replica's report of lost records was dropped: it is not suspect")
	}
}
