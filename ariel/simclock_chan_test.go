package ariel_test

import (
	"testing"
	"time"

	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/clock"
)

var _ clock.Clock = (*ariel.SimClock)(nil)

// TestSimClockChannels: After, NewTimer and NewTicker of the virtual clock
// fire on virtual time only, a stopped timer or ticker never fires, and a
// ticker does not pile up ticks its receiver has not taken.
func TestSimClockChannels(t *testing.T) {
	start := time.Unix(1000, 0)
	c := ariel.NewSimClock(start)
	after := c.After(time.Second)
	timer, stopTimer := c.NewTimer(2 * time.Second)
	stopped, stop := c.NewTimer(time.Second)
	ticks, stopTicks := c.NewTicker(500 * time.Millisecond)
	if !stop() {
		t.Fatal("stopping a pending timer reported false")
	}
	recv := func(ch <-chan time.Time) (time.Time, bool) {
		select {
		case v := <-ch:
			return v, true
		default:
			return time.Time{}, false
		}
	}
	if _, ok := recv(after); ok {
		t.Fatal("After fired before time moved")
	}
	c.Advance(time.Second)
	if v, ok := recv(after); !ok || !v.Equal(start.Add(time.Second)) {
		t.Fatalf("After at 1s: %v, %v", v, ok)
	}
	if _, ok := recv(stopped); ok {
		t.Fatal("a stopped timer fired")
	}
	if _, ok := recv(timer); ok {
		t.Fatal("the 2s timer fired at 1s")
	}
	if v, ok := recv(ticks); !ok || !v.Equal(start.Add(500*time.Millisecond)) {
		t.Fatalf("first tick: %v, %v (one is kept, the second dropped)", v, ok)
	}
	if _, ok := recv(ticks); ok {
		t.Fatal("ticks piled up")
	}
	c.Advance(time.Second)
	if _, ok := recv(timer); !ok {
		t.Fatal("the 2s timer did not fire at 2s")
	}
	if stopTimer() {
		t.Fatal("stopping a fired timer reported true")
	}
	if _, ok := recv(ticks); !ok {
		t.Fatal("no tick in the second second")
	}
	stopTicks()
	c.Advance(time.Second)
	if _, ok := recv(ticks); ok {
		t.Fatal("a stopped ticker ticked")
	}
	if n := c.Pending(); n != 0 {
		t.Fatalf("%d timers left pending after everything stopped or fired", n)
	}
}
