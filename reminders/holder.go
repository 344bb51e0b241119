package reminders

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
)

// Kept is a shard a node keeps (owns and is not moving away) as one read
// of its placement table shows it: the epoch at which it owns it, and
// whether it may serve it now (lease fresh, not marked down).
type Kept struct {
	Epoch uint64
	Serve bool
}

// Holder keeps an Engine's shards equal to the shards its node keeps,
// firing those it may serve now and pausing the others: the node's
// reminder loop calls Sync with what its table shows, at every change of
// the table and a few times a second. A shard kept at another epoch than
// it was acquired at (its owner changed and came back) is released and
// loaded again; a lapse of the lease pauses a shard, and its renewal
// resumes it, without a reload. A shard moving away is released by the
// handoff itself (Release), before its records ship.
//
// A shard that keeps failing the same way is logged once while the node
// owns it, not at every pass. A release that fails leaves the shard held
// (Engine.Release) and paused, so the next pass tries it again. Its
// methods are safe for concurrent use; Sync passes run one at a time.
type Holder struct {
	e   *Engine
	log *slog.Logger

	passMu sync.Mutex // serialises Sync passes, which share failAcquire, failRelease
	// failAcquire and failRelease are, per shard, the error its last
	// Acquire or Release by Sync gave.
	failAcquire, failRelease map[string]string

	mu     sync.Mutex
	epochs map[string]uint64 // per shard held, the epoch it was acquired at
	// loading holds, per shard, the epochs AcquireAt calls load it at.
	loading map[string][]uint64
}

// NewHolder returns a Holder of e's shards.
func NewHolder(e *Engine, log *slog.Logger) *Holder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{e: e, log: log, failAcquire: map[string]string{}, failRelease: map[string]string{},
		epochs: map[string]uint64{}, loading: map[string][]uint64{}}
}

// AcquireAt loads shard outside Sync (for a call that found it not
// loaded although the node serves it at epoch) and records the epoch,
// unless an acquisition is recorded already (the engine's Acquire of a
// held shard loads nothing). While it loads, a pass reads the shard at
// that epoch (loading), so it never finds the shard held with no epoch
// recorded, which would make it release the shard (dropping what it has
// not written) and load it again; the load itself holds no lock of the
// holder's, so passes go on meanwhile.
func (h *Holder) AcquireAt(ctx context.Context, shard string, epoch uint64) error {
	h.mu.Lock()
	h.loading[shard] = append(h.loading[shard], epoch)
	h.mu.Unlock()
	err := h.e.Acquire(ctx, shard)
	h.mu.Lock()
	defer h.mu.Unlock()
	ls := h.loading[shard]
	if i := slices.Index(ls, epoch); i >= 0 {
		ls = slices.Delete(ls, i, i+1)
	}
	if len(ls) == 0 {
		delete(h.loading, shard)
	} else {
		h.loading[shard] = ls
	}
	if err != nil {
		return err
	}
	h.acquiredLocked(shard, epoch)
	return nil
}

// Acquired records that shard was loaded at epoch, unless an acquisition
// is recorded already.
func (h *Holder) Acquired(shard string, epoch uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acquiredLocked(shard, epoch)
}

func (h *Holder) acquiredLocked(shard string, epoch uint64) {
	if _, ok := h.epochs[shard]; !ok {
		h.epochs[shard] = epoch
	}
}

// EpochOf is the epoch at which shard was acquired (0: none recorded).
func (h *Holder) EpochOf(shard string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epochs[shard]
}

// Release releases shard ahead of a handoff (Engine.Release).
func (h *Holder) Release(ctx context.Context, shard string) error {
	if err := h.e.Release(ctx, shard); err != nil {
		return err
	}
	h.forget(shard)
	return nil
}

func (h *Holder) forget(shard string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.epochs, shard)
}

// held returns the epochs of the shards the engine holds (0: none
// recorded, which makes Sync release and load the shard again),
// forgetting shards no longer held.
func (h *Holder) held() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	shards := h.e.Shards()
	out := make(map[string]uint64, len(shards))
	for _, sh := range shards {
		out[sh] = h.epochs[sh]
		if ls := h.loading[sh]; out[sh] == 0 && len(ls) > 0 {
			out[sh] = ls[0] // loaded by a call that records it next
		}
	}
	for sh := range h.epochs {
		if _, ok := out[sh]; !ok {
			delete(h.epochs, sh)
		}
	}
	return out
}

// Sync makes one pass: keep is what the node keeps, owned every shard it
// owns with its epoch (also those moving away; it bounds what is
// remembered of failing shards). With load false nothing is loaded (the
// node's store is damaged: every read would fail, and the node stops
// serving anyway).
//
// A shard released while the node still owns it at the epoch it was
// acquired at (moving away) writes what it has not written yet
// (Engine.Release); one the node no longer owns at that epoch (a
// failover took it, and it may have come back since) is dropped without
// writing (Engine.Drop): the owners since then wrote its records, and
// this node's leftovers would overwrite them.
func (h *Holder) Sync(ctx context.Context, keep map[string]Kept, owned map[string]uint64, load bool) {
	h.passMu.Lock()
	defer h.passMu.Unlock()
	held := h.held()
	p := plan(keep, held)
	for _, sh := range p.pause {
		h.e.Pause(sh)
	}
	for _, sh := range p.resume {
		h.e.Resume(sh)
	}
	for _, sh := range p.release {
		release := h.e.Drop
		if ep, ok := owned[sh]; ok && ep != 0 && ep == held[sh] {
			release = h.e.Release
		}
		err := release(ctx, sh)
		switch {
		case err == nil:
			h.forget(sh)
			if _, was := h.failRelease[sh]; was {
				h.log.Info("released the reminders of a shard after failing", "shard", sh)
			}
		case errors.Is(err, ErrClosed):
		default:
			// Still held, and not to fire here: not this node's, or
			// loaded before another owner may have changed it.
			h.e.Pause(sh)
			if h.failRelease[sh] != err.Error() {
				h.failRelease[sh] = err.Error()
				h.log.Warn("releasing the reminders of a shard", "shard", sh, "error", err)
			}
		}
	}
	for sh := range h.failRelease {
		if _, ok := keep[sh]; ok || !h.e.Held(sh) {
			delete(h.failRelease, sh) // released, or wanted again
		}
	}
	for sh := range h.failAcquire {
		// Kept while the shard is owned here, also while it may not be
		// served for a moment (a lease renewing): a shard that fails the
		// same way after that is not logged again.
		if _, ok := owned[sh]; !ok {
			delete(h.failAcquire, sh)
		}
	}
	if !load {
		return
	}
	for _, sh := range p.acquire {
		if h.e.Held(sh) {
			continue // its release failed: what it holds is not the epoch's
		}
		err := h.e.Acquire(ctx, sh)
		switch {
		case err == nil:
			h.Acquired(sh, keep[sh].Epoch)
			if _, was := h.failAcquire[sh]; was {
				delete(h.failAcquire, sh)
				h.log.Info("loaded the reminders of a shard after failing", "shard", sh)
			}
		case errors.Is(err, ErrClosed):
		case h.failAcquire[sh] != err.Error():
			h.failAcquire[sh] = err.Error()
			h.log.Warn("loading the reminders of a shard", "shard", sh, "error", err)
		}
	}
}

// holdPlan is what one Sync pass does to the engine's shards.
type holdPlan struct{ release, pause, resume, acquire []string }

// plan decides what the engine's shards become, from the shards the
// node keeps (keep) and those the engine holds, each with the epoch it
// was acquired at (held): a held shard not kept, or kept at another
// epoch than it was acquired at, is released; a kept shard at the same
// epoch is resumed when it may be served and paused when not; a kept
// shard not held, or released for its epoch, is acquired once it may be
// served (after the release: Sync acquires only a shard no longer held).
// Each list is sorted.
//
// A shard kept but not servable for a moment (a lease that lapsed on a
// busy node, the sync barrier after it) is paused, not released:
// releasing would write all its reminders and reloading read them all
// back, at every lapse, and ticks would be missed meanwhile (a loaded
// node released and reloaded shards over and over). Pausing is enough
// because a shard's reminders can only have changed elsewhere if its
// owner changed, which changes its epoch: a shard held from another
// epoch than the table's is released and acquired again. (An aborted
// move raises the epoch too, the owner staying: seen only after the
// abort, the shard is dropped and reloaded, redoing the progress not
// written yet, as after a crash.)
func plan(keep map[string]Kept, held map[string]uint64) holdPlan {
	var p holdPlan
	for sh, ep := range held {
		k, ok := keep[sh]
		switch {
		case !ok:
			p.release = append(p.release, sh)
		case k.Epoch != ep:
			p.release = append(p.release, sh)
			if k.Serve {
				p.acquire = append(p.acquire, sh) // once released
			}
		case k.Serve:
			p.resume = append(p.resume, sh)
		default:
			p.pause = append(p.pause, sh)
		}
	}
	for sh, k := range keep {
		if _, ok := held[sh]; !ok && k.Serve {
			p.acquire = append(p.acquire, sh)
		}
	}
	for _, l := range [][]string{p.release, p.pause, p.resume, p.acquire} {
		slices.Sort(l)
	}
	return p
}
