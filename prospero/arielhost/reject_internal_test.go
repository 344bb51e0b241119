package arielhost

import (
	"errors"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire"
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

// Mail refused because the node is closing never ran: an ask from
// another node goes back as the not-run NOT_SERVING refusal (its
// caller's node sends it again), still matching
// actor.ErrProcessUnavailable. It went back as an answer, and callers on
// other nodes failed at once when a drain ran out of time.
func TestRejectErrorWhileClosingIsANotRunRefusal(t *testing.T) {
	err := rejectError(prospero.ErrClosed)
	var m interface{ Unmarked() error }
	if !errors.As(err, &m) {
		t.Fatalf("closing: %v, want a not-run mark", err)
	}
	var re *wire.RefusedError
	if !errors.As(m.Unmarked(), &re) || re.Reason != wire.RefusedReasonNotServing || !errors.Is(err, actor.ErrProcessUnavailable) {
		t.Fatalf("closing: %v, want NOT_SERVING matching ErrProcessUnavailable", err)
	}
}
