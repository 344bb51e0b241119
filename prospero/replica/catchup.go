package replica

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// Joiner is the part of View a catch-up needs besides Route and Shrink.
type Joiner interface {
	// ShardOf returns the shard id belongs to (false for identities that
	// are not replicated).
	ShardOf(id prospero.Identity) (Shard, bool)
	// Join adds follower to the in-sync sets of shards, owned by this
	// node at the given epochs, through raft, and returns once this
	// node's applied table shows it in every one of them that this node
	// still owns at its epoch: how many those are. A shard that changed
	// owner meanwhile is left out (its new owner fills its set); it is an
	// error when none is left. An error matching ErrJoinUnsettled says
	// that the join may still be applied (this node's lease lapsed, or
	// ctx ended, before its table showed the outcome).
	Join(ctx context.Context, follower string, shards map[Shard]uint64) (int, error)
}

// ErrJoinUnsettled: a join was proposed and its outcome is not known
// yet; raft may still apply it (Joiner.Join).
var ErrJoinUnsettled = errors.New("replica: the join may still be applied")

// catchUp is one follower's catch-up in progress: while it runs, every
// write of its shards is sent to the follower too and waited for, like
// a write to an in-sync follower, so that nothing committed since the
// bulk copy began can be missing when the follower joins.
type catchUp struct {
	follower string
	shards   map[Shard]uint64 // fixed once registered
	aborted  bool             // a write to the follower failed
	joining  bool             // the join was proposed
	settled  chan struct{}    // closed when the catch-up ended
}

// ErrCatchUpAborted: a write to a catching-up follower failed, so it
// does not join the set now.
var ErrCatchUpAborted = errors.New("replica: catch-up aborted")

// CatchUp brings follower up to date for shards (owned by this node at
// the given epochs) and adds it to their in-sync sets: from now on every
// write of those shards also goes to follower; then a bulk copy of
// every record of the shards this store holds (newest version, stamped
// with the shard's epoch, so it replaces whatever an older owner left
// there) goes to it at no more than rate bytes a second; once it has
// acknowledged all of it and no write to it failed, the join is
// proposed through raft. It returns nil once follower is in the sets.
// The view given to Attach must implement Joiner. One catch-up per
// follower runs at a time (ErrCatchUpBusy otherwise). A failure
// (CatchUpFailed) is counted in Stats.CatchUpFails unless ctx ended.
func (s *Store) CatchUp(ctx context.Context, follower string, shards map[Shard]uint64, rate int) error {
	err := s.runCatchUp(ctx, follower, shards, rate)
	if CatchUpFailed(err) && ctx.Err() == nil {
		s.stats.catchUpFails.Add(1)
	}
	return err
}

func (s *Store) runCatchUp(ctx context.Context, follower string, shards map[Shard]uint64, rate int) error {
	a := s.att.Load()
	if a == nil {
		return errors.New("replica: not attached")
	}
	j, ok := a.view.(Joiner)
	if !ok {
		return errors.New("replica: the view cannot join followers")
	}
	if rate <= 0 {
		rate = 16 << 20
	}
	// Writes wait for a catching-up follower: make sure it answers
	// before they do, so that a follower that is down delays none.
	if err := s.probe(ctx, a, follower); err != nil {
		s.lost(ctx, a, follower, err)
		return fmt.Errorf("replica: catch-up of %s: %w", follower, err)
	}
	if s.Suspect(follower) {
		// A removal it owes failed: retried now, and no catch-up before.
		s.lost(ctx, a, follower, fmt.Errorf("%w (reported earlier)", ErrLostRecords))
		if s.Suspect(follower) {
			return fmt.Errorf("replica: catch-up of %s: %w (reported earlier; it could not leave the sets yet)", follower, ErrLostRecords)
		}
	}
	cu := &catchUp{follower: follower, shards: maps.Clone(shards), settled: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return prospero.ErrStoreClosed
	}
	if _, busy := s.catching[follower]; busy {
		s.mu.Unlock()
		return ErrCatchUpBusy
	}
	s.catching[follower] = cu
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.catching, follower)
		s.mu.Unlock()
		close(cu.settled)
	}()
	s.stats.catchUps.Add(1)

	// Records written from here on reach follower through replicate;
	// those written before are in the store now.
	var ids []prospero.Identity
	err := s.local.ScanIDs(ctx, func(id prospero.Identity) bool {
		sh, ok := j.ShardOf(id)
		_, want := shards[sh]
		return ok && want
	}, func(id prospero.Identity) error {
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("replica: catch-up of %s: scan: %w", follower, err)
	}
	p, err := s.peer(follower)
	if err != nil {
		return err
	}
	start, sent := time.Now(), 0
	var invalid []prospero.Identity
	for len(ids) > 0 {
		var chunk []*Record
		size := 0
		for len(ids) > 0 && size < s.cfg.MaxBatchBytes/2 {
			id := ids[0]
			ids = ids[1:]
			rec, err := s.local.Get(ctx, id)
			if errors.Is(err, prospero.ErrNotFound) {
				continue // deleted since: the deletion went to follower
			}
			if errors.Is(err, prospero.ErrInvalidIdentity) {
				// At rest from before keys were checked: the follower
				// would refuse it, and it must not keep the shard's
				// other records from their replica.
				invalid = append(invalid, id)
				continue
			}
			if err != nil {
				return fmt.Errorf("replica: catch-up of %s: %w", follower, err)
			}
			sh, _ := j.ShardOf(id)
			chunk = append(chunk, &Record{Shard: sh, Replicated: prospero.Replicated{ID: id, Epoch: shards[sh],
				Version: rec.Version, Incarnation: rec.Incarnation, State: rec.State}})
			size += len(rec.State) + 64
		}
		if err := s.sendAll(ctx, p, chunk); err != nil {
			return fmt.Errorf("replica: catch-up of %s: %w", follower, err)
		}
		s.stats.bulk.Add(uint64(len(chunk)))
		sent += size
		// Throttle: no faster than rate on average.
		if ahead := time.Duration(float64(sent)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
			t := time.NewTimer(ahead)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}

	if len(invalid) > 0 {
		s.stats.bulkInvalid.Add(uint64(len(invalid)))
		s.log.LogAttrs(ctx, slog.LevelWarn, "replica: catch-up left out records whose identity is not valid",
			slog.String("replica", follower), slog.Int("records", len(invalid)),
			slog.String("first", fmt.Sprintf("%q", invalid[0].String())))
	}

	// What the follower holds that this store no longer has was deleted
	// while it was away: remove it there before it joins.
	removed, err := s.removeDeleted(ctx, a, p, follower, shards)
	if err != nil {
		return fmt.Errorf("replica: catch-up of %s: %w", follower, err)
	}
	s.stats.bulkDeleted.Add(uint64(removed))

	// The follower acknowledged the copy on receipt and writes it in the
	// background: before it joins, every record it acknowledged must be
	// durable there, or a write that failed there (a full disk) would
	// leave a member of the set without records it was counted for.
	// The follower's disk may trail the copy: as long again as the copy
	// took is allowed for it to catch up, Timeout at least.
	if err := s.confirm(ctx, a, follower, max(s.cfg.Timeout, time.Since(start))); err != nil {
		s.lost(ctx, a, follower, err)
		return fmt.Errorf("replica: catch-up of %s: %w", follower, err)
	}

	s.mu.Lock()
	if cu.aborted {
		s.mu.Unlock()
		return fmt.Errorf("%w: a write to %s failed", ErrCatchUpAborted, follower)
	}
	cu.joining = true
	s.mu.Unlock()
	joined, jerr := j.Join(ctx, follower, shards)
	for errors.Is(jerr, ErrJoinUnsettled) && ctx.Err() == nil {
		// The join may still be applied, and writes committed without
		// follower meanwhile would then be missing on a member of the
		// set: it stays registered (writes go on reaching it) until this
		// node's table settles the join, once its lease is fresh again
		// (the barrier that renews it is applied after every entry
		// committed before it, the join's too if it was).
		if err := s.awaitFresh(ctx, a.view); err != nil {
			break
		}
		s.mu.Lock()
		aborted := cu.aborted
		s.mu.Unlock()
		if aborted {
			break // not joined again: taken out below
		}
		joined, jerr = j.Join(ctx, follower, shards)
	}
	s.mu.Lock()
	aborted := cu.aborted
	s.mu.Unlock()
	if aborted {
		// A write failed while the join was on its way: follower may be
		// in a set without that write. Take it out again before the
		// failed write commits (it waits for settled), retried while
		// the lease is lapsed (the removal needs it): a follower left
		// in a set without a committed write would lose it to a
		// failover.
		for freshFails := 0; ; {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*s.cfg.Timeout)
			n, err := a.view.Shrink(sctx, follower, shards)
			cancel()
			if err == nil {
				s.stats.shrinks.Add(uint64(n))
				break
			}
			// Retried across a lapse; a second failure with the lease
			// fresh is not one (the shards changed owner: their new
			// owner's sets are its own).
			if a.view.Fresh() {
				freshFails++
			}
			if freshFails == 2 || s.awaitFresh(ctx, a.view) != nil {
				s.log.LogAttrs(ctx, slog.LevelError, "replica: catch-up aborted after its join; could not remove the follower",
					slog.String("replica", follower), slog.Any("error", err))
				break
			}
		}
		return fmt.Errorf("%w: a write to %s failed", ErrCatchUpAborted, follower)
	}
	if jerr != nil {
		return fmt.Errorf("replica: catch-up of %s: join: %w", follower, jerr)
	}
	s.stats.joins.Add(uint64(joined))
	s.log.LogAttrs(ctx, slog.LevelInfo, "replica caught up and joined the in-sync set",
		slog.String("replica", follower), slog.Int("shards", joined))
	return nil
}

// awaitFresh returns once view says this node's lease is fresh, or
// ctx's error.
func (s *Store) awaitFresh(ctx context.Context, view View) error {
	t := time.NewTicker(max(s.cfg.Timeout/16, 10*time.Millisecond))
	defer t.Stop()
	for !view.Fresh() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// ErrCatchUpBusy: a catch-up of that follower is running already.
var ErrCatchUpBusy = errors.New("replica: a catch-up of that follower is running")

// CatchUpFailed reports whether err, returned by CatchUp, means that the
// follower was not brought up to date: not nil, and not ErrCatchUpBusy
// (another catch-up of it runs), a closed store or a cancelled context
// (the node is shutting down).
func CatchUpFailed(err error) bool {
	return err != nil && !errors.Is(err, ErrCatchUpBusy) && !errors.Is(err, prospero.ErrStoreClosed) &&
		!errors.Is(err, context.Canceled)
}

// sendAll queues recs to p and waits for all of them.
func (s *Store) sendAll(ctx context.Context, p *peer, recs []*Record) error {
	if len(recs) == 0 {
		return nil
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	wg.Add(len(recs))
	for _, r := range recs {
		p.enqueue(r, func(err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return first
	case <-ctx.Done():
		return ctx.Err()
	}
}

// catchingFor returns the followers of cus catching up on shard at epoch
// (an aborted catch-up names none).
func (s *Store) catchingFor(cus []*catchUp, shard Shard, epoch uint64) []string {
	if len(cus) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, cu := range cus {
		if e, ok := cu.shards[shard]; ok && e == epoch && !cu.aborted {
			out = append(out, cu.follower)
		}
	}
	return out
}

// catchUps returns the catch-ups running now. A write reads them before
// its route: a catch-up stops naming its follower only once the
// follower's join is applied here, so a write whose list lacks a joining
// follower reads a route that has it in the set. Read the other way
// round, a join applied and its catch-up ended between the two reads
// left the write to neither list, and the follower in the set without it.
func (s *Store) catchUps() []*catchUp {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.catching) == 0 {
		return nil
	}
	out := make([]*catchUp, 0, len(s.catching))
	for _, cu := range s.catching {
		out = append(out, cu)
	}
	return out
}

// abortCatchUp marks follower's catch-up failed and, if its join was
// proposed, waits until the catch-up took follower out of the sets again.
func (s *Store) abortCatchUp(ctx context.Context, follower string) {
	s.mu.Lock()
	cu, ok := s.catching[follower]
	if ok {
		cu.aborted = true
	}
	joining := ok && cu.joining
	s.mu.Unlock()
	if joining {
		select {
		case <-cu.settled:
		case <-ctx.Done():
		}
	}
}

// probe sends an empty batch to follower on a stream of its own and
// waits for the answer.
func (s *Store) probe(ctx context.Context, a *attachment, follower string) error {
	return s.emptyBatch(ctx, a, follower, false, s.cfg.Timeout)
}

// emptyBatch sends follower an empty batch (with the sync flag if sync)
// on a stream of its own and returns its answer, within timeout.
func (s *Store) emptyBatch(ctx context.Context, a *attachment, follower string, sync bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := a.dial(ctx, follower)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if _, err := conn.Write(EncodeBatch(1, sync, nil)); err != nil {
		return err
	}
	return ReadAck(conn)
}

// lost handles err, a catch-up's probe or confirmation refused by
// follower: when it says that records the follower acknowledged to this
// node were not stored (ErrLostRecords, which the follower reports once,
// to whichever stream asks first), the follower leaves every set it
// shares with this node, as when a regular batch is refused so (peer.fail):
// it may be in-sync for other shards of this node than those caught up.
func (s *Store) lost(ctx context.Context, a *attachment, follower string, err error) {
	if !errors.Is(err, ErrLostRecords) {
		return
	}
	p, perr := s.peer(follower)
	if perr != nil {
		return
	}
	// The peer's removal, which it also remembers to retry should it
	// fail (peer.lost), before any batch reaches the follower again.
	_ = p.fail(nil, err)
}

// confirm asks follower, on a stream of its own, to make durable every
// record it acknowledged to this node so far (an empty batch with the
// sync flag): nil once it has, within timeout, else why not
// (ErrLostRecords when a background write of them failed).
func (s *Store) confirm(ctx context.Context, a *attachment, follower string, timeout time.Duration) error {
	return s.emptyBatch(ctx, a, follower, true, timeout)
}

// removeDeleted asks follower, on a stream of its own, for what it holds
// of shards, and sends it a deletion for each record this store does not
// have: sent under the shard's epoch, naming the follower's copy by its
// own (epoch, version), so that it removes exactly that copy and never
// a record a write sent meanwhile put there, even one re-created at a
// lower version. It returns how many it sent.
func (s *Store) removeDeleted(ctx context.Context, a *attachment, p *peer, follower string, shards map[Shard]uint64) (int, error) {
	held, err := s.listHeld(ctx, a, follower, shards)
	if err != nil {
		return 0, err
	}
	var dels []*Record
	for _, h := range held {
		epoch, ok := shards[h.Shard]
		if !ok || h.Epoch > epoch {
			// A copy of a newer epoch than this owner's: no deletion of
			// this owner's may remove it.
			continue
		}
		switch _, err := s.local.Get(ctx, h.ID); {
		case errors.Is(err, prospero.ErrNotFound):
			dels = append(dels, &Record{Shard: h.Shard, Replicated: prospero.Replicated{ID: h.ID, Epoch: epoch,
				Version: h.Version, Deleted: true, DeletesEpoch: h.Epoch}})
		case err != nil:
			return 0, err
		}
	}
	for rest := dels; len(rest) > 0; {
		n := min(len(rest), 1024)
		if err := s.sendAll(ctx, p, rest[:n]); err != nil {
			return 0, err
		}
		rest = rest[n:]
	}
	return len(dels), nil
}

// listHeld asks follower for the records it holds of shards.
func (s *Store) listHeld(ctx context.Context, a *attachment, follower string, shards map[Shard]uint64) ([]Held, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*s.cfg.Timeout)
	defer cancel()
	conn, err := a.dial(ctx, follower)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if _, err := conn.Write(frameOf(appendList(nil, slices.Collect(maps.Keys(shards))))); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	r := bufio.NewReader(conn)
	var out []Held
	for {
		b, err := readFrame(r)
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		hs, last, msg, err := decodeHeld(b)
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		if msg != "" {
			return nil, fmt.Errorf("list: replica %s refused: %s", follower, msg)
		}
		out = append(out, hs...)
		if last {
			return out, nil
		}
	}
}
