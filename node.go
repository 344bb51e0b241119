package tempest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// Lifecycle errors of a Node.
var (
	// ErrNotStarted: the node was not started yet.
	ErrNotStarted = errors.New("tempest: node not started")
	// ErrStarted: the operation is only allowed before Start.
	ErrStarted = errors.New("tempest: node already started")
	// ErrClosed: the node is shutting down or closed. It matches
	// actor.ErrProcessUnavailable too.
	ErrClosed error = closedError{}
	// ErrInvalidKey is actor.ErrInvalidKey: a reference whose kind or key
	// fails actor.CheckVirtual (empty, not valid UTF-8, longer than
	// actor.MaxKindLen or actor.MaxKeyLen bytes). Every operation of a
	// node refuses it before anything is sent or stored, on every node
	// alike.
	ErrInvalidKey = actor.ErrInvalidKey
	// ErrNoQuorum: no placement leader is known, so placement cannot
	// change and leases cannot be renewed: a majority of the placement
	// voters is unreachable (or an election is still running). It matches
	// actor.ErrProcessUnavailable too: an operation that fails with it
	// did not reach its actor.
	ErrNoQuorum error = noQuorumError{}
)

type noQuorumError struct{}

func (noQuorumError) Error() string        { return "tempest: no placement quorum (no raft leader known)" }
func (noQuorumError) Is(target error) bool { return target == actor.ErrProcessUnavailable }

// NotReadyError says which step of joining a cluster a node waits for.
type NotReadyError struct {
	Node   string
	Reason string // "not joined", "placement table not initialised", "placement lease not fresh"
}

func (e *NotReadyError) Error() string { return "tempest: " + e.Node + " not ready: " + e.Reason }

type closedError struct{}

func (closedError) Error() string        { return "tempest: node closed" }
func (closedError) Is(target error) bool { return target == actor.ErrProcessUnavailable }

// StateFile is the name of the state store file inside Config.DataDir.
const StateFile = "state.db"

// Stable attribute keys of the node's activation log.
const (
	LogKeyNode        = "node"
	LogKeyActor       = "actor"
	LogKeyIncarnation = "incarnation"
	LogKeyEpoch       = "epoch"
	LogKeyReason      = "reason"
	LogKeyError       = "error"
)

// Messages of the node's activation log.
const (
	LogActivated   = "actor activated"
	LogDeactivated = "actor deactivated"
	// LogStoreError: state at rest of an identity could not be read or
	// written (the turn or activation that needed it fails).
	LogStoreError = "state store error"
)

type lifecycle uint8

const (
	stateNew lifecycle = iota
	stateStarted
	stateClosing
	stateClosed
)

// Node is one Tempest node: a scheduler (ariel), a supervisor (prospero)
// with its state store, and the registered kinds of virtual actors.
//
// Lifecycle: New, Register every kind, Start, use, Close. Register is only
// allowed before Start. Every other method is safe for concurrent use.
type Node struct {
	cfg  Config
	log  *slog.Logger
	man  manifest.Manifest
	reg  *prospero.Registry // validates kind names and options before Start
	msgs *messageTable
	wreg *wire.Registry // the kinds' message types; set in Start
	errs errorTable     // application error codes of every kind
	trc  *tracing       // nil when not tracing

	mu     sync.Mutex // guards state, kinds (before Start), the components
	state  lifecycle
	kinds  map[string]*kindInfo
	store  *prospero.BoltStore
	sup    *prospero.Supervisor
	sched  *ariel.Scheduler
	rem    *reminders.Engine
	closed chan struct{} // closed when Close has finished
	cerr   error

	cl *cluster // nil for a standalone node

	run   atomic.Pointer[running] // set while started and not closing
	ready atomic.Bool
	phase atomic.Uint32 // lifecycle, readable without mu

	waitMu  sync.Mutex
	waiters map[prospero.Identity][]chan struct{} // Passivate callers
}

// running is what the hot path needs, published once Start succeeded.
type running struct {
	sched *ariel.Scheduler
	sup   *prospero.Supervisor
	rem   *reminders.Engine
}

var _ actor.Client = (*Node)(nil)

// New validates cfg and returns a node that starts nothing until Start.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger.With(LogKeyNode, cfg.Name),
		reg:     prospero.NewRegistry(),
		msgs:    newMessageTable(),
		errs:    errorTable{},
		kinds:   map[string]*kindInfo{},
		closed:  make(chan struct{}),
		waiters: map[prospero.Identity][]chan struct{}{},
	}
	if cfg.Cluster != nil {
		n.cl = newCluster(n, *cfg.Cluster)
	}
	n.man = manifest.Build(manifest.Options{
		Env: manifest.Detect(),
		Capacities: manifest.Capacities{
			Workers:            cfg.Scheduler.Workers,
			MailboxDepth:       cfg.Scheduler.MailboxCapacity,
			TurnBudget:         cfg.Scheduler.TurnBudget,
			FairnessMessages:   cfg.Scheduler.FairnessMessages,
			FairnessTime:       cfg.Scheduler.FairnessTime,
			HydrationBudget:    cfg.Supervisor.HydrationBudget,
			MaxActive:          cfg.Supervisor.MaxActive,
			ReplacementWorkers: cfg.Scheduler.MaxReplacements,
		},
	})
	return n, nil
}

// kindCapacities are the limits the node enforces per registered kind:
// the ones the scheduler was configured with (arielhost.Start), read
// back from it.
func (n *Node) kindCapacities(sched *ariel.Scheduler) []manifest.KindCapacities {
	names := n.reg.Names()
	out := make([]manifest.KindCapacities, 0, len(names))
	for _, name := range names {
		k, err := n.reg.Lookup(name)
		if err != nil {
			continue
		}
		out = append(out, manifest.KindCapacities{Kind: name, MailboxDepth: k.Options.MailboxDepth,
			TurnBudget: sched.TurnBudget(name)})
	}
	return out
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Config returns the effective configuration (defaults filled in).
func (n *Node) Config() Config { return n.cfg }

// Manifest returns the node's assumption manifest, computed from its
// effective scheduler and supervisor configuration and the detected
// environment; from Start on it also lists each kind's mailbox depth and
// turn budget.
func (n *Node) Manifest() manifest.Manifest { return n.man }

// Register adds a kind of virtual actor: factory(key) builds a fresh actor
// value for kind/key (restored from its state at rest when the actor
// implements prospero.Persistent and the kind persists). Only before Start.
// Errors: ErrStarted, ErrInvalidKind, prospero.ErrKindExists,
// prospero.ErrInvalidKindOptions.
func (n *Node) Register(kind string, factory func(key string) actor.Actor, opts KindOptions) error {
	if factory == nil {
		return fmt.Errorf("%w %q: nil factory", ErrInvalidKind, kind)
	}
	if err := actor.CheckVirtual(kind, "-"); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidKind, kind, err)
	}
	if strings.HasPrefix(kind, reservedKindPrefix) {
		return fmt.Errorf("%w %q: names starting with %q are reserved", ErrInvalidKind, kind, reservedKindPrefix)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state != stateNew {
		return ErrStarted
	}
	if err := n.msgs.check(kind, opts.Messages); err != nil {
		return err
	}
	if err := n.errs.check(kind, opts.Errors); err != nil {
		return err
	}
	k := &kindInfo{name: kind, opts: opts}
	k.opts.Messages = slices.Clone(opts.Messages)
	if opts.Gateway != nil {
		g := *opts.Gateway
		k.opts.Gateway = &g
		gw, err := newGateway(kind, g, opts.Messages)
		if err != nil {
			return err
		}
		gw.byName = func(name string) *registeredMessage { return n.msgs.byName[kind+"\x00"+name] }
		k.gw = gw
	}
	if _, err := n.reg.Register(kind, opts.KindOptions); err != nil {
		return err
	}
	n.msgs.add(kind, k.opts.Messages)
	n.errs.add(opts.Errors)
	k.opts.Errors = nil // kept in n.errs
	k.factory = factory
	n.kinds[kind] = k
	return nil
}

// vet is the scheduler's Vet hook. A message to a kind no node of the
// cluster registers fails with actor.ErrUnknownKind naming the kind. A
// message to (or a reply from) a virtual actor is delivered in the form a remote sender's would arrive
// in (a *T of a registered type as a T), so a handler needs one case per
// type. In a cluster a message of an unregistered type is refused here,
// whoever owns the key: it could not cross the wire, so it must not work
// only when the owner happens to be local.
func (n *Node) vet(to actor.Ref, msg any) (any, error) {
	// No node hosts the kind: say so now, naming it, for a tell as for an
	// ask and wherever its key would be placed. (A reference no actor can
	// have is left to routing, which refuses it with ErrInvalidKey.)
	if n.kind(to.Kind()) == nil && to.Check() == nil && (n.cl == nil || !n.cl.hostsKind(to.Kind())) {
		return nil, fmt.Errorf("%w: %q", actor.ErrUnknownKind, to.Kind())
	}
	v, err := n.wreg.Value(msg)
	if err != nil {
		if n.cl == nil {
			return msg, nil
		}
		return nil, err
	}
	return v, nil
}

// Kinds returns the names of the registered kinds, sorted.
func (n *Node) Kinds() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.kinds))
	for k := range n.kinds {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// kind returns a registered kind. The map is only written before Start,
// so after Start it is read without the lock.
func (n *Node) kind(name string) *kindInfo {
	if lifecycle(n.phase.Load()) == stateNew {
		n.mu.Lock()
		defer n.mu.Unlock()
	}
	return n.kinds[name]
}

// Start opens the state store and starts the supervisor and the scheduler.
// Everything it starts stops in Close. If Start fails, what it started is
// stopped again and the node is closed.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.state {
	case stateStarted:
		return ErrStarted
	case stateClosing, stateClosed:
		return ErrClosed
	}
	if err := n.startLocked(ctx); err != nil {
		n.state = stateClosing
		n.phase.Store(uint32(stateClosing))
		n.shutdownLocked(context.WithoutCancel(ctx), false)
		n.state = stateClosed
		n.phase.Store(uint32(stateClosed))
		close(n.closed)
		return err
	}
	n.state = stateStarted
	n.phase.Store(uint32(stateStarted))
	n.run.Store(&running{sched: n.sched, sup: n.sup, rem: n.rem})
	n.ready.Store(true)
	n.log.LogAttrs(ctx, slog.LevelInfo, "node started", slog.String("dir", n.cfg.DataDir),
		slog.Int("kinds", len(n.kinds)), slog.String("manifest", n.man.Digest()))
	return nil
}

func (n *Node) startLocked(ctx context.Context) error {
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("tempest: data dir: %w", err)
	}
	store, err := prospero.NewBoltStore(filepath.Join(n.cfg.DataDir, StateFile))
	if err != nil {
		return fmt.Errorf("tempest: state store: %w", err)
	}
	n.store = store
	pc := n.cfg.Supervisor
	pc.Store = store
	pc.Events = prospero.EventFunc(n.emit)
	sup, err := prospero.NewSupervisor(pc)
	if err != nil {
		return err
	}
	n.sup = sup
	for _, name := range n.reg.Names() {
		k := n.kinds[name]
		if _, err := sup.Register(name, k.factory, k.opts.KindOptions); err != nil {
			return err
		}
	}
	n.wreg = wire.NewRegistry()
	for _, name := range n.reg.Names() {
		for _, m := range n.kinds[name].opts.Messages {
			if n.msgs.byTag[m.Tag].kind != name {
				continue // a message several kinds take is registered once
			}
			if err := m.register(n.wreg); err != nil {
				return fmt.Errorf("tempest: kind %q: %w", name, err)
			}
		}
	}
	sc := n.cfg.Scheduler
	if n.cl != nil || len(n.msgs.byTag) > 0 {
		sc.Vet = n.vet
	}
	sc.Activator = arielhost.Activator(sup)
	sc.Faults = arielhost.Faults(sup)
	if n.trc = newTracing(n.cfg.Name, n.cfg.TracerProvider); n.trc != nil {
		sc.Tracer = n.trc
	}
	sched, err := ariel.New(sc)
	if err != nil {
		return err
	}
	n.sched = sched
	if err := arielhost.Start(sup, sched); err != nil {
		return err
	}
	// The manifest was computed in New; the kinds are known now.
	n.man.Capacities.Kinds = n.kindCapacities(sched)
	if n.rem, err = n.startReminders(ctx); err != nil {
		return err
	}
	if n.cl != nil {
		return n.cl.start(ctx)
	}
	return nil
}

// Close shuts the node down gracefully: readiness turns false; in a
// cluster the node's shards are handed off to other nodes (their actors
// passivated and their state at rest shipped to the new owners); new mail
// is refused, every active actor is passivated (its state written at
// rest); the node leaves the cluster; then the components stop in reverse
// start order. It waits until that is done or ctx ends (default
// Config.CloseTimeout). It is idempotent; later calls return the first
// call's result once it is done. An error wrapping ErrHandoffIncomplete
// means state at rest this node owned was not handed off (it stays in
// this node's store); the node is closed all the same.
func (n *Node) Close(ctx context.Context) error { return n.close(ctx, true) }

// close is Close; graceful false stops the node as a crash would, as far
// as the cluster can tell: it vanishes from gossip and raft without
// handing anything off (tests use it; local state is still written).
func (n *Node) close(ctx context.Context, graceful bool) error {
	n.mu.Lock()
	switch n.state {
	case stateClosing, stateClosed:
		n.mu.Unlock()
		select {
		case <-n.closed:
			return n.cerr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n.state = stateClosing
	n.phase.Store(uint32(stateClosing))
	n.ready.Store(false)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.CloseTimeout)
		defer cancel()
	}
	var handoffErr error
	if n.cl != nil && graceful && n.sched != nil {
		// Handing off needs the node running: it still serves what it
		// owns until each shard has moved.
		if err := n.cl.leave(ctx); err != nil {
			n.log.LogAttrs(ctx, slog.LevelWarn, "leave: shards not handed off", slog.Any("error", err))
			handoffErr = fmt.Errorf("%w: %w", ErrHandoffIncomplete, err)
		}
		// A clean exit promises that everything this node owned moved.
		handoffErr = errors.Join(handoffErr, n.cl.unshippedErr())
	}
	n.run.Store(nil)
	err := errors.Join(handoffErr, n.shutdownLocked(ctx, graceful))
	n.cerr = err
	n.state = stateClosed
	n.phase.Store(uint32(stateClosed))
	close(n.closed)
	n.mu.Unlock()
	n.log.LogAttrs(ctx, slog.LevelInfo, "node closed")
	return err
}

// shutdownLocked stops what was started, in reverse order.
func (n *Node) shutdownLocked(ctx context.Context, graceful bool) error {
	var errs []error
	if n.cl != nil && !graceful {
		errs = append(errs, n.cl.stopNetwork(ctx, false))
	}
	if n.rem != nil {
		// Delivered progress goes at rest while the store is open.
		errs = append(errs, n.rem.Close(ctx))
	}
	if n.sup != nil {
		// The supervisor passivates through the scheduler, so it goes first.
		errs = append(errs, n.sup.Close(ctx))
	}
	if n.cl != nil && graceful {
		errs = append(errs, n.cl.stopNetwork(ctx, true))
	}
	if n.sched != nil {
		errs = append(errs, n.sched.Close(ctx))
	}
	if n.cl != nil && n.cl.pl != nil && n.store != nil {
		// Activations the index loop had no time to record.
		errs = append(errs, n.cl.flushIndex(ctx))
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	return errors.Join(errs...)
}

// Ready reports whether the node accepts work: started and not shutting
// down; in a cluster also joined, with a known raft leader, an
// initialised placement table and a fresh placement lease. Readiness says
// why not.
func (n *Node) Ready() bool { return n.Readiness() == nil }

// Readiness is nil when the node is Ready, else why it is not: ErrNotStarted,
// ErrClosed, ErrNoQuorum (no raft leader is known: a majority of the
// placement voters is unreachable, or the election has not finished), or a
// *NotReadyError naming the step it waits for.
func (n *Node) Readiness() error {
	if !n.ready.Load() {
		if lifecycle(n.phase.Load()) == stateNew {
			return ErrNotStarted
		}
		return ErrClosed
	}
	if n.cl == nil {
		return nil
	}
	return n.cl.readiness()
}

// WaitReady waits until the node is Ready. It returns nil then, ErrClosed
// if the node closes meanwhile, or, when ctx ends first, an error that
// matches ctx's error and says why the node is not ready (errors.Is
// ErrNoQuorum, *NotReadyError). Call it after Start.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		why := n.Readiness()
		switch {
		case why == nil:
			return nil
		case errors.Is(why, ErrClosed):
			return why
		}
		var changed <-chan struct{}
		if lifecycle(n.phase.Load()) != stateNew && n.cl != nil && n.cl.pl != nil {
			changed = n.cl.pl.Changed()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tempest: %s not ready: %w: %w", n.cfg.Name, ctx.Err(), why)
		case <-n.closed:
			return ErrClosed
		case <-changed:
		case <-t.C:
		}
	}
}

// Degraded explains why the node runs below its configured capacity, or
// returns "" when it does not: turns abandoned past their budget that
// have not returned hold more goroutines than the scheduler's
// replacement cap allows, so its pool runs short of workers. The node
// still answers (supervision, the HTTP API and mail for other nodes do
// not need the pool), and it recovers as the stuck turns return.
func (n *Node) Degraded() string {
	r := n.run.Load()
	if r == nil {
		return ""
	}
	st := r.sched.Stats()
	if !st.Degraded {
		return ""
	}
	return fmt.Sprintf("scheduler pool at %d of %d workers: %d turns stuck past their budget, replacement cap %d reached",
		st.Workers, n.cfg.Scheduler.Workers, st.Stuck, n.cfg.Scheduler.MaxReplacements)
}

// Live reports whether the node's process is healthy: it was not closed.
func (n *Node) Live() bool {
	select {
	case <-n.closed:
		return false
	default:
		return true
	}
}

// Done is closed when Close has finished.
func (n *Node) Done() <-chan struct{} { return n.closed }

func (n *Node) running() (*running, error) {
	if r := n.run.Load(); r != nil {
		return r, nil
	}
	if lifecycle(n.phase.Load()) == stateNew {
		return nil, ErrNotStarted
	}
	return nil, ErrClosed
}

// Ref returns the reference of the virtual actor kind/key.
func (n *Node) Ref(kind, key string) actor.Ref { return actor.Virtual(kind, key) }

// Tell sends msg to ref without waiting for it to be handled. A nil
// error means the message was accepted for delivery, not that it was
// handled. What Tell knows at once it returns, wherever the owner lives:
// ErrInvalidKey for a kind or key no actor can have; actor.ErrUnknownKind
// (naming the kind) when no node of the cluster registers the kind;
// ErrUnregisteredMessage for a message of a type no kind registered (in a
// cluster, also when the owner is this node); the routing errors when no
// owner can be found (actor.ErrProcessUnavailable, ErrNoQuorum,
// actor.ErrNoEligibleNode); ErrClosed during shutdown. actor.ErrRefused
// means the message was refused before it left: the owner is this node
// and the recipient's mailbox is full, or the send queue of the link to
// the owner is full.
//
// What only the owner can know arrives later and is not returned: when
// the owner is another node, its refusal (a full mailbox, an overloaded
// node, a stale placement epoch) is counted in Stats().Mail, and a tell
// sent by an actor (Context.Tell) comes back to that actor as an
// actor.Undelivered message. Use Ask when the caller needs to know that
// the message was handled.
//
// In a cluster, a tell for a shard being handed off or not placed yet
// waits (up to actor.DefaultAskTimeout) until placement settles.
func (n *Node) Tell(ref actor.Ref, msg any) error {
	r, err := n.running()
	if err != nil {
		return err
	}
	err = r.sched.Tell(ref, msg)
	if n.cl == nil || err == nil || !waitable(err) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), actor.DefaultAskTimeout)
	defer cancel()
	for waitable(err) {
		if werr := n.cl.awaitChange(ctx, 100*time.Millisecond); werr != nil {
			return err
		}
		err = r.sched.Tell(ref, msg)
	}
	return err
}

// waitable: the send failed before anything left this node, because
// placement is in flux; it may be tried again.
func waitable(err error) bool {
	return errors.Is(err, placement.ErrHandoff) || errors.Is(err, placement.ErrUnassigned) ||
		errors.Is(err, placement.ErrUninitialized) || errors.Is(err, placement.ErrLeaseExpired) ||
		errors.Is(err, placement.ErrBehind) || errors.Is(err, wire.ErrNotServing)
}

// Ask sends msg to ref and waits for the reply, until ctx's deadline
// (default actor.DefaultAskTimeout). Errors are the actor sentinels
// (ErrDeadlineExceeded, ErrRefused, ErrActorTerminated,
// ErrProcessUnavailable, ErrUnknownKind, ErrInvalidKey) or an error the
// actor replied.
//
// In a cluster, an ask for a shard being handed off or not placed yet
// waits until placement settles (within ctx), and an ask the receiving
// node refused as not its owner is sent again once, after this node's
// table changed. An ask that fails while this node knows no placement
// leader also matches ErrNoQuorum (besides ErrDeadlineExceeded when its
// deadline passed), so the caller learns why it was not answered.
func (n *Node) Ask(ctx context.Context, ref actor.Ref, msg any) (any, error) {
	if t := n.trc; t != nil {
		return t.ask(ctx, ref, func(ctx context.Context) (any, error) { return n.ask(ctx, ref, msg) })
	}
	return n.ask(ctx, ref, msg)
}

func (n *Node) ask(ctx context.Context, ref actor.Ref, msg any) (any, error) {
	r, err := n.running()
	if err != nil {
		return nil, err
	}
	if n.cl == nil {
		return r.sched.Ask(ctx, ref, msg)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, actor.DefaultAskTimeout)
		defer cancel()
	}
	resent := false
	for {
		reply, err := r.sched.Ask(ctx, ref, msg)
		switch {
		case err == nil:
			return reply, nil
		case waitable(err):
		case errors.Is(err, wire.ErrNotOwner) && !resent:
			resent = true
		default:
			return nil, n.cl.whyUnanswered(err)
		}
		if werr := n.cl.awaitChange(ctx, 100*time.Millisecond); werr != nil {
			return nil, n.cl.whyUnanswered(err)
		}
	}
}

// Status is what a reference designates.
type Status struct {
	Kind string
	Key  string
	// State is Valid (active), Dormant (state at rest or never activated),
	// ActorTerminated (a pinned incarnation was re-minted or retired),
	// ProcessUnavailable (its owner node is gone and it is not re-placed
	// yet) or Unknown.
	//
	// A virtual actor exists conceptually forever: an identity that was
	// never activated is Dormant with Incarnation 1, which is what it is
	// activated as when its first message arrives.
	State actor.ReferenceState
	// Node is the node that runs (or would run) the identity.
	Node string
	// Incarnation is the identity's current incarnation (1 for one never
	// activated, see State).
	Incarnation uint64
	// Active reports whether the identity is in memory on Node.
	Active bool
}

// Status reports what ref designates. Errors: ErrInvalidKey,
// actor.ErrUnknownKind, ErrNotStarted, ErrClosed, a store error.
func (n *Node) Status(ctx context.Context, ref actor.Ref) (Status, error) {
	if err := ref.Check(); err != nil {
		return Status{}, err
	}
	if !ref.IsVirtual() {
		return Status{}, fmt.Errorf("tempest: status of %v: not a virtual actor", ref)
	}
	r, err := n.running()
	if err != nil {
		return Status{}, err
	}
	if n.kind(ref.Kind()) == nil {
		return Status{}, fmt.Errorf("%w: %q", actor.ErrUnknownKind, ref.Kind())
	}
	if n.cl != nil {
		owner, local, err := n.cl.locate(ref)
		switch {
		case err != nil && errors.Is(err, actor.ErrProcessUnavailable):
			return Status{Kind: ref.Kind(), Key: ref.Key(), State: actor.ProcessUnavailable}, nil
		case err != nil:
			return Status{}, err
		case !local:
			// The owner's supervisor knows the rest; ask it there.
			return Status{Kind: ref.Kind(), Key: ref.Key(), State: actor.Unknown, Node: owner}, nil
		}
	}
	st, err := r.sup.Status(ctx, ref)
	if err != nil {
		return Status{}, err
	}
	return Status{Kind: ref.Kind(), Key: ref.Key(), State: st.State, Node: n.cfg.Name,
		Incarnation: st.Incarnation, Active: st.Active}, nil
}

// Passivate puts ref's activation to rest now: it handles a final
// Passivating turn, its state is written at rest and it becomes Dormant.
// It returns once that is done, or with ctx's error: also when the
// activation was already being passivated, it returns only once that
// write at rest is done. An identity with nothing in memory here (in a
// cluster: not on this node) is left alone. Errors: ErrInvalidKey,
// actor.ErrUnknownKind, ErrNotStarted, ErrClosed, a store error, ctx's.
func (n *Node) Passivate(ctx context.Context, ref actor.Ref) error {
	if err := ref.Check(); err != nil {
		return err
	}
	if !ref.IsVirtual() {
		return fmt.Errorf("tempest: passivate %v: not a virtual actor", ref)
	}
	r, err := n.running()
	if err != nil {
		return err
	}
	if n.kind(ref.Kind()) == nil {
		return fmt.Errorf("%w: %q", actor.ErrUnknownKind, ref.Kind())
	}
	id := prospero.IdentityOf(ref)
	ch := n.await(id)
	defer n.unawait(id, ch)
	for {
		if r.sup.Passivate(ref) {
			break
		}
		// Not active: at rest, or in a transition (already passivating,
		// hydrating, restarting). Only "nothing in memory" means its state
		// at rest is final; otherwise look again shortly.
		st, err := r.sup.Status(ctx, ref)
		if err != nil {
			return err
		}
		if !st.Active {
			return nil
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ch:
			t.Stop()
			return nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-n.closed:
			t.Stop()
			return ErrClosed
		}
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.closed:
		return ErrClosed
	}
}

func (n *Node) await(id prospero.Identity) chan struct{} {
	ch := make(chan struct{})
	n.waitMu.Lock()
	n.waiters[id] = append(n.waiters[id], ch)
	n.waitMu.Unlock()
	return ch
}

func (n *Node) unawait(id prospero.Identity, ch chan struct{}) {
	n.waitMu.Lock()
	defer n.waitMu.Unlock()
	ws := n.waiters[id]
	if i := slices.Index(ws, ch); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		delete(n.waiters, id)
	} else {
		n.waiters[id] = ws
	}
}

// emit is the supervisor's event sink: the activation log, Passivate's
// waiters, then the user's hook. It runs with the supervisor's lock held.
func (n *Node) emit(e prospero.Event) {
	if n.cl != nil {
		n.cl.track(e)
	}
	switch e.Type {
	case prospero.EventActivated, prospero.EventHydrated, prospero.EventRestarted, prospero.EventRehydrated:
		n.log.LogAttrs(context.Background(), slog.LevelInfo, LogActivated,
			slog.String(LogKeyActor, e.ID.String()), slog.Uint64(LogKeyIncarnation, e.Incarnation),
			slog.Uint64(LogKeyEpoch, n.epochOf(e.ID)), slog.String(LogKeyReason, e.Type.String()))
	case prospero.EventPassivated, prospero.EventRetired:
		n.log.LogAttrs(context.Background(), slog.LevelInfo, LogDeactivated,
			slog.String(LogKeyActor, e.ID.String()), slog.Uint64(LogKeyIncarnation, e.Incarnation),
			slog.Uint64(LogKeyEpoch, n.epochOf(e.ID)), slog.String(LogKeyReason, e.Type.String()))
		n.waitMu.Lock()
		for _, ch := range n.waiters[e.ID] {
			close(ch)
		}
		delete(n.waiters, e.ID)
		n.waitMu.Unlock()
	case prospero.EventStoreError:
		n.log.LogAttrs(context.Background(), slog.LevelError, LogStoreError,
			slog.String(LogKeyActor, e.ID.String()), slog.Uint64(LogKeyIncarnation, e.Incarnation),
			slog.Any(LogKeyError, e.Err))
	}
	if n.cfg.Events != nil {
		n.cfg.Events(e)
	}
}

// epochOf is the placement epoch of id's shard on this node (0 on a
// single node).
func (n *Node) epochOf(id prospero.Identity) uint64 {
	if n.cl == nil {
		return 0
	}
	return n.cl.epochOf(id)
}

// Stats is a snapshot of the node's counters, for the metrics endpoint.
type Stats struct {
	Scheduler  ariel.Stats
	Supervisor prospero.Stats
	// Cluster only:
	Mail      wire.MailStats
	Transport wire.Stats
	Members   int  // live members in this node's view
	Leader    bool // this node is the raft leader
	// HandoffIsolated counts identities this node isolated from its
	// handoffs: their records could not be shipped and stayed here.
	HandoffIsolated uint64
	// Unproven is how many live gossip members have not proved their
	// name with a certificate of the cluster CA (placement ignores them);
	// ProofsFailed counts the attempts to prove one that failed.
	Unproven     int
	ProofsFailed uint64
	// Gossip counts gossip traffic this node dropped (no key decrypts
	// it, or it does not decode).
	Gossip membership.TrafficStats
}

// Stats returns a snapshot; zero before Start and after Close.
func (n *Node) Stats() Stats {
	r := n.run.Load()
	if r == nil {
		return Stats{}
	}
	st := Stats{Scheduler: r.sched.Stats(), Supervisor: r.sup.Stats()}
	if c := n.cl; c != nil {
		st.Mail, st.Transport = c.rem.stats(), c.tr.Stats()
		for _, m := range c.ml.Members() {
			if !m.Status.Gone() {
				st.Members++
				if m.MetaErr == nil && !c.prove.Proven(m) {
					st.Unproven++
				}
			}
		}
		st.ProofsFailed = c.prove.failed.Load()
		st.Gossip = c.ml.Dropped()
		st.Leader = c.pl.IsLeader()
		st.HandoffIsolated = c.isolated.Load()
	}
	return st
}
