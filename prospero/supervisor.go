package prospero

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/clock"
)

// Persistent is implemented by actors of kinds that keep state at rest.
// Both methods are called with no turn of the actor running:
// UnmarshalState before its first turn, MarshalState inside its final
// Passivating turn (or right after a turn, for turn-driven policies).
type Persistent interface {
	// MarshalState returns the actor's state, typically BARE-encoded.
	MarshalState() ([]byte, error)
	// UnmarshalState restores state written by MarshalState.
	UnmarshalState([]byte) error
}

// marshalState is p.MarshalState with a panic in it an error matching
// actor.ErrPanicked: it runs on the supervisor's goroutines and a
// worker's, where a panic would end the process or leave a passivation
// unfinished, and it fails as a MarshalState error does.
func marshalState(p Persistent) (state []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			state, err = nil, fmt.Errorf("%w: in MarshalState: %v", actor.ErrPanicked, r)
		}
	}()
	return p.MarshalState()
}

// unmarshalState is p.UnmarshalState with a panic in it an error
// matching actor.ErrPanicked, which fails the load as an error would.
func unmarshalState(p Persistent, b []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: in UnmarshalState: %v", actor.ErrPanicked, r)
		}
	}()
	return p.UnmarshalState(b)
}

// Host is what the supervisor needs from the node's scheduler. The
// scheduler owns each identity's mailbox (which exists before the actor
// does) and rings the supervisor's Ring when mail arrives for an
// identity with no actor attached. Methods must not block and must not
// call back into the supervisor synchronously.
type Host interface {
	// Attach gives the mailbox of ref (pinned to the incarnation the
	// activation runs under) the actor a. a receives actor.Started as
	// its first turn, then the mail that waited, in order.
	Attach(ref actor.Ref, a actor.Actor) error
	// Restart replaces the attached actor value of ref by a between two
	// turns and re-mints the identity: afterwards the host's incarnation
	// is ref.Incarnation() (the old one plus one), references pinned to
	// the old incarnation are refused, and a receives actor.Started
	// before the mail that waited.
	Restart(ref actor.Ref, a actor.Actor) error
	// Passivate delivers actor.Passivating as the actor's last turn,
	// calls final (if not nil) with the actor value inside that turn,
	// then detaches the actor. Mail that arrives afterwards rings again.
	// It fails with ErrOutOfService when the host has taken the value
	// out of service (abandoned a turn) and not reported it yet; a
	// passivation queued when the host does that ends without calling
	// final. Either way the report follows (Supervisor.TurnAbandoned).
	Passivate(ref actor.Ref, final func(actor.Actor)) error
	// Retire stops the actor of ref for good; mail queued for it is
	// answered ErrActorTerminated. released is called once the actor is
	// stopped and its mailbox released: mail sent afterwards rings again
	// (for the next incarnation) instead of reaching the retiring actor.
	// It may run before Retire returns, and is not called when Retire
	// returns an error (nothing is left to release).
	Retire(ref actor.Ref, released func()) error
}

// Replacer is implemented by a Host that can swap the attached actor
// value of ref for a between two turns without re-minting (the
// incarnation stays). With it the Hydrate remedy leaves the faulted value
// attached until the reloaded one replaces it, like Restart does, instead
// of detaching it with a Passivating turn first.
type Replacer interface {
	Replace(ref actor.Ref, a actor.Actor) error
}

// Detacher is implemented by a Host that can take a faulted actor value
// out of service before any further mail without a final turn: the value
// receives no Passivating, final is called once it is out, and the mail
// waits for the remedy's value (Restart, Replace). The supervisor uses it
// for the Restart and Hydrate remedies, so that the faulted value does
// not go on handling mail while the new one loads.
type Detacher interface {
	Detach(ref actor.Ref, final func(actor.Actor)) error
}

// Fencer is implemented by a Host that fences activations (a cluster
// node may activate an identity only while it may serve its shard). The
// supervisor asks Fence under its lock just before it attaches a new
// activation, once its state is loaded: the doorbell's own check ran
// before the load, and the shard may have begun to move away since (a
// handoff's quiesce cannot wait for an identity whose activation is
// still loading and that nothing here ever recorded). An error refuses
// the activation: nothing is attached, and the waiting mail is rejected
// (Rejecter) with a *FencedError holding the fence's error. Fence must
// not block.
type Fencer interface {
	Fence(ref actor.Ref) error
}

// FencedError is the rejection of an activation its host's fence refused
// (Fencer); Err is the fence's error, which a Rejecter should hand to the
// waiting mail unchanged, as a refusal at the doorbell would be.
type FencedError struct{ Err error }

func (e *FencedError) Error() string { return e.Err.Error() }
func (e *FencedError) Unwrap() error { return e.Err }

// Rejecter is implemented by a Host that can answer the mail waiting for
// an identity the supervisor will not activate (OpReject: shutdown, or
// its state cannot be loaded): asks fail with err (ErrClosed: the node is
// going away), tells from actors come back to them as Undelivered. Hosts
// without it leave that mail to fail at its deadlines.
type Rejecter interface {
	Reject(ref actor.Ref, err error) error
}

// Config configures a Supervisor. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// Store keeps state at rest. Required. The supervisor does not close
	// it.
	Store StateStore
	// MaxActive bounds active actors on the node; beyond it the least
	// recently used are passivated. 0: unbounded.
	MaxActive int
	// HydrationBudget bounds concurrent activations (store reads and
	// restores). Default 64.
	HydrationBudget int
	// IOWorkers is the number of goroutines doing store I/O. Default
	// HydrationBudget, at most 64.
	IOWorkers int
	// TickInterval is how often the supervisor looks for idle actors and
	// ended back-offs. Default 100 ms.
	TickInterval time.Duration
	// Clock reads time. Default the real clock.
	Clock Clock
	// Events receives every lifecycle decision. Default: none.
	Events EventSink
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
}

// Clock is the supervisor's time source, the project's one (package
// clock); safe for concurrent use.
type Clock = clock.Clock

// RealClock returns the wall clock (also the fake clock of a
// testing/synctest bubble).
func RealClock() Clock { return clock.Real{} }

// DefaultConfig returns the defaults (without a Store).
func DefaultConfig() Config {
	return Config{HydrationBudget: 64, TickInterval: 100 * time.Millisecond}
}

// ErrInvalidConfig: Config.Validate found a bad field.
var ErrInvalidConfig = errors.New("prospero: invalid config")

// ErrOutOfService is returned by a Host's Passivate for an actor value the
// host has taken out of service (a turn abandoned past its budget) and is
// about to report with Supervisor.TurnAbandoned.
var ErrOutOfService = errors.New("prospero: actor value taken out of service")

// Validate reports a configuration the supervisor cannot run with.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: Store is required", ErrInvalidConfig)
	case c.MaxActive < 0 || c.HydrationBudget < 0 || c.IOWorkers < 0:
		return fmt.Errorf("%w: negative limit", ErrInvalidConfig)
	case c.TickInterval < 0:
		return fmt.Errorf("%w: negative TickInterval", ErrInvalidConfig)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.HydrationBudget == 0 {
		c.HydrationBudget = d.HydrationBudget
	}
	if c.IOWorkers == 0 {
		c.IOWorkers = min(c.HydrationBudget, 64)
	}
	if c.TickInterval == 0 {
		c.TickInterval = d.TickInterval
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Events == nil {
		c.Events = discardSink{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Supervisor is the goroutine shell around Core: it rings Core from the
// scheduler's doorbell and fault reports, carries out Core's commands
// against the StateStore and the Host, and ticks Core on its own
// goroutine, outside the scheduler's worker pool, so supervision keeps
// running when every worker is busy.
//
// Lifecycle: NewSupervisor, Register kinds, Start(host), ..., Close.
// All methods are safe for concurrent use.
type Supervisor struct {
	cfg   Config
	reg   *Registry
	store StateStore
	clock Clock
	log   *slog.Logger

	factories sync.Map // kind name → func(key string) actor.Actor
	lastUse   sync.Map // Identity → *atomic.Int64 (unix nanos), for active identities

	// put queues a write at rest: the store's PutAsync, or own's.
	put func(id Identity, expected uint64, rec Record, done func(uint64, error))
	own *groupCommitter // writes of a store without PutAsync, off the callers' goroutines

	mu                      sync.Mutex // guards core, host, unsaved, chains, jobs, started, closed
	core                    *Core
	chains                  map[Identity]*chain // write chains of active persistent identities
	commits, commitFailures uint64
	idle                    *sync.Cond // a chain has no write in flight any more
	host                    Host
	unsaved                 map[Identity]Record // state whose write at rest failed; retried on tick
	// doubtful holds identities a write of which failed to commit: it
	// may have landed in the local store all the same (a replicated
	// store's local write succeeded, a replica did not acknowledge), so
	// the record there may be one the other replicas lack. The next
	// activation writes it again, and commits it, before it serves it.
	doubtful map[Identity]struct{}
	// trusted holds, for a dormant identity, the record its last
	// activation here committed (see DoubtingStore): loaded again
	// unchanged, it is served without being written again. Bounded by
	// maxTrusted; one forgotten costs a write at its next activation.
	trusted map[Identity]trust
	seed    maphash.Seed
	doubts  DoubtingStore // the store, if it may doubt its records; else nil
	jobs    []job
	jobCond *sync.Cond
	started bool
	closed  bool
	settled chan struct{} // closed when the core settles after Shutdown
	// abandoned and stale count TurnAbandoned reports and state writes
	// dropped because their turn was abandoned.
	abandoned, stale uint64
	// superseded counts unsaved states dropped at activation because the
	// store held a newer record (Stats.Superseded).
	superseded uint64
	// recommitted counts records written again at activation because
	// they were in doubt (Stats.Recommitted).
	recommitted uint64
	// passing holds the passivation whose final turn is outstanding, per
	// identity, so that an abandoned final turn's state is not written.
	passing map[Identity]*passing
	// waiters are PassivateWait's callers, per identity: told nil when it
	// leaves memory, ErrClosed when Close gives up on it.
	waiters map[Identity][]chan error
	done    bool // Close has returned: no waiter is told any more

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// passing is one passivation's final turn, outstanding.
type passing struct {
	inc       uint64
	abandoned bool // the turn was abandoned: its state is stale
}

type job struct {
	cmd   Command
	state []byte // OpPassivate: the marshalled state to write
}

// NewSupervisor validates cfg and returns a supervisor that starts no
// goroutine until Start.
func NewSupervisor(cfg Config) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Supervisor{
		cfg: cfg, reg: NewRegistry(), store: cfg.Store, clock: cfg.Clock, log: cfg.Logger,
		unsaved:  make(map[Identity]Record),
		doubtful: make(map[Identity]struct{}),
		trusted:  make(map[Identity]trust),
		seed:     maphash.MakeSeed(),
		passing:  make(map[Identity]*passing),
		chains:   make(map[Identity]*chain),
		settled:  make(chan struct{}),
		waiters:  make(map[Identity][]chan error),
	}
	s.doubts, _ = cfg.Store.(DoubtingStore)
	s.jobCond = sync.NewCond(&s.mu)
	s.idle = sync.NewCond(&s.mu)
	s.core = NewCore(s.reg, CoreConfig{MaxActive: cfg.MaxActive, HydrationBudget: cfg.HydrationBudget,
		Sink: EventFunc(s.observe), LastUse: s.lastUseOf})
	return s, nil
}

// observe is the core's event sink (called with s.mu held): it ends the
// PassivateWait of an identity that left memory, then tells cfg.Events.
func (s *Supervisor) observe(e Event) {
	switch e.Type {
	case EventPassivated, EventRetired, EventRejected:
		var err error
		if e.Type == EventPassivated {
			err = e.Err // its state was not written (its final turn was abandoned)
		}
		for _, ch := range s.waiters[e.ID] {
			ch <- err
		}
		delete(s.waiters, e.ID)
	}
	s.cfg.Events.Emit(e)
}

// Register adds a kind: factory(key) builds a fresh actor value for
// kind/key (restored from state at rest when the actor implements
// Persistent and the kind persists).
func (s *Supervisor) Register(kind string, factory func(key string) actor.Actor, opts KindOptions) (*Kind, error) {
	if factory == nil {
		return nil, fmt.Errorf("%w: nil factory for kind %q", ErrInvalidKindOptions, kind)
	}
	k, err := s.reg.Register(kind, opts)
	if err != nil {
		return nil, err
	}
	s.factories.Store(kind, factory)
	return k, nil
}

// Factory returns the factory registered for kind.
func (s *Supervisor) Factory(kind string) (func(key string) actor.Actor, bool) {
	f, ok := s.factories.Load(kind)
	if !ok {
		return nil, false
	}
	return f.(func(string) actor.Actor), true
}

// Registry returns the kinds registered with the supervisor.
func (s *Supervisor) Registry() *Registry { return s.reg }

// Start binds the supervisor to its host and starts its goroutines (the
// tick loop and the store I/O workers). They stop in Close.
func (s *Supervisor) Start(host Host) error {
	if host == nil {
		return fmt.Errorf("%w: nil host", ErrInvalidConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errors.New("prospero: supervisor already started")
	}
	s.started, s.host = true, host
	if as, ok := s.store.(AsyncStore); ok {
		s.put = as.PutAsync
	} else {
		s.own = syncCommitter(s.store)
		s.put = s.own.put
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for range s.cfg.IOWorkers {
		s.wg.Add(1)
		go s.ioLoop(ctx)
	}
	s.wg.Add(1)
	go s.tickLoop(ctx)
	return nil
}

// Ring is the doorbell: mail was admitted for ref while no actor is
// attached. It never blocks on I/O. It returns ErrUnknownKind for a kind
// not registered here and ErrClosed during shutdown; the scheduler then
// fails the waiting mail.
func (s *Supervisor) Ring(ref actor.Ref) error {
	id := IdentityOf(ref)
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.core.Doorbell(id, s.clock.Now())
	s.dispatchLocked()
	return err
}

// Touch records that ref is in use (a message was routed to it). It is
// lock-free and cheap enough for the scheduler's send path; idle and
// LRU passivation consult it.
func (s *Supervisor) Touch(ref actor.Ref) {
	if v, ok := s.lastUse.Load(IdentityOf(ref)); ok {
		v.(*atomic.Int64).Store(s.clock.Now().UnixNano())
	}
}

func (s *Supervisor) lastUseOf(id Identity) (time.Time, bool) {
	v, ok := s.lastUse.Load(id)
	if !ok {
		return time.Time{}, false
	}
	n := v.(*atomic.Int64).Load()
	return time.Unix(0, n), n != 0
}

// Fault reports a failed turn (a panic or an exhausted budget) of the
// incarnation inc of ref.
func (s *Supervisor) Fault(ref actor.Ref, inc uint64, cause FaultCause, err error) {
	s.report(Fault{ID: IdentityOf(ref), Incarnation: inc, Cause: cause, Err: err})
}

// TurnAbandoned reports a turn of incarnation inc of ref that ran past
// its budget and that the host took away from its goroutine (which may
// never return): the host has already taken the actor value out of
// service, keeping its mail, so the kind's remedy applies at once.
func (s *Supervisor) TurnAbandoned(ref actor.Ref, inc uint64, err error) {
	s.report(Fault{ID: IdentityOf(ref), Incarnation: inc, Cause: FaultBudgetExhausted, Err: err, Abandoned: true})
}

func (s *Supervisor) report(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Abandoned {
		s.abandoned++
		if tok := s.passing[f.ID]; tok != nil && tok.inc == f.Incarnation {
			// The passivation's final turn will report nothing that
			// may be written.
			tok.abandoned = true
			delete(s.passing, f.ID)
		}
	}
	s.markFailedLocked(f.ID, f.Incarnation, f.Err)
	s.core.Fault(f, s.clock.Now())
	s.dispatchLocked()
}

// AfterTurn reports that a turn of ref's incarnation inc finished
// normally; a is the actor value and h the scheduler's handle on the turn
// (nil: its outputs cannot be held). activity is false for the tick of the
// actor's own timer (not armed with actor.KeepAlive): the turn's state is
// persisted by policy, but it does not count as use for idle passivation.
// It must be called on the actor's own turn thread (no other turn
// running), before the turn's outputs leave, since it may marshal the
// state for a turn-driven persistence policy.
//
// It never waits for the write. Under PersistEveryTurn a turn that
// changed the state holds its outputs (h.Wait) until the write is
// committed, and fails them with a *CommitError (ErrNotCommitted) if it
// is not; a turn that changed nothing writes nothing. Under
// PersistPeriodic the write is made in the background and outputs leave
// at once.
func (s *Supervisor) AfterTurn(ref actor.Ref, inc uint64, a actor.Actor, activity bool, h Holder) {
	s.turnWrite(IdentityOf(ref), inc, a, activity, h)
}

// Passivate asks for ref to be passivated now; it reports whether it was
// active.
func (s *Supervisor) Passivate(ref actor.Ref) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := s.core.Passivate(IdentityOf(ref), s.clock.Now())
	s.dispatchLocked()
	return ok
}

// PassivateWait passivates ref's activation and returns once ref has
// nothing in memory, so that its state at rest is final until the next
// doorbell, or with ctx's error. An identity with nothing in memory
// returns at once; one being passivated is waited for; one not active
// yet (being hydrated, backing off after a fault) is passivated as soon
// as its activation is attached (Core.PassivateSoon). The wait is
// driven by the identity's lifecycle events, not by polling. ErrClosed:
// the supervisor closed without the identity leaving memory; an error
// matching actor.ErrNotCommitted: it left memory, but its passivating
// turn was abandoned past its budget, so its state at rest is what it
// was before that activation's unwritten turns.
func (s *Supervisor) PassivateWait(ctx context.Context, ref actor.Ref) error {
	id := IdentityOf(ref)
	s.mu.Lock()
	if s.done && s.core.InMemory(id) {
		s.mu.Unlock()
		return ErrClosed
	}
	if !s.core.PassivateSoon(id, s.clock.Now()) {
		s.mu.Unlock()
		return nil
	}
	s.dispatchLocked()
	ch := make(chan error, 1)
	s.waiters[id] = append(s.waiters[id], ch)
	s.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		ws := s.waiters[id]
		if i := slices.Index(ws, ch); i >= 0 {
			ws = slices.Delete(ws, i, i+1)
		}
		if len(ws) == 0 {
			delete(s.waiters, id)
			s.core.UnwantPassivation(id) // nobody waits for it any more
		} else {
			s.waiters[id] = ws
		}
		return ctx.Err()
	}
}

// Status answers the state of ref (pinned or not): Valid, Dormant,
// ActorTerminated or Unknown, its current incarnation and whether it is
// in memory, in any phase (Status.Active: also while it is queued for or
// in hydration, re-admitted after a passivation that found mail waiting,
// backing off, or being passivated). It may read the store for an
// identity not attached yet. Active false means the state at rest is
// final until the next doorbell: a handoff reads the store for shipping
// only then.
func (s *Supervisor) Status(ctx context.Context, ref actor.Ref) (Status, error) {
	id := IdentityOf(ref)
	s.mu.Lock()
	st, atRest, err := s.core.Status(id, ref.Incarnation())
	// An identity being hydrated has an entry, but its incarnation is
	// known only from its record: it is answered from the store, and
	// still reported in memory, since its activation may run and write.
	inMemory := s.core.InMemory(id)
	rec, unsaved := s.unsaved[id]
	s.mu.Unlock()
	if err != nil || !atRest {
		return st, err
	}
	if unsaved {
		return StatusAtRest(ref.Incarnation(), rec, true, inMemory), nil
	}
	rec, err = s.store.Get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return StatusAtRest(ref.Incarnation(), Record{}, false, inMemory), nil
	case err != nil:
		return Status{State: actor.Unknown}, err
	}
	return StatusAtRest(ref.Incarnation(), rec, true, inMemory), nil
}

// Stats is a snapshot of the supervisor's counts.
type Stats struct {
	Entries   int // identities in memory (not dormant)
	Active    int // identities with an attached activation
	Hydrating int // activations in progress
	Waiting   int // activations waiting for the hydration budget
	Unsaved   int // states whose write at rest failed and is retried
	// Commits and CommitFailures count the writes of activations' state
	// through their write chains (turn policies and passivation of
	// active persistent kinds): committed, and failed (each failure
	// reloads the activation and fails the outputs waiting for it).
	Commits        uint64
	CommitFailures uint64
	// Store counts the group commits of a store that reports them
	// (CommitCounter): writes per fsync is Store.Writes / Store.Groups.
	Store CommitStats
	// Abandoned counts turns the host abandoned past their budget
	// (reported with TurnAbandoned).
	Abandoned uint64
	// StaleWrites counts states marshalled by a turn that was abandoned
	// meanwhile and therefore not written at rest.
	StaleWrites uint64
	// Superseded counts states whose write at rest had failed (see
	// Unsaved) and that the next activation dropped because the store
	// held a newer record by then: the failed write had landed after all,
	// or a handoff or a replica had brought a newer state.
	Superseded uint64
	// Recommitted counts records written again, and committed, by an
	// activation before it served them, because they were in doubt: a
	// write of the identity had failed to commit (it may have landed in
	// the local store only), or the store doubts records this node did
	// not commit itself (DoubtingStore).
	Recommitted uint64
}

// Stats returns a snapshot.
func (s *Supervisor) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, wait := s.core.Hydrating()
	st := Stats{Entries: s.core.Entries(), Active: s.core.Active(), Hydrating: in, Waiting: wait, Unsaved: len(s.unsaved),
		Commits: s.commits, CommitFailures: s.commitFailures,
		Abandoned: s.abandoned, StaleWrites: s.stale, Superseded: s.superseded, Recommitted: s.recommitted}
	if cs, ok := s.store.(CommitCounter); ok {
		st.Store = cs.CommitStats()
	}
	return st
}

// HydrationWaiting returns the number of activations waiting for the
// hydration budget (Stats.Waiting), without the rest of a snapshot: a
// node reads it to refuse mail that would need one more (BUSY) while it is
// over its backlog. Safe for concurrent use.
func (s *Supervisor) HydrationWaiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, wait := s.core.Hydrating()
	return wait
}

// InMemory returns every identity the supervisor holds in memory, in any
// phase: loading (an activation not attached or announced yet), active,
// passivating, retiring, rejecting, backing off after a fault. It is read
// under the supervisor's lock, so an activation that attaches afterwards
// has not passed its host's fence yet (Fencer).
func (s *Supervisor) InMemory() []Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.Identities(nil)
}

// ActiveKeys returns the keys of kind's identities with an attached
// activation on this node, least recently used first: a snapshot, owned
// by the caller. Safe for concurrent use.
func (s *Supervisor) ActiveKeys(kind string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.ActiveKeys(kind, nil)
}

// Close shuts down gracefully: every active actor is passivated (state
// written at rest), then the goroutines stop. It waits until that is
// done or ctx ends. It is idempotent.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.core.Shutdown(s.clock.Now())
	s.dispatchLocked()
	s.mu.Unlock()
	var err error
	if started {
		select {
		case <-s.settled:
		case <-ctx.Done():
			err = fmt.Errorf("prospero: close: %w", ctx.Err())
		}
		s.cancel()
		s.mu.Lock()
		s.jobCond.Broadcast()
		s.mu.Unlock()
		// The I/O workers stop at their next job; one in a kind's factory
		// or UnmarshalState that does not return cannot be stopped, and
		// Close does not wait for it past ctx (it finds the store closed
		// when it returns).
		workers := make(chan struct{})
		go func() {
			s.wg.Wait()
			close(workers)
		}()
		select {
		case <-workers:
		case <-ctx.Done():
			select {
			case <-workers:
			default:
				err = errors.Join(err, fmt.Errorf("prospero: close: %w: an I/O worker had not stopped (in a kind's factory or UnmarshalState that has not returned?)", ctx.Err()))
			}
		}
		if s.own != nil {
			s.own.close()
		}
	}
	s.retryUnsaved(ctx)
	s.mu.Lock()
	s.done = true
	for id, ws := range s.waiters { // left in memory: nothing will end their wait now
		for _, ch := range ws {
			ch <- ErrClosed
		}
		delete(s.waiters, id)
	}
	if n := len(s.unsaved); n > 0 && err == nil {
		err = fmt.Errorf("prospero: close: %d states could not be written at rest", n)
	}
	s.mu.Unlock()
	return err
}

// dispatchLocked turns the core's commands into host calls and I/O jobs.
func (s *Supervisor) dispatchLocked() {
	for {
		cmds := s.core.Drain(nil)
		if len(cmds) == 0 {
			break
		}
		s.dispatchAllLocked(cmds)
	}
	if s.closed && s.core.Settled() {
		select {
		case <-s.settled:
		default:
			close(s.settled)
		}
	}
}

// dispatchAllLocked carries out cmds; handling one may produce more,
// which dispatchLocked picks up.
func (s *Supervisor) dispatchAllLocked(cmds []Command) {
	for _, c := range cmds {
		switch c.Op {
		case OpLoad:
			s.pushJobLocked(job{cmd: c})
		case OpRetire:
			s.lastUse.Delete(c.ID)
			s.pushJobLocked(job{cmd: c})
		case OpPassivate:
			s.lastUse.Delete(c.ID)
			s.passivateLocked(c)
		case OpStop:
			s.stopLocked(c)
		case OpReject:
			s.log.LogAttrs(context.Background(), slog.LevelDebug, "activation rejected",
				slog.String("actor", c.ID.String()), slog.Any("error", c.Err))
			if _, ok := s.host.(Rejecter); ok {
				// Answered by an I/O worker, outside the lock: failing
				// the mail may wake its senders.
				s.pushJobLocked(job{cmd: c})
			} else {
				s.core.Rejected(c.ID, c.Err, s.clock.Now())
			}
		}
	}
}

// stopLocked takes a faulted actor out of service. A Detacher host
// detaches the value at once, before any further mail, without a final
// turn and without writing its state; the remedy, Restart or Hydrate,
// then attaches a value loaded from the last state at rest to the mail
// that waited. Left attached until the new value is loaded, the faulted
// value went on handling mail, and what it answered was then lost with
// it. A value the host already took out of service (an abandoned turn)
// has nothing to detach. A Replacer host without Detach replaces the
// value in place later; any other host passivates it before a Hydrate.
func (s *Supervisor) stopLocked(c Command) {
	s.lastUse.Delete(c.ID)
	done := func(actor.Actor) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.core.Stopped(c.ID, s.clock.Now())
		s.dispatchLocked()
	}
	ref := c.ID.Ref().WithIncarnation(c.Incarnation)
	var err error
	switch h := s.host.(type) {
	case Detacher:
		err = h.Detach(ref, done)
	case Replacer:
		// Replaced in place when the remedy's value is loaded.
		err = errNoStop
	default:
		if c.Remedy != Hydrate || s.host == nil {
			err = errNoStop
		} else {
			err = s.host.Passivate(ref, done)
		}
	}
	if err != nil {
		s.core.Stopped(c.ID, s.clock.Now())
	}
}

// errNoStop: stopLocked takes nothing out of service.
var errNoStop = errors.New("prospero: nothing to stop")

func (s *Supervisor) pushJobLocked(j job) {
	s.jobs = append(s.jobs, j)
	s.jobCond.Signal()
}

// passivateLocked asks the host for the final turn; the state is
// captured inside it and written by an I/O worker.
func (s *Supervisor) passivateLocked(c Command) {
	tok := &passing{inc: c.Incarnation}
	s.passing[c.ID] = tok
	final := func(a actor.Actor) {
		var state []byte
		var err error
		p, persist := a.(Persistent)
		persist = persist && c.Persist
		if persist {
			state, err = marshalState(p)
		}
		s.mu.Lock()
		if s.passing[c.ID] == tok {
			delete(s.passing, c.ID)
		}
		if tok.abandoned {
			// The final turn was abandoned while it marshalled (the
			// passivation ended without it): its state is stale.
			s.stale++
			s.mu.Unlock()
			return
		}
		if err != nil {
			s.core.PersistFailed(c.ID, c.Incarnation, err, s.clock.Now())
		}
		if ch := s.chains[c.ID]; ch != nil && ch.inc == c.Incarnation && persist && err == nil {
			unchanged := bytes.Equal(state, ch.last)
			if ch.inflight == nil && (ch.failed != nil || unchanged) {
				// Nothing new to write (or nothing that may be written).
				delete(s.chains, c.ID)
				if s.doubts != nil && ch.failed == nil && ch.version != 0 {
					s.trustLocked(c.ID, Record{Version: ch.version, Incarnation: ch.inc, State: ch.last})
				}
				s.core.Passivated(c.ID, ch.version, false, s.clock.Now())
				s.dispatchLocked()
				s.mu.Unlock()
				return
			}
			// Behind the writes in flight: those of the last turns (under
			// PersistEveryTurn also of a turn that ended after the
			// passivation was decided, Core.TurnDone), whose outputs wait
			// for them. If one fails, this write is skipped (the state at
			// rest stays the last committed one, and what those turns
			// answered fails); if the final state is theirs, it writes
			// nothing once they committed.
			w := &write{rec: Record{Incarnation: c.Incarnation, State: state}, state: true, unchanged: unchanged}
			w.done = func(v uint64, err error) { s.passivatedLocked(c, w.rec, w.expected, v, err) }
			t := s.submitLocked(c.ID, ch, w)
			s.dispatchLocked()
			s.mu.Unlock()
			s.after(t)
			return
		}
		defer s.mu.Unlock()
		if persist && err == nil {
			// Writes made after turns since the decision moved the
			// version on; expect the latest.
			c.Version = s.core.Version(c.ID, c.Version)
			s.pushJobLocked(job{cmd: c, state: state})
			return
		}
		s.core.Passivated(c.ID, c.Version, false, s.clock.Now())
		s.dispatchLocked()
	}
	if s.host == nil {
		delete(s.passing, c.ID)
		s.core.Passivated(c.ID, c.Version, false, s.clock.Now())
		return
	}
	err := s.host.Passivate(c.ID.Ref().WithIncarnation(c.Incarnation), final)
	switch {
	case err == nil:
	case errors.Is(err, ErrOutOfService):
		// An abandoned turn whose report is on its way: the
		// passivation ends with it (TurnAbandoned finds it), and until
		// then no new activation starts (mail waits, as for any
		// passivation).
	default:
		// The cell is gone (stopped): nothing to save.
		delete(s.passing, c.ID)
		s.core.Passivated(c.ID, c.Version, false, s.clock.Now())
	}
}

func (s *Supervisor) ioLoop(ctx context.Context) {
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.jobs) == 0 && ctx.Err() == nil {
			s.jobCond.Wait()
		}
		if len(s.jobs) == 0 {
			return
		}
		j := s.jobs[0]
		s.jobs[0] = job{}
		s.jobs = s.jobs[1:]
		s.mu.Unlock()
		s.run(ctx, j)
		s.mu.Lock()
	}
}

// run carries out one job outside the lock.
func (s *Supervisor) run(ctx context.Context, j job) {
	c := j.cmd
	switch c.Op {
	case OpLoad:
		s.load(ctx, c)
	case OpPassivate:
		rec := Record{Incarnation: c.Incarnation, State: j.state}
		v, err := s.store.Put(ctx, c.ID, c.Version, rec)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.passivatedLocked(c, rec, c.Version, v, err)
		s.dispatchLocked()
	case OpReject:
		if r, ok := s.host.(Rejecter); ok {
			if err := r.Reject(c.ID.Ref(), c.Err); err != nil {
				s.log.LogAttrs(ctx, slog.LevelDebug, "reject", slog.String("actor", c.ID.String()), slog.Any("error", err))
			}
		}
		// Reported in every case: the core keeps the identity until it is.
		s.mu.Lock()
		s.core.Rejected(c.ID, c.Err, s.clock.Now())
		s.dispatchLocked()
		s.mu.Unlock()
	case OpRetire:
		// The retirement is done when both the host released the
		// actor's mailbox and the tombstone is written, in either order:
		// reported before the release, the next message could still land
		// in the retiring mailbox and be answered ErrActorTerminated
		// although the identity is free for its next incarnation.
		r := &retirement{cmd: c}
		released := func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			r.releasedLocked(s)
		}
		if err := s.host.Retire(c.ID.Ref(), released); err != nil {
			s.log.LogAttrs(ctx, slog.LevelDebug, "retire", slog.String("actor", c.ID.String()), slog.Any("error", err))
			s.mu.Lock()
			r.releasedLocked(s)
			s.mu.Unlock()
		}
		s.mu.Lock()
		if ch := s.chains[c.ID]; ch != nil {
			// Behind the writes still in flight, whose versions the
			// tombstone must expect.
			w := &write{rec: Record{Incarnation: c.Mint}}
			w.done = func(v uint64, err error) { r.writtenLocked(s, w.expected, v, err) }
			t := s.submitLocked(c.ID, ch, w)
			s.mu.Unlock()
			s.after(t)
			return
		}
		s.mu.Unlock()
		v, err := s.store.Put(ctx, c.ID, c.Version, Record{Incarnation: c.Mint})
		s.mu.Lock()
		defer s.mu.Unlock()
		r.writtenLocked(s, c.Version, v, err)
		s.dispatchLocked()
	}
}

// retirement joins the two halves of an OpRetire: the host's release of
// the actor's mailbox and the tombstone write. Guarded by the
// supervisor's mutex.
type retirement struct {
	cmd      Command
	released bool
	written  bool
	expected uint64
	v        uint64
	err      error
}

// releasedLocked records the host's release; if the tombstone is already
// written, the retirement is done (and dispatched: the release comes
// from the host, outside any job).
func (r *retirement) releasedLocked(s *Supervisor) {
	if r.released {
		return
	}
	r.released = true
	if r.written {
		s.retiredLocked(r.cmd, r.expected, r.v, r.err)
		s.dispatchLocked()
	}
}

// writtenLocked records the tombstone write (expecting version expected,
// ended with v, err); if the host already released the mailbox, the
// retirement is done. The caller dispatches.
func (r *retirement) writtenLocked(s *Supervisor, expected, v uint64, err error) {
	r.written, r.expected, r.v, r.err = true, expected, v, err
	if r.released {
		s.retiredLocked(r.cmd, expected, v, err)
	}
}

// passivatedLocked finishes a passivation whose state write (expecting
// version expected) ended with v, err. A failed write keeps the state in
// memory: the next activation starts from it and writes it; Close retries
// it. The caller dispatches.
func (s *Supervisor) passivatedLocked(c Command, rec Record, expected, v uint64, err error) {
	now := s.clock.Now()
	delete(s.chains, c.ID)
	switch {
	case errors.Is(err, errSkipped):
		s.core.Passivated(c.ID, v, false, now)
	case err != nil:
		s.core.PersistFailed(c.ID, c.Incarnation, err, now)
		rec.Version = expected
		s.unsaved[c.ID] = rec
		s.core.Passivated(c.ID, expected, false, now)
	default:
		if s.doubts != nil {
			rec.Version = v
			s.trustLocked(c.ID, rec)
		}
		s.core.Passivated(c.ID, v, false, now)
	}
}

// trust identifies a record: its version and a hash of its incarnation
// and state (versions of different owners' copies may coincide).
type trust struct{ version, sum uint64 }

func (s *Supervisor) trustOf(rec Record) trust {
	var h maphash.Hash
	h.SetSeed(s.seed)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], rec.Incarnation)
	_, _ = h.Write(b[:])
	_, _ = h.Write(rec.State)
	return trust{version: rec.Version, sum: h.Sum64()}
}

// maxTrusted bounds Supervisor.trusted (about 100 bytes an entry).
const maxTrusted = 1 << 18

// trustLocked records that this node committed rec (at rec.Version) as
// id's state at rest when its activation ended.
func (s *Supervisor) trustLocked(id Identity, rec Record) {
	if _, ok := s.doubtful[id]; ok {
		return
	}
	if len(s.trusted) >= maxTrusted {
		for k := range s.trusted { // any one: it costs a write later
			delete(s.trusted, k)
			break
		}
	}
	s.trusted[id] = s.trustOf(rec)
}

// retiredLocked finishes a retirement whose tombstone write (expecting
// version expected) ended with v, err. The caller dispatches.
func (s *Supervisor) retiredLocked(c Command, expected, v uint64, err error) {
	delete(s.chains, c.ID)
	if err != nil {
		s.core.PersistFailed(c.ID, c.Incarnation, err, s.clock.Now())
		s.unsaved[c.ID] = Record{Version: expected, Incarnation: c.Mint}
	}
	s.core.Retired(c.ID, v, false, s.clock.Now())
}

// load reads the record, re-mints if a restart asked for it, restores
// the actor and attaches it.
func (s *Supervisor) load(ctx context.Context, c Command) {
	fail := func(err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.core.LoadFailed(c.ID, err, s.clock.Now())
		s.dispatchLocked()
	}
	s.mu.Lock()
	// A remedy reloads what the store holds once the activation's
	// writes in flight have landed.
	s.waitIdleLocked(c.ID)
	rec, unsaved := s.unsaved[c.ID]
	_, doubtful := s.doubtful[c.ID]
	known, wasTrusted := s.trusted[c.ID]
	delete(s.trusted, c.ID)
	s.mu.Unlock()
	stored, err := s.store.Get(ctx, c.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		stored = Record{}
	case err != nil:
		fail(err)
		return
	}
	if unsaved && stored.Version != rec.Version {
		// The store moved on from the version the failed write expected:
		// that write landed after all (its commit failed, not its local
		// write), or a handoff or a replica brought a newer record. The
		// store holds the identity's state; writing the unsaved one
		// would only fail its version check, at every activation.
		s.mu.Lock()
		if cur, ok := s.unsaved[c.ID]; ok && cur.Version == rec.Version {
			delete(s.unsaved, c.ID)
			s.superseded++
		}
		s.mu.Unlock()
		s.log.LogAttrs(ctx, slog.LevelWarn, "unsaved state superseded by a newer record at rest",
			slog.String("actor", c.ID.String()), slog.Uint64("expected_version", rec.Version),
			slog.Uint64("stored_version", stored.Version))
		unsaved = false
	}
	if !unsaved {
		rec = stored
	}
	if s.doubts != nil && !doubtful && !unsaved && stored.Version != 0 &&
		!(wasTrusted && known == s.trustOf(stored)) && s.doubts.RecordsInDoubt() {
		doubtful = true // a record this node did not commit itself
	}
	inc := c.LoadIncarnation(rec)
	version := rec.Version
	if inc != max(rec.Incarnation, 1) || unsaved || doubtful {
		// A re-mint (or a state that never reached the store) is written
		// before anyone can observe the new incarnation. So is a record
		// in doubt (a write of it failed to commit, or this node did not
		// commit it itself): the replicas may lack it, and a turn must
		// not answer from a state that a failover can still take back.
		v, err := s.store.Put(ctx, c.ID, rec.Version, Record{Incarnation: inc, State: rec.State})
		if err != nil {
			fail(err)
			return
		}
		version = v
		s.mu.Lock()
		if unsaved {
			delete(s.unsaved, c.ID)
		}
		if doubtful {
			s.recommitted++
			delete(s.doubtful, c.ID)
		}
		s.mu.Unlock()
	}
	f, ok := s.factories.Load(c.ID.Kind)
	if !ok {
		fail(fmt.Errorf("%w: %q", ErrUnknownKind, c.ID.Kind))
		return
	}
	a := f.(func(string) actor.Actor)(c.ID.Key)
	hydrated := false
	var atRest []byte // the state as the activation starts: turns that keep it write nothing
	if p, ok := a.(Persistent); ok && c.Kind.Options.Persistence.Persistent() {
		if len(rec.State) > 0 {
			if err := unmarshalState(p, rec.State); err != nil {
				fail(fmt.Errorf("prospero: restore %s: %w", c.ID, err))
				return
			}
			hydrated = true
		}
		if c.Kind.Options.Persistence.Mode == PersistEveryTurn || c.Kind.Options.Persistence.Mode == PersistPeriodic {
			// Not attached yet: no turn runs, the value may be read here.
			atRest, _ = marshalState(p)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	// Attach under the lock so that no fault or turn report of the new
	// incarnation can reach the core before it knows the activation.
	ref := c.ID.Ref().WithIncarnation(inc)
	r, replaces := s.host.(Replacer)
	switch {
	case c.Mint != 0:
		err = s.host.Restart(ref, a)
	case c.Replace && replaces:
		err = r.Replace(ref, a)
	default:
		if f, ok := s.host.(Fencer); ok {
			if ferr := f.Fence(ref); ferr != nil {
				s.core.Fenced(c.ID, ferr, now)
				s.dispatchLocked()
				return
			}
		}
		err = s.host.Attach(ref, a)
	}
	if err != nil {
		s.core.LoadFailed(c.ID, err, now)
	} else {
		s.lastUse.Store(c.ID, new(atomic.Int64))
		s.newChainLocked(c.ID, c.Kind, a, inc, version, atRest)
		s.core.Loaded(c.ID, inc, version, hydrated, now)
	}
	s.dispatchLocked()
}

func (s *Supervisor) tickLoop(ctx context.Context) {
	defer s.wg.Done()
	ticks, stop := s.clock.NewTicker(s.cfg.TickInterval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			s.Tick()
		}
	}
}

// Tick runs one supervision step now: ended back-offs resume, idle
// actors are passivated and the node sheds actors above MaxActive. The tick loop calls it every
// TickInterval; tests may call it directly.
func (s *Supervisor) Tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.core.Tick(s.clock.Now())
	s.dispatchLocked()
}

// retryUnsaved writes states whose write failed earlier; Close uses it
// once the supervisor's loops have stopped, so nothing else writes
// s.unsaved meanwhile. The lock is not held across the writes: a
// replicated write waits for the followers, and the hooks peers' mail
// calls (the doorbell, the hydration backlog) need the lock meanwhile.
func (s *Supervisor) retryUnsaved(ctx context.Context) {
	s.mu.Lock()
	todo := maps.Clone(s.unsaved)
	s.mu.Unlock()
	for id, rec := range todo {
		if _, err := s.store.Put(ctx, id, rec.Version, rec); err == nil {
			s.mu.Lock()
			delete(s.unsaved, id)
			s.mu.Unlock()
		}
	}
}
