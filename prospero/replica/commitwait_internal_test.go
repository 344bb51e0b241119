package replica

import (
	"errors"
	"testing"
)

// The release rule of a write sent before its local commit: in the
// default mode the followers' receipt is enough once at least one
// in-sync follower has it; otherwise (no follower acknowledged, or
// SyncReplicas) the local commit is waited for too; a failure is
// reported only once the local commit is over, never from inside it.
func TestCommitWaitReleasesByTheMode(t *testing.T) {
	errRepl, errLocal := errors.New("replica failed"), errors.New("disk failed")
	type step struct {
		local bool // else: the followers' outcome
		acked int
		err   error
	}
	for _, tc := range []struct {
		name    string
		syncAll bool
		steps   []step
		firesAt int // index of the step after which done is called
		wantErr error
	}{
		{"followers first, default", false, []step{{acked: 2}, {local: true}}, 0, nil},
		{"followers first, SyncReplicas", true, []step{{acked: 2}, {local: true}}, 1, nil},
		{"no follower in the set", false, []step{{acked: 0}, {local: true}}, 1, nil},
		{"local first", false, []step{{local: true}, {acked: 1}}, 1, nil},
		{"follower failed", false, []step{{acked: 1, err: errRepl}, {local: true}}, 1, errRepl},
		{"local failed first", false, []step{{local: true, err: errLocal}, {acked: 2}}, 0, errLocal},
		{"local failed after the release", false, []step{{acked: 2}, {local: true, err: errLocal}}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, at := 0, -1
			var got error
			var gotV uint64
			c := &commitWait{syncAll: tc.syncAll, done: func(v uint64, err error) {
				calls++
				gotV, got = v, err
			}}
			c.v = 7 // set when the write was sent
			for i, s := range tc.steps {
				if s.local {
					v := uint64(7)
					if s.err != nil {
						v = 0
					}
					c.local(v, s.err)
				} else {
					c.replicated(s.acked, s.err)
				}
				if calls == 1 && at < 0 {
					at = i
				}
			}
			if calls != 1 || at != tc.firesAt || !errors.Is(got, tc.wantErr) {
				t.Fatalf("done called %d times, first after step %d with %v; want once after step %d with %v", calls, at, got, tc.firesAt, tc.wantErr)
			}
			if got == nil && gotV != 7 {
				t.Fatalf("released version %d, want 7", gotV)
			}
		})
	}
}
