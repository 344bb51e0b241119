package placement

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// FSM is the raft state machine holding the Table. Apply, Snapshot and
// Restore are called by raft; the read methods may be called by any
// goroutine at any time.
type FSM struct {
	mu      sync.RWMutex
	table   *Table
	applied uint64        // raft index of the last applied entry
	changed chan struct{} // closed and replaced on every change
	// observer, when set, is told of every read of the table (Read,
	// Table): see ObserveReads.
	observer atomic.Pointer[func()]
	// logged holds, by node name, the newest data ID recorded by an entry
	// of the log this node opened with that is not applied yet (see
	// Node.DataIDOf).
	logged map[string]loggedDataID
}

type loggedDataID struct {
	id          string
	index, term uint64 // of the entry that records it
}

// setLogged sets the data IDs recorded by the entries of the log at
// open, less those applied already.
func (f *FSM) setLogged(m map[string]loggedDataID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, rec := range m {
		if rec.index <= f.applied {
			delete(m, name)
		}
	}
	f.logged = m
}

// dataIDOf returns the data ID recorded for node name: the newest
// logged one not applied yet, if it still holds (the log still has its
// entry: a new leader may have replaced an uncommitted tail), or the
// table's.
func (f *FSM) dataIDOf(name string, holds func(index, term uint64) bool) string {
	f.mu.RLock()
	rec, ok := f.logged[name]
	id := f.table.DataIDs[name]
	f.mu.RUnlock()
	if !ok {
		return id
	}
	if holds(rec.index, rec.term) {
		return rec.id
	}
	f.mu.Lock()
	if f.logged[name] == rec {
		delete(f.logged, name)
	}
	id = f.table.DataIDs[name]
	f.mu.Unlock()
	return id
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.FSMSnapshot = (*fsmSnapshot)(nil)
)

// NewFSM returns an FSM with an empty table.
func NewFSM() *FSM {
	return &FSM{table: NewTable(), changed: make(chan struct{})}
}

// Apply implements raft.FSM. It returns a Result.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	c, err := DecodeCommand(l.Data)
	if err != nil {
		f.mu.Lock()
		f.applied = l.Index
		v := f.table.Version
		f.mu.Unlock()
		return Result{Version: v, Err: err}
	}
	f.mu.Lock()
	r := f.table.Apply(c)
	f.applied = l.Index
	for name, rec := range f.logged {
		if rec.index <= l.Index {
			delete(f.logged, name) // applied now (or replaced by a leader's entry)
		}
	}
	var ch chan struct{}
	if r.Applied > 0 {
		ch = f.changed
		f.changed = make(chan struct{})
	}
	f.mu.Unlock()
	if ch != nil {
		close(ch)
	}
	return r
}

// Read calls fn with the current table under a read lock. fn must not
// retain or modify the table.
func (f *FSM) Read(fn func(t *Table)) {
	f.observed()
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.table)
}

// Table returns a deep copy of the current table.
func (f *FSM) Table() *Table {
	f.observed()
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Clone()
}

// tableSince returns a deep copy of the current table and the channel
// closed at its next change, or prev and changed themselves when changed
// is still that channel (the table has not changed since prev was
// copied). The leader's step reads the table every pass and it changes
// far less often; the copy is shared, so no caller may modify it.
func (f *FSM) tableSince(prev *Table, changed <-chan struct{}) (*Table, <-chan struct{}) {
	f.observed()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if prev != nil && changed == f.changed {
		return prev, changed
	}
	return f.table.Clone(), f.changed
}

// ObserveReads makes fn (nil: none) be called at every read of the
// table through Read or Table, and so through every Node method that
// reads it (Locate, Owner, Check, Table, ...), before the read. It is for
// tests that count the table reads of a code path, such as the lookups
// one message costs each node that routes or admits it. fn must be fast
// and safe for concurrent use; it must not read the table.
func (f *FSM) ObserveReads(fn func()) {
	if fn == nil {
		f.observer.Store(nil)
		return
	}
	f.observer.Store(&fn)
}

func (f *FSM) observed() {
	if fn := f.observer.Load(); fn != nil {
		(*fn)()
	}
}

// Changed returns a channel closed at the next change of the table.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// Snapshot implements raft.FSM: it takes a deep copy under the lock
// (cheap: a few thousand small structs) and streams it in Persist.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{t: f.table.Clone()}, nil
}

// Restore implements raft.FSM, replacing the table with the snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	t, err := ReadSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.table = t
	f.logged = nil // a snapshot from the leader replaces the log
	ch := f.changed
	f.changed = make(chan struct{})
	f.mu.Unlock()
	close(ch)
	return nil
}

type fsmSnapshot struct{ t *Table }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := WriteSnapshot(sink, s.t); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// Snapshot stream format, version 1: newline-delimited JSON records,
// written and read one record at a time so neither side holds the whole
// encoding in memory:
//
//	{"v":1,"shards":S,"version":V,"nodes":N,"kinds":K,"groups":G,"data_ids":D}
//	N × NodeInfo
//	K × {"kind":..,"group":..}
//	G × ( {"name":..,"requires":[..]}  then S × Shard )
//	D × {"node":..,"data_id":..}
//
// "data_ids" is left out when D is 0, so a table without data IDs reads
// in builds from before them.
//
// Like commands, it moves to BARE later.
type snapHeader struct {
	V        int    `json:"v"`
	Shards   int    `json:"shards"`
	Replicas int    `json:"replicas,omitempty"`
	Version  uint64 `json:"version"`
	Nodes    int    `json:"nodes"`
	Kinds    int    `json:"kinds"`
	Groups   int    `json:"groups"`
	DataIDs  int    `json:"data_ids,omitempty"`
}

type snapDataID struct {
	Node   string `json:"node"`
	DataID string `json:"data_id"`
}

type snapKind struct {
	Kind  string `json:"kind"`
	Group string `json:"group"`
}

// WriteSnapshot streams t to w.
func WriteSnapshot(w io.Writer, t *Table) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	kinds := make([]string, 0, len(t.Kinds))
	for k := range t.Kinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	hdr := snapHeader{V: 1, Shards: t.ShardCount, Replicas: t.ReplicaCount, Version: t.Version, Nodes: len(t.Nodes), Kinds: len(kinds), Groups: len(t.Groups), DataIDs: len(t.DataIDs)}
	if err := enc.Encode(hdr); err != nil {
		return err
	}
	for _, n := range t.NodeNames() {
		if err := enc.Encode(t.Nodes[n]); err != nil {
			return err
		}
	}
	for _, k := range kinds {
		if err := enc.Encode(snapKind{Kind: k, Group: t.Kinds[k]}); err != nil {
			return err
		}
	}
	for _, gn := range t.GroupNames() {
		g := t.Groups[gn]
		if err := enc.Encode(g); err != nil {
			return err
		}
		if len(g.Shards) != t.ShardCount {
			return fmt.Errorf("placement: group %q has %d shards, want %d", gn, len(g.Shards), t.ShardCount)
		}
		for _, s := range g.Shards {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.DataIDs)) {
		if err := enc.Encode(snapDataID{Node: name, DataID: t.DataIDs[name]}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// maxSnapshotShards bounds the shard count a snapshot may declare.
const maxSnapshotShards = 1 << 20

// ReadSnapshot reads a table written by WriteSnapshot.
func ReadSnapshot(r io.Reader) (*Table, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	dec.DisallowUnknownFields()
	var hdr snapHeader
	if err := dec.Decode(&hdr); err != nil {
		return nil, fmt.Errorf("placement: snapshot header: %w", err)
	}
	if hdr.V != 1 || hdr.Shards < 0 || hdr.Replicas < 0 || hdr.Replicas > maxReplicas || hdr.Shards > maxSnapshotShards || hdr.Nodes < 0 || hdr.Kinds < 0 || hdr.Groups < 0 || hdr.DataIDs < 0 {
		return nil, fmt.Errorf("placement: bad snapshot header %+v", hdr)
	}
	t := NewTable()
	t.ShardCount, t.ReplicaCount, t.Version = hdr.Shards, hdr.Replicas, hdr.Version
	for i := 0; i < hdr.Nodes; i++ {
		var n NodeInfo
		if err := dec.Decode(&n); err != nil {
			return nil, fmt.Errorf("placement: snapshot node: %w", err)
		}
		t.Nodes[n.Name] = &n
	}
	for i := 0; i < hdr.Kinds; i++ {
		var k snapKind
		if err := dec.Decode(&k); err != nil {
			return nil, fmt.Errorf("placement: snapshot kind: %w", err)
		}
		t.Kinds[k.Kind] = k.Group
	}
	for i := 0; i < hdr.Groups; i++ {
		g := &Group{}
		if err := dec.Decode(g); err != nil {
			return nil, fmt.Errorf("placement: snapshot group: %w", err)
		}
		g.Shards = make([]Shard, hdr.Shards)
		for j := range g.Shards {
			if err := dec.Decode(&g.Shards[j]); err != nil {
				return nil, fmt.Errorf("placement: snapshot shard: %w", err)
			}
		}
		t.Groups[g.Name] = g
	}
	for i := 0; i < hdr.DataIDs; i++ {
		var d snapDataID
		if err := dec.Decode(&d); err != nil {
			return nil, fmt.Errorf("placement: snapshot data ID: %w", err)
		}
		t.DataIDs[d.Node] = d.DataID
	}
	if dec.More() {
		return nil, fmt.Errorf("placement: trailing data after snapshot")
	}
	return t, nil
}
