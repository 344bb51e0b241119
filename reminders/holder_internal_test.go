package reminders

import (
	"fmt"
	"testing"
)

// The holder's decisions: a lapse pauses and a renewal resumes a
// shard without releasing it; only a change of owner (a new epoch) or
// the shard leaving makes it release and load again.
func TestHolderPlanPausesThroughALapse(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep map[string]Kept
		held map[string]uint64
		want string
	}{
		{"takeover", map[string]Kept{"a": {3, true}}, nil, "{[] [] [] [a]}"},
		{"not servable yet", map[string]Kept{"a": {3, false}}, nil, "{[] [] [] []}"},
		{"lease lapsed", map[string]Kept{"a": {3, false}}, map[string]uint64{"a": 3}, "{[] [a] [] []}"},
		{"lease renewed", map[string]Kept{"a": {3, true}}, map[string]uint64{"a": 3}, "{[] [] [a] []}"},
		{"owner changed and back", map[string]Kept{"a": {5, true}}, map[string]uint64{"a": 3}, "{[a] [] [] [a]}"},
		{"owner changed, not servable", map[string]Kept{"a": {5, false}}, map[string]uint64{"a": 3}, "{[a] [] [] []}"},
		{"gone or moving", nil, map[string]uint64{"a": 3}, "{[a] [] [] []}"},
		{"mixed", map[string]Kept{"a": {1, true}, "b": {2, false}, "d": {4, true}},
			map[string]uint64{"a": 1, "b": 2, "c": 3}, "{[c] [b] [a] [d]}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(plan(tc.keep, tc.held)); got != tc.want {
				t.Fatalf("got %s, want %s (release, pause, resume, acquire)", got, tc.want)
			}
		})
	}
}
