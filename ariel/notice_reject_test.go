package ariel_test

import (
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// A notice queued for a dormant identity whose activation is refused is
// failed back to its sender (which decides when to send it again), and
// the identity is not left waiting: the next mail rings the doorbell.
func TestRejectedActivationFailsNoticeAndRingsAgain(t *testing.T) {
	bell := chanBell{make(chan actor.Ref, 16)}
	s := newSched(t, ariel.Config{Workers: 2, Activator: bell})
	if err := s.Register("w", func(string) actor.Actor { return echo{} }, 0); err != nil {
		t.Fatal(err)
	}
	a := actor.Virtual("w", "a")
	failed := make(chan error, 1)
	if err := s.Notify(a, "tick", func() bool { return true }, func(err error) { failed <- err }); err != nil {
		t.Fatal(err)
	}
	waitRing(t, bell)
	if err := s.Reject(a, ariel.ErrClosed); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("notice failed with a nil error")
		}
	default:
		t.Fatal("the notice of a refused activation was not failed back")
	}
	if n := s.Queued(a); n != 0 {
		t.Fatalf("%d still queued for the refused identity", n)
	}
	if err := s.Tell(a, 1); err != nil {
		t.Fatal(err)
	}
	waitRing(t, bell)
}
