package placement_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tempest-actors/tempest/placement"
)

type loopDialer struct{}

func (loopDialer) Dial(ctx context.Context, peer, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", peer)
}

// splitOverTCP is a SplitHeartbeats transport on loopback TCP: appends
// with no I/O timeout at all, heartbeats with hbTimeout.
func splitOverTCP(t *testing.T, hbTimeout time.Duration) *placement.SplitTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := placement.SplitHeartbeats(
		raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: placement.NewStreamLayer(loopDialer{}, ln, ""), MaxPool: 2}),
		raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: placement.HeartbeatStreamLayer(loopDialer{}, ln.Addr(), ""), MaxPool: 2, Timeout: hbTimeout}))
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func heartbeat(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: term, Leader: []byte("a")}
}

// TestSplitHeartbeats: heartbeats take the fast transport (its timeout
// applies, the append transport has none) and reach the receiver's
// heartbeat handler; an accepted one, and only that, moves
// LastHeartbeatTerm; appends arrive through the consumer.
func TestSplitHeartbeats(t *testing.T) {
	a := splitOverTCP(t, 200*time.Millisecond)
	b := splitOverTCP(t, 200*time.Millisecond)
	to := b.LocalAddr()
	accept := make(chan bool, 1)
	b.SetHeartbeatHandler(func(rpc raft.RPC) {
		ok := <-accept
		rpc.Respond(&raft.AppendEntriesResponse{Success: ok}, nil)
	})
	if !lastHeartbeat(b).IsZero() {
		t.Fatal("LastHeartbeat set before any heartbeat")
	}

	var resp raft.AppendEntriesResponse
	accept <- true
	if err := a.AppendEntries("b", to, heartbeat(1), &resp); err != nil || !resp.Success {
		t.Fatalf("heartbeat: %v %+v", err, resp)
	}
	first := lastHeartbeat(b)
	if first.IsZero() {
		t.Fatal("an accepted heartbeat did not set LastHeartbeat")
	}
	accept <- false
	if err := a.AppendEntries("b", to, heartbeat(1), &resp); err != nil || resp.Success {
		t.Fatalf("refused heartbeat: %v %+v", err, resp)
	}
	if got := lastHeartbeat(b); !got.Equal(first) {
		t.Fatalf("a refused heartbeat moved LastHeartbeat from %s to %s", first, got)
	}

	// The receiver does not answer: the heartbeat fails by the fast
	// transport's timeout (the append transport would wait forever).
	if err := a.AppendEntries("b", to, heartbeat(1), &resp); err == nil {
		t.Fatal("an unanswered heartbeat succeeded")
	}
	accept <- false // release the handler

	// An append goes to raft's consumer.
	go func() {
		rpc := <-b.Consumer()
		if req, ok := rpc.Command.(*raft.AppendEntriesRequest); !ok || len(req.Entries) != 1 {
			rpc.Respond(nil, net.ErrClosed)
			return
		}
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	}()
	app := heartbeat(1)
	app.PrevLogEntry, app.PrevLogTerm, app.LeaderCommitIndex = 1, 1, 1
	app.Entries = []*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("x")}}
	if err := a.AppendEntries("b", to, app, &resp); err != nil || !resp.Success {
		t.Fatalf("append: %v %+v", err, resp)
	}
}

func lastHeartbeat(s *placement.SplitTransport) time.Time {
	at, _ := s.LastHeartbeatTerm()
	return at
}
