package prospero

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
)

// ErrUnknownKind: no kind of that name is registered on this node. A
// sender addressing an unknown kind gets this error. It is the actor
// package's sentinel, so callers may test either name.
var ErrUnknownKind = actor.ErrUnknownKind

// ErrInvalidKindOptions: KindOptions.Validate found a bad field.
var ErrInvalidKindOptions = errors.New("prospero: invalid kind options")

// ErrKindExists: a kind of that name is already registered.
var ErrKindExists = errors.New("prospero: kind already registered")

// Remedy is what Prospero does to an actor after a fault (a panic or a
// BudgetExhausted turn).
type Remedy uint8

const (
	// Restart re-mints identity: the incarnation increases and the actor
	// starts again from its last state at rest (or empty). References
	// pinned to the old incarnation read ActorTerminated.
	Restart Remedy = iota
	// Retire releases the actor and its state at rest as a unit. The next
	// message to its kind/key activates a new incarnation with empty state.
	Retire
	// Hydrate reloads the last state at rest and keeps identity:
	// references stay Valid.
	Hydrate
)

var remedyNames = [...]string{"Restart", "Retire", "Hydrate"}

func (r Remedy) String() string {
	if int(r) < len(remedyNames) {
		return remedyNames[r]
	}
	return fmt.Sprintf("Remedy(%d)", r)
}

// PersistMode says when a kind's state is written at rest.
type PersistMode uint8

const (
	// PersistNone: the kind keeps no state at rest. A passivated actor
	// comes back empty (its identity and incarnation are kept).
	PersistNone PersistMode = iota
	// PersistOnPassivation writes state when the actor is passivated and
	// on graceful shutdown.
	PersistOnPassivation
	// PersistEveryTurn also writes after every turn that handled a
	// message: nothing acknowledged is lost to a crash.
	PersistEveryTurn
	// PersistPeriodic also writes after every EveryTurns turns or when
	// Every has passed since the last write, whichever comes first.
	PersistPeriodic
)

var persistNames = [...]string{"None", "OnPassivation", "EveryTurn", "Periodic"}

func (m PersistMode) String() string {
	if int(m) < len(persistNames) {
		return persistNames[m]
	}
	return fmt.Sprintf("PersistMode(%d)", m)
}

// Persistence is a kind's policy for writing state at rest.
type Persistence struct {
	Mode PersistMode
	// EveryTurns (PersistPeriodic): write after this many turns; 0 means
	// no turn-count trigger. Set with another mode, it is refused
	// (ErrInvalidKindOptions), not ignored.
	EveryTurns int
	// Every (PersistPeriodic): write when this long has passed since the
	// last write; 0 means no time trigger. Likewise refused with another
	// mode.
	Every time.Duration
}

// Persistent reports whether the policy writes state at rest at all.
func (p Persistence) Persistent() bool { return p.Mode != PersistNone }

// KindOptions configure one kind of virtual actor. The zero value of
// each field means its default; see DefaultKindOptions.
type KindOptions struct {
	// MailboxDepth bounds each activation's mailbox (default 1024).
	MailboxDepth int
	// IdleTimeout passivates an actor that handled no message for this
	// long (default 10 min). NeverIdle disables idle passivation.
	IdleTimeout time.Duration
	// TurnBudget is the longest a turn may run before it is
	// BudgetExhausted, a fault: the host abandons the turn and the Remedy
	// applies at once (default 0: the node scheduler's turn budget, 5 s
	// unless configured).
	TurnBudget time.Duration
	// Remedy applied on a fault (default Restart).
	Remedy Remedy
	// MaxRestarts within RestartPeriod (defaults 3 and 5 s): one more
	// fault inside the window escalates the remedy to Retire and is
	// reported with an Escalated event. Hydrate remedies count too.
	MaxRestarts   int
	RestartPeriod time.Duration
	// BackoffInitial and BackoffMax shape the delay before a restart: the
	// first restart in a window is immediate, the n-th waits
	// BackoffInitial·2^(n-2), capped at BackoffMax (defaults 10 ms, 1 s).
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// Persistence says when state is written at rest (default none).
	Persistence Persistence
	// RequiredClauses must be Discharged by a node's manifest for it to
	// host this kind (used by placement).
	RequiredClauses []manifest.ClauseID
	// Reentrancy says what the kind's actors may handle while they wait
	// for the reply to an ask made in a turn (default actor.Reentrant).
	Reentrancy actor.Reentrancy
	// AskTimeout is the deadline of an ask to the kind's actors whose
	// caller sets none (default actor.DefaultAskTimeout, 5 s, or
	// MaxAskTimeout when that is shorter), on every
	// node of a cluster: one that does not register the kind applies
	// what its hosts publish in the placement table.
	AskTimeout time.Duration
	// MaxAskTimeout is the longest an ask to the kind's actors may wait
	// (default DefaultMaxAskTimeout, 5 min). An ask whose caller sets a
	// later deadline is clamped to it, not refused: it fails with
	// ErrDeadlineExceeded once MaxAskTimeout has passed. The caller's
	// node clamps it (with the policy the kind's hosts publish when it
	// does not register the kind), and the owner clamps what arrives
	// from other nodes, so the maximum holds either way.
	MaxAskTimeout time.Duration
}

// DefaultMaxAskTimeout is KindOptions.MaxAskTimeout's default: the
// longest ask the HTTP gateway accepts too.
const DefaultMaxAskTimeout = 5 * time.Minute

// NeverIdle, as KindOptions.IdleTimeout, disables idle passivation.
const NeverIdle time.Duration = -1

// DefaultKindOptions returns the documented defaults.
func DefaultKindOptions() KindOptions {
	return KindOptions{
		MailboxDepth:   1024,
		IdleTimeout:    10 * time.Minute,
		Remedy:         Restart,
		MaxRestarts:    3,
		RestartPeriod:  5 * time.Second,
		BackoffInitial: 10 * time.Millisecond,
		BackoffMax:     time.Second,
	}
}

// WithDefaults returns o with every zero field replaced by its default.
func (o KindOptions) WithDefaults() KindOptions {
	d := DefaultKindOptions()
	if o.MailboxDepth == 0 {
		o.MailboxDepth = d.MailboxDepth
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = d.IdleTimeout
	}
	if o.MaxRestarts == 0 {
		o.MaxRestarts = d.MaxRestarts
	}
	if o.RestartPeriod == 0 {
		o.RestartPeriod = d.RestartPeriod
	}
	if o.BackoffInitial == 0 {
		o.BackoffInitial = d.BackoffInitial
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = d.BackoffMax
	}
	if o.AskTimeout == 0 {
		o.AskTimeout = actor.DefaultAskTimeout
		if o.MaxAskTimeout > 0 {
			o.AskTimeout = min(o.AskTimeout, o.MaxAskTimeout)
		}
	}
	if o.MaxAskTimeout == 0 {
		o.MaxAskTimeout = DefaultMaxAskTimeout
	}
	o.RequiredClauses = slices.Clone(o.RequiredClauses)
	return o
}

// Validate reports ErrInvalidKindOptions for negative sizes or
// durations, unknown enum values and inconsistent back-off. Zero fields
// are valid (they mean the default).
func (o KindOptions) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidKindOptions}, args...)...)
	}
	switch {
	case o.MailboxDepth < 0:
		return bad("MailboxDepth %d < 0", o.MailboxDepth)
	case o.IdleTimeout < 0 && o.IdleTimeout != NeverIdle:
		return bad("IdleTimeout %v < 0 (use NeverIdle)", o.IdleTimeout)
	case o.TurnBudget < 0:
		return bad("TurnBudget %v < 0", o.TurnBudget)
	case o.Remedy > Hydrate:
		return bad("unknown remedy %v", o.Remedy)
	case o.Reentrancy > actor.NonReentrant:
		return bad("unknown reentrancy %v", o.Reentrancy)
	case o.MaxRestarts < 0:
		return bad("MaxRestarts %d < 0", o.MaxRestarts)
	case o.RestartPeriod < 0:
		return bad("RestartPeriod %v < 0", o.RestartPeriod)
	case o.BackoffInitial < 0 || o.BackoffMax < 0:
		return bad("negative back-off")
	case o.BackoffInitial > 0 && o.BackoffMax > 0 && o.BackoffMax < o.BackoffInitial:
		return bad("BackoffMax %v < BackoffInitial %v", o.BackoffMax, o.BackoffInitial)
	case o.AskTimeout < 0 || o.MaxAskTimeout < 0:
		return bad("negative ask timeout")
	case o.MaxAskTimeout > 0 && o.AskTimeout > o.MaxAskTimeout:
		return bad("AskTimeout %v > MaxAskTimeout %v", o.AskTimeout, o.MaxAskTimeout)
	case o.MaxAskTimeout == 0 && o.AskTimeout > DefaultMaxAskTimeout:
		return bad("AskTimeout %v > the default MaxAskTimeout %v: set MaxAskTimeout", o.AskTimeout, DefaultMaxAskTimeout)
	case o.Persistence.Mode > PersistPeriodic:
		return bad("unknown persistence mode %v", o.Persistence.Mode)
	case o.Persistence.EveryTurns < 0 || o.Persistence.Every < 0:
		return bad("negative persistence interval")
	case o.Persistence.Mode == PersistPeriodic && o.Persistence.EveryTurns == 0 && o.Persistence.Every == 0:
		return bad("PersistPeriodic needs EveryTurns or Every")
	case o.Persistence.Mode != PersistPeriodic && (o.Persistence.EveryTurns != 0 || o.Persistence.Every != 0):
		// Another mode would ignore them: a kind configured to persist
		// every 5 turns that persisted only on passivation would lose
		// what its author meant to keep.
		return bad("EveryTurns and Every apply to PersistPeriodic only, not to %v", o.Persistence.Mode)
	}
	for _, c := range o.RequiredClauses {
		if int(c) >= len(manifest.Clauses) {
			return bad("unknown clause %v", c)
		}
	}
	return nil
}

// Kind is a registered kind: its name and its options with defaults
// applied. A Kind is immutable after registration.
type Kind struct {
	Name    string
	Options KindOptions
}

// Registry maps kind names to kinds. It is safe for concurrent use;
// lookups take a read lock only.
type Registry struct {
	mu    sync.RWMutex
	kinds map[string]*Kind
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{kinds: make(map[string]*Kind)} }

// Register validates opts, applies defaults and adds the kind.
// Errors: ErrInvalidKindOptions, ErrInvalidIdentity (bad name),
// ErrKindExists.
func (r *Registry) Register(name string, opts KindOptions) (*Kind, error) {
	if err := (Identity{Kind: name, Key: "-"}).Validate(); err != nil {
		return nil, fmt.Errorf("kind name %q: %w", name, err)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("kind %q: %w", name, err)
	}
	k := &Kind{Name: name, Options: opts.WithDefaults()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.kinds[name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrKindExists, name)
	}
	r.kinds[name] = k
	return k, nil
}

// Lookup returns the kind called name, or an error wrapping
// ErrUnknownKind.
func (r *Registry) Lookup(name string) (*Kind, error) {
	r.mu.RLock()
	k, ok := r.kinds[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKind, name)
	}
	return k, nil
}

// Names returns the registered kind names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.kinds))
	for n := range r.kinds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
