package tempest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/internal/cluster"
	"github.com/tempest-actors/tempest/internal/kinds"
	"github.com/tempest-actors/tempest/internal/tracing"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
	"github.com/tempest-actors/tempest/prospero/replica"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// Lifecycle errors of a Node.
var (
	// ErrNotStarted: the node was not started yet.
	ErrNotStarted = cluster.ErrNotStarted
	// ErrStarted: the operation is only allowed before Start.
	ErrStarted = errors.New("tempest: node already started")
	// ErrClosed: the node is shutting down or closed. It matches
	// actor.ErrProcessUnavailable too.
	ErrClosed = cluster.ErrClosed
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
	ErrNoQuorum = cluster.ErrNoQuorum
)

// DeadlineError is the error of an ask that was not answered before its
// deadline, the same wherever the owner runs: it names the actor and the
// time the ask had ("tempest: ask of account/alice: deadline exceeded
// after 300ms"), and adds that placement has no quorum when that is why
// (then errors.Is(err, ErrNoQuorum) holds too). errors.Is(err,
// actor.ErrDeadlineExceeded) and errors.Is(err, context.DeadlineExceeded)
// hold for every DeadlineError; Err is what
// the node saw (its own timer, the owner's answer that the ask expired in
// its mailbox, or the context), kept for errors.Is and errors.As only,
// since which of those came first is a race.
type DeadlineError struct {
	Ref     actor.Ref
	Timeout time.Duration // from the call to its deadline
	Err     error
}

func (e *DeadlineError) Error() string {
	s := fmt.Sprintf("tempest: ask of %v: deadline exceeded after %v", e.Ref, roughly(e.Timeout))
	if errors.Is(e.Err, ErrNoQuorum) {
		s += " (no placement quorum: no raft leader known)"
	}
	return s
}

// Is makes errors.Is(err, actor.ErrDeadlineExceeded) and errors.Is(err,
// context.DeadlineExceeded) hold whatever Err is: whether the context's
// error is among what the node saw depends on which timer fired first.
func (e *DeadlineError) Is(target error) bool {
	return target == actor.ErrDeadlineExceeded || target == context.DeadlineExceeded
}

// Unwrap returns what the node saw.
func (e *DeadlineError) Unwrap() error { return e.Err }

// roughly rounds d to two significant digits (299.97ms is 300ms, 4.9999s
// is 5s): the time between the caller setting its deadline and the call
// is noise in a message.
func roughly(d time.Duration) time.Duration {
	p := time.Duration(1)
	for d/p >= 100 {
		p *= 10
	}
	return d.Round(p)
}

// NotReadyError says which step of joining a cluster a node waits for.
type NotReadyError struct {
	Node string
	// Reason is "not joined", "placement table not initialised",
	// "placement lease not fresh" or "kinds not published in the
	// placement table".
	Reason string
}

func (e *NotReadyError) Error() string { return "tempest: " + e.Node + " not ready: " + e.Reason }

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
// A Node is made by New: a declared one (its zero value) is never
// started, and its methods return ErrNotStarted or zero values. A method
// given a nil context.Context returns ErrNilContext.
type Node struct {
	cfg  Config
	log  *slog.Logger
	man  manifest.Manifest
	reg  *prospero.Registry // validates kind names and options before Start
	msgs *kinds.Messages
	wreg *wire.Registry  // the kinds' message types; set in Start
	errs *kinds.Errors   // application error codes of every kind
	trc  *tracing.Tracer // nil when not tracing

	mu    sync.Mutex // guards state, kinds (before Start), the components
	state lifecycle
	kinds map[string]*kindInfo
	store *prospero.BoltStore
	repl  *replica.Store // in a cluster: store, replicated; nil otherwise
	// storeExisted: the state store was there before this start (a
	// restart, not a new node).
	storeExisted bool
	sup          *prospero.Supervisor
	sched        *ariel.Scheduler
	rem          *reminders.Engine
	closed       chan struct{} // closed when Close has finished
	cerr         error

	cl  router          // eng, or local for a standalone node
	eng *cluster.Engine // nil for a standalone node

	// remStore, set before Start by tests only, wraps the store the
	// reminder engine writes through (to hold its commits open or fail
	// them); nil: the node's own.
	remStore func(prospero.StateStore) prospero.StateStore

	run   atomic.Pointer[running] // set while started and not closing
	ready atomic.Bool
	phase atomic.Uint32 // lifecycle, readable without mu
}

// running is what the hot path needs, published once Start succeeded.
type running struct {
	sched *ariel.Scheduler
	sup   *prospero.Supervisor
	rem   *reminders.Engine
	hold  *reminders.Holder // keeps rem's shards equal to those the node keeps (cluster)
}

var _ actor.Client = (*Node)(nil)

// New validates cfg and returns a node that starts nothing until Start.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{
		cfg:    cfg,
		log:    cfg.Logger.With(LogKeyNode, cfg.Name),
		reg:    prospero.NewRegistry(),
		msgs:   kinds.NewMessages(),
		errs:   kinds.NewErrors(builtinErrors),
		kinds:  map[string]*kindInfo{},
		closed: make(chan struct{}),
	}
	n.cl = local{n}
	if cfg.Cluster != nil {
		n.eng = cluster.New(cfg.Cluster.engine(cfg, n.log), host{n})
		n.cl = n.eng
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
// Errors: ErrStarted, ErrClosed, ErrInvalidKind, prospero.ErrKindExists,
// prospero.ErrInvalidKindOptions.
func (n *Node) Register(kind string, factory func(key string) actor.Actor, opts KindOptions) error {
	if n.closed == nil {
		return errNotMade
	}
	if factory == nil {
		return fmt.Errorf("%w %q: nil factory", ErrInvalidKind, kind)
	}
	if err := actor.CheckKind(kind); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidKind, kind, err)
	}
	if strings.HasPrefix(kind, cluster.ReservedKindPrefix) {
		return fmt.Errorf("%w %q: names starting with %q are reserved", ErrInvalidKind, kind, cluster.ReservedKindPrefix)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.state {
	case stateStarted:
		return ErrStarted
	case stateClosing, stateClosed:
		return ErrClosed
	}
	if err := n.msgs.Check(kind, codecs(opts.Messages)); err != nil {
		return err
	}
	if err := n.errs.Check(kind, opts.Errors); err != nil {
		return err
	}
	k := &kindInfo{name: kind, opts: opts}
	k.opts.Messages = slices.Clone(opts.Messages)
	if opts.Gateway != nil {
		g := *opts.Gateway
		k.opts.Gateway = &g
		gw, err := kinds.NewGateway(kind, g.Schema, g.Input, g.Reply, codecs(opts.Messages), n.msgs)
		if err != nil {
			return err
		}
		k.gw = gw
	}
	if _, err := n.reg.Register(kind, opts.KindOptions); err != nil {
		return err
	}
	n.msgs.Add(kind, codecs(k.opts.Messages))
	if len(k.opts.Messages) > 0 {
		k.tags = wire.KindTags{}
		for _, m := range k.opts.Messages {
			k.tags[m.Tag] = struct{}{}
		}
	}
	n.errs.Add(opts.Errors)
	k.opts.Errors = nil // kept in n.errs
	k.factory = factory
	n.kinds[kind] = k
	return nil
}

// vet is the scheduler's Vet hook. A message to a kind no node of the
// cluster registers fails with actor.ErrUnknownKind naming the kind, and
// one of a registered type the kind does not declare in its
// KindOptions.Messages with ErrUnregisteredMessage (on the owner's node
// alike, when this one does not register the kind). A message to (or a
// reply from) a virtual actor is delivered in the form a remote sender's would arrive
// in (a *T of a registered type as a T), so a handler needs one case per
// type. In a cluster a message of an unregistered type is refused here,
// whoever owns the key: it could not cross the wire, so it must not work
// only when the owner happens to be local.
func (n *Node) vet(to actor.Ref, msg any) (any, error) {
	// No node hosts the kind: say so now, naming it, for a tell as for an
	// ask and wherever its key would be placed. (A reference no actor can
	// have is left to routing, which refuses it with ErrInvalidKey.)
	k := n.kind(to.Kind())
	if k == nil && to.Check() == nil && !n.rt().HostsKind(to.Kind()) {
		return nil, fmt.Errorf("%w: %q", actor.ErrUnknownKind, to.Kind())
	}
	v, tag, err := n.wreg.ValueTag(msg)
	if err != nil {
		if n.eng == nil && tag == 0 {
			return msg, nil // standalone: any Go value of a type not registered
		}
		return nil, err // (a nil *T of a registered type too, on every node)
	}
	// A message of a type the kind did not declare, when it is registered
	// here (the owner's node refuses it alike when it is not).
	if k != nil {
		if err := k.tags.Check(to.Kind(), tag, msg); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// vetReply is the scheduler's VetReply hook: a virtual actor's reply in
// the form a remote asker's would arrive in.
func (n *Node) vetReply(_ actor.Ref, msg any) (any, error) {
	v, tag, err := n.wreg.ValueTag(msg)
	if err != nil {
		if n.eng == nil && tag == 0 {
			return msg, nil
		}
		return nil, err
	}
	return v, nil
}

// hosted reports whether kind is registered here or, in a cluster, by a
// live member: the kinds an operation on a reference may address from
// this node (the owner of a kind registered elsewhere is asked, as an
// ask is routed).
func (n *Node) hosted(kind string) bool {
	return n.kind(kind) != nil || n.rt().HostsKind(kind)
}

// vetError is the scheduler's VetError hook of a clustered node: an
// actor's reply error takes the form it has once it crossed the wire
// (wire.Registry.AppendError, then DecodeError), whoever asked. An asker
// on this node then sees what one on another node sees: the actor
// sentinel's code, the registered application sentinel
// (KindOptions.Errors), the value of a registered message type, and
// otherwise only the text, in a *wire.RemoteError. Without it errors.Is
// and errors.As would answer for an unregistered error only when the
// owner happens to be the caller's node. A reply error that is already
// in that form (relayed from another node) keeps it.
func (n *Node) vetError(_ actor.Ref, err error) error {
	v, derr := n.wreg.DecodeError(n.wreg.AppendError(nil, err))
	if e, ok := v.(error); derr == nil && ok {
		return e
	}
	return err
}

// ErrNilContext: a method that takes a context.Context was given nil.
var ErrNilContext = errors.New("tempest: nil context")

// errNotMade is what a Node's methods return when it was not made by New
// (its zero value): it is not started, and cannot be.
var errNotMade = fmt.Errorf("%w: a Node is made by New, not declared", ErrNotStarted)

// usable checks what every method that takes a context checks first.
func (n *Node) usable(ctx context.Context) error {
	switch {
	case n.closed == nil:
		return errNotMade
	case ctx == nil:
		return ErrNilContext
	}
	return nil
}

// rt is the node's router (a Node not made by New has none: a
// standalone node's then answers for it).
func (n *Node) rt() router {
	if n.cl == nil {
		return local{n}
	}
	return n.cl
}

// lockIfNew takes n.mu while the node is new, and returns its release:
// until Start is done, Register and Start write the kinds and the
// components; afterwards they are fixed, and reading them must not wait
// for a Close in progress, which holds n.mu (a metrics scrape or a probe
// during a graceful leave would hang for its length).
func (n *Node) lockIfNew() func() {
	if lifecycle(n.phase.Load()) != stateNew {
		return func() {}
	}
	n.mu.Lock()
	return n.mu.Unlock
}

// Kinds returns the names of the registered kinds, sorted.
func (n *Node) Kinds() []string {
	defer n.lockIfNew()()
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
	defer n.lockIfNew()()
	return n.kinds[name]
}

// Start opens the state store and starts the supervisor and the scheduler
// (and in a cluster begins to join it: Ready says when it has). ctx bounds
// the start only: what Start starts runs until Close, whatever becomes of
// ctx after Start returned. If Start fails, what it started is stopped
// again and the node is closed; a ctx that has ended already starts
// nothing and returns its error, leaving the node new.
func (n *Node) Start(ctx context.Context) error {
	if err := n.usable(ctx); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.state {
	case stateStarted:
		return ErrStarted
	case stateClosing, stateClosed:
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
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
	n.run.Store(&running{sched: n.sched, sup: n.sup, rem: n.rem, hold: reminders.NewHolder(n.rem, n.log)})
	n.ready.Store(true)
	n.log.LogAttrs(ctx, slog.LevelInfo, "node started", slog.String("dir", n.cfg.DataDir),
		slog.Int("kinds", len(n.kinds)), slog.String("manifest", n.man.Digest()))
	return nil
}

func (n *Node) startLocked(ctx context.Context) error {
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("tempest: data dir: %w", err)
	}
	if n.eng != nil {
		// Before anything in the data directory is opened or written.
		if err := placement.CheckDataDir(n.cfg.DataDir, n.cfg.Name); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, StateFile)); err == nil {
		n.storeExisted = true
	}
	store, err := prospero.NewBoltStore(filepath.Join(n.cfg.DataDir, StateFile))
	if err != nil {
		return fmt.Errorf("tempest: state store: %w", err)
	}
	n.store = store
	if back := store.Recovered(); back > 0 {
		n.log.LogAttrs(ctx, slog.LevelInfo, "state store: wrote back writes sent to replicas before the last stop and not yet committed",
			slog.Int("records", back), slog.Any("from", prospero.PendingLogFiles(store.Path())))
	}
	if bad := store.InvalidIdentities(); bad.Count > 0 {
		first := make([]string, len(bad.First))
		for i, id := range bad.First {
			first[i] = fmt.Sprintf("%q", id.String())
		}
		n.log.LogAttrs(ctx, slog.LevelWarn, "state store holds records whose identity is not valid: they are isolated (not read, handed off or replicated)",
			slog.Int("records", bad.Count), slog.String("first", strings.Join(first, ", ")))
	}
	pc := n.cfg.Supervisor
	pc.Store = store
	if n.eng != nil {
		rc := n.cfg.Cluster.Replication
		n.repl, err = replica.New(replica.Config{Local: store, Timeout: rc.Timeout, SyncReplicas: rc.SyncReplicas, MinInSync: rc.MinInSync, Logger: n.log})
		if err != nil {
			return err
		}
		pc.Store = n.repl
	}
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
	if err := n.msgs.Register(n.wreg, n.reg.Names(), func(kind string) []kinds.Codec {
		return codecs(n.kinds[kind].opts.Messages)
	}); err != nil {
		return err
	}
	for _, name := range n.reg.Names() {
		if k := n.kinds[name]; k.tags != nil {
			n.wreg.DeclareKind(name, slices.Collect(maps.Keys(k.tags)))
		}
	}
	sc := n.cfg.Scheduler
	if n.eng != nil || n.msgs.Len() > 0 {
		sc.Vet, sc.VetReply = n.vet, n.vetReply
	}
	if n.eng != nil {
		sc.VetError = n.vetError
		sc.ForeignAskTimeouts = n.eng.ForeignAskTimeouts
		// This node's own refusals at admission in the form a remote
		// owner's take, naming the refusing node, so that a sender
		// (program code or an actor) sees the same error, text included,
		// whichever node owns the recipient.
		sc.Refuse = func(sentinel error) error {
			reason := wire.RefusedReasonMailboxFull
			if sentinel == actor.ErrActorTerminated {
				reason = wire.RefusedReasonTerminatedIncarnation
			}
			return &wire.RefusedError{Node: n.cfg.Name, Reason: reason, Detail: sentinel.Error()}
		}
	}
	sc.Activator = arielhost.Activator(sup)
	if n.eng != nil {
		sc.Activator = arielhost.FencedActivator(sup, n.eng.FenceActivation)
		sc.Lapsed = n.eng.Lapsed
	}
	sc.Faults = arielhost.Faults(sup)
	if n.trc = tracing.New(n.cfg.Name, n.cfg.TracerProvider); n.trc != nil {
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
	for _, name := range n.reg.Names() {
		if n.eng != nil {
			// Served only under the placement lease (Engine.Lapsed).
			if err := sched.SetLeased(name); err != nil {
				return err
			}
		}
		if n.kinds[name].opts.Reminders {
			// Right after arielhost.Start registered the kinds: a kind's
			// cells carry what was set when they were made, and no mail
			// reaches the scheduler before the node is running (n.run)
			// or its cluster has started.
			if err := sched.SetHoldOutputs(name); err != nil {
				return err
			}
		}
	}
	// The manifest was computed in New; the kinds are known now.
	n.man.Capacities.Kinds = n.kindCapacities(sched)
	if n.rem, err = n.startReminders(ctx); err != nil {
		return err
	}
	if n.eng == nil {
		return nil
	}
	if err := n.errs.Register(n.wreg); err != nil {
		return fmt.Errorf("tempest: error codes: %w", err)
	}
	return n.eng.Start(ctx, cluster.Deps{Registry: n.wreg, Sched: sched, Sup: sup, Tracer: n.trc, Manifest: n.man,
		KindNames: n.reg.Names(), Kinds: n.kindSpecs(), Store: n.store, Replicas: n.repl, StoreExisted: n.storeExisted})
}

// Close shuts the node down gracefully: readiness turns false; in a
// cluster the node's shards are handed off to other nodes (their actors
// passivated and their state at rest shipped to the new owners); new mail
// is refused, every active actor is passivated (its state written at
// rest); the node leaves the cluster; then the components stop in reverse
// start order. It waits until that is done or ctx ends (default
// Config.CloseTimeout). It is idempotent; later calls return the first
// call's result once it is done. An error wrapping ErrHandoffIncomplete
// means state at rest this node owned was not handed off although another
// node could have taken it (it stays in this node's store); the node is
// closed all the same. When no other node can (none is up: the others are
// gone or leaving too, as when a whole cluster stops, or no placement
// leader is known), nothing is handed off and Close does not wait for it:
// the state stays in this node's store and on its replicas.
func (n *Node) Close(ctx context.Context) error {
	if err := n.usable(ctx); err != nil {
		return err
	}
	return n.close(ctx, true)
}

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
	if graceful && n.sched != nil {
		// Handing off needs the node running: it still serves what it
		// owns until each shard has moved.
		if err := n.rt().Leave(ctx); err != nil {
			n.log.LogAttrs(ctx, slog.LevelWarn, "leave: shards not handed off", slog.Any("error", err))
			handoffErr = fmt.Errorf("%w: %w", ErrHandoffIncomplete, err)
		}
		// A clean exit promises that everything this node owned moved.
		handoffErr = errors.Join(handoffErr, n.rt().UnshippedErr())
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
	if !graceful {
		errs = append(errs, n.rt().StopNetwork(ctx, false))
	}
	if n.rem != nil {
		// Delivered progress goes at rest while the store is open.
		errs = append(errs, n.rem.Close(ctx))
	}
	if n.sched != nil && n.sup != nil {
		if st := n.sched.Stats(); st.Workers == 0 && st.Stuck > 0 {
			// No worker is left to run the Passivating turns (each one is
			// stuck in a turn abandoned past its budget, the replacement
			// cap reached): the scheduler closes first, which runs each
			// final turn on a goroutine of its own, so that the healthy
			// actors' state is still written. (It does not wait here for
			// the stuck turns; its Close below does, within ctx.)
			closing, cancel := context.WithCancel(ctx)
			cancel()
			_ = n.sched.Close(closing)
		}
	}
	if n.sup != nil {
		// The supervisor passivates through the scheduler, so it goes first.
		errs = append(errs, n.sup.Close(ctx))
	}
	if graceful {
		errs = append(errs, n.rt().StopNetwork(ctx, true))
	}
	if n.sched != nil {
		errs = append(errs, n.sched.Close(ctx))
	}
	if n.eng.Placement() != nil && n.store != nil {
		// Activations the index loop had no time to record.
		errs = append(errs, n.eng.FlushIndex(ctx))
	}
	if n.repl != nil {
		errs = append(errs, n.repl.Close()) // closes store too
	} else if n.store != nil {
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
		if n.closed == nil {
			return errNotMade
		}
		if lifecycle(n.phase.Load()) == stateNew {
			return ErrNotStarted
		}
		return ErrClosed
	}
	err := n.rt().Readiness()
	if nr, ok := err.(*cluster.NotReadyError); ok {
		return &NotReadyError{Node: nr.Node, Reason: nr.Reason}
	}
	return err
}

// WaitReady waits until the node is Ready. It returns nil then, ErrClosed
// if the node closes meanwhile, or, when ctx ends first, an error that
// matches ctx's error and says why the node is not ready (errors.Is
// ErrNoQuorum, *NotReadyError). Call it after Start.
func (n *Node) WaitReady(ctx context.Context) error {
	if err := n.usable(ctx); err != nil {
		return err
	}
	tick, stop := n.cfg.Clock.NewTicker(20 * time.Millisecond)
	defer stop()
	for {
		why := n.Readiness()
		switch {
		case why == nil:
			return nil
		case errors.Is(why, ErrClosed):
			return why
		}
		var changed <-chan struct{}
		if pl := n.rt().Placement(); lifecycle(n.phase.Load()) != stateNew && pl != nil {
			changed = pl.Changed()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tempest: %s not ready: %w: %w", n.cfg.Name, ctx.Err(), why)
		case <-n.closed:
			return ErrClosed
		case <-changed:
		case <-tick:
		}
	}
}

// StoreDamaged returns a channel closed once the node's state store is
// found damaged while it runs (Degraded then says how; every read and
// write of state at rest fails from then on). A program that embeds the
// node should stop it, so that its shards move to nodes that can serve
// them; the agent does, and exits with its code for damaged files. Nil
// before Start: a nil channel never delivers.
func (n *Node) StoreDamaged() <-chan struct{} {
	defer n.lockIfNew()()
	if n.store == nil {
		return nil
	}
	return n.store.DamagedCh()
}

// StoreDamage returns the error the damaged state store returns to every
// operation, or nil while it is sound.
func (n *Node) StoreDamage() error {
	unlock := n.lockIfNew()
	store := n.store
	unlock()
	if store == nil {
		return nil
	}
	return store.Damaged()
}

// Degraded explains why the node runs below its configured capacity, or
// returns "" when it does not: its state store was damaged while it ran
// (every read and write of state at rest fails with prospero.ErrCorrupt
// naming the file until the node restarts and checks it), its state
// store's writes fail or its file system is short of room for them (a
// full disk: the asks that change persisted state fail not committed
// until there is room again; in a cluster the node gives up its shards
// and replica places meanwhile), or turns
// abandoned past their budget that
// have not returned hold more goroutines than the scheduler's
// replacement cap allows, so its pool runs short of workers. The node
// still answers (supervision, the HTTP API and mail for other nodes do
// not need the pool), and it recovers as the stuck turns return.
func (n *Node) Degraded() string {
	r := n.run.Load()
	if r == nil {
		return ""
	}
	unlock := n.lockIfNew()
	store := n.store
	unlock()
	if store != nil {
		if err := store.Damaged(); err != nil {
			return err.Error()
		}
		if err := store.WriteFailure(); err != nil {
			return err.Error()
		}
		if err := store.Room(); err != nil {
			return "state store short of room: " + err.Error()
		}
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
	if n.closed == nil {
		return false
	}
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
	if n.closed == nil {
		return nil, errNotMade
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
// owner can be found (actor.ErrProcessUnavailable, actor.ErrNoEligibleNode;
// while this node knows no placement leader an unreachable owner's error
// matches ErrNoQuorum too, whichever node owns the key); ErrClosed during
// shutdown; ErrMessageTooLarge when msg is too large to cross to the
// owner's node. actor.ErrRefused
// means the message was refused before it left: the owner is this node
// and the recipient's mailbox is full (in a cluster a *wire.RefusedError,
// MAILBOX_FULL, naming this node, the error an ask gets from any node),
// or the send queue of the link to the owner is full.
//
// What only the owner can know arrives later and is not returned: when
// the owner is another node, its refusal (a full mailbox, an overloaded
// node, a stale placement epoch) is counted in Stats().Mail, and a tell
// sent by an actor (Context.Tell) comes back to that actor as an
// actor.Undelivered message. Use Ask when the caller needs to know that
// the message was handled.
//
// In a cluster, a tell for a shard being handed off or not placed yet,
// or whose owner's node cannot be reached (no link: the tell never left),
// waits (up to actor.DefaultAskTimeout, or ctx's deadline with
// TellContext) until placement settles; after that it returns the last
// error.
func (n *Node) Tell(ref actor.Ref, msg any) error {
	if tracing.Built && n.trc != nil {
		return n.TellContext(context.Background(), ref, msg)
	}
	return n.tell(context.Background(), ref, msg, nil)
}

// TellContext is Tell with a context: its deadline (default
// actor.DefaultAskTimeout) bounds the wait for placement to settle, and
// its span, on a node that traces (Config.TracerProvider), is the parent
// of the tell's tempest.tell span (see docs/operations.md, "Tracing").
func (n *Node) TellContext(ctx context.Context, ref actor.Ref, msg any) error {
	if err := n.usable(ctx); err != nil {
		return err
	}
	if t := n.trc; tracing.Built && t != nil {
		return t.Tell(ctx, ref, func(tr any) error { return n.tell(ctx, ref, msg, tr) })
	}
	return n.tell(ctx, ref, msg, nil)
}

// tell is Tell; tr, when not nil, is the tell's trace (see internal/tracing).
func (n *Node) tell(ctx context.Context, ref actor.Ref, msg any, tr any) error {
	r, err := n.running()
	if err != nil {
		return err
	}
	send := func(r *running, ref actor.Ref, msg, tr any) error {
		if tracing.Built && tr != nil {
			return r.sched.TellTraced(ref, msg, tr)
		}
		return r.sched.Tell(ref, msg)
	}
	if err = send(r, ref, msg, tr); err == nil {
		return nil
	}
	// Refused: the router decides whether to send again. The closure is
	// made only here, so that a tell that went through allocates nothing.
	return n.rt().Resend(ctx, err, func() error { return send(r, ref, msg, tr) })
}

// Ask sends msg to ref and waits for the reply, until ctx's deadline
// (default actor.DefaultAskTimeout). Errors are the actor sentinels
// (ErrDeadlineExceeded, always as a *DeadlineError naming ref and the
// time the ask had, whether the owner is local or remote; ErrRefused,
// ErrActorTerminated, ErrProcessUnavailable, ErrUnknownKind,
// ErrInvalidKey) or an error the actor replied. In a cluster, a full
// mailbox's refusal is a *wire.RefusedError (MAILBOX_FULL, naming the
// owner) on every node, the owner included. An error the actor replied
// that matches ErrDeadlineExceeded (a downstream ask of its own that
// timed out) keeps its text: only this ask's own expiry is a
// *DeadlineError. ErrMessageTooLarge: msg, or the reply, is too large to
// cross between this node and the owner's.
//
// In a cluster, an ask for a shard being handed off or not placed yet,
// or whose owner's node cannot be reached (crashed or cut off, before
// placement moved its shards), waits until placement settles (within
// ctx), and an ask the owner's node refused without running it
// (NOT_OWNER, NOT_SERVING) is sent again once this node's table routes it
// elsewhere, or the owner may serve again: the retry policy of every
// sender, see docs/federation.md, "Retries". An ask whose turn ran, or
// that may have (the link to its owner went down before the answer:
// wire.ErrLinkLost, outcome unknown), is never sent again. An ask that
// is not answered (its deadline passed, or its owner cannot be reached)
// while this node knows no placement leader also matches ErrNoQuorum,
// besides ErrDeadlineExceeded or actor.ErrProcessUnavailable, whichever
// node owns the key, so the caller learns why it was not answered.
func (n *Node) Ask(ctx context.Context, ref actor.Ref, msg any) (any, error) {
	if err := n.usable(ctx); err != nil {
		return nil, err
	}
	if t := n.trc; tracing.Built && t != nil {
		return t.Ask(ctx, ref, func(ctx context.Context) (any, error) { return n.ask(ctx, ref, msg) })
	}
	return n.ask(ctx, ref, msg)
}

func (n *Node) ask(ctx context.Context, ref actor.Ref, msg any) (any, error) {
	r, err := n.running()
	if err != nil {
		return nil, err
	}
	start := n.cfg.Clock.Now()
	// The deadline policy of ref's kind: its default when ctx sets no
	// deadline, at most its maximum. The owner's node clamps to the same
	// maximum on arrival (for callers that do not register the kind).
	set, _ := ctx.Deadline()
	deadline := r.sched.AskDeadline(ref, start, set)
	if !deadline.Equal(set) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline.Sub(start))
		defer cancel()
	}
	reply, err := n.askRouted(ctx, ref, msg)
	if err != nil && errors.Is(err, actor.ErrDeadlineExceeded) && askExpired(ctx, err, !n.cfg.Clock.Now().Before(deadline)) {
		var de *DeadlineError
		if !errors.As(err, &de) {
			err = &DeadlineError{Ref: ref, Timeout: max(deadline.Sub(start), 0), Err: err} // an ask whose deadline had passed had no time
		}
	}
	return reply, err
}

// askExpired reports whether err, which matches actor.ErrDeadlineExceeded,
// says that the ask itself ran out of time (its context ended, or its
// deadline passed: past says so by this node's clock; this node's timer
// fired, also with no placement quorum; the owner's mailbox expired it),
// not that its actor replied an error of its own that matches it (a
// downstream ask that timed out, say), which keeps its text.
func askExpired(ctx context.Context, err error, past bool) bool {
	if past || ctx.Err() != nil || err == actor.ErrDeadlineExceeded || errors.Is(err, ErrNoQuorum) {
		return true
	}
	var re *wire.RefusedError
	return errors.As(err, &re) && re.Reason == wire.RefusedReasonExpired
}

func (n *Node) askRouted(ctx context.Context, ref actor.Ref, msg any) (any, error) {
	r, err := n.running()
	if err != nil {
		return nil, err
	}
	reply, err := r.sched.Ask(ctx, ref, msg)
	if err == nil {
		return reply, nil
	}
	return n.rt().Reask(ctx, err, func() (any, error) { return r.sched.Ask(ctx, ref, msg) })
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

// Status reports what ref designates. It gives the same answer on every
// node of a cluster: a node that does not own ref asks the owner's
// supervisor over the federation protocol (see docs/federation.md). An
// owner that cannot be reached, or cannot serve the actor now (also for
// want of a placement quorum: ErrNoQuorum is a State, not an error, here),
// gives State ProcessUnavailable. A kind registered only on other nodes
// is answered by its owner as from those nodes. Errors: ErrInvalidKey,
// actor.ErrUnknownKind (no live member registers the kind),
// actor.ErrNoEligibleNode, ErrNotStarted, ErrClosed, a store error,
// ctx's.
func (n *Node) Status(ctx context.Context, ref actor.Ref) (Status, error) {
	if err := ref.Check(); err != nil {
		return Status{}, err
	}
	if err := n.usable(ctx); err != nil {
		return Status{}, err
	}
	if err := ctx.Err(); err != nil { // as on every node, the owner's too
		return Status{}, err
	}
	if !ref.IsVirtual() {
		return Status{}, fmt.Errorf("tempest: status of %v: not a virtual actor", ref)
	}
	if _, err := n.running(); err != nil {
		return Status{}, err
	}
	if !n.hosted(ref.Kind()) {
		return Status{}, fmt.Errorf("%w: %q", actor.ErrUnknownKind, ref.Kind())
	}
	st, err := n.rt().Status(ctx, ref)
	return Status(st), err
}

// statusHere is Status answered by this node's supervisor, for an
// identity this node owns (or any, standalone).
func (n *Node) statusHere(ctx context.Context, ref actor.Ref) (Status, error) {
	r, err := n.running()
	if err != nil {
		return Status{}, err
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
// write at rest is done. An identity with nothing in memory is left
// alone. In a cluster it acts on the node that owns ref, from any node
// (over the federation protocol), also from a node that does not
// register ref's kind; while ref's shard cannot be served
// (moving, lease not fresh) it passivates what this node holds in
// memory. Errors: ErrInvalidKey, actor.ErrUnknownKind, ErrNotStarted,
// ErrClosed, actor.ErrProcessUnavailable (the owner cannot be reached;
// also ErrNoQuorum while this node knows no placement leader), a store
// error, actor.ErrNotCommitted (the Passivating turn was abandoned past
// its budget: the actor left memory without its state written), ctx's.
func (n *Node) Passivate(ctx context.Context, ref actor.Ref) error {
	if err := ref.Check(); err != nil {
		return err
	}
	if err := n.usable(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil { // nothing is done with an ended ctx, on any node
		return err
	}
	if !ref.IsVirtual() {
		return fmt.Errorf("tempest: passivate %v: not a virtual actor", ref)
	}
	if _, err := n.running(); err != nil {
		return err
	}
	if !n.hosted(ref.Kind()) {
		return fmt.Errorf("%w: %q", actor.ErrUnknownKind, ref.Kind())
	}
	return n.rt().Passivate(ctx, ref)
}

// passivateHere is Passivate of what this node holds in memory for ref.
func (n *Node) passivateHere(ctx context.Context, ref actor.Ref) error {
	r, err := n.running()
	if err != nil {
		return err
	}
	err = r.sup.PassivateWait(ctx, ref)
	if errors.Is(err, prospero.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// emit is the supervisor's event sink: the activation log, then the
// user's hook. It runs with the supervisor's lock held.
func (n *Node) emit(e prospero.Event) {
	n.rt().Track(e)
	switch e.Type {
	case prospero.EventActivated, prospero.EventHydrated, prospero.EventRestarted, prospero.EventRehydrated:
		n.log.LogAttrs(context.Background(), slog.LevelInfo, LogActivated,
			slog.String(LogKeyActor, e.ID.String()), slog.Uint64(LogKeyIncarnation, e.Incarnation),
			slog.Uint64(LogKeyEpoch, n.epochOf(e.ID)), slog.String(LogKeyReason, e.Type.String()))
	case prospero.EventPassivated, prospero.EventRetired, prospero.EventRejected:
		n.log.LogAttrs(context.Background(), slog.LevelInfo, LogDeactivated,
			slog.String(LogKeyActor, e.ID.String()), slog.Uint64(LogKeyIncarnation, e.Incarnation),
			slog.Uint64(LogKeyEpoch, n.epochOf(e.ID)), slog.String(LogKeyReason, e.Type.String()))
	case prospero.EventStoreError:
		level := slog.LevelError
		if errors.Is(e.Err, replica.ErrLeaseLapsed) || errors.Is(e.Err, placement.ErrLeaseExpired) ||
			errors.Is(e.Err, cluster.ErrNotReplicating) {
			// Not the store's fault: this node may not commit for now (a
			// raft election, or it is cut off; or the shard moved away
			// while it was paused), which every election causes and the
			// write's caller is told (not committed).
			level = slog.LevelWarn
		}
		n.log.LogAttrs(context.Background(), level, LogStoreError,
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
	return n.rt().EpochOf(id)
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
	// InvalidAtRest is how many records of the state store had, when it
	// opened, an identity that is not valid (written by a version that
	// did not check keys): they are isolated, never read, handed off or
	// replicated, and reported once in the log at start.
	InvalidAtRest int
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
	// Retry counts mail that waited to be sent again under the retry
	// policy of every sender (docs/federation.md, "Retries").
	Retry RetryStats
}

// RetryStats are the counters of the retry policy: messages whose route
// was in flux, or that the owner's node refused without running them,
// and that waited in the routing layer to be sent again.
type RetryStats struct {
	Parked uint64 // messages that waited (each time they did)
	Resent uint64 // messages sent again
	// GaveUp counts tells that waited longer than the retry wait (an
	// actor sender got them back as actor.Undelivered; program code's
	// are only counted here), and program code's tells lost otherwise
	// after a refusal: a full retry queue, a failed resend. Asks end at
	// their deadline instead.
	GaveUp  uint64
	Waiting int64 // messages waiting now
}

// Stats returns a snapshot; zero before Start and after Close.
func (n *Node) Stats() Stats {
	r := n.run.Load()
	if r == nil {
		return Stats{}
	}
	st := Stats{Scheduler: r.sched.Stats(), Supervisor: r.sup.Stats(), InvalidAtRest: n.store.InvalidIdentities().Count}
	if c := n.rt().Stats(); c != nil {
		st.Mail, st.Transport, st.Members, st.Unproven = c.Mail, c.Transport, c.Members, c.Unproven
		st.ProofsFailed, st.Gossip, st.Leader, st.HandoffIsolated = c.ProofsFailed, c.Gossip, c.Leader, c.HandoffIsolated
		st.Retry = RetryStats{Parked: c.Retry.Parked, Resent: c.Retry.Resent, GaveUp: c.Retry.GaveUp, Waiting: c.Waiting}
	}
	return st
}
