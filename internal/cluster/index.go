package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire/bare"
)

// The shard index: for every shard, the identities whose state at rest
// this node's store may hold. A handoff ships exactly those, so actors
// that stayed dormant since an earlier process lifetime move with their
// shard too. It lives in the state store itself, one record per shard,
// under a kind no user may register.
const indexKind = "tempest.shard-index"

// ReservedKindPrefix starts kind names the node keeps for itself.
const ReservedKindPrefix = "tempest."

func indexID(s placement.ShardRef) prospero.Identity {
	return prospero.Identity{Kind: indexKind, Key: s.Group + "#" + strconv.Itoa(s.Index)}
}

func encodeIndex(ids []prospero.Identity) []byte {
	b := bare.AppendUint(nil, uint64(len(ids)))
	for _, id := range ids {
		b = bare.AppendString(b, id.Kind)
		b = bare.AppendString(b, id.Key)
	}
	return b
}

// decodeIndex returns the identities of an index record. An entry whose
// kind or key is not valid UTF-8 (written before keys were validated, or
// damaged) comes back in bad instead, so that one such entry never hides
// the rest of the shard; err reports a record that does not decode at
// all.
func decodeIndex(b []byte) (ids, bad []prospero.Identity, err error) {
	d := bare.NewDecoder(b, bare.Config{})
	n := d.Count(2)
	ids = make([]prospero.Identity, 0, n)
	for range n {
		// As data, not str: the UTF-8 check is per entry below.
		id := prospero.Identity{Kind: string(d.Data(nil)), Key: string(d.Data(nil))}
		if utf8.ValidString(id.Kind) && utf8.ValidString(id.Key) {
			ids = append(ids, id)
		} else {
			bad = append(bad, id)
		}
	}
	if err := d.Finish(); err != nil {
		return nil, nil, fmt.Errorf("tempest: shard index: %w", err)
	}
	return ids, bad, nil
}

// updateIndex applies add and remove to the index record of shard,
// retrying on a concurrent write.
func (c *Engine) updateIndex(ctx context.Context, shard placement.ShardRef, add, remove []prospero.Identity) error {
	store := c.run.Store
	id := indexID(shard)
	for range 5 {
		var cur []prospero.Identity
		var version uint64
		rec, err := store.Get(ctx, id)
		switch {
		case err == nil:
			version = rec.Version
			var bad []prospero.Identity
			if cur, bad, err = decodeIndex(rec.State); err != nil {
				cur = nil // a damaged index is rebuilt from what is known now
			}
			// Entries that do not decode stay, so that every handoff of
			// the shard reports them.
			cur = append(cur, bad...)
		case !errors.Is(err, prospero.ErrNotFound):
			return err
		}
		next := slices.Clone(cur)
		for _, a := range add {
			if !slices.Contains(next, a) {
				next = append(next, a)
			}
		}
		next = slices.DeleteFunc(next, func(x prospero.Identity) bool { return slices.Contains(remove, x) })
		if slices.Equal(next, cur) && (version != 0 || len(next) == 0) {
			return nil
		}
		if len(next) == 0 {
			err = store.Delete(ctx, id, version)
		} else {
			slices.SortFunc(next, func(a, b prospero.Identity) int { return cmpString(a.String(), b.String()) })
			_, err = store.Put(ctx, id, version, prospero.Record{State: encodeIndex(next)})
		}
		if errors.Is(err, prospero.ErrVersionConflict) {
			continue
		}
		return err
	}
	return fmt.Errorf("tempest: shard index %s: %w", shard, prospero.ErrVersionConflict)
}

// ReadIndex returns the identities indexed for shard, and apart the
// entries that are not valid identities (see decodeIndex).
func (c *Engine) ReadIndex(ctx context.Context, shard placement.ShardRef) (ids, bad []prospero.Identity, err error) {
	rec, err := c.run.Store.Get(ctx, indexID(shard))
	if errors.Is(err, prospero.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return decodeIndex(rec.State)
}

// FlushIndex writes the identities activated since the last flush into
// their shards' index records.
func (c *Engine) FlushIndex(ctx context.Context) error {
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	byShard := map[placement.ShardRef][]prospero.Identity{}
	var retry []prospero.Identity
	for _, id := range pending {
		loc, err := c.pl.Locate(id.Kind, id.Key)
		if err != nil && loc.Shard == (placement.ShardRef{}) {
			retry = append(retry, id)
			continue
		}
		byShard[loc.Shard] = append(byShard[loc.Shard], id)
	}
	var errs []error
	for s, ids := range byShard {
		if err := c.updateIndex(ctx, s, ids, nil); err != nil {
			retry = append(retry, ids...)
			errs = append(errs, err)
		}
	}
	if len(retry) > 0 {
		c.mu.Lock()
		c.pending = append(c.pending, retry...)
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// indexLoop flushes the index whenever identities were activated.
func (c *Engine) indexLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.indexKick:
		}
		if err := c.FlushIndex(c.ctx); err != nil && c.ctx.Err() == nil {
			c.log.Debug("shard index", "error", err)
			// Retried at the next activation or handoff.
		}
	}
}

// Dormant lists the keys of kind's identities in the shards this node
// owns, other than those seen holds (which it adds them to): those of
// the shard index handoff uses, and every one whose record the store
// holds, whatever wrote it (records that arrived as a follower's, before
// this node took the shard over, are in no index of its own; finding
// them reads every key of the store once).
func (c *Engine) Dormant(ctx context.Context, kind string, seen map[string]bool) ([]string, error) {
	if c.pl == nil || c.run.Store == nil {
		return nil, ErrNotStarted
	}
	t := c.pl.Table()
	if t == nil {
		return nil, ErrNotStarted
	}
	var keys []string
	group, hosted := t.Kinds[kind]
	owned := map[placement.ShardRef]bool{}
	for _, shard := range t.Owned(c.name) {
		if !hosted || shard.Group != group {
			continue
		}
		owned[shard] = true
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ids, _, err := c.ReadIndex(ctx, shard)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if id.Kind == kind && !seen[id.Key] {
				seen[id.Key] = true
				keys = append(keys, id.Key)
			}
		}
	}
	err := c.run.Store.ScanIDs(ctx, func(id prospero.Identity) bool {
		if id.Kind != kind || seen[id.Key] {
			return false
		}
		ref, err := t.RefOf(id.Kind, id.Key)
		return err == nil && owned[ref]
	}, func(id prospero.Identity) error {
		seen[id.Key] = true
		keys = append(keys, id.Key)
		return nil
	})
	return keys, err
}
