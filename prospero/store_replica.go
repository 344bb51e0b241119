package prospero

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Replicated is one record of another node's shard as a replica of that
// shard stores it: the identity's state at rest at the owner's version,
// stamped with the placement epoch the owner wrote it under.
type Replicated struct {
	ID          Identity
	Epoch       uint64
	Version     uint64
	Incarnation uint64
	State       []byte
	// Deleted: the record is a deletion of the copy at (DeletesEpoch,
	// Version). It removes the stored record only if that record is the
	// copy or older by (epoch, version), never a newer one. Epoch is the
	// epoch the deletion was sent under, which a replica's epoch checks
	// see; the copy's own can be older (a catch-up removes a copy an
	// older owner left) and is never newer.
	Deleted      bool
	DeletesEpoch uint64
}

// epochBucket holds, per identity, the epoch of the record the store
// holds ("kind/key" → epochValue: 8 bytes big endian and a checksum;
// none for a record written outside a cluster). A kind name cannot
// contain '/', so the bucket never meets a kind's. It also holds the
// store's own keys, which begin with '/': pendingMark, storeIDKey,
// formatKey and opensKey.
var epochBucket = []byte("/epochs")

// ApplyReplicated stores recs in one transaction (one fsync). Each
// applies only if it is newer than what the store holds for its
// identity, comparing (epoch, version): a record from a newer owner wins
// over any copy left by an older one, and, under one owner, the newest
// version wins. Records this store wrote itself carry the epoch their
// write was made under (Record.Epoch; 0 outside a cluster). A
// deletion removes the record if it is not newer than the copy the
// deletion names, (DeletesEpoch, Version): a record written since, even
// at a lower version under a newer epoch, stays. The
// kind's version sequence is raised to at least each applied version, so
// that the store's own later writes (once this node owns the shard) get
// larger versions still. It returns how many records applied.
func (s *BoltStore) ApplyReplicated(recs []Replicated) (int, error) {
	ids := make([]Identity, len(recs))
	for i := range recs {
		if err := recs[i].ID.Validate(); err != nil {
			return 0, err
		}
		ids[i] = recs[i].ID
	}
	// Held from before the wait for decided writes until committed: a
	// write of one of them decided after that wait (by an activation of
	// this node) would read the identity without these records, and its
	// commit would then find them stored at a higher version.
	defer s.Hold(ids...)()
	s.settle(nil)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, ErrStoreClosed
	}
	var applied int
	err := s.guardedWrite(func() error {
		return s.update(func(tx *bolt.Tx) error {
			var err error
			applied, err = applyReplicatedTx(tx, recs)
			return err
		})
	})
	if err != nil {
		return 0, fmt.Errorf("prospero: apply replicated records: %w", err)
	}
	return applied, nil
}

// ApplyReplicatedAsync queues recs to be stored as ApplyReplicated
// stores them, in the store's next group commit: the records a replica
// receives share one transaction and one fsync with the node's own
// writes (PutAsync, DeleteAsync) and with the other batches queued
// meanwhile, in the order queued. done is called once, on the store's
// goroutine, with how many applied once they are durable, or with the
// error ApplyReplicated would return (then none of recs is stored; the
// other writes of the group commit without them). When the store is
// closed, done gets ErrStoreClosed before ApplyReplicatedAsync returns.
func (s *BoltStore) ApplyReplicatedAsync(recs []Replicated, done func(applied int, err error)) {
	s.applyReplicatedAsync(recs, false, done)
}

// ApplyReplicatedLater is ApplyReplicatedAsync for records nobody waits
// for (a replica that acknowledged them on receipt writes them in the
// background): they start no commit of their own while the store has
// other writes to commit soon, but join the next group commit of the
// node's own writes, or, if none comes, are committed within a few
// milliseconds (lingerLazy). Queue order is kept with every other write.
func (s *BoltStore) ApplyReplicatedLater(recs []Replicated, done func(applied int, err error)) {
	s.applyReplicatedAsync(recs, true, done)
}

func (s *BoltStore) applyReplicatedAsync(recs []Replicated, lazy bool, done func(applied int, err error)) {
	for i := range recs {
		if err := recs[i].ID.Validate(); err != nil {
			done(0, err)
			return
		}
	}
	ids := make([]Identity, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
	}
	s.touch(ids...)
	s.commit.queued(asyncPut{repl: recs, lazy: lazy, done: func(n uint64, err error) {
		s.untouch(ids...)
		if err != nil {
			err = fmt.Errorf("prospero: apply replicated records: %w", err)
		}
		done(int(n), err)
	}})
}

// applyReplicatedTx is ApplyReplicated inside tx: it returns how many of
// recs applied, or the first error (the caller rolls tx back).
func applyReplicatedTx(tx *bolt.Tx, recs []Replicated) (int, error) {
	eb, err := tx.CreateBucketIfNotExists(epochBucket)
	if err != nil {
		return 0, err
	}
	applied := 0
	for i := range recs {
		r := &recs[i]
		b, err := tx.CreateBucketIfNotExists([]byte(r.ID.Kind))
		if err != nil {
			return 0, err
		}
		key := []byte(r.ID.Key)
		ekey := []byte(r.ID.String())
		cur, err := storedVersion(b.Get(key))
		if err != nil {
			return 0, err
		}
		curEpoch, err := parseEpoch(ekey, eb.Get(ekey))
		if err != nil {
			return 0, fmt.Errorf("record %q: %w", r.ID.String(), err)
		}
		newer := r.Epoch > curEpoch || (r.Epoch == curEpoch && r.Version > cur)
		if r.Deleted {
			notNewer := curEpoch < r.DeletesEpoch || (curEpoch == r.DeletesEpoch && cur <= r.Version)
			if cur != 0 && notNewer {
				if err := b.Delete(key); err != nil {
					return 0, err
				}
				if err := eb.Delete(ekey); err != nil {
					return 0, err
				}
				applied++
			}
			continue
		}
		if cur != 0 && !newer {
			continue
		}
		if b.Sequence() < r.Version {
			if err := b.SetSequence(r.Version); err != nil {
				return 0, err
			}
		}
		if err := b.Put(key, encodeRecord(r.ID.Kind, r.ID.Key, r.Version, Record{Incarnation: r.Incarnation, State: r.State})); err != nil {
			return 0, err
		}
		if err := eb.Put(ekey, epochValue(ekey, r.Epoch)); err != nil {
			return 0, err
		}
		applied++
	}
	return applied, nil
}

// ScanIDs calls fn for every identity with a record in the store that
// keep selects, without reading the records (one that does not decode
// is listed too: reading it is the caller's, with Get). It stops at the
// first error fn returns, or when ctx ends. Records whose identity is not
// valid (see InvalidIdentities) are listed too; Get of one fails with
// ErrInvalidIdentity.
func (s *BoltStore) ScanIDs(ctx context.Context, keep func(Identity) bool, fn func(Identity) error) error {
	s.settle(nil)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrStoreClosed
	}
	return s.guarded(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(kind []byte, b *bolt.Bucket) error {
				if string(kind) == string(epochBucket) {
					return nil
				}
				return b.ForEach(func(k, _ []byte) error {
					if err := ctx.Err(); err != nil {
						return err
					}
					id := Identity{Kind: string(kind), Key: string(k)}
					if !keep(id) {
						return nil
					}
					return fn(id)
				})
			})
		})
	})
}

// ScanHeld calls fn with the identity, epoch and version of every record
// in the store that keep selects (Record.Epoch: the epoch of its owner's
// write, 0 for one written outside a cluster). A record whose value does not decode is reported as a
// CorruptError. It stops at the first error fn returns, or when ctx ends.
// Records whose identity is not valid (see InvalidIdentities) are left
// out: the listing goes to a peer, which could not decode them.
func (s *BoltStore) ScanHeld(ctx context.Context, keep func(Identity) bool, fn func(id Identity, epoch, version uint64) error) error {
	s.settle(nil)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrStoreClosed
	}
	return s.guarded(func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			eb := tx.Bucket(epochBucket)
			return tx.ForEach(func(kind []byte, b *bolt.Bucket) error {
				if string(kind) == string(epochBucket) {
					return nil
				}
				return b.ForEach(func(k, v []byte) error {
					if err := ctx.Err(); err != nil {
						return err
					}
					id := Identity{Kind: string(kind), Key: string(k)}
					if id.Validate() != nil || !keep(id) {
						return nil // an invalid identity is isolated (InvalidIdentities)
					}
					version, err := storedVersion(v)
					if err != nil {
						return s.corrupt(id, err)
					}
					var epoch uint64
					if eb != nil {
						key := []byte(id.String())
						if epoch, err = parseEpoch(key, eb.Get(key)); err != nil {
							return s.corrupt(id, err)
						}
					}
					return fn(id, epoch, version)
				})
			})
		})
	})
}
