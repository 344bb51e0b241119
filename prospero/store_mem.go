package prospero

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// MemStore is an in-memory StateStore for tests and for nodes that do
// not need state to survive the process. It is safe for concurrent use.
type MemStore struct {
	mu      sync.Mutex
	closed  bool
	seq     uint64 // last version handed out; shared by every identity
	records map[Identity]Record
}

var _ PrefixScanner = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{records: make(map[Identity]Record)}
}

// Get implements StateStore.
func (s *MemStore) Get(ctx context.Context, id Identity) (Record, error) {
	if err := id.Validate(); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Record{}, ErrStoreClosed
	}
	r, ok := s.records[id]
	if !ok {
		return Record{}, ErrNotFound
	}
	r.State = clone(r.State)
	return r, nil
}

// Put implements StateStore.
func (s *MemStore) Put(ctx context.Context, id Identity, expected uint64, rec Record) (uint64, error) {
	if err := id.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrStoreClosed
	}
	if cur := s.records[id].Version; cur != expected {
		return 0, fmt.Errorf("%w: %s is at version %d, not %d", ErrVersionConflict, id, cur, expected)
	}
	s.seq++
	s.records[id] = Record{Version: s.seq, Incarnation: rec.Incarnation, State: clone(rec.State)}
	return s.seq, nil
}

// Delete implements StateStore.
func (s *MemStore) Delete(ctx context.Context, id Identity, expected uint64) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrStoreClosed
	}
	if cur := s.records[id].Version; expected != AnyVersion && cur != expected {
		return fmt.Errorf("%w: %s is at version %d, not %d", ErrVersionConflict, id, cur, expected)
	}
	delete(s.records, id)
	return nil
}

// ScanPrefix implements PrefixScanner. It visits every record held.
func (s *MemStore) ScanPrefix(ctx context.Context, kind, prefix string) ([]Keyed, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrStoreClosed
	}
	var out []Keyed
	for id, r := range s.records {
		if id.Kind == kind && strings.HasPrefix(id.Key, prefix) {
			r.State = clone(r.State)
			out = append(out, Keyed{Key: id.Key, Record: r})
		}
	}
	slices.SortFunc(out, func(a, b Keyed) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Len returns the number of records held.
func (s *MemStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Close implements StateStore.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.records = nil
	return nil
}

// clone copies b; empty state is stored as nil, as in BoltStore.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte{}, b...)
}
