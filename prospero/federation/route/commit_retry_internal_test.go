package route

import (
	"errors"
	"fmt"
	"testing"

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
