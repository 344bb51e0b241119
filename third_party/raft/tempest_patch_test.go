package raft

import (
	"testing"
	"time"
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
