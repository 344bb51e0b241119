package cluster

import (
	"testing"
	"time"
)

// A failure is reported at once; working again only after the hold,
// which doubles when writes fail again within a minute of being reported
// working (up to maxStoreHold) and starts afresh after a quiet minute.
func TestStoreHealthHoldsBeforeReportingWritesWork(t *testing.T) {
	h := storeHealth{base: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	step := func(failure string, now time.Time, want string) {
		t.Helper()
		if got := h.observe(failure, now); got != want {
			t.Fatalf("observe(%q) at +%v = %q, want %q", failure, now.Sub(t0), got, want)
		}
	}
	step("", at(0), "")
	step("disk full", at(time.Second), "disk full")
	step("", at(2*time.Second), "disk full")                   // working since +2s
	step("", at(11*time.Second), "disk full")                  // 9s of 10
	step("disk full", at(11500*time.Millisecond), "disk full") // failed again: the count restarts
	step("", at(12*time.Second), "disk full")
	step("", at(22*time.Second), "") // 10s working
	// Failing again 30s later: the next hold is 20s.
	step("disk full again", at(52*time.Second), "disk full again")
	step("", at(53*time.Second), "disk full again")
	step("", at(72*time.Second), "disk full again")
	step("", at(73*time.Second), "")
	// Once more soon after: 40s, and the doubling stops at maxStoreHold.
	for i, want := range []time.Duration{40 * time.Second, 80 * time.Second, 160 * time.Second, maxStoreHold, maxStoreHold} {
		start := h.clearAt.Add(time.Second)
		step("x", start, "x")
		step("", start, "x")
		step("", start.Add(want-time.Millisecond), "x")
		step("", start.Add(want), "")
		if h.hold != want {
			t.Fatalf("relapse %d: hold %v, want %v", i, h.hold, want)
		}
	}
	// After more than a minute of working writes, the hold starts afresh.
	step("y", h.clearAt.Add(2*storeRelapse), "y")
	if h.hold != h.base {
		t.Fatalf("hold after a quiet while: %v, want %v", h.hold, h.base)
	}
}
