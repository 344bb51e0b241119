package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tempest-actors/tempest/manifest"
)

// DefaultShards is the number of shards per group when the cluster is
// bootstrapped without an explicit count. It is fixed for the life of a
// cluster: changing it would move almost every identity.
const DefaultShards = 1024

// DefaultReplicas is the size of each shard's replica set (owner
// included) when the cluster is bootstrapped without an explicit count;
// a cluster of fewer nodes keeps one replica on each.
const DefaultReplicas = 3

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
	// Kinds are the kinds the node registered, sorted by name, each with
	// its requirements and the digest of its policy, as the node itself
	// published them (OpHosts; node upserts keep them). Only nodes that
	// host a kind, with the digest the cluster agrees on, receive its
	// shards.
	Kinds []KindSpec `json:"kinds,omitempty"`
	// StoreFailing, when not empty, is why the node's state store cannot
	// write (a full disk, an I/O error), as the node itself reported it
	// (OpStore): such a node is not eligible (Eligible), so its shards
	// are handed to other nodes and its places in replica sets to others
	// too, until it reports its writes work again.
	StoreFailing string `json:"store_failing,omitempty"`
}

// Hosts returns the node's entry for kind and whether it hosts it.
func (n *NodeInfo) Hosts(kind string) (KindSpec, bool) {
	i, ok := slices.BinarySearchFunc(n.Kinds, kind, func(k KindSpec, name string) int { return strings.Compare(k.Name, name) })
	if !ok {
		return KindSpec{}, false
	}
	return n.Kinds[i], true
}

// Shard is one shard's entry: its owner, its epoch and, during a planned
// handoff, the node it is moving to.
type Shard struct {
	// Owner is the node that serves the shard ("" while unassigned).
	Owner string `json:"o,omitempty"`
	// Epoch increases on every change of Owner and on every aborted
	// move (OpAbort), so that each move has a name of its own; mail
	// stamped with an older epoch is refused by the owner's fence.
	Epoch uint64 `json:"e,omitempty"`
	// MovingTo is set while a planned handoff from Owner is in progress.
	// Owner stops admitting as soon as it applies this; the new owner
	// starts only when the move completes with Epoch+1.
	MovingTo string `json:"m,omitempty"`
	// Replicas is the shard's in-sync replica set: the owner first, then
	// its followers, each holding every record the owner committed (see
	// docs/cluster.md, "Replicated state at rest"). It changes only
	// through raft: set on assignment, a follower removed by OpShrink
	// before the owner commits without it, one added by OpJoin once it
	// caught up. Empty for a shard assigned before replica sets existed:
	// it behaves as a set of the owner alone.
	Replicas []string `json:"r,omitempty"`
}

// InSync reports whether node is in the shard's in-sync replica set (the
// owner always is).
func (s Shard) InSync(node string) bool {
	return node != "" && (node == s.Owner || slices.Contains(s.Replicas, node))
}

// Followers returns the in-sync replicas other than the owner, in set
// order. The slice is the caller's.
func (s Shard) Followers() []string {
	out := make([]string, 0, len(s.Replicas))
	for _, r := range s.Replicas {
		if r != s.Owner {
			out = append(out, r)
		}
	}
	return out
}

// Group is the set of one kind's shards; the group is named after the
// kind. Its shards are placed only on nodes that are up, whose manifest
// discharges every clause in Requires, that host the kind, and whose
// policy digest for it is the one the cluster agrees on (see
// Table.Policy). Requires is fixed when the group is created (by the
// first node that publishes the kind): changing it would not move any
// identity, but the planner would hand shards to nodes the old
// requirements excluded, so a kind's requirements change only through
// its policy digest, which keeps dissenting nodes out until they agree.
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
	return fmt.Sprintf("shard %s/%d", r.Group, r.Index)
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
	// ReplicaCount is the replica set size of every shard (owner
	// included), fixed at initialisation; 0 in a table initialised before
	// replica sets existed, read as DefaultReplicas.
	ReplicaCount int
	// Version increases by one for every command that changed anything.
	Version uint64
	Nodes   map[string]*NodeInfo
	// Kinds maps every kind some node published (OpHosts) to its group.
	// A kind absent here has no shards: Locate answers ErrUnknownKind.
	Kinds  map[string]string
	Groups map[string]*Group
	// DataIDs are the data IDs of the nodes' data directories, by node
	// name (OpDataID): raft streams to a node name its data ID, and a
	// node found with another one is re-added as a new server (see
	// LoadDataID). Removing a node from the table keeps its data ID: its
	// raft server may outlive its entry.
	DataIDs map[string]string
}

// NewTable returns an empty, uninitialised table.
func NewTable() *Table {
	return &Table{
		Nodes:   map[string]*NodeInfo{},
		Kinds:   map[string]string{},
		Groups:  map[string]*Group{},
		DataIDs: map[string]string{},
	}
}

// Clone returns a deep copy.
func (t *Table) Clone() *Table {
	c := &Table{
		ShardCount:   t.ShardCount,
		ReplicaCount: t.ReplicaCount,
		Version:      t.Version,
		Nodes:        make(map[string]*NodeInfo, len(t.Nodes)),
		Kinds:        make(map[string]string, len(t.Kinds)),
		Groups:       make(map[string]*Group, len(t.Groups)),
		DataIDs:      maps.Clone(t.DataIDs),
	}
	if c.DataIDs == nil {
		c.DataIDs = map[string]string{}
	}
	for k, n := range t.Nodes {
		nn := *n
		nn.Kinds = slices.Clone(n.Kinds) // Apply replaces it whole, but a caller may not know that
		c.Nodes[k] = &nn
	}
	for k, g := range t.Kinds {
		c.Kinds[k] = g
	}
	for k, g := range t.Groups {
		shards := slices.Clone(g.Shards)
		// The replica sets of a group share one backing array (one
		// allocation instead of one per shard; the table is copied at
		// every step of the leader's planner). Each keeps its own
		// capacity, so appending to one never writes into the next.
		n := 0
		for i := range shards {
			n += len(shards[i].Replicas)
		}
		backing := make([]string, 0, n)
		for i := range shards {
			if len(shards[i].Replicas) == 0 {
				// nil stays nil; no capacity is shared with t
				shards[i].Replicas = shards[i].Replicas[:0:0]
				continue
			}
			start := len(backing)
			backing = append(backing, shards[i].Replicas...)
			shards[i].Replicas = backing[start:len(backing):len(backing)]
		}
		c.Groups[k] = &Group{Name: g.Name, Requires: slices.Clone(g.Requires), Shards: shards}
	}
	return c
}

// Replication returns the replica set size of the table's shards.
func (t *Table) Replication() int {
	if t.ReplicaCount <= 0 {
		return DefaultReplicas
	}
	return t.ReplicaCount
}

// WantReplicas returns the replica set ref should have: up to
// Replication() nodes eligible for its group, best rendezvous rank
// first. A shard's owner heads its set and need not rank first (shards
// move gradually); the followers it should gain are the members of this
// list that are not in its set yet.
func (t *Table) WantReplicas(ref ShardRef) []string {
	return t.ReplicaRanking(ref.Group)(ref.Index)
}

// ReplicaRanking returns WantReplicas for the shards of group gn, with
// the eligible nodes found once rather than once per shard: for callers
// that look at many shards of a group.
func (t *Table) ReplicaRanking(gn string) func(index int) []string {
	g, ok := t.Groups[gn]
	if !ok {
		return func(int) []string { return nil }
	}
	eligible, r := t.Eligible(g.Name), t.Replication()
	return func(index int) []string {
		ranked := Ranked(gn, index, eligible)
		if len(ranked) > r {
			ranked = ranked[:r]
		}
		return ranked
	}
}

// UnderReplicated returns the assigned shards whose in-sync set has fewer
// members on nodes that are not down than WantReplicas names (followers
// still catching up, none eligible to join, or a member down and not yet
// dropped or failed over), in group and index order.
func (t *Table) UnderReplicated() []ShardRef {
	var out []ShardRef
	for _, gn := range t.GroupNames() {
		want := t.ReplicaRanking(gn)
		for i, s := range t.Groups[gn].Shards {
			if s.Owner != "" && t.liveMembers(s) < len(want(i)) {
				out = append(out, ShardRef{Group: gn, Index: i})
			}
		}
	}
	return out
}

// BelowReplicas returns the assigned shards whose in-sync set has fewer
// members on nodes that are not down than Replication(), in group and
// index order: the redundancy lost, whether or not the cluster has a node
// to restore it (UnderReplicated counts only what it could).
func (t *Table) BelowReplicas() []ShardRef {
	var out []ShardRef
	r := t.Replication()
	for _, gn := range t.GroupNames() {
		for i, s := range t.Groups[gn].Shards {
			if s.Owner != "" && t.liveMembers(s) < r {
				out = append(out, ShardRef{Group: gn, Index: i})
			}
		}
	}
	return out
}

// liveMembers counts the members of s's in-sync set, its owner included,
// on nodes that are not down.
func (t *Table) liveMembers(s Shard) int {
	up := func(name string) bool { n := t.Nodes[name]; return n != nil && n.Status != StatusDown }
	live := 0
	if up(s.Owner) {
		live++
	}
	for _, r := range s.Replicas {
		if r != s.Owner && up(r) {
			live++
		}
	}
	return live
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
// identity's shard index. It returns ErrUninitialized before Init and
// ErrUnknownKind (naming the kind) for a kind no node has published.
func (t *Table) RefOf(kind, key string) (ShardRef, error) {
	if t.ShardCount == 0 {
		return ShardRef{}, ErrUninitialized
	}
	g, ok := t.Kinds[kind]
	if !ok {
		return ShardRef{}, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
	}
	return ShardRef{Group: g, Index: ShardOf(kind, key, t.ShardCount)}, nil
}

// Eligible returns, sorted by name, the nodes that may receive new
// shards of group: status up, a state store that writes (no
// StoreFailing), a manifest that discharges every clause the group
// requires, and the group's kind hosted with the policy digest the
// cluster agrees on (Policy). A group that does not exist has none.
func (t *Table) Eligible(group string) []string {
	g, ok := t.Groups[group]
	if !ok {
		return nil
	}
	agreed := t.Policy(group).Digest
	var out []string
	for _, name := range t.NodeNames() {
		n := t.Nodes[name]
		if n.Status != StatusUp || n.StoreFailing != "" || !n.Manifest.Satisfies(g.Requires) {
			continue
		}
		if k, ok := n.Hosts(group); ok && k.Digest == agreed {
			out = append(out, name)
		}
	}
	return out
}

// PolicyView is what the table says about one kind's policy across the
// cluster: the digest the cluster agrees on, the nodes that publish it
// and those that publish another.
type PolicyView struct {
	Kind string `json:"kind"`
	// Digest is the agreed digest: the one published by the most live
	// (not down) nodes hosting the kind; on a tie, the one whose nodes
	// own the most of the kind's shards (so a two-node rolling upgrade
	// does not move everything), then the smallest.
	Digest string `json:"digest"`
	// Agree lists the live nodes hosting the kind with Digest, sorted.
	Agree []string `json:"agree,omitempty"`
	// Differ maps each live node hosting the kind with another digest to
	// that digest. They receive none of the kind's shards until they
	// publish the agreed one.
	Differ map[string]string `json:"differ,omitempty"`
}

// Policy returns the cluster's view of kind's policy digests. Nodes
// marked down do not vote: a node that died with an old policy does not
// hold back the survivors.
func (t *Table) Policy(kind string) PolicyView {
	v := PolicyView{Kind: kind}
	nodes := map[string][]string{} // digest → nodes
	for _, name := range t.NodeNames() {
		n := t.Nodes[name]
		if n.Status == StatusDown {
			continue
		}
		if k, ok := n.Hosts(kind); ok {
			nodes[k.Digest] = append(nodes[k.Digest], name)
		}
	}
	if len(nodes) == 0 {
		return v
	}
	// Most nodes first; only a tie (rare: a two-node upgrade, say) costs
	// a pass over the kind's shards.
	most := 0
	var tied []string
	for d, ns := range nodes {
		switch {
		case len(ns) > most:
			most, tied = len(ns), []string{d}
		case len(ns) == most:
			tied = append(tied, d)
		}
	}
	slices.Sort(tied)
	best := tied[0]
	if len(tied) > 1 {
		if g, ok := t.Groups[kind]; ok {
			owned := map[string]int{} // digest → shards its nodes own
			for _, s := range g.Shards {
				if n, ok := t.Nodes[s.Owner]; ok && n.Status != StatusDown {
					if k, ok := n.Hosts(kind); ok {
						owned[k.Digest]++
					}
				}
			}
			for _, d := range tied[1:] {
				if owned[d] > owned[best] {
					best = d
				}
			}
		}
	}
	v.Digest, v.Agree = best, nodes[best]
	for d, ns := range nodes {
		if d == best {
			continue
		}
		if v.Differ == nil {
			v.Differ = map[string]string{}
		}
		for _, n := range ns {
			v.Differ[n] = d
		}
	}
	return v
}

// KindNames returns the kinds with groups in sorted order.
func (t *Table) KindNames() []string {
	names := make([]string, 0, len(t.Kinds))
	for k := range t.Kinds {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
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
	// OwnerDown is true when the table marks the owner down: its shards
	// fail over once the fence delay has passed, and mail should wait
	// for that (ErrOwnerDown) instead of going to a node that is gone.
	OwnerDown bool
}

// Locate returns the location of kind/key. Errors: ErrUninitialized,
// ErrUnknownKind (no node published the kind), ErrNoEligibleNode (no
// node can host the kind's group) and ErrUnassigned
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
		if len(t.Eligible(ref.Group)) == 0 {
			return Location{Shard: ref}, fmt.Errorf("%w: kind %q", ErrNoEligibleNode, kind)
		}
		return Location{Shard: ref}, fmt.Errorf("%w: %s", ErrUnassigned, ref)
	}
	down := false
	if n, ok := t.Nodes[s.Owner]; ok && n.Status == StatusDown {
		down = true
	}
	return Location{Shard: ref, Owner: s.Owner, Epoch: s.Epoch, Moving: s.MovingTo != "", OwnerDown: down}, nil
}

// Unsettled says why the table is not at the planner's target, or ""
// when it is: a shard is moving, or is not on the node rendezvous hashing
// picks among its group's eligible nodes (a group with no eligible node
// counts as settled). Tests wait for "" before they reason about owners:
// every shard owned and none moving is not enough, since a kind's shards
// move between publications and between handoff batches.
func (t *Table) Unsettled() string {
	for _, gn := range t.GroupNames() {
		eligible := t.Eligible(gn)
		for i, s := range t.Groups[gn].Shards {
			ref := ShardRef{Group: gn, Index: i}
			if s.MovingTo != "" {
				return fmt.Sprintf("%s is moving from %q to %q", ref, s.Owner, s.MovingTo)
			}
			if len(eligible) > 0 {
				if want := Rendezvous(gn, i, eligible); s.Owner != want {
					return fmt.Sprintf("%s is on %q, its target is %q (eligible %v)", ref, s.Owner, want, eligible)
				}
			}
		}
	}
	return ""
}
