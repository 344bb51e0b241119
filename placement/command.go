package placement

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tempest-actors/tempest/manifest"
)

// Op names a command.
type Op string

// Commands. Every command is idempotent: applying it twice leaves the
// table as applying it once, so a proposal retried after an indeterminate
// raft.ErrLeadershipLost (which may still have committed) is harmless.
// Upserts are idempotent by nature; shard moves carry preconditions (the
// expected owner, epoch and target) that no longer hold once applied.
const (
	// OpInit fixes the shard count and creates the default group. A second
	// Init is ignored.
	OpInit Op = "init"
	// OpNode inserts or replaces a node entry (including its status).
	OpNode Op = "node"
	// OpStatus sets a node's status.
	OpStatus Op = "status"
	// OpRemove deletes a node that owns no shard and is not a move target.
	OpRemove Op = "remove"
	// OpKind maps a kind to the group of its requirements (creating the
	// group). A kind's requirements cannot change once recorded: its
	// identities would change group, and so owner, without a handoff.
	OpKind Op = "kind"
	// OpAssign sets owners directly (initial placement and failover of a
	// down node's shards): Owner From → To, Epoch+1.
	OpAssign Op = "assign"
	// OpBegin starts planned handoffs: MovingTo = To, epoch unchanged.
	OpBegin Op = "begin"
	// OpComplete finishes planned handoffs: Owner = To, Epoch+1.
	OpComplete Op = "complete"
	// OpAbort cancels planned handoffs: MovingTo cleared.
	OpAbort Op = "abort"
	// OpSync records a node's sync barrier nonce. A node whose lease
	// lapsed proposes one after regaining contact; once it has applied
	// its own nonce, its table holds everything committed before, so it
	// may trust the table again.
	OpSync Op = "sync"
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
	Op       Op                  `json:"op"`
	Shards   int                 `json:"shards,omitempty"`   // OpInit
	Node     *NodeInfo           `json:"node,omitempty"`     // OpNode
	Name     string              `json:"name,omitempty"`     // OpStatus, OpRemove, OpKind (kind name)
	Status   NodeStatus          `json:"status,omitempty"`   // OpStatus
	Requires []manifest.ClauseID `json:"requires,omitempty"` // OpKind
	Moves    []Move              `json:"moves,omitempty"`    // OpAssign, OpBegin, OpComplete, OpAbort
	Nonce    string              `json:"nonce,omitempty"`    // OpSync
}

const commandVersion = 1

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
		if t.ShardCount != 0 {
			return 0, 1, nil
		}
		t.ShardCount = c.Shards
		for _, g := range t.Groups { // kinds recorded before init (not possible via the shell)
			g.Shards = make([]Shard, c.Shards)
		}
		t.Groups[DefaultGroup] = &Group{Name: DefaultGroup, Shards: make([]Shard, c.Shards)}
		return 1, 0, nil

	case OpNode:
		if c.Node == nil || c.Node.Name == "" || c.Node.Status < StatusUp || c.Node.Status > StatusDown {
			return 0, 0, fmt.Errorf("%w: bad node entry", ErrBadCommand)
		}
		n := *c.Node
		n.Sync = ""
		if old, ok := t.Nodes[n.Name]; ok {
			n.Sync = old.Sync // only OpSync changes it
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

	case OpKind:
		if c.Name == "" {
			return 0, 0, fmt.Errorf("%w: kind without a name", ErrBadCommand)
		}
		req := normalizeClauses(c.Requires)
		gn := GroupName(req)
		if cur, ok := t.Kinds[c.Name]; ok || gn == DefaultGroup {
			if cur == gn {
				return 0, 1, nil
			}
			return 0, 0, fmt.Errorf("%w: kind %q is in group %q, not %q", ErrKindConflict, c.Name, cur, gn)
		}
		if _, ok := t.Groups[gn]; !ok {
			t.Groups[gn] = &Group{Name: gn, Requires: req, Shards: make([]Shard, t.ShardCount)}
		}
		t.Kinds[c.Name] = gn
		return 1, 0, nil

	case OpAssign, OpBegin, OpComplete, OpAbort:
		for _, m := range c.Moves {
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
				s.Owner, s.Epoch, s.MovingTo = m.To, s.Epoch+1, ""
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
				s.Owner, s.Epoch, s.MovingTo = m.To, s.Epoch+1, ""
			case OpAbort:
				if s.MovingTo == "" || s.MovingTo != m.To {
					skipped++
					continue
				}
				s.MovingTo = ""
			}
			applied++
		}
		return applied, skipped, nil
	}
	return 0, 0, fmt.Errorf("%w: unknown op %q", ErrBadCommand, c.Op)
}

func sameNode(a, b *NodeInfo) bool {
	return a.Name == b.Name && a.Addr == b.Addr && a.HTTPAddr == b.HTTPAddr &&
		a.Version == b.Version && a.Status == b.Status && a.Manifest.Digest() == b.Manifest.Digest()
}
