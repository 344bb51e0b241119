package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/tempest-actors/tempest/membership"
)

type noConnector struct{}

func (noConnector) Connect(context.Context, string) error { return errors.New("no links here") }

// TestUndecodableMemberCountsAsUnproven: a live gossip member whose
// metadata does not decode is listed as not proven, and the gauge of
// unproven members counts it like any other unproven member.
func TestUndecodableMemberCountsAsUnproven(t *testing.T) {
	c := New(Config{Name: "n1"}, nil)
	c.prove = membership.NewProver(membership.ProverConfig{Self: "n1", Connector: noConnector{}})
	bad := errors.New("metadata does not decode")
	ms := []membership.Member{
		{Name: "n1", Status: membership.StatusAlive, Meta: membership.Meta{QUICAddr: "127.0.0.1:1"}},
		{Name: "n2", Status: membership.StatusAlive, Meta: membership.Meta{QUICAddr: "127.0.0.1:2"}},
		{Name: "garbage", Status: membership.StatusAlive, MetaErr: bad},
		{Name: "empty", Status: membership.StatusAlive, MetaErr: bad},
		{Name: "gone", Status: membership.StatusDead, MetaErr: bad},
	}
	for _, m := range ms[2:4] {
		if c.Proven(m) {
			t.Fatalf("%s is proven", m.Name)
		}
	}
	live, unproven := c.countMembers(ms)
	if live != 4 || unproven != 3 {
		t.Errorf("live %d, unproven %d; want 4 and 3 (n2 and both undecodable members)", live, unproven)
	}
}
