package ariel_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// NotifyDone reports the outcome of the turn that received the notice:
// on an actor whose outputs are held, once they are released (nil, or
// the error they fail with, so the sender can send it again); on one
// whose outputs are not held, as the turn ends.
func TestNotifyDoneReportsTheTurnsOutcome(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	idle := func(string) actor.Actor { return actor.Func(func(actor.Context, any) {}) }
	for _, k := range []string{"d", "plain"} {
		if err := s.Register(k, idle, 0); err != nil {
			t.Fatal(err)
		}
	}
	rels := make(chan func(error), 4)
	if err := s.SetAfterTurn("d", func(_ actor.Ref, _ uint64, _ actor.Actor, _ bool, h ariel.Hold) { rels <- h.Wait() }); err != nil {
		t.Fatal(err)
	}
	accept := func() bool { return true }
	outcome := func(t *testing.T, done chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("no outcome reported")
			return nil
		}
	}
	d := actor.Virtual("d", "1")
	for _, want := range []error{errors.New("not committed"), nil} {
		done := make(chan error, 1)
		if err := s.NotifyDone(d, "tick", accept, func(err error) { done <- err }, nil); err != nil {
			t.Fatal(err)
		}
		release := <-rels
		select {
		case err := <-done:
			t.Fatalf("outcome %v reported before the turn's outputs were released", err)
		default:
		}
		release(want)
		if got := outcome(t, done); (got == nil) != (want == nil) || (want != nil && got.Error() != want.Error()) {
			t.Fatalf("outcome %v, want %v", got, want)
		}
	}
	done := make(chan error, 1)
	if err := s.NotifyDone(actor.Virtual("plain", "1"), "tick", accept, func(err error) { done <- err }, nil); err != nil {
		t.Fatal(err)
	}
	if err := outcome(t, done); err != nil {
		t.Fatalf("outputs not held: %v, want nil", err)
	}
}
