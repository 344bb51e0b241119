package prospero_test

import (
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestDecideRestartIntensity(t *testing.T) {
	opts := prospero.DefaultKindOptions()
	f := prospero.Fault{Cause: prospero.FaultPanic}
	var h prospero.RestartHistory
	now := t0
	wantDelays := []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}
	for i, want := range wantDelays {
		d := prospero.Decide(opts, f, h, now)
		if d.Remedy != prospero.Restart || d.Escalated || d.Delay != want {
			t.Fatalf("fault %d: got %+v, want Restart after %v", i+1, d, want)
		}
		h = h.Record(now, opts.RestartPeriod, opts.MaxRestarts)
		now = now.Add(time.Second)
	}
	// The fourth fault inside 5 s escalates.
	if d := prospero.Decide(opts, f, h, now); d.Remedy != prospero.Retire || !d.Escalated || d.Recent != 3 {
		t.Fatalf("fourth fault: got %+v, want escalation to Retire", d)
	}
	// Once the first restart leaves the window, a restart is allowed again.
	later := t0.Add(opts.RestartPeriod)
	if d := prospero.Decide(opts, f, h, later); d.Remedy != prospero.Restart || d.Recent != 2 {
		t.Fatalf("after the window: got %+v, want Restart with 2 recent", d)
	}
}

func TestDecideRemedies(t *testing.T) {
	f := prospero.Fault{Cause: prospero.FaultBudgetExhausted}
	o := prospero.KindOptions{Remedy: prospero.Retire}.WithDefaults()
	if d := prospero.Decide(o, f, prospero.RestartHistory{}, t0); d.Remedy != prospero.Retire || d.Escalated {
		t.Fatalf("Retire kind: got %+v", d)
	}
	o = prospero.KindOptions{Remedy: prospero.Hydrate}.WithDefaults()
	if d := prospero.Decide(o, f, prospero.RestartHistory{}, t0); d.Remedy != prospero.Hydrate {
		t.Fatalf("Hydrate kind: got %+v", d)
	}
}

func TestBackoffCapped(t *testing.T) {
	o := prospero.KindOptions{BackoffInitial: 100 * time.Millisecond, BackoffMax: 300 * time.Millisecond}.WithDefaults()
	for recent, want := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond} {
		if got := prospero.Backoff(o, recent); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", recent, got, want)
		}
	}
	if got := prospero.Backoff(o, 1000); got != o.BackoffMax {
		t.Errorf("Backoff(1000) = %v, want the cap", got)
	}
}

// Restart intensity escalates exactly when MaxRestarts restarts already
// happened inside the window, for any spacing of faults.
func TestDecideEscalatesExactlyAtThreshold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		opts := prospero.KindOptions{
			MaxRestarts:   rapid.IntRange(1, 5).Draw(t, "max"),
			RestartPeriod: time.Duration(rapid.IntRange(1, 100).Draw(t, "period")) * time.Millisecond,
		}.WithDefaults()
		gaps := rapid.SliceOfN(rapid.IntRange(0, 60), 1, 40).Draw(t, "gaps")
		var h prospero.RestartHistory
		var restarts []time.Time // model: every restart ever applied
		now := t0
		for _, g := range gaps {
			now = now.Add(time.Duration(g) * time.Millisecond)
			inWindow := 0
			for _, r := range restarts {
				if now.Sub(r) < opts.RestartPeriod {
					inWindow++
				}
			}
			d := prospero.Decide(opts, prospero.Fault{}, h, now)
			if want := inWindow >= opts.MaxRestarts; d.Escalated != want {
				t.Fatalf("at %v with %d restarts in window (max %d): escalated=%v", now.Sub(t0), inWindow, opts.MaxRestarts, d.Escalated)
			}
			if d.Delay > opts.BackoffMax || d.Delay < 0 {
				t.Fatalf("delay %v outside [0, %v]", d.Delay, opts.BackoffMax)
			}
			if !d.Escalated {
				h = h.Record(now, opts.RestartPeriod, opts.MaxRestarts)
				restarts = append(restarts, now)
			}
		}
	})
}
