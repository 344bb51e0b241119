package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Op names a command.
type Op string

// Commands. Every command is idempotent: applying it twice leaves the
// table as applying it once, so a proposal retried after an indeterminate
// raft.ErrLeadershipLost (which may still have committed) is harmless.
// Upserts are idempotent by nature; shard moves carry preconditions (the
// expected owner, epoch and target) that no longer hold once applied.
const (
	// OpInit fixes the shard count (kinds get their groups from OpHosts). A second
	// Init is ignored.
	OpInit Op = "init"
	// OpNode inserts or replaces a node entry (including its status).
	OpNode Op = "node"
	// OpStatus sets a node's status.
	OpStatus Op = "status"
	// OpRemove deletes a node that owns no shard and is not a move target.
	OpRemove Op = "remove"
	// OpHosts replaces the kinds a node hosts (Name, Kinds), as the node
	// publishes them, and creates the group of every kind not seen
	// before, with the requirements the publishing node gives it. Node
	// upserts (OpNode) keep a node's kinds: only the node knows what it
	// registered, gossip carries at most the names.
	OpHosts Op = "hosts"
	// OpAssign sets owners directly (initial placement and failover of a
	// down node's shards): Owner From → To, Epoch+1. Command.Sets, when
	// given, holds each move's new in-sync replica set (To first); without
	// it the set is To alone.
	OpAssign Op = "assign"
	// OpBegin starts planned handoffs: MovingTo = To, epoch unchanged.
	OpBegin Op = "begin"
	// OpComplete finishes planned handoffs: Owner = To, Epoch+1. The new
	// owner heads the in-sync set; the old owner, which held every
	// committed record, stays in it as a follower, as do the others.
	OpComplete Op = "complete"
	// OpAbort cancels planned handoffs: MovingTo cleared, Epoch+1 (the
	// owner stays). A move is named by (shard, From, Epoch, To); without
	// the new epoch, a move begun again after the abort would bear the
	// aborted one's name, and what was still on its way for the aborted
	// one (a shipment of state read before the owner served again, its
	// confirmation, a complete) would be taken for the new one's.
	OpAbort Op = "abort-move"
	// opAbortKeepEpoch is an abort as builds from before OpAbort raised
	// the epoch wrote it: MovingTo cleared, the epoch kept. An entry of a
	// raft log such a build wrote is applied as it applied it, so that
	// nodes replaying it (from snapshots taken at different points) reach
	// the same table. Nothing proposes it any more.
	opAbortKeepEpoch Op = "abort"
	// OpSync records a node's sync barrier nonce. A node whose lease
	// lapsed proposes one after regaining contact; once it has applied
	// its own nonce, its table holds everything committed before, so it
	// may trust the table again.
	OpSync Op = "sync"
	// OpShrink removes follower To from the in-sync replica set of the
	// shard owned by From at Epoch. The owner proposes it before it
	// commits a record without that follower; the leader proposes it for
	// followers that are down or beyond the replica count. Removing a
	// follower never loses a committed record: every one left holds them.
	OpShrink Op = "shrink"
	// OpJoin adds follower To to the in-sync replica set of the shard
	// owned by From at Epoch. The owner proposes it once To holds a bulk
	// copy of the shard and every record streamed since.
	OpJoin Op = "join"
	// OpDataID records the data ID of node Name's data directory
	// (Table.DataIDs). The leader proposes it before it adds the node to
	// the raft configuration, and for servers without one. An empty
	// DataID forgets the name's (the leader's, once the name is neither a
	// raft server nor in gossip).
	OpDataID Op = "data-id"
	// OpStore records whether node Name's state store can write (Failing:
	// why not, or empty when its writes work). Only the node itself
	// proposes it; a node whose store fails is not eligible (Table.Eligible).
	OpStore Op = "store"
)

// Move is one shard change with its precondition: it applies only if the
// shard's current owner is From at epoch Epoch (and, for complete and
// abort, is moving to To).
type Move struct {
	Shard ShardRef `json:"s"`
	From  string   `json:"f,omitempty"`
	Epoch uint64   `json:"e,omitempty"`
	To    string   `json:"t,omitempty"`
}

// Command is one replicated change to the table.
//
// Encoding: a version byte (1) followed by the command's JSON. Go's JSON
// encoder writes struct fields in declaration order and sorts map keys,
// so the bytes are deterministic. The format moves to BARE (like every
// other Tempest wire format) later; the version byte makes that change
// detectable in old logs.
type Command struct {
	Op       Op         `json:"op"`
	Shards   int        `json:"shards,omitempty"`   // OpInit
	Replicas int        `json:"replicas,omitempty"` // OpInit (0: DefaultReplicas)
	Node     *NodeInfo  `json:"node,omitempty"`     // OpNode
	Name     string     `json:"name,omitempty"`     // OpStatus, OpRemove, OpSync, OpHosts, OpStore (node name)
	Status   NodeStatus `json:"status,omitempty"`   // OpStatus
	Kinds    []KindSpec `json:"kinds,omitempty"`    // OpHosts
	Moves    []Move     `json:"moves,omitempty"`    // OpAssign, OpBegin, OpComplete, OpAbort, OpShrink, OpJoin
	Sets     [][]string `json:"sets,omitempty"`     // OpAssign: Sets[i] is Moves[i]'s new replica set
	Nonce    string     `json:"nonce,omitempty"`    // OpSync
	DataID   string     `json:"data_id,omitempty"`  // OpDataID
	Failing  string     `json:"failing,omitempty"`  // OpStore
}

const commandVersion = 1

// maxReplicas bounds a replica set's size.
const maxReplicas = 7

// maxFailingLen bounds OpStore's reason, kept in every table copy.
const maxFailingLen = 256

// maxCommandSize bounds a decoded command; a whole-table reassignment of
// 1024 shards is well below it.
const maxCommandSize = 8 << 20

// Encode returns the command's log bytes.
func (c Command) Encode() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(commandVersion)
	if err := json.NewEncoder(&buf).Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeCommand parses bytes written by Encode. It rejects unknown
// versions, unknown fields, trailing data and oversized input.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if len(b) == 0 || b[0] != commandVersion {
		return c, fmt.Errorf("%w: unknown command version", ErrBadCommand)
	}
	if len(b) > maxCommandSize {
		return c, fmt.Errorf("%w: %d bytes", ErrBadCommand, len(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	if dec.More() {
		return c, fmt.Errorf("%w: trailing data", ErrBadCommand)
	}
	return c, nil
}

// Result is what applying a command returned.
type Result struct {
	// Version is the table version after the command.
	Version uint64
	// Applied and Skipped count the moves (or, for other commands, 1 or
	// 0) that took effect or whose precondition no longer held.
	Applied, Skipped int
	// Err is set when the command was invalid; the table is unchanged.
	Err error
}

// Apply applies c to t deterministically and returns what happened. An
// invalid command changes nothing and reports why in Result.Err; it is
// not a reason to stop the state machine, since every replica rejects it
// identically.
func (t *Table) Apply(c Command) Result {
	applied, skipped, err := t.apply(c)
	if err == nil && applied > 0 {
		t.Version++
	}
	return Result{Version: t.Version, Applied: applied, Skipped: skipped, Err: err}
}

func one(changed bool) (int, int, error) {
	if changed {
		return 1, 0, nil
	}
	return 0, 1, nil
}

func (t *Table) apply(c Command) (applied, skipped int, err error) {
	switch c.Op {
	case OpInit:
		if c.Shards <= 0 {
			return 0, 0, fmt.Errorf("%w: init with %d shards", ErrBadCommand, c.Shards)
		}
		if c.Replicas < 0 || c.Replicas > maxReplicas {
			return 0, 0, fmt.Errorf("%w: init with %d replicas", ErrBadCommand, c.Replicas)
		}
		if t.ShardCount != 0 {
			return 0, 1, nil
		}
		t.ShardCount = c.Shards
		t.ReplicaCount = c.Replicas
		for _, g := range t.Groups { // kinds published before init
			g.Shards = make([]Shard, c.Shards)
		}
		return 1, 0, nil

	case OpNode:
		if c.Node == nil || c.Node.Name == "" || c.Node.Status < StatusUp || c.Node.Status > StatusDown {
			return 0, 0, fmt.Errorf("%w: bad node entry", ErrBadCommand)
		}
		n := *c.Node
		n.Sync, n.Kinds, n.StoreFailing = "", nil, ""
		if old, ok := t.Nodes[n.Name]; ok {
			n.Sync, n.Kinds, n.StoreFailing = old.Sync, old.Kinds, old.StoreFailing // only OpSync, OpHosts and OpStore change them
			if sameNode(old, &n) {
				return 0, 1, nil
			}
		}
		t.Nodes[n.Name] = &n
		return 1, 0, nil

	case OpStatus:
		if c.Status < StatusUp || c.Status > StatusDown {
			return 0, 0, fmt.Errorf("%w: bad status %d", ErrBadCommand, c.Status)
		}
		n, ok := t.Nodes[c.Name]
		if !ok {
			return 0, 1, nil
		}
		changed := n.Status != c.Status
		n.Status = c.Status
		return one(changed)

	case OpSync:
		if c.Nonce == "" {
			return 0, 0, fmt.Errorf("%w: sync without a nonce", ErrBadCommand)
		}
		n, ok := t.Nodes[c.Name]
		if !ok {
			return 0, 1, nil
		}
		changed := n.Sync != c.Nonce
		n.Sync = c.Nonce
		return one(changed)

	case OpStore:
		if len(c.Failing) > maxFailingLen {
			return 0, 0, fmt.Errorf("%w: store failure of %d bytes", ErrBadCommand, len(c.Failing))
		}
		n, ok := t.Nodes[c.Name]
		if !ok {
			return 0, 1, nil
		}
		changed := n.StoreFailing != c.Failing
		n.StoreFailing = c.Failing
		return one(changed)

	case OpDataID:
		if c.Name == "" {
			return 0, 0, fmt.Errorf("%w: data-id without a name", ErrBadCommand)
		}
		old, had := t.DataIDs[c.Name]
		if c.DataID == "" {
			delete(t.DataIDs, c.Name)
			return one(had)
		}
		t.DataIDs[c.Name] = c.DataID
		return one(old != c.DataID)

	case OpRemove:
		if _, ok := t.Nodes[c.Name]; !ok {
			return 0, 1, nil
		}
		for _, g := range t.Groups {
			for _, s := range g.Shards {
				if s.Owner == c.Name || s.MovingTo == c.Name {
					return 0, 1, nil // still referenced: refuse quietly, the leader retries later
				}
			}
		}
		delete(t.Nodes, c.Name)
		return 1, 0, nil

	case OpHosts:
		kinds, err := normalizeKinds(c.Kinds)
		if err != nil {
			return 0, 0, err
		}
		n, ok := t.Nodes[c.Name]
		if !ok {
			return 0, 1, nil // the leader adds it first; the node publishes again
		}
		changed := !slices.EqualFunc(n.Kinds, kinds, sameKind)
		n.Kinds = kinds
		for _, k := range kinds {
			if _, ok := t.Kinds[k.Name]; ok {
				continue
			}
			t.Groups[k.Name] = &Group{Name: k.Name, Requires: k.Requires, Shards: make([]Shard, t.ShardCount)}
			t.Kinds[k.Name] = k.Name
			changed = true
		}
		return one(changed)

	case OpAssign, OpBegin, OpComplete, OpAbort, opAbortKeepEpoch, OpShrink, OpJoin:
		if c.Sets != nil && (c.Op != OpAssign || len(c.Sets) != len(c.Moves)) {
			return 0, 0, fmt.Errorf("%w: %d replica sets for %d moves of %s", ErrBadCommand, len(c.Sets), len(c.Moves), c.Op)
		}
		for i, m := range c.Moves {
			g, ok := t.Groups[m.Shard.Group]
			if !ok || m.Shard.Index < 0 || m.Shard.Index >= len(g.Shards) {
				skipped++
				continue
			}
			s := &g.Shards[m.Shard.Index]
			if s.Owner != m.From || s.Epoch != m.Epoch {
				skipped++
				continue
			}
			switch c.Op {
			case OpAssign:
				if m.To == s.Owner && s.MovingTo == "" {
					skipped++
					continue
				}
				var set []string
				if c.Sets != nil {
					set = c.Sets[i]
				}
				s.Owner, s.Epoch, s.MovingTo = m.To, s.Epoch+1, ""
				s.Replicas = nil
				if m.To != "" {
					s.Replicas = replicaSet(m.To, set)
				}
			case OpBegin:
				if s.MovingTo != "" || m.To == "" || m.To == s.Owner {
					skipped++
					continue
				}
				s.MovingTo = m.To
			case OpComplete:
				if s.MovingTo == "" || s.MovingTo != m.To {
					skipped++
					continue
				}
				old := s.Replicas
				if len(old) == 0 && s.Owner != "" {
					old = []string{s.Owner}
				}
				s.Owner, s.Epoch, s.MovingTo = m.To, s.Epoch+1, ""
				s.Replicas = replicaSet(m.To, old)
			case OpAbort, opAbortKeepEpoch:
				if s.MovingTo == "" || s.MovingTo != m.To {
					skipped++
					continue
				}
				s.MovingTo = ""
				if c.Op == OpAbort {
					s.Epoch++
				}
			case OpShrink:
				if m.To == "" || m.To == s.Owner || !slices.Contains(s.Replicas, m.To) {
					skipped++
					continue
				}
				s.Replicas = slices.DeleteFunc(slices.Clone(s.Replicas), func(r string) bool { return r == m.To })
			case OpJoin:
				if m.To == "" || s.Owner == "" || slices.Contains(s.Replicas, m.To) || m.To == s.Owner {
					skipped++
					continue
				}
				if len(s.Replicas) == 0 {
					s.Replicas = []string{s.Owner}
				}
				s.Replicas = append(slices.Clone(s.Replicas), m.To)
			}
			applied++
		}
		return applied, skipped, nil
	}
	return 0, 0, fmt.Errorf("%w: unknown op %q", ErrBadCommand, c.Op)
}

// replicaSet returns owner followed by the other members of set, without
// duplicates or empty names, in set order.
func replicaSet(owner string, set []string) []string {
	out := []string{owner}
	for _, r := range set {
		if r != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// normalizeKinds validates a published kind list and returns it sorted,
// with each kind's requirements normalised.
func normalizeKinds(in []KindSpec) ([]KindSpec, error) {
	out := make([]KindSpec, len(in))
	for i, k := range in {
		if k.Name == "" {
			return nil, fmt.Errorf("%w: kind without a name", ErrBadCommand)
		}
		if k.AskTimeout < 0 || k.MaxAskTimeout < 0 {
			return nil, fmt.Errorf("%w: kind %q with ask timeouts %v, %v", ErrBadCommand, k.Name, k.AskTimeout, k.MaxAskTimeout)
		}
		out[i] = KindSpec{Name: k.Name, Requires: normalizeClauses(k.Requires), Digest: k.Digest,
			AskTimeout: k.AskTimeout, MaxAskTimeout: k.MaxAskTimeout}
		if len(out[i].Requires) == 0 {
			out[i].Requires = nil
		}
	}
	slices.SortFunc(out, func(a, b KindSpec) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, fmt.Errorf("%w: kind %q listed twice", ErrBadCommand, out[i].Name)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, nil
}

// Forwardable returns nil if node from may have c applied by forwarding
// it to the leader, by table t, and an error wrapping ErrNotForwardable
// otherwise. A node proposes changes of its own: its entry (the status
// it has in t kept), its kinds, its sync barrier, its store's health,
// leaving (draining) and coming back from it, and the replica sets of the shards it owns (a
// follower removed or added) or follows (itself removed). Initial
// placement, moves, failovers and other nodes' entries are the leader's
// own to propose, and a node t does not hold may forward nothing: it
// enters the table through the leader, once it proved its name.
func Forwardable(t *Table, from string, c Command) error {
	self, ok := t.Nodes[from]
	if !ok {
		return fmt.Errorf("%w: %q is not in the table", ErrNotForwardable, from)
	}
	each := func(ok func(Move) bool) bool {
		for _, m := range c.Moves {
			if !ok(m) {
				return false
			}
		}
		return len(c.Moves) > 0
	}
	switch c.Op {
	case OpNode:
		if c.Node != nil && c.Node.Name == from && c.Node.Status == self.Status {
			return nil
		}
	case OpStatus:
		if c.Name == from && (c.Status == StatusDraining || (c.Status == StatusUp && self.Status == StatusDraining)) {
			return nil
		}
	case OpHosts, OpSync, OpStore:
		if c.Name == from {
			return nil
		}
	case OpShrink:
		if each(func(m Move) bool { return m.From == from || m.To == from }) {
			return nil
		}
	case OpJoin:
		if each(func(m Move) bool { return m.From == from }) {
			return nil
		}
	}
	return fmt.Errorf("%w: %q may not forward %s", ErrNotForwardable, from, c.Op)
}

func sameKind(a, b KindSpec) bool {
	return a.Name == b.Name && a.Digest == b.Digest && slices.Equal(a.Requires, b.Requires) &&
		a.AskTimeout == b.AskTimeout && a.MaxAskTimeout == b.MaxAskTimeout
}

func sameNode(a, b *NodeInfo) bool {
	return a.Name == b.Name && a.Addr == b.Addr && a.HTTPAddr == b.HTTPAddr &&
		a.Version == b.Version && a.Status == b.Status && a.Manifest.Digest() == b.Manifest.Digest()
}
