package arielhost

import (
	"errors"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// TestRejectErrorOfAStateNotCommitted: mail refused because the actor's
// state could not be committed again while loading (a lapsed lease, an
// unreachable replica: a moment's trouble) is refused with that commit
// failure, not as a terminated actor, which a caller would take for
// good; other load failures stay terminations.
func TestRejectErrorOfAStateNotCommitted(t *testing.T) {
	lapsed := &prospero.CommitError{ID: prospero.Identity{Kind: "k", Key: "x"}, Err: errors.New("lease lapsed")}
	err := rejectError(lapsed)
	if errors.Is(err, actor.ErrActorTerminated) || !errors.Is(err, prospero.ErrNotCommitted) {
		t.Fatalf("a state not committed: %v, want ErrNotCommitted, not ErrActorTerminated", err)
	}
	if err := rejectError(errors.New("record does not decode")); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("another load failure: %v, want ErrActorTerminated", err)
	}
}
