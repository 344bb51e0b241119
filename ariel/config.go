package ariel

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// Config configures a Scheduler. Zero fields take the defaults of
// DefaultConfig. The fields are plain numbers so that the node's assumption
// manifest can report them as the capacities the scheduler enforces.
type Config struct {
	// Node is this node's name; it appears in the references of spawned
	// actors. Default "local".
	Node string
	// Workers is the number of pool workers. Default GOMAXPROCS.
	Workers int
	// MailboxCapacity is the default bound of a mailbox (user mail). A send
	// to a full mailbox is refused with actor.ErrRefused (see Refuse).
	// Default 1024.
	MailboxCapacity int
	// Refuse, when set, gives the scheduler's refusals of mail at
	// admission their form, whoever sent it (program code, an actor's
	// tell or ask): a full mailbox's (actor.ErrRefused) and that of a
	// reference pinned to an incarnation other than its actor's
	// (actor.ErrActorTerminated). It is called once for each at New, and
	// what it returns must match the sentinel it was given. A clustered
	// node gives them the form a peer's refusal takes, so that a sender
	// sees the same error whichever node owns the recipient.
	Refuse func(sentinel error) error
	// FairnessMessages ends a drain cycle after this many messages; the
	// actor then goes to the back of the shared queue. Default 64.
	FairnessMessages int
	// FairnessTime ends a drain cycle after this long (the clock is read
	// only every few messages, so a cycle may run slightly over). Default
	// 200µs.
	FairnessTime time.Duration
	// TurnBudget is the longest a single turn may run before the watchdog
	// abandons it (BudgetExhausted) and replaces the worker; a kind may
	// set its own (SetTurnBudget). Default 5s.
	TurnBudget time.Duration
	// MaxReplacements caps the replacement workers running beside
	// abandoned goroutines that have not returned yet: the pool's
	// goroutines beyond Workers never exceed it. Past the cap a stuck
	// worker is not replaced, the pool runs below its size and Stats
	// reports Degraded until stuck goroutines return. Default 64.
	MaxReplacements int
	// SpinIterations is how many times an idle worker looks for work before
	// it parks. Default 64.
	SpinIterations int
	// RecruitWork is how much measured work the groups of mail a worker
	// holds for actors it seized (a fan-out to idle actors) must still
	// carry for it to share them with idle workers, which then claim
	// and run whole groups beside it (Stats.Shares, Stats.Recruited).
	// Default 20µs; negative: never share.
	RecruitWork time.Duration
	// Simulated selects the deterministic scheduler: one goroutine, seeded
	// choice among ready actors, a virtual clock. Workers is ignored.
	Simulated bool
	// Seed seeds the simulated scheduler's choices.
	Seed uint64

	// Clock is the time source for timers, deadlines and budgets. Default
	// the real clock; in simulated mode it must be nil or a *SimClock
	// (default a new SimClock).
	Clock Clock
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
	// Faults receives panics and exhausted turn budgets. Default: log at
	// error level and count.
	Faults FaultHook
	// Activator is rung when mail arrives for an inactive cell. Default:
	// activate virtual actors from the factory registered for their kind.
	Activator Activator
	// Lapsed, when set, is called on a worker when user mail of an actor
	// of a leased kind (SetLeased) is due but the scheduler's lease
	// (SetLease) has run out. That mail stays in the mailbox, not run.
	// Lapsed should renew the lease (SetLease) or passivate the actor
	// (Passivate: it then goes ahead of the mail, even of mail that
	// waited for the activation); until one of them happens, or more
	// mail arrives, the actor waits. It must not block.
	Lapsed func(ref actor.Ref)
	// Vet, when set, sees every user message sent to a virtual actor by
	// program code (Tell, Ask) or in a turn (Context.Tell, Context.Ask),
	// and every reply (Context.Reply, a Replier) with the replying actor as to,
	// before routing. It returns the message to send instead (a
	// normalised form: the same for every sender, local or remote) or an
	// error that refuses the send like a failed admission. Timer messages
	// an actor sends itself are not vetted. It must be fast and safe for
	// concurrent use.
	Vet func(to actor.Ref, msg any) (any, error)
	// VetReply, when set, is Vet for the replies of virtual actors (with
	// the replying actor as from) instead of Vet: a reply is not a
	// message to the replier.
	VetReply func(from actor.Ref, reply any) (any, error)
	// VetError, when set, sees every error a virtual actor replies
	// (Context.ReplyError, a Replier), and the error that fails the
	// replies of its turns whose held outputs were not released (Hold),
	// with the replying actor as from, before it reaches the asker, and returns the error to deliver
	// instead (for example the form the error has once it crossed the
	// wire, so that a local asker sees what a remote one does). It must
	// be fast and safe for concurrent use.
	VetError func(from actor.Ref, err error) error
	// ForeignAskTimeouts, when set, gives the deadline policy of a kind
	// that is not registered on this node (see SetAskTimeouts): the
	// default and the maximum ask timeout its hosts publish, ok false when
	// none is known. Asks made here to such a kind then get the same
	// deadline as on a node that hosts it. It must be fast and safe for
	// concurrent use.
	ForeignAskTimeouts func(kind string) (def, max time.Duration, ok bool)
	// Latency, when set, observes per-message queueing and handler time.
	// It makes every message read the clock twice; leave it nil on hot
	// paths that do not need it.
	Latency LatencyObserver
	// Tracer, when set, is told the timestamps of traced asks and tells
	// (see TurnTracer, WithTrace, TellTraced). Untraced mail costs one clock read per batch
	// a worker takes; with Tracer nil, nothing.
	Tracer TurnTracer
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Node:             "local",
		Workers:          runtime.GOMAXPROCS(0),
		MailboxCapacity:  1024,
		FairnessMessages: 64,
		FairnessTime:     200 * time.Microsecond,
		TurnBudget:       5 * time.Second,
		MaxReplacements:  64,
		SpinIterations:   64,
		RecruitWork:      20 * time.Microsecond,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Node == "" {
		c.Node = d.Node
	}
	if c.Workers == 0 {
		c.Workers = d.Workers
	}
	if c.MailboxCapacity == 0 {
		c.MailboxCapacity = d.MailboxCapacity
	}
	if c.FairnessMessages == 0 {
		c.FairnessMessages = d.FairnessMessages
	}
	if c.FairnessTime == 0 {
		c.FairnessTime = d.FairnessTime
	}
	if c.TurnBudget == 0 {
		c.TurnBudget = d.TurnBudget
	}
	if c.SpinIterations == 0 {
		c.SpinIterations = d.SpinIterations
	}
	if c.RecruitWork == 0 {
		c.RecruitWork = d.RecruitWork
	}
	if c.MaxReplacements == 0 {
		c.MaxReplacements = d.MaxReplacements
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// maxMailbox bounds MailboxCapacity (the ring indexes with int32).
const maxMailbox = 1 << 24

// MaxWorkers bounds Config.Workers.
const MaxWorkers = 4096

// maxReplacements bounds MaxReplacements.
const maxReplacements = 1 << 16

// Validate reports a configuration the scheduler cannot run with. Zero
// values are valid (they mean "default").
func (c Config) Validate() error {
	var errs []error
	if c.Workers < 0 || c.Workers > MaxWorkers {
		errs = append(errs, fmt.Errorf("ariel: Workers %d out of range [1,%d]", c.Workers, MaxWorkers))
	}
	if c.MailboxCapacity < 0 || c.MailboxCapacity > maxMailbox {
		errs = append(errs, fmt.Errorf("ariel: MailboxCapacity %d out of range [1,%d]", c.MailboxCapacity, maxMailbox))
	}
	if c.Refuse != nil {
		for _, s := range []error{actor.ErrRefused, actor.ErrActorTerminated} {
			if r := c.Refuse(s); !errors.Is(r, s) {
				errs = append(errs, fmt.Errorf("ariel: Refuse(%v) = %v, which does not match it", s, r))
			}
		}
	}
	if c.FairnessMessages < 0 {
		errs = append(errs, fmt.Errorf("ariel: FairnessMessages %d is negative", c.FairnessMessages))
	}
	if c.FairnessTime < 0 || c.TurnBudget < 0 {
		errs = append(errs, errors.New("ariel: FairnessTime and TurnBudget must not be negative"))
	}
	if c.Tracer != nil && !tracingBuilt {
		errs = append(errs, errors.New("ariel: Config.Tracer is set, but this build has no tracing (tag tempest_notrace)"))
	}
	if c.MaxReplacements < 0 || c.MaxReplacements > maxReplacements {
		errs = append(errs, fmt.Errorf("ariel: MaxReplacements %d out of range [1,%d]", c.MaxReplacements, maxReplacements))
	}
	if c.SpinIterations < 0 {
		errs = append(errs, fmt.Errorf("ariel: SpinIterations %d is negative", c.SpinIterations))
	}
	if c.Simulated && c.Clock != nil {
		if _, ok := c.Clock.(*SimClock); !ok {
			errs = append(errs, errors.New("ariel: a simulated scheduler needs a *SimClock"))
		}
	}
	return errors.Join(errs...)
}
