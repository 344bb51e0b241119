package raft

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Tempest's patch: the wait between replication attempts to a failing
// follower grows like the heartbeat's and stops at half a heartbeat
// timeout, where upstream's grew to about 10 s.
func TestReplicationBackoffIsCapped(t *testing.T) {
	const hb = time.Second
	if got := replicationBackoff(1, hb); got != failureWait {
		t.Errorf("after 1 failure: %v, want %v", got, failureWait)
	}
	if got := replicationBackoff(4, hb); got != 4*failureWait {
		t.Errorf("after 4 failures: %v, want %v", got, 4*failureWait)
	}
	for _, f := range []uint64{8, 12, 100} {
		if got := replicationBackoff(f, hb); got != hb/2 {
			t.Errorf("after %d failures: %v, want the cap %v (uncapped: %v)", f, got, hb/2, backoff(failureWait, f, maxFailureScale))
		}
	}
}

// chanPipeline is an AppendPipeline whose responses a test hands over.
type chanPipeline struct{ ch chan AppendFuture }

func (p chanPipeline) AppendEntries(*AppendEntriesRequest, *AppendEntriesResponse) (AppendFuture, error) {
	return nil, nil
}
func (p chanPipeline) Consumer() <-chan AppendFuture { return p.ch }
func (p chanPipeline) Close() error                  { return nil }

// Tempest's patch: a pipeline decoder that stops early (a newer term)
// keeps taking responses until the sender stops, so that the transport's
// reader, handing over the response to a request the sender pipelined
// meanwhile, does not block, and with it the sender, which would then
// never see the decoder finished: replication and Shutdown hung.
func TestPipelineDecoderDrainsAfterAStaleTerm(t *testing.T) {
	r := &Raft{logger: hclog.NewNullLogger()}
	s := &followerReplication{stepDown: make(chan struct{}, 1), notify: map[*verifyFuture]struct{}{}}
	p := chanPipeline{ch: make(chan AppendFuture)} // unbuffered, as the transport's can be
	stopCh, finishCh := make(chan struct{}), make(chan struct{})
	r.goFunc(func() { r.pipelineDecode(s, p, stopCh, finishCh) })
	response := func(term uint64) AppendFuture {
		f := &appendFuture{start: time.Now(), args: &AppendEntriesRequest{RPCHeader: RPCHeader{}, Term: 1},
			resp: &AppendEntriesResponse{Term: term}}
		f.init()
		return f
	}
	p.ch <- response(2) // a newer term: the decoder stops
	<-finishCh
	select {
	case p.ch <- response(2): // the response to one more request the sender pipelined
	case <-time.After(10 * time.Second):
		t.Fatal("nobody takes the pipeline's responses after the decoder stopped: the transport's reader blocks")
	}
	close(stopCh) // the sender stopped
	r.routinesGroup.Wait()
}
