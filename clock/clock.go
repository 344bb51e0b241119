// Package clock is the one time source of Tempest. Every package that
// reads the time or waits for it takes a Clock (tempest.Config.Clock,
// ariel.Config.Clock, wire.MailConfig.Clock, placement.Config.Clock,
// membership.Config.Clock, prospero.Config.Clock, reminders.Config.Clock,
// federation.Config.Clock;
// each of those names is an alias of Clock), so that one clock, the wall
// clock or a fake one, drives them all. Real is the wall clock, and the
// fake clock of a testing/synctest bubble; ariel.SimClock is a virtual one.
//
// The package has no dependencies beyond the standard library, so every
// other package may import it.
package clock

import "time"

// Clock is a time source. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once after d (time.After).
	After(d time.Duration) <-chan time.Time
	// AfterFunc calls f once after d, on a goroutine of the clock's
	// choosing (time.AfterFunc).
	AfterFunc(d time.Duration, f func()) Timer
	// NewTimer returns a channel that receives once after d, and its stop
	// func (time.NewTimer).
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
	// NewTicker returns a channel that receives every d, and its stop func
	// (time.NewTicker).
	NewTicker(d time.Duration) (<-chan time.Time, func())
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After wraps time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// NewTicker wraps time.NewTicker.
func (Real) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
