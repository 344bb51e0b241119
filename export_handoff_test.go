package tempest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
)

// ShipStateAs sends peer, from n, a handoff of dst's shard to the epoch
// epoch carrying the state at rest n holds for src as dst's: tests replay
// a late or forged transfer with it. It returns peer's answer.
func ShipStateAs(ctx context.Context, n *Node, peer string, src, dst actor.Ref, epoch uint64) error {
	c := n.cl
	rec, err := n.store.Get(ctx, prospero.IdentityOf(src))
	if err != nil {
		return err
	}
	loc, err := c.pl.Locate(dst.Kind(), dst.Key())
	if err != nil {
		return err
	}
	return c.sendStates(ctx, peer, loc.Shard, epoch,
		[]shipped{{id: prospero.IdentityOf(dst), inc: rec.Incarnation, state: rec.State}})
}

// PlantIndexEntry adds kind/key (which need not be a valid identity) to
// the shard index n keeps for near's shard, as a record written by an
// older version or damaged at rest would.
func PlantIndexEntry(ctx context.Context, n *Node, near actor.Ref, kind, key string) error {
	loc, err := n.cl.pl.Locate(near.Kind(), near.Key())
	if err != nil {
		return err
	}
	return n.cl.updateIndex(ctx, loc.Shard, []prospero.Identity{{Kind: kind, Key: key}}, nil)
}

// RequestMove asks from, on behalf of n as the leader would, to hand m's
// shard off within budget. answered is from's answer (nil: shipped);
// err is a failure to get one before ctx ended.
func RequestMove(ctx context.Context, n *Node, from string, m placement.Move, budget time.Duration) (answered, err error) {
	b, err := json.Marshal(moveRequest{Move: m, DeadlineNs: int64(budget)})
	if err != nil {
		return nil, err
	}
	conn, err := n.cl.tr.DialStream(ctx, from, serviceMove)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if err := writeMsg(conn, b); err != nil {
		return nil, err
	}
	err = readResult(bufio.NewReader(conn))
	var ans *peerAnswerError
	if err == nil || errors.As(err, &ans) {
		return err, nil
	}
	return nil, err
}
