package arielhost_test

import (
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// TestNoMailRunsOnAFaultedValue: mail queued behind the turn that
// panicked is not handled by the faulted actor value: the remedy takes
// it out of service before any further user mail (ariel.FaultHook's
// contract), so the restarted incarnation, loaded from the state at
// rest, handles all of it. Before, the faulted value went on answering
// until the restart landed, and what it answered (or changed in memory)
// was then lost with it.
func TestNoMailRunsOnAFaultedValue(t *testing.T) {
	for _, remedy := range []prospero.Remedy{prospero.Restart, prospero.Hydrate} {
		t.Run(remedy.String(), func(t *testing.T) {
			kind := persistent
			kind.Remedy = remedy
			n := newNode(t, options{kind: kind, workers: 1})
			ref := actor.Virtual("counter", "f")
			first := n.ask(t, ref, "self").(actor.Ref)
			for _, m := range []string{"inc", "boom", "inc", "inc"} {
				if err := n.sched.Tell(ref, m); err != nil {
					t.Fatal(err)
				}
			}
			got := n.ask(t, ref, "get")
			// Nothing was at rest before the panic (PersistOnPassivation),
			// so the restarted value starts at 0 and handles the two incs
			// queued behind the panic: 2. The faulted value would have
			// answered 3 (1 before the panic, then 2 more).
			if got != uint64(2) {
				t.Fatalf("count after the panic: %v, want 2 (the incs behind the panic ran on the faulted value)", got)
			}
			self := n.ask(t, ref, "self").(actor.Ref)
			if remedy == prospero.Restart && self.Incarnation() != first.Incarnation()+1 {
				t.Fatalf("Self after the restart %v, first %v", self, first)
			}
		})
	}
}
