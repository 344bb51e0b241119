package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/prospero/federation/route"
)

// Warm handoff: on a planned move the old owner names the identities
// that were active when it quiesced them (HydrateRequest), and the new
// owner activates them once its table shows it owning the shard, so the
// first ask after the move finds its actor in memory instead of paying
// the hydration itself. See docs/federation.md.

const (
	// maxHydrateActors bounds the identities one HydrateRequest names;
	// the old owner names the first ones in its order when it had more.
	maxHydrateActors = 4096
	// hydrateWait bounds how long the new owner waits for its table to
	// show it owning the shard, and the old owner's retries on BUSY.
	hydrateWait = 10 * time.Second
)

// warmKey names one move's warm-up on the new owner.
type warmKey = transferKey

// requestHydration tells the new owner of m which of its identities
// were active here. It runs after the move was answered, so it never
// delays the move; a BUSY answer is retried after the delay it names,
// within hydrateWait. Failure costs only a cold first ask.
func (c *Engine) requestHydration(m placement.Move, active []prospero.Identity) {
	if len(active) == 0 || !c.warmHandoff.Load() || c.ctx.Err() != nil {
		return
	}
	if len(active) > maxHydrateActors {
		active = active[:maxHydrateActors]
	}
	req := &federation.HydrateRequest{Group: m.Shard.Group, Shard: uint32(m.Shard.Index), Epoch: m.Epoch + 1,
		BudgetNs: uint64(hydrateWait)}
	for _, id := range active {
		req.Actors = append(req.Actors, federation.Actor{Kind: id.Kind, Key: id.Key})
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, hydrateWait)
		defer cancel()
		retries, err := c.fed.CallRetrying(ctx, m.To, req)
		c.hydrateRetries.Add(uint64(retries))
		if err != nil {
			c.log.LogAttrs(ctx, slog.LevelDebug, "hydration request not taken", slog.String("to", m.To),
				slog.String("shard", m.Shard.String()), slog.Int("retries", retries), slog.Any("error", err))
		}
	}()
}

// Hydrate is the new owner's side: it checks the request against its
// applied table (the sender owns the shard at the epoch before, moving
// here, or this node owns it at the epoch now), the identities (valid,
// of a kind hosted here, in that shard) and its hydration backlog, then
// schedules the activations; they run once the table shows this node
// owning the shard at the epoch.
func (h fedHandler) Hydrate(_ context.Context, from string, m *federation.HydrateRequest) error {
	if err := h.c.starting(); err != nil {
		return err
	}
	c := h.c
	if len(m.Actors) == 0 || len(m.Actors) > maxHydrateActors {
		return fmt.Errorf("%w: %d identities to hydrate (1 to %d)", federation.ErrBadRequest, len(m.Actors), maxHydrateActors)
	}
	shard := placement.ShardRef{Group: m.Group, Index: int(m.Shard)}
	refs := make([]actor.Ref, 0, len(m.Actors))
	for _, a := range m.Actors {
		ref := actor.Virtual(a.Kind, a.Key)
		if err := ref.Check(); err != nil {
			return fmt.Errorf("%w: %w", federation.ErrBadRequest, err)
		}
		if !c.h.Hosts(a.Kind) {
			return fmt.Errorf("%w: kind %q is not hosted here", federation.ErrBadRequest, a.Kind)
		}
		if loc, err := c.pl.Locate(a.Kind, a.Key); err != nil && loc.Shard == (placement.ShardRef{}) || loc.Shard != shard {
			return fmt.Errorf("%w: %s is not in %s", federation.ErrBadRequest, ref, shard)
		}
		refs = append(refs, ref)
	}
	s, ok := c.pl.Owner(shard)
	if !hydrationCurrent(s, ok, m.Epoch, from, c.name) {
		return fmt.Errorf("%w: hydration of %s at epoch %d from %s: this node's table shows owner %q at epoch %d moving to %q",
			errStaleTransfer, shard, m.Epoch, from, s.Owner, s.Epoch, s.MovingTo)
	}
	key := warmKey{from: from, shard: shard, epoch: m.Epoch}
	waiting := c.run.Sup.HydrationWaiting() // not under c.wmu: the supervisor's lock comes first
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for k := range c.warmed { // forget the warm-ups of moves this table is past
		if s, ok := c.pl.Owner(k.shard); !ok || s.Epoch > k.epoch {
			delete(c.warmed, k)
		}
	}
	// Busy first: a request refused BUSY was not taken, and its retry
	// is then judged afresh (a replay of a taken one: DUPLICATE). The
	// backlog is the one mail is judged by (hydrationBusy), the
	// activations waiting for the hydration budget, plus those of
	// warm-ups taken and not yet scheduled; a node with none takes a
	// request of any size.
	backlog, limit := c.warming+waiting, c.HydrateBacklog()
	switch hydrationAdmission(backlog, limit, len(refs), c.warmed[key]) {
	case hydrateBusy:
		c.hydrateBusy.Add(1)
		return &federation.BusyError{Delay: retryAfter(backlog, c.cfg.HydrationBudget),
			Reason: fmt.Sprintf("%d activations scheduled or waiting for the hydration budget, backlog %d", backlog, limit)}
	case hydrateDuplicate:
		return fmt.Errorf("%w: hydration of %s at epoch %d from %s already taken", federation.ErrDuplicate, shard, m.Epoch, from)
	}
	c.warmed[key] = true
	c.warming += len(refs)
	wait := min(time.Duration(m.BudgetNs), hydrateWait)
	c.wg.Add(1)
	go c.warm(key, refs, wait)
	return nil
}

// hydrationCurrent reports whether a HydrateRequest from the node from,
// for a shard at epoch (the epoch the move gives it), fits self's applied
// entry s of the shard (ok: there is one): from owns it at the epoch
// before, moving to self, or self owns it at that epoch. Otherwise the
// request is stale (or early: the sender retries it).
func hydrationCurrent(s placement.Shard, ok bool, epoch uint64, from, self string) bool {
	moving := ok && s.Epoch+1 == epoch && s.Owner == from && s.MovingTo == self
	moved := ok && s.Epoch == epoch && s.Owner == self
	return moving || moved
}

// hydrateAdmit is what the new owner does with a current HydrateRequest.
type hydrateAdmit int

const (
	hydrateTake      hydrateAdmit = iota // schedule the warm-up
	hydrateBusy                          // refuse BUSY: the request was not taken, its retry is judged afresh
	hydrateDuplicate                     // refuse DUPLICATE: this move's warm-up was taken already
)

// hydrationAdmission decides on a current request naming n identities,
// given the backlog of activations (scheduled by warm-ups taken and not
// started, and waiting for the hydration budget), its limit, and whether
// this move's warm-up was taken already. Busy comes first, so that a
// request refused BUSY and retried is judged afresh; a node with no
// backlog takes a request of any size.
func hydrationAdmission(backlog, limit, n int, taken bool) hydrateAdmit {
	switch {
	case backlog > 0 && backlog+n > limit:
		return hydrateBusy
	case taken:
		return hydrateDuplicate
	}
	return hydrateTake
}

// warmStep is where a warm-up stands by the new owner's applied table.
type warmStep int

const (
	warmWait warmStep = iota // the table does not show the move done here yet
	warmGo                   // self owns the shard at the epoch, not moving: activate
	warmOver                 // the table is past the epoch, or gave it to another: drop it
)

// warmReadiness is the step of a warm-up of a shard at epoch on self,
// given self's applied entry s of the shard (ok: there is one).
func warmReadiness(s placement.Shard, ok bool, epoch uint64, self string) warmStep {
	switch {
	case ok && s.Epoch == epoch && s.Owner == self && s.MovingTo == "":
		return warmGo
	case ok && s.Epoch > epoch, ok && s.Epoch == epoch && s.Owner != self:
		return warmOver
	}
	return warmWait
}

// HydrateBacklog is how many activations warm handoffs may have
// scheduled and not yet started: sixteen times the node's hydration
// budget (the activations its supervisor runs at once).
func (c *Engine) HydrateBacklog() int {
	return 16 * max(c.cfg.HydrationBudget, 1)
}

// hydrationBusy is the admission check of mail from peers (remote.busy):
// mail for an identity without a cell here would need an activation, and
// while the activations waiting for the supervisor's hydration budget
// are at the backlog (HydrateBacklog) it is refused BUSY, asking the
// sender to wait about the time the backlog takes to drain, rather than
// queued without bound. Mail for an identity resident here is never
// refused for it, nor is the supervisor read then.
func (c *Engine) hydrationBusy(to actor.Ref) (time.Duration, string, bool) {
	if c.run.Sched.Resident(to) {
		return 0, "", false
	}
	waiting, limit := c.run.Sup.HydrationWaiting(), c.HydrateBacklog()
	if waiting < limit {
		return 0, "", false
	}
	c.mailBusy.Add(1)
	return retryAfter(waiting, c.cfg.HydrationBudget),
		fmt.Sprintf("%d activations waiting for the hydration budget, backlog %d", waiting, limit), true
}

// retryAfter is the delay a BUSY answer asks for, with backlog
// activations ahead under a hydration budget of budget at once: about
// the time the backlog takes to drain at 5 ms per budget's worth, at
// least 10 ms and at most a second.
func retryAfter(backlog, budget int) time.Duration {
	d := time.Duration(backlog/max(budget, 1)) * 5 * time.Millisecond
	return min(max(d, 10*time.Millisecond), time.Second)
}

// warm waits, at most wait (the request's budget, at most hydrateWait),
// until this node's table shows it owning key's shard at key's epoch,
// then activates refs through the supervisor (under the hydration
// budget), as first mail for them would. A table that moves past the
// epoch first ends it: the shard is someone else's again.
func (c *Engine) warm(key warmKey, refs []actor.Ref, wait time.Duration) {
	defer c.wg.Done()
	defer func() {
		c.wmu.Lock()
		c.warming = max(c.warming-len(refs), 0)
		c.wmu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(c.ctx, wait)
	defer cancel()
	for {
		s, ok := c.pl.Owner(key.shard)
		step := warmReadiness(s, ok, key.epoch, c.name)
		if step == warmGo {
			break
		}
		if step == warmOver {
			return
		}
		if err := c.awaitChange(ctx, 50*time.Millisecond); err != nil {
			return
		}
	}
	_, err := c.h.Running()
	if err != nil {
		return
	}
	// Routing may refuse for a moment yet (a lease being renewed on a node
	// that just joined, a table catching up): those wait for the next
	// change, as mail for them would.
	pending := refs
	for len(pending) > 0 {
		var later []actor.Ref
		for _, ref := range pending {
			_, local, err := c.Route(ref)
			switch {
			case err != nil && route.Waitable(err):
				later = append(later, ref)
				continue
			case err != nil || !local:
				continue
			}
			if err := c.run.Sched.EnsureCell(ref, 0, 0); err != nil {
				continue
			}
			if err := c.run.Sup.Ring(ref); err == nil {
				c.hydrated.Add(1)
			}
		}
		if pending = later; len(pending) > 0 {
			if err := c.awaitChange(ctx, 50*time.Millisecond); err != nil {
				return
			}
		}
	}
}
