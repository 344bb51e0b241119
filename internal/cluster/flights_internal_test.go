package cluster

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// A call made while another of its key runs joins it: f runs once, and
// both get its error. Another key runs at once; once the call ended, the
// key runs again. A joiner whose context ends stops waiting alone.
func TestFlightsJoinACallOfTheirKey(t *testing.T) {
	synctest.Test(t, testFlights)
}

func testFlights(t *testing.T) {
	var fs flights[int]
	errFirst := errors.New("first")
	entered, release := make(chan struct{}), make(chan struct{})
	runs := 0
	first := make(chan error, 1)
	go func() {
		first <- fs.do(t.Context(), 1, func() error {
			runs++
			close(entered)
			<-release
			return errFirst
		})
	}()
	<-entered
	joined := make(chan error, 1)
	go func() {
		joined <- fs.do(t.Context(), 1, func() error { runs++; return nil })
	}()
	synctest.Wait() // the joiner waits for the first call
	if err := fs.do(t.Context(), 2, func() error { return nil }); err != nil {
		t.Fatalf("another key: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := fs.do(ctx, 1, func() error { runs++; return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a joiner whose context ended: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-first; err != errFirst {
		t.Fatalf("first: %v", err)
	}
	if err := <-joined; err != errFirst {
		t.Fatalf("joined: %v, want the first call's error", err)
	}
	if runs != 1 {
		t.Fatalf("f ran %d times for one key at once, want 1", runs)
	}
	if err := fs.do(t.Context(), 1, func() error { runs++; return nil }); err != nil || runs != 2 {
		t.Fatalf("after the call ended: %v, runs %d; want it run again", err, runs)
	}
}
