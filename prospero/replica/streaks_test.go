package replica_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/replica"
)

// A follower that keeps failing its catch-up is reported once per streak
// and again when the error changes, not once per retry; the success that
// ends a streak is reported with the failures it ended; outcomes that are
// no failure (busy, shutdown) change nothing; followers are independent.
func TestCatchUpStreaks(t *testing.T) {
	refused := errors.New("replica: catch-up of n2: connection refused")
	aborted := fmt.Errorf("%w: a write to n2 failed", replica.ErrCatchUpAborted)
	steps := []struct {
		follower string
		err      error
		want     replica.CatchUpReport
	}{
		{"n2", nil, replica.CatchUpReport{}}, // success, no streak: quiet
		{"n2", refused, replica.CatchUpReport{replica.CatchUpFailedFirst, 1}},
		{"n2", refused, replica.CatchUpReport{replica.CatchUpFailedAgain, 2}},
		{"n2", errors.New(refused.Error()), replica.CatchUpReport{replica.CatchUpFailedAgain, 3}}, // same text, another value
		{"n2", replica.ErrCatchUpBusy, replica.CatchUpReport{replica.CatchUpQuiet, 3}},
		{"n2", fmt.Errorf("replica: catch-up of n2: %w", context.Canceled), replica.CatchUpReport{replica.CatchUpQuiet, 3}},
		{"n2", prospero.ErrStoreClosed, replica.CatchUpReport{replica.CatchUpQuiet, 3}},
		{"n3", refused, replica.CatchUpReport{replica.CatchUpFailedFirst, 1}}, // another follower, its own streak
		{"n2", aborted, replica.CatchUpReport{replica.CatchUpFailedFirst, 4}}, // the error changed
		{"n2", aborted, replica.CatchUpReport{replica.CatchUpFailedAgain, 5}},
		{"n2", refused, replica.CatchUpReport{replica.CatchUpFailedFirst, 6}}, // and changed back
		{"n2", nil, replica.CatchUpReport{replica.CatchUpRecovered, 6}},
		{"n2", nil, replica.CatchUpReport{}},
		{"n2", refused, replica.CatchUpReport{replica.CatchUpFailedFirst, 1}}, // a new streak
		{"n3", refused, replica.CatchUpReport{replica.CatchUpFailedAgain, 2}},
		{"n3", nil, replica.CatchUpReport{replica.CatchUpRecovered, 2}},
	}
	s := replica.CatchUpStreaks{}
	for i, st := range steps {
		if got := s.Observe(st.follower, st.err); got != st.want {
			t.Errorf("step %d (%s, %v): got %+v, want %+v", i, st.follower, st.err, got, st.want)
		}
	}
	if len(s) != 1 || s["n2"] == nil {
		t.Errorf("streaks left %v, want n2's only", s)
	}
}
