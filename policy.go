package tempest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
)

// KindPolicy is what a node does with one kind: its supervision policy
// (remedy, restart intensity, persistence, idle timeout, turn budget,
// required clauses, reentrancy, message tags) and its deadline policy
// (the default and the longest ask deadline, what happens at expiry). It
// is computed from the kind's effective options, after defaults, and
// published into the placement table as its Digest.
//
// Two nodes whose digests for a kind differ would treat the same identity
// differently (another remedy, another tag for the same message), so the
// cluster does not spread a kind across them: the nodes whose digest
// differs from the one most nodes publish receive none of its shards
// until they agree (see docs/placement.md, "Policy digests"). During a
// rolling upgrade that changes a kind's options, the upgraded nodes take
// over the kind only once they are the majority.
type KindPolicy struct {
	Kind string `json:"kind"`

	// Supervision.
	Remedy         string        `json:"remedy"`
	MaxRestarts    int           `json:"max_restarts"`
	RestartPeriod  time.Duration `json:"restart_period_ns"`
	BackoffInitial time.Duration `json:"backoff_initial_ns"`
	BackoffMax     time.Duration `json:"backoff_max_ns"`
	Persistence    string        `json:"persistence"`
	PersistTurns   int           `json:"persist_every_turns,omitempty"`
	PersistEvery   time.Duration `json:"persist_every_ns,omitempty"`
	IdleTimeout    time.Duration `json:"idle_timeout_ns"` // prospero.NeverIdle (-1): never
	TurnBudget     time.Duration `json:"turn_budget_ns"`
	MailboxDepth   int           `json:"mailbox_depth"`
	Reentrancy     string        `json:"reentrancy"`
	Requires       []string      `json:"requires,omitempty"`
	Messages       []PolicyTag   `json:"messages,omitempty"`

	// Deadlines.
	AskTimeout    time.Duration `json:"ask_timeout_ns"`     // of an ask whose context sets none
	MaxAskTimeout time.Duration `json:"max_ask_timeout_ns"` // a later deadline is clamped to this
	Expiry        string        `json:"expiry"`

	// Digest is the hex SHA-256 (first 16 bytes) of the fields above in
	// their JSON form; it is what the table compares.
	Digest string `json:"digest"`
}

// PolicyTag is one message of a kind: the wire tag and its BARE type
// name. A tag that means another type on another node is a different
// policy, so the digest catches a tag declared differently.
type PolicyTag struct {
	Tag  uint32 `json:"tag"`
	Name string `json:"name"`
}

// ExpiryDropQueued is the one expiry behaviour Tempest implements: an ask
// whose deadline passes before its turn starts is dropped and answered
// ErrDeadlineExceeded (on arrival and again at dequeue); a turn that has
// started runs to completion within the turn budget, and its late reply
// is discarded by the caller. An ask whose caller gives up before its
// deadline (a cancelled context) is withdrawn the same way: dropped if
// its turn has not started, on the owner's node too (CancelAsk).
const ExpiryDropQueued = "drop-queued"

// kindPolicy computes the policy of a registered kind. nodeBudget is the
// scheduler's turn budget, which applies when the kind sets none.
func kindPolicy(name string, k *kindInfo, nodeBudget time.Duration) KindPolicy {
	o := k.opts.KindOptions.WithDefaults()
	p := KindPolicy{
		Kind:           name,
		Remedy:         o.Remedy.String(),
		MaxRestarts:    o.MaxRestarts,
		RestartPeriod:  o.RestartPeriod,
		BackoffInitial: o.BackoffInitial,
		BackoffMax:     o.BackoffMax,
		Persistence:    o.Persistence.Mode.String(),
		PersistTurns:   o.Persistence.EveryTurns,
		PersistEvery:   o.Persistence.Every,
		IdleTimeout:    o.IdleTimeout,
		TurnBudget:     o.TurnBudget,
		MailboxDepth:   o.MailboxDepth,
		Reentrancy:     o.Reentrancy.String(),
		AskTimeout:     o.AskTimeout,
		MaxAskTimeout:  o.MaxAskTimeout,
		Expiry:         ExpiryDropQueued,
	}
	if p.TurnBudget == 0 {
		p.TurnBudget = nodeBudget
	}
	for _, c := range o.RequiredClauses {
		p.Requires = append(p.Requires, c.String())
	}
	slices.Sort(p.Requires)
	p.Requires = slices.Compact(p.Requires)
	for _, m := range k.opts.Messages {
		p.Messages = append(p.Messages, PolicyTag{Tag: m.Tag, Name: m.Name})
	}
	slices.SortFunc(p.Messages, func(a, b PolicyTag) int {
		switch {
		case a.Tag < b.Tag:
			return -1
		case a.Tag > b.Tag:
			return 1
		}
		return 0
	})
	b, _ := json.Marshal(p) // fixed field order, no maps: deterministic
	sum := sha256.Sum256(b)
	p.Digest = hex.EncodeToString(sum[:16])
	return p
}

// Policies returns the policy of every kind registered on this node,
// sorted by kind. Safe for concurrent use.
func (n *Node) Policies() []KindPolicy {
	defer n.lockIfNew()()
	return n.policies()
}

// policies is Policies for callers that hold n.mu or run after Start.
func (n *Node) policies() []KindPolicy {
	names := make([]string, 0, len(n.kinds))
	for name := range n.kinds {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]KindPolicy, 0, len(names))
	for _, name := range names {
		out = append(out, kindPolicy(name, n.kinds[name], n.cfg.Scheduler.TurnBudget))
	}
	return out
}

// kindSpecs are the kinds this node publishes to placement: names,
// required clauses, policy digests and deadline policies. The caller
// holds n.mu (Start).
func (n *Node) kindSpecs() []placement.KindSpec {
	ps := n.policies()
	out := make([]placement.KindSpec, 0, len(ps))
	for _, p := range ps {
		k := n.kinds[p.Kind]
		spec := placement.KindSpec{Name: p.Kind, Requires: slices.Clone(k.opts.RequiredClauses), Digest: p.Digest}
		// The ask timeouts go into the table only when they are not the
		// defaults, which a node that does not host the kind applies
		// anyway: a build from before they were published refuses a
		// table entry that carries them (deploy.md, Upgrades).
		if p.AskTimeout != actor.DefaultAskTimeout {
			spec.AskTimeout = p.AskTimeout
		}
		if p.MaxAskTimeout != prospero.DefaultMaxAskTimeout {
			spec.MaxAskTimeout = p.MaxAskTimeout
		}
		out = append(out, spec)
	}
	return out
}
