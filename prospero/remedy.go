package prospero

import (
	"fmt"
	"time"
)

// FaultCause says how a turn failed.
type FaultCause uint8

const (
	// FaultPanic: the handler panicked.
	FaultPanic FaultCause = iota
	// FaultBudgetExhausted: the turn ran past the kind's turn budget.
	FaultBudgetExhausted
	// FaultHydration: the state at rest could not be loaded or restored.
	FaultHydration
	// FaultCommit: the state a turn changed could not be written at rest
	// (or marshalled), so the activation's memory is ahead of it.
	FaultCommit
)

var faultNames = [...]string{"Panic", "BudgetExhausted", "HydrationFailed", "CommitFailed"}

func (c FaultCause) String() string {
	if int(c) < len(faultNames) {
		return faultNames[c]
	}
	return fmt.Sprintf("FaultCause(%d)", c)
}

// Fault reports one failed turn of one incarnation.
type Fault struct {
	ID          Identity
	Incarnation uint64
	Cause       FaultCause
	// Err describes the failure (the panic value, the overrun); may be nil.
	Err error
	// Abandoned: the turn (FaultBudgetExhausted) was taken away from a
	// goroutine that had not returned, and the host already took the
	// actor value out of service; whatever that goroutine does later is
	// discarded.
	Abandoned bool
}

// RestartHistory remembers when an identity was last restarted (or
// re-hydrated after a fault), enough to apply restart intensity. The
// zero value is an empty history. It is a value: Decide reads it and
// Record returns an updated copy, so a caller can test a decision
// without committing it. It holds at most MaxRestarts times.
type RestartHistory struct {
	times []time.Time // ascending
}

// Count returns the restarts in the window (now-period, now].
func (h RestartHistory) Count(now time.Time, period time.Duration) int {
	n := 0
	for _, t := range h.times {
		if now.Sub(t) < period {
			n++
		}
	}
	return n
}

// Record returns h with a restart at now added, dropping entries that
// can no longer matter (outside the window or beyond max).
func (h RestartHistory) Record(now time.Time, period time.Duration, max int) RestartHistory {
	kept := make([]time.Time, 0, max)
	for _, t := range h.times {
		if now.Sub(t) < period {
			kept = append(kept, t)
		}
	}
	kept = append(kept, now)
	if len(kept) > max {
		kept = kept[len(kept)-max:]
	}
	return RestartHistory{times: kept}
}

// Decision is the outcome of Decide.
type Decision struct {
	// Remedy to apply.
	Remedy Remedy
	// Delay before a Restart or Hydrate is carried out (back-off); mail
	// keeps waiting in the mailbox meanwhile.
	Delay time.Duration
	// Escalated: the kind's remedy was Restart or Hydrate, but the
	// identity already used up its restart intensity, so it is retired.
	Escalated bool
	// Recent is the number of restarts already in the window.
	Recent int
}

// Decide chooses the remedy for fault f of a kind with options opts
// (defaults applied), given the identity's restart history at time now.
// It is a pure function: no clock, no I/O, no mutation.
//
// Restart and Hydrate are limited by restart intensity: with
// MaxRestarts restarts already inside RestartPeriod, the next fault
// escalates to Retire. Otherwise the remedy waits a back-off that
// doubles with every recent restart: none for the first,
// BackoffInitial for the second, then 2×, 4×…, capped at BackoffMax.
func Decide(opts KindOptions, f Fault, h RestartHistory, now time.Time) Decision {
	if opts.Remedy == Retire {
		return Decision{Remedy: Retire}
	}
	recent := h.Count(now, opts.RestartPeriod)
	if recent >= opts.MaxRestarts {
		return Decision{Remedy: Retire, Escalated: true, Recent: recent}
	}
	return Decision{Remedy: opts.Remedy, Delay: Backoff(opts, recent), Recent: recent}
}

// Backoff returns the delay before a restart that follows recent
// restarts inside the window.
func Backoff(opts KindOptions, recent int) time.Duration {
	if recent <= 0 {
		return 0
	}
	d := opts.BackoffInitial
	for i := 1; i < recent; i++ {
		if d >= opts.BackoffMax/2 {
			return opts.BackoffMax
		}
		d *= 2
	}
	return min(d, opts.BackoffMax)
}
