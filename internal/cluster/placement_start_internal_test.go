package cluster

import (
	"errors"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
)

// Mail reaches the routing layer as soon as the transport listens, which
// is before placement runs (a node restarted under load gets asks at
// once): it is refused as from a node without a lease, not a nil
// dereference of the placement node.
func TestMailBeforePlacementIsRefused(t *testing.T) {
	c := &Engine{name: "n1"}
	ref := actor.Virtual("counter", "k")
	_, _, _, err := c.locateAt(ref)
	if !errors.Is(err, actor.ErrProcessUnavailable) || !errors.Is(err, placement.ErrLeaseExpired) {
		t.Fatalf("locateAt before placement: %v, want ErrProcessUnavailable and ErrLeaseExpired", err)
	}
	if name, ok := c.shardName(ref); ok {
		t.Fatalf("shardName before placement: %q", name)
	}
}
