package prospero

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tempest-actors/tempest/actor"
)

// Identity names a virtual actor: its kind and its key within the kind.
// An identity exists conceptually forever; only its activations come and
// go. Its text form is "kind/key".
type Identity struct {
	Kind string
	Key  string
}

// String returns "kind/key".
func (id Identity) String() string { return id.Kind + "/" + id.Key }

// Validate reports ErrInvalidIdentity when kind/key cannot name a
// virtual actor by actor.CheckVirtual (empty, not valid UTF-8, too long,
// or a kind that would make the text form of a reference ambiguous); the
// error matches actor.ErrInvalidKey too.
func (id Identity) Validate() error {
	if err := actor.CheckVirtual(id.Kind, id.Key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidIdentity, err)
	}
	return nil
}

// IdentityOf returns the identity a virtual reference names (its
// incarnation, if pinned, is dropped).
func IdentityOf(r actor.Ref) Identity { return Identity{Kind: r.Kind(), Key: r.Key()} }

// Ref returns the plain (unpinned) reference of id.
func (id Identity) Ref() actor.Ref { return actor.Virtual(id.Kind, id.Key) }

// ParseIdentity parses "kind/key". The key may itself contain '/'.
func ParseIdentity(s string) (Identity, error) {
	kind, key, ok := strings.Cut(s, "/")
	id := Identity{Kind: kind, Key: key}
	if !ok {
		return id, fmt.Errorf("%w: %q", ErrInvalidIdentity, s)
	}
	return id, id.Validate()
}

// Errors returned by state stores.
var (
	// ErrNotFound: the store holds no record for the identity.
	ErrNotFound = errors.New("prospero: no state at rest")
	// ErrVersionConflict: a conditional write or delete named a version
	// other than the stored one (someone else wrote first).
	ErrVersionConflict = errors.New("prospero: state version conflict")
	// ErrStoreClosed: the store was closed.
	ErrStoreClosed = errors.New("prospero: state store closed")
	// ErrInvalidIdentity: an identity that fails Identity.Validate.
	ErrInvalidIdentity = errors.New("prospero: invalid identity")
)

// AnyVersion, passed as the expected version of Delete, deletes
// whatever is stored.
const AnyVersion = ^uint64(0)

// Record is one identity's state at rest.
type Record struct {
	// Version is assigned by the store on every successful Put: nonzero,
	// strictly increasing per identity and never reused, even after a
	// Delete. Callers pass it back as the expected version of their next
	// conditional write. It is ignored by Put.
	Version uint64
	// Incarnation is the identity's incarnation number when the record
	// was written. It is persisted with the state so that a restart after
	// a passivation still re-mints a larger number.
	Incarnation uint64
	// State is the actor's marshalled state (BARE or opaque bytes); nil
	// for identities that only remember their incarnation.
	State []byte
	// Epoch is the placement epoch of the shard's owner that wrote the
	// record, 0 outside a cluster. A replicated store sets it on its
	// owner's writes (the caller's value is ignored there) and orders
	// every copy of an identity by (Epoch, Version): a record of an older
	// epoch never replaces one of a newer, whatever their versions, and a
	// write under an older epoch than the stored record's fails with
	// ErrVersionConflict. BoltStore keeps it with the record and returns
	// it from Get; MemStore ignores it.
	Epoch uint64
}

// StateStore keeps state at rest by identity. Implementations are safe
// for concurrent use by many goroutines; operations on one identity are
// linearizable.
//
// Conditional writes are the fencing primitive: Put and Delete succeed
// only when the stored version equals the expected one (0 meaning "no
// record"), and otherwise return ErrVersionConflict without changing
// anything. A supervisor that hydrated version v writes back with
// expected v, so two activations of one identity can never both write.
type StateStore interface {
	// Get returns the record of id, or ErrNotFound. The returned State is
	// owned by the caller.
	Get(ctx context.Context, id Identity) (Record, error)
	// Put stores rec.Incarnation and rec.State for id if the stored
	// version equals expected (0: no record may exist) and returns the
	// new version. The store copies rec.State; the caller keeps it.
	// Errors: ErrVersionConflict, ErrInvalidIdentity, ErrStoreClosed.
	Put(ctx context.Context, id Identity, expected uint64, rec Record) (uint64, error)
	// Delete removes the record of id if the stored version equals
	// expected (AnyVersion: whatever is stored). Deleting an absent
	// record with expected 0 or AnyVersion succeeds.
	// Errors: ErrVersionConflict, ErrInvalidIdentity, ErrStoreClosed.
	Delete(ctx context.Context, id Identity, expected uint64) error
	// Close releases the store. It is idempotent; other operations after
	// Close return ErrStoreClosed.
	Close() error
}

// DoubtingStore is a StateStore whose records at rest are not all known
// to be committed: a replicated store writes the owner's copy before its
// replicas acknowledge it, and a follower holds whatever its owner sent,
// committed or not. Until RecordsInDoubt returns true (a replicated
// store not attached to a cluster commits locally), nothing is in doubt
// but the record of an identity a write of which failed to commit: with
// any store, the next activation writes that one again before serving
// it (it may have landed all the same).
//
// While records are in doubt, the supervisor serves a record it loads
// only if it committed that very record itself (the last write of the
// identity's previous activation on this node, in this process): any
// other one (a record found after a restart, a follower's copy after a
// failover or a promotion, state a handoff brought) is written again,
// through the store, and committed before the actor runs a turn from
// it. So under PersistEveryTurn (reply after commit) no reply is
// computed from a state a failover could take back.
type DoubtingStore interface {
	StateStore
	RecordsInDoubt() bool
}

// Keyed is one record of a PrefixScanner's scan: the identity's key
// (within the scanned kind) and its record.
type Keyed struct {
	Key string
	Record
}

// PrefixScanner is a StateStore that lists the records of one kind whose
// keys begin with a prefix. A store that keeps a kind's keys in order
// (BoltStore) reads only those records. The reminder engine needs it to
// load a shard's reminders, one record each.
type PrefixScanner interface {
	StateStore
	// ScanPrefix returns, in key order, the records of kind whose keys
	// begin with prefix. Errors: ErrStoreClosed, ctx's, a damaged
	// record's *CorruptError.
	ScanPrefix(ctx context.Context, kind, prefix string) ([]Keyed, error)
}
