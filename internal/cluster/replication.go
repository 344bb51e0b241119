package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/replica"
)

// serviceReplica carries replication streams: records of the shards a
// node owns, to their in-sync replicas. Neither actor mail nor the
// control lane share it.
const serviceReplica = "tempest-replica"

// ErrNotReplicating: a write of state at rest arrived for a shard this
// node does not own by its applied table, so it cannot be committed.
var ErrNotReplicating = errors.New("tempest: this node does not own the shard of the state")

// replView is placement as the replication engine sees it.
type replView struct{ c *Engine }

var (
	_ replica.View   = replView{}
	_ replica.Joiner = replView{}
)

func shardRef(s replica.Shard) placement.ShardRef {
	return placement.ShardRef{Group: s.Group, Index: s.Index}
}

func (v replView) Route(id prospero.Identity) (replica.Route, error) {
	c := v.c
	var loc placement.Location
	if ref, ok := reminderRecordShard(id); ok {
		// A shard's reminders are replicated with the shard's state, so
		// that they fire on the new owner after a failover.
		loc.Shard = ref
	} else if isReserved(id) {
		return replica.Route{}, nil // the node's own bookkeeping stays local
	} else {
		var err error
		if loc, err = c.pl.Locate(id.Kind, id.Key); err != nil && loc.Shard == (placement.ShardRef{}) {
			return replica.Route{}, err
		}
	}
	s, ok := c.pl.Owner(loc.Shard)
	if !ok || s.Owner != c.name {
		return replica.Route{}, fmt.Errorf("%w: %s of %s is owned by %q at epoch %d", ErrNotReplicating, loc.Shard, id, s.Owner, s.Epoch)
	}
	return replica.Route{Replicated: true, Shard: replica.Shard{Group: loc.Shard.Group, Index: loc.Shard.Index},
		Epoch: s.Epoch, Followers: s.Followers()}, nil
}

func (v replView) Shrink(ctx context.Context, follower string, shards map[replica.Shard]uint64) (int, error) {
	c := v.c
	cmd := placement.Command{Op: placement.OpShrink}
	removed := 0
	for sh, epoch := range shards {
		if s, ok := c.pl.Owner(shardRef(sh)); ok && s.Owner == c.name && s.Epoch == epoch && s.InSync(follower) {
			cmd.Moves = append(cmd.Moves, placement.Move{Shard: shardRef(sh), From: c.name, Epoch: epoch, To: follower})
			removed++
		}
	}
	err := v.await(ctx, cmd, shards, func(s placement.Shard) bool { return !s.InSync(follower) })
	if err != nil {
		return 0, err
	}
	if removed > 0 {
		c.log.LogAttrs(ctx, slog.LevelWarn, "replica removed from the in-sync set",
			slog.String("replica", follower), slog.Int("shards", removed))
	}
	return removed, nil
}

func (v replView) ShardOf(id prospero.Identity) (replica.Shard, bool) {
	if ref, ok := reminderRecordShard(id); ok {
		return replica.Shard{Group: ref.Group, Index: ref.Index}, true
	}
	if isReserved(id) {
		return replica.Shard{}, false
	}
	var ref placement.ShardRef
	var err error
	v.c.pl.FSM().Read(func(t *placement.Table) { ref, err = t.RefOf(id.Kind, id.Key) })
	if err != nil {
		return replica.Shard{}, false
	}
	return replica.Shard{Group: ref.Group, Index: ref.Index}, true
}

func (v replView) Join(ctx context.Context, follower string, shards map[replica.Shard]uint64) (int, error) {
	cmd := placement.Command{Op: placement.OpJoin}
	for sh, epoch := range shards {
		cmd.Moves = append(cmd.Moves, placement.Move{Shard: shardRef(sh), From: v.c.name, Epoch: epoch, To: follower})
	}
	// A shard that moved away during the catch-up is its new owner's to
	// fill; the table fences the join of it (the move names the old
	// epoch), and the others join all the same.
	shards = maps.Clone(shards)
	err := v.await(ctx, cmd, shards, func(s placement.Shard) bool { return s.InSync(follower) })
	if err != nil {
		if errors.Is(err, placement.ErrLeaseExpired) || ctx.Err() != nil {
			// Proposed (perhaps) and not seen applied: raft may still
			// apply it; only a fresh table can say.
			return 0, fmt.Errorf("%w: %w", replica.ErrJoinUnsettled, err)
		}
		return 0, err
	}
	return len(shards), nil
}

// await proposes cmd until this node's applied table shows done for
// every shard of shards, still owned by this node at its epoch. A
// shard that changed owner is an error, except for a join (cmd.Op is
// OpJoin), which deletes it from shards and fails only when none is
// left.
func (v replView) await(ctx context.Context, cmd placement.Command, shards map[replica.Shard]uint64, done func(placement.Shard) bool) error {
	c := v.c
	for {
		// An owner whose lease lapsed (cut off from the leader) can get
		// no change of its sets committed; its writes fail now, so that
		// the activations waiting on them end before a new owner's begin,
		// instead of when the wait runs out.
		if !c.pl.LeaseFresh(c.cfg.Clock.Now()) {
			return fmt.Errorf("%w: %w", ErrNotReplicating, placement.ErrLeaseExpired)
		}
		all := true
		for sh, epoch := range shards {
			s, ok := c.pl.Owner(shardRef(sh))
			if !ok || s.Owner != c.name || s.Epoch != epoch {
				if cmd.Op == placement.OpJoin && len(shards) > 1 {
					delete(shards, sh)
					continue
				}
				return fmt.Errorf("%w: %s changed owner (now %q at epoch %d)", ErrNotReplicating, sh, s.Owner, s.Epoch)
			}
			if !done(s) {
				all = false
			}
		}
		if all {
			return nil
		}
		if _, err := c.pl.Propose(ctx, cmd); err != nil && ctx.Err() != nil {
			return err
		}
		if err := c.awaitChange(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func (v replView) Fresh() bool { return v.c.pl.LeaseFresh(v.c.cfg.Clock.Now()) }

func (v replView) LeftSet(follower string, sh replica.Shard, epoch uint64) bool {
	s, ok := v.c.pl.Owner(shardRef(sh))
	return ok && s.Owner == v.c.name && s.Epoch == epoch && !s.InSync(follower)
}

func (v replView) Down(node string) bool {
	down := false
	v.c.pl.FSM().Read(func(t *placement.Table) {
		n, ok := t.Nodes[node]
		down = ok && n.Status == placement.StatusDown
	})
	return down
}

func (v replView) Accept(from string, sh replica.Shard, epoch uint64) error {
	c := v.c
	s, ok := c.pl.Owner(shardRef(sh))
	switch {
	case !ok:
		return fmt.Errorf("%w: %s is not in this node's table", replica.ErrStale, sh)
	case epoch < s.Epoch:
		return fmt.Errorf("%w: %s at epoch %d from %s, this node's table is at epoch %d", replica.ErrStale, sh, epoch, from, s.Epoch)
	case epoch == s.Epoch && s.Owner != from:
		return fmt.Errorf("%w: %s at epoch %d from %s, owned by %q", replica.ErrStale, sh, epoch, from, s.Owner)
	case s.Owner == c.name && epoch <= s.Epoch:
		return fmt.Errorf("%w: %s is owned by this node", replica.ErrStale, sh)
	}
	return nil // epoch > s.Epoch: this node's table is behind the sender's
}

func (c *Engine) dialReplica(ctx context.Context, peer string) (net.Conn, error) {
	return c.tr.DialStream(ctx, peer, serviceReplica)
}

func (c *Engine) serveReplica(conn net.Conn) error {
	return c.run.Replicas.Serve(conn, conn.RemoteAddr().String())
}

// replicaLoop restores replica sets: for every shard this node owns and
// serves, each node the ranking wants in its set that is up and not in
// it yet gets a bulk copy and joins (replica.Store.CatchUp), one
// catch-up per follower at a time. A node that restarted on an existing
// store first leaves the sets it follows: in the default mode it may
// have lost records it acknowledged before fsyncing them, so it must
// catch up like a new replica before it counts again.
func (c *Engine) replicaLoop(restarted bool) {
	defer c.wg.Done()
	running := map[string]bool{}
	finished := make(chan catchUpDone)
	streaks := replica.CatchUpStreaks{}
	var wg sync.WaitGroup
	defer wg.Wait()
	retryAt := map[string]time.Time{}
	down := map[string]bool{}
	for {
		changed := c.pl.Changed()
		// A follower the table newly marks down fails its round trip in
		// flight now, not when the replication timeout runs out: the
		// writes waiting for it leave it out of their sets (through raft)
		// and commit within a raft round trip.
		for _, name := range c.newlyDown(down) {
			c.run.Replicas.Failed(name)
		}
		now := c.cfg.Clock.Now()
		if restarted && c.leaveFollowed(now) {
			restarted = false
		}
		if !restarted {
			for f, shards := range c.missingReplicas(now) {
				if running[f] || now.Before(retryAt[f]) {
					continue
				}
				running[f] = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := c.run.Replicas.CatchUp(c.ctx, f, shards, c.cfg.CatchUpRate)
					select {
					case finished <- catchUpDone{f, err}:
					case <-c.ctx.Done():
					}
				}()
			}
		}
		select {
		case d := <-finished:
			delete(running, d.follower)
			retryAt[d.follower] = c.cfg.Clock.Now().Add(time.Second)
			if c.ctx.Err() == nil { // at shutdown a catch-up fails for no reason worth telling
				c.logCatchUp(d, streaks.Observe(d.follower, d.err))
			}
		case <-changed:
		case <-c.cfg.Clock.After(time.Second):
		case <-c.ctx.Done():
			return
		}
	}
}

// catchUpDone is the outcome of one catch-up of follower.
type catchUpDone struct {
	follower string
	err      error
}

// logCatchUp logs what r says about the catch-up d.
func (c *Engine) logCatchUp(d catchUpDone, r replica.CatchUpReport) {
	switch r.Event {
	case replica.CatchUpFailedFirst:
		c.log.LogAttrs(c.ctx, slog.LevelWarn, "replica catch-up failed",
			slog.String("replica", d.follower), slog.Int("failures", r.Failures), slog.Any("error", d.err))
	case replica.CatchUpFailedAgain:
		c.log.LogAttrs(c.ctx, slog.LevelDebug, "replica catch-up failed again",
			slog.String("replica", d.follower), slog.Int("failures", r.Failures), slog.Any("error", d.err))
	case replica.CatchUpRecovered:
		c.log.LogAttrs(c.ctx, slog.LevelInfo, "replica caught up after failed catch-ups",
			slog.String("replica", d.follower), slog.Int("failures", r.Failures))
	}
}

// newlyDown returns the peers the applied table marks down that were not
// down at the previous call (down holds those, updated).
func (c *Engine) newlyDown(down map[string]bool) []string {
	var newly []string
	c.pl.FSM().Read(func(t *placement.Table) { newly = newlyDownIn(t, c.name, down) })
	return newly
}

// missingReplicas returns, per follower, the shards this node owns and
// serves whose set the ranking wants it in, with their epochs.
func (c *Engine) missingReplicas(now time.Time) map[string]map[replica.Shard]uint64 {
	if !c.pl.LeaseFresh(now) {
		return nil
	}
	out := map[string]map[replica.Shard]uint64{}
	c.pl.FSM().Read(func(t *placement.Table) {
		if t.ShardCount == 0 {
			return
		}
		want := map[string]func(int) []string{}
		for _, ref := range t.Owned(c.name) {
			s, _ := t.Shard(ref)
			if s.MovingTo != "" {
				continue
			}
			if want[ref.Group] == nil {
				want[ref.Group] = t.ReplicaRanking(ref.Group)
			}
			for _, w := range want[ref.Group](ref.Index) {
				if w == c.name || s.InSync(w) {
					continue
				}
				if out[w] == nil {
					out[w] = map[replica.Shard]uint64{}
				}
				out[w][replica.Shard{Group: ref.Group, Index: ref.Index}] = s.Epoch
			}
		}
	})
	return out
}

// leaveFollowed proposes to remove this node from every set it follows
// and reports whether its table shows it in none.
func (c *Engine) leaveFollowed(now time.Time) bool {
	if !c.pl.LeaseFresh(now) {
		return false
	}
	cmd := placement.Command{Op: placement.OpShrink}
	c.pl.FSM().Read(func(t *placement.Table) {
		for _, gn := range t.GroupNames() {
			for i, s := range t.Groups[gn].Shards {
				if s.Owner != c.name && s.InSync(c.name) {
					cmd.Moves = append(cmd.Moves, placement.Move{Shard: placement.ShardRef{Group: gn, Index: i}, From: s.Owner, Epoch: s.Epoch, To: c.name})
				}
			}
		}
	})
	if len(cmd.Moves) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	if _, err := c.pl.Propose(ctx, cmd); err != nil {
		c.log.LogAttrs(ctx, slog.LevelDebug, "leaving the replica sets after a restart", slog.Any("error", err))
		return false
	}
	c.log.LogAttrs(ctx, slog.LevelInfo, "restarted: left the replica sets this node followed, to catch up again",
		slog.Int("shards", len(cmd.Moves)))
	return false // checked again on the next pass
}

// heldInShard returns the identities of shard whose records this node's
// store holds, whatever wrote them: a scan of the store, since records
// that arrived as a replica's are in no shard index of this node.
func (c *Engine) heldInShard(ctx context.Context, shard placement.ShardRef) ([]prospero.Identity, error) {
	if c.run.Replicas == nil {
		return nil, nil
	}
	want := replica.Shard{Group: shard.Group, Index: shard.Index}
	v := replView{c}
	var ids []prospero.Identity
	err := c.run.Store.ScanIDs(ctx, func(id prospero.Identity) bool {
		sh, ok := v.ShardOf(id)
		return ok && sh == want
	}, func(id prospero.Identity) error {
		ids = append(ids, id)
		return nil
	})
	return ids, err
}

// FollowedBy implements replica.FollowedView.
func (v replView) FollowedBy(follower string) map[replica.Shard]uint64 {
	out := map[replica.Shard]uint64{}
	v.c.pl.FSM().Read(func(t *placement.Table) {
		for _, ref := range t.Owned(v.c.name) {
			if s, _ := t.Shard(ref); s.InSync(follower) {
				out[replicaShard(ref)] = s.Epoch
			}
		}
	})
	return out
}

// FollowedShards counts, for every follower of a shard this node owns by
// its applied table, the shards it follows (nil before placement runs).
func (c *Engine) FollowedShards() map[string]int {
	pl := c.Placement()
	if pl == nil {
		return nil
	}
	shards := map[string]int{}
	pl.FSM().Read(func(t *placement.Table) {
		for _, ref := range t.Owned(c.name) {
			s, _ := t.Shard(ref)
			for _, f := range s.Followers() {
				shards[f]++
			}
		}
	})
	return shards
}

// replicaShard is ref as the replication engine names it.
func replicaShard(ref placement.ShardRef) replica.Shard {
	return replica.Shard{Group: ref.Group, Index: ref.Index}
}
