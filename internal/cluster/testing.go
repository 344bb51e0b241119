package cluster

import (
	"context"
	"net"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
)

// What follows lets the root package's tests act as a rogue or late peer
// would, or reach state the engine does not report otherwise. Nothing
// else calls it.

// Federation is the engine's federation endpoint (tests send requests
// through it as the leader or another node would).
func (c *Engine) Federation() *federation.Endpoint { return c.fed }

// ShipStateAs sends peer a handoff of dst's shard at epoch carrying the
// state at rest this node holds for src as dst's, and returns peer's
// answer: a late or forged transfer.
func (c *Engine) ShipStateAs(ctx context.Context, peer string, src, dst actor.Ref, epoch uint64) error {
	rec, err := c.run.Store.Get(ctx, prospero.IdentityOf(src))
	if err != nil {
		return err
	}
	loc, err := c.pl.Locate(dst.Kind(), dst.Key())
	if err != nil {
		return err
	}
	return c.sendStates(ctx, peer, loc.Shard, epoch,
		[]shipped{{id: prospero.IdentityOf(dst), inc: rec.Incarnation, state: rec.State, version: rec.Version}})
}

// PlantIndexEntry adds kind/key (which need not be a valid identity) to
// the index of near's shard, as a record written by an older version or
// damaged at rest would.
func (c *Engine) PlantIndexEntry(ctx context.Context, near actor.Ref, kind, key string) error {
	loc, err := c.pl.Locate(near.Kind(), near.Key())
	if err != nil {
		return err
	}
	return c.updateIndex(ctx, loc.Shard, []prospero.Identity{{Kind: kind, Key: key}}, nil)
}

// SetWarmHandoff turns HydrateRequests on planned moves on or off (on by
// default).
func (c *Engine) SetWarmHandoff(on bool) { c.warmHandoff.Store(on) }

// SetHydrateBacklog makes the engine count k activations already
// scheduled by warm handoffs.
func (c *Engine) SetHydrateBacklog(k int) {
	c.wmu.Lock()
	c.warming = k
	c.wmu.Unlock()
}

// TellStamped sends msg to to on node peer, stamped with the placement
// epoch epoch, bypassing routing.
func (c *Engine) TellStamped(peer string, epoch uint64, to actor.Ref, msg any) error {
	return c.rem.Mailer().TellAt(peer, epoch, to, actor.Ref{}, msg)
}

// DialReplica opens a replication stream to peer.
func (c *Engine) DialReplica(ctx context.Context, peer string) (net.Conn, error) {
	return c.dialReplica(ctx, peer)
}

// SetStoreHold sets how long the state store's writes must work before
// the node reports them working again (default 10 s; storehealth.go).
func (c *Engine) SetStoreHold(d time.Duration) { c.storeHold.Store(int64(d)) }
