package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tempest-actors/tempest/manifest"
)

// DefaultShards is the number of shards per group when the cluster is
// bootstrapped without an explicit count. It is fixed for the life of a
// cluster: changing it would move almost every identity.
const DefaultShards = 1024

// NodeStatus is a node's status in the replicated table.
type NodeStatus uint8

// Node statuses.
const (
	// StatusUp: the node may own shards and receives new ones.
	StatusUp NodeStatus = iota + 1
	// StatusDraining: the node keeps what it owns until each shard is
	// handed off, and receives nothing new (graceful leave).
	StatusDraining
	// StatusDown: the node is considered lost. It must not serve (its own
	// fence refuses), and its shards move to survivors once its lease must
	// have expired.
	StatusDown
)

var statusNames = [...]string{"", "up", "draining", "down"}

func (s NodeStatus) String() string {
	if int(s) < len(statusNames) && s != 0 {
		return statusNames[s]
	}
	return fmt.Sprintf("NodeStatus(%d)", s)
}

// NodeInfo is one node's entry in the replicated table.
type NodeInfo struct {
	Name     string            `json:"name"`
	Addr     string            `json:"addr,omitempty"` // QUIC address, informational: routing resolves names
	HTTPAddr string            `json:"http,omitempty"`
	Version  string            `json:"version,omitempty"`
	Manifest manifest.Manifest `json:"manifest"`
	Status   NodeStatus        `json:"status"`
	// Sync is the nonce of the node's latest sync barrier (see OpSync):
	// a node that lost its lease serves again only after it has applied
	// a barrier it requested after regaining contact.
	Sync string `json:"sync,omitempty"`
}

// DefaultGroup is the group of every kind without clause requirements.
const DefaultGroup = ""

// Shard is one shard's entry: its owner, its epoch and, during a planned
// handoff, the node it is moving to.
type Shard struct {
	// Owner is the node that serves the shard ("" while unassigned).
	Owner string `json:"o,omitempty"`
	// Epoch increases on every change of Owner; mail stamped with an
	// older epoch is refused by the owner's fence.
	Epoch uint64 `json:"e,omitempty"`
	// MovingTo is set while a planned handoff from Owner is in progress.
	// Owner stops admitting as soon as it applies this; the new owner
	// starts only when the move completes with Epoch+1.
	MovingTo string `json:"m,omitempty"`
}

// Group is a set of shards whose owners must discharge the same clauses.
// Kinds without requirements share the default group; a kind requiring,
// say, ControlPlaneImmunity lives in the group of that requirement, whose
// shards are placed only on nodes whose manifest discharges it.
type Group struct {
	Name     string              `json:"name"`
	Requires []manifest.ClauseID `json:"requires,omitempty"`
	Shards   []Shard             `json:"-"` // streamed separately in snapshots
}

// ShardRef names one shard of one group.
type ShardRef struct {
	Group string `json:"g,omitempty"`
	Index int    `json:"i"`
}

func (r ShardRef) String() string {
	if r.Group == DefaultGroup {
		return fmt.Sprintf("shard %d", r.Index)
	}
	return fmt.Sprintf("shard %s/%d", r.Group, r.Index)
}

// GroupName returns the canonical group name for a requirement set: the
// sorted, deduplicated clause names joined by "+", or DefaultGroup.
func GroupName(requires []manifest.ClauseID) string {
	rs := normalizeClauses(requires)
	names := make([]string, len(rs))
	for i, c := range rs {
		names[i] = c.String()
	}
	return strings.Join(names, "+")
}

func normalizeClauses(requires []manifest.ClauseID) []manifest.ClauseID {
	rs := slices.Clone(requires)
	slices.Sort(rs)
	return slices.Compact(rs)
}

// Table is the replicated placement state. It is changed only by Apply
// (deterministically, the same on every node) and restored from
// snapshots. A Table is not safe for concurrent use; the FSM guards it.
type Table struct {
	// ShardCount is the number of shards per group, fixed at
	// initialisation (0 until the Init command applies).
	ShardCount int
	// Version increases by one for every command that changed anything.
	Version uint64
	Nodes   map[string]*NodeInfo
	// Kinds maps a kind with requirements to its group; kinds absent
	// here are in DefaultGroup.
	Kinds  map[string]string
	Groups map[string]*Group
}

// NewTable returns an empty, uninitialised table.
func NewTable() *Table {
	return &Table{
		Nodes:  map[string]*NodeInfo{},
		Kinds:  map[string]string{},
		Groups: map[string]*Group{},
	}
}

// Clone returns a deep copy.
func (t *Table) Clone() *Table {
	c := &Table{
		ShardCount: t.ShardCount,
		Version:    t.Version,
		Nodes:      make(map[string]*NodeInfo, len(t.Nodes)),
		Kinds:      make(map[string]string, len(t.Kinds)),
		Groups:     make(map[string]*Group, len(t.Groups)),
	}
	for k, n := range t.Nodes {
		nn := *n
		c.Nodes[k] = &nn
	}
	for k, g := range t.Kinds {
		c.Kinds[k] = g
	}
	for k, g := range t.Groups {
		c.Groups[k] = &Group{Name: g.Name, Requires: slices.Clone(g.Requires), Shards: slices.Clone(g.Shards)}
	}
	return c
}

// GroupNames returns the group names in sorted order.
func (t *Table) GroupNames() []string {
	names := make([]string, 0, len(t.Groups))
	for n := range t.Groups {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// NodeNames returns the node names in sorted order.
func (t *Table) NodeNames() []string {
	names := make([]string, 0, len(t.Nodes))
	for n := range t.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Shard returns the entry of ref and whether it exists.
func (t *Table) Shard(ref ShardRef) (Shard, bool) {
	g, ok := t.Groups[ref.Group]
	if !ok || ref.Index < 0 || ref.Index >= len(g.Shards) {
		return Shard{}, false
	}
	return g.Shards[ref.Index], true
}

// RefOf returns the shard that holds kind/key: the kind's group and the
// identity's shard index. It returns ErrUninitialized before Init.
func (t *Table) RefOf(kind, key string) (ShardRef, error) {
	if t.ShardCount == 0 {
		return ShardRef{}, ErrUninitialized
	}
	return ShardRef{Group: t.Kinds[kind], Index: ShardOf(kind, key, t.ShardCount)}, nil
}

// Eligible returns, sorted by name, the nodes that may receive new
// shards of a group with the given requirements: status up and a
// manifest that discharges every required clause.
func (t *Table) Eligible(requires []manifest.ClauseID) []string {
	var out []string
	for _, name := range t.NodeNames() {
		n := t.Nodes[name]
		if n.Status == StatusUp && n.Manifest.Satisfies(requires) {
			out = append(out, name)
		}
	}
	return out
}

// Owned returns the shards owned by node (including those it is
// handing off), in group then index order.
func (t *Table) Owned(node string) []ShardRef {
	var out []ShardRef
	for _, gn := range t.GroupNames() {
		for i, s := range t.Groups[gn].Shards {
			if s.Owner == node {
				out = append(out, ShardRef{Group: gn, Index: i})
			}
		}
	}
	return out
}

// Location is where an identity lives according to a table.
type Location struct {
	Shard ShardRef
	Owner string
	Epoch uint64
	// Moving is true while a planned handoff of the shard is in progress:
	// mail should wait (bounded) until the move completes.
	Moving bool
}

// Locate returns the location of kind/key. Errors: ErrUninitialized,
// ErrNoEligibleNode (no node can host the kind's group) and ErrUnassigned
// (eligible nodes exist but the leader has not assigned the shard yet).
func (t *Table) Locate(kind, key string) (Location, error) {
	ref, err := t.RefOf(kind, key)
	if err != nil {
		return Location{}, err
	}
	s, ok := t.Shard(ref)
	if !ok {
		// A kind mapped to a group that is missing cannot happen through
		// Apply; treat it as unplaceable rather than panic.
		return Location{}, fmt.Errorf("%w: %s", ErrNoEligibleNode, ref)
	}
	if s.Owner == "" {
		if len(t.Eligible(t.Groups[ref.Group].Requires)) == 0 {
			return Location{Shard: ref}, fmt.Errorf("%w: kind %q", ErrNoEligibleNode, kind)
		}
		return Location{Shard: ref}, fmt.Errorf("%w: %s", ErrUnassigned, ref)
	}
	return Location{Shard: ref, Owner: s.Owner, Epoch: s.Epoch, Moving: s.MovingTo != ""}, nil
}
