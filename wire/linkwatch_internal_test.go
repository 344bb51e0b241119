package wire

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestLinkWatchFollowsEventsAndConnects: a peer is down from its link's
// down event until its up event, or until the one connect that mail for
// it starts succeeds; a failed connect leaves it down, and the next mail
// tries again.
func TestLinkWatchFollowsEventsAndConnects(t *testing.T) {
	synctest.Test(t, testLinkWatch)
}

func testLinkWatch(t *testing.T) {
	var l LinkWatch
	var calls atomic.Int32
	release := make(chan error)
	l.Connect = func(string) error { calls.Add(1); return <-release }
	var kicks atomic.Int32
	l.OnUp = func() { kicks.Add(1) }

	if l.Down("b") {
		t.Fatal("a peer never seen down is down")
	}
	l.Event(LinkEvent{Peer: "b"})
	l.Event(LinkEvent{Peer: "c"})
	for range 10 {
		if !l.Down("b") {
			t.Fatal("b is not down after its down event")
		}
	}
	release <- errors.New("dial failed") // the one attempt for b
	synctest.Wait()                      // its goroutine ended
	if !l.Down("b") {                    // and a second attempt starts
		t.Fatal("b is not down after a failed connect")
	}
	release <- nil
	synctest.Wait()
	if l.Down("b") {
		t.Fatal("b is down after a connect to it succeeded")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d connects to b, want one per attempt, 2", n)
	}
	if kicks.Load() != 1 {
		t.Errorf("%d kicks of the retry queue, want 1 (b came up)", kicks.Load())
	}
	// c comes up by its event; a second up event changes nothing.
	l.Event(LinkEvent{Peer: "c", Up: true})
	l.Event(LinkEvent{Peer: "c", Up: true})
	if l.down.Load() != nil || kicks.Load() != 2 {
		t.Errorf("after c's up event: down %v, kicks %d", l.down.Load(), kicks.Load())
	}
}

// A connect that began during one outage and succeeds after the link
// came up and went down again does not clear the newer outage.
func TestLinkWatchStaleConnectKeepsANewerOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l LinkWatch
		release := make(chan error)
		l.Connect = func(string) error { return <-release }
		l.Event(LinkEvent{Peer: "b"})
		if !l.Down("b") { // starts the first outage's connect
			t.Fatal("b is not down after its down event")
		}
		l.Event(LinkEvent{Peer: "b", Up: true})
		l.Event(LinkEvent{Peer: "b"})
		release <- nil // the first outage's connect succeeds late
		synctest.Wait()
		if m := l.down.Load(); m == nil || (*m)["b"] == nil {
			t.Fatal("a connect begun before b's link came up and went down again cleared the newer outage")
		}
		// The newer outage's own connect clears it.
		if !l.Down("b") {
			t.Fatal("b is not down")
		}
		release <- nil
		synctest.Wait()
		if l.Down("b") {
			t.Fatal("b is down after the newer outage's connect succeeded")
		}
	})
}
