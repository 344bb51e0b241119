package placement_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/placement"
)

// TestFollowerBehindTheSnapshotCatchesUp: a follower that was down while
// the leader snapshotted and dropped the entries it lacks gets the
// snapshot installed when it comes back, and then takes new entries. raft
// must know that raft-wal is monotonic (it only appends the next index):
// otherwise it keeps the follower's old entries after the install, and
// every later append to that log fails: the follower never catches up.
func TestFollowerBehindTheSnapshotCatchesUp(t *testing.T) {
	c := newTestCluster(t, 3)
	c.tune = func(cfg *placement.Config) {
		cfg.TrailingLogs = 4
		cfg.WALSegmentSize = 16 << 10 // the leader's compaction removes whole segments
	}
	names := []string{"a", "b", "c"}
	startAll(c, names...)
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled(names...) })
	var leader, follower string
	for name, n := range c.live() {
		if n.IsLeader() {
			leader = name
		} else {
			follower = name
		}
	}
	c.stop(follower, placement.PeerAlive) // a pause: its peers keep it in the configuration
	ln := c.node(leader)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 40 {
				if _, err := ln.Propose(t.Context(), placement.Command{Op: placement.OpSync, Name: leader, Nonce: fmt.Sprint("n", w, "-", i)}); err != nil {
					t.Errorf("propose %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := ln.Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	n := c.start(follower)
	waitFor(t, 30*time.Second, "the follower at the leader's table", func() bool {
		return n.Table().Version >= ln.Table().Version
	})
	// And it takes entries after the snapshot.
	if _, err := ln.Propose(t.Context(), placement.Command{Op: placement.OpSync, Name: leader, Nonce: "after"}); err != nil {
		t.Fatal(err)
	}
	want := ln.Table().Version
	waitFor(t, 10*time.Second, "the follower applying entries after the snapshot", func() bool {
		return n.Table().Version >= want
	})
	// Its data directory opens again (the log's checks accept the log
	// raft emptied at the install).
	c.stop(follower, placement.PeerAlive)
	n = c.start(follower)
	waitFor(t, 10*time.Second, "the follower back after a restart", func() bool {
		return n.Table().Version >= want
	})
}
