package route

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire"
)

// A turn whose state was not committed ran: its write may have landed
// and reached replicas. Its ask must not be sent again, although the
// commit's cause is one that would make a send that never left this
// node worth retrying (an owner whose lease lapsed failed the removal of
// a replica). Retrying it applied an Add twice under faults, which the
// linearizability check of three real agents caught.
func TestUncommittedTurnIsNotSentAgain(t *testing.T) {
	for _, cause := range []error{
		fmt.Errorf("%w: %w", errors.New("not replicating"), placement.ErrLeaseExpired),
		placement.ErrHandoff,
		wire.NotServing(placement.ErrBehind),
	} {
		err := &prospero.CommitError{ID: prospero.Identity{Kind: "counter", Key: "k"}, Err: cause}
		if Waitable(err) || Resendable(err) {
			t.Errorf("%v: waitable or resendable, so the ask would run again", err)
		}
		if !Waitable(cause) || !Resendable(cause) {
			t.Errorf("%v alone: not waitable (the test's premise)", cause)
		}
	}
}

// An owner marked down in its own table (cut off or paused for less than
// the fence delay, and not yet marked up again) refuses mail NOT_SERVING:
// the sender backs off and sends again, and the owner serves it once it
// is up. Refused NOT_OWNER without a hint, the sender waited for its
// table to route the shard elsewhere, which it never did, and the ask
// waited out its deadline (a fault probe saw keys out for 5.7-6.3 s after
// a pause of under 3 s).
func TestOwnerMarkedDownRefusesNotServing(t *testing.T) {
	r := &Router{self: "n1"}
	err := r.refusal(fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrNodeDown))
	var re *wire.RefusedError
	if !errors.As(err, &re) || re.Reason != wire.RefusedReasonNotServing {
		t.Fatalf("refusal of an owner marked down: %v, want NOT_SERVING", err)
	}
	if _, notOwner := refusedBy(err); notOwner || !Resendable(err) {
		t.Fatalf("%v: taken for NOT_OWNER (%v) or not resendable", err, notOwner)
	}
	// This node's own program code, routing to itself, waits as a
	// remote sender does.
	if local := fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrNodeDown); !Waitable(local) {
		t.Fatalf("%v: not waitable for this node's own senders", local)
	}
}
