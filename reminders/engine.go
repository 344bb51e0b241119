package reminders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// Codec stores reminder payloads. On a node it is the message table of
// the kinds (a payload must be one of the kind's declared messages).
type Codec interface {
	// Encode returns the name and bytes payload is stored under for a
	// reminder of kind, or an error wrapping ErrUnknownPayload.
	Encode(kind string, payload any) (name string, b []byte, err error)
	// Decode is Encode's inverse.
	Decode(kind, name string, b []byte) (any, error)
}

// Deliverer hands ticks to actors on this node.
type Deliverer interface {
	// Deliver queues tick for the virtual actor ref, activating it when
	// dormant. accept must be called on the actor's turn thread right
	// before its handler would see the tick, and the tick dropped unless
	// it returns true. An error means the tick was not queued.
	Deliver(ref actor.Ref, tick Tick, accept func() bool) error
}

// Clock is the engine's time source (tests pass a fake one).
type Clock interface {
	Now() time.Time
	// NewTimer returns a channel that receives once after d, and a stop
	// func.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Observer receives the lateness of every tick dispatched (now minus its
// scheduled time), for a histogram. It must be fast and safe for
// concurrent use.
type Observer func(late time.Duration)

// Config configures an Engine. Zero fields take defaults.
type Config struct {
	// Store keeps the reminders at rest, one record per shard (RecordID).
	// Required.
	Store prospero.StateStore
	// Codec stores payloads. Required.
	Codec Codec
	// Deliver hands ticks to actors. Required.
	Deliver Deliverer
	// ShardOf names the shard of an identity; the engine holds the
	// reminders of the shards it was told to Acquire. Required.
	ShardOf func(prospero.Identity) string
	// Clock reads time. Default the wall clock.
	Clock Clock
	// MinPeriod is the shortest period of a periodic reminder (default
	// DefaultMinPeriod, at least FloorMinPeriod).
	MinPeriod time.Duration
	// MaxPerIdentity bounds the reminders of one identity (default
	// DefaultMaxPerIdentity).
	MaxPerIdentity int
	// DeliveryTimeout is how long a dispatched tick may take to reach
	// its actor's turn before it counts as failed and fires again
	// (default 30 s).
	DeliveryTimeout time.Duration
	// RetryAfter is the pause before a tick whose delivery was refused
	// fires again (default 1 s).
	RetryAfter time.Duration
	// FlushInterval is how often delivered sequence numbers are written
	// at rest (default 1 s). A crash can lose at most this much of that
	// progress: those ticks are delivered again, with the same Seq.
	FlushInterval time.Duration
	// Lateness, when set, observes every dispatched tick's lateness.
	Lateness Observer
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
}

// ErrInvalidConfig: Config.Validate found a bad field.
var ErrInvalidConfig = errors.New("reminders: invalid config")

// Validate reports a configuration the engine cannot run with.
func (c Config) Validate() error {
	switch {
	case c.Store == nil || c.Codec == nil || c.Deliver == nil || c.ShardOf == nil:
		return fmt.Errorf("%w: Store, Codec, Deliver and ShardOf are required", ErrInvalidConfig)
	case c.MinPeriod != 0 && c.MinPeriod < FloorMinPeriod:
		return fmt.Errorf("%w: MinPeriod %v below %v", ErrInvalidConfig, c.MinPeriod, FloorMinPeriod)
	case c.MaxPerIdentity < 0 || c.DeliveryTimeout < 0 || c.RetryAfter < 0 || c.FlushInterval < 0:
		return fmt.Errorf("%w: negative limit", ErrInvalidConfig)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.MinPeriod == 0 {
		c.MinPeriod = DefaultMinPeriod
	}
	if c.MaxPerIdentity == 0 {
		c.MaxPerIdentity = DefaultMaxPerIdentity
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = 30 * time.Second
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Stats are the engine's counters and gauges.
type Stats struct {
	Counts
	Reminders int // reminders held (of the shards held)
	Shards    int // shards held
}

// shardState is what the engine knows of one held shard's record.
type shardState struct {
	wmu     sync.Mutex // serialises writes of the record
	version uint64     // store version of the record (0: none); guarded by wmu
	mut     uint64     // changes made; guarded by Engine.mu
	durable uint64     // changes written; guarded by wmu
	dirty   bool       // delivered progress not written yet; guarded by Engine.mu
}

// Engine is the thin shell around a Schedule: one goroutine fires due
// ticks and writes progress at rest; registrations write through to the
// store before they return. Methods are safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	sched   *Schedule
	shards  map[string]*shardState
	gen     uint64
	closed  bool
	started bool

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns an engine holding no shards; Start runs it.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Engine{cfg: cfg, log: cfg.Logger, sched: NewSchedule(cfg.DeliveryTimeout),
		shards: map[string]*shardState{}, wake: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// Start runs the engine's goroutine until Close.
func (e *Engine) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.started {
		return ErrClosed
	}
	e.started = true
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go e.run(ctx)
	return nil
}

// Close writes the progress of every held shard and stops the engine.
// It is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	started := e.started
	e.mu.Unlock()
	if started {
		e.cancel()
		select {
		case <-e.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.flushAll(ctx)
}

// Acquire loads the reminders of shard from the store and starts firing
// them; called when this node takes the shard over. Missed occurrences
// are handled by each reminder's catch-up policy. Acquiring a held
// shard is a no-op.
func (e *Engine) Acquire(ctx context.Context, shard string) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	if _, ok := e.shards[shard]; ok {
		e.mu.Unlock()
		return nil
	}
	e.mu.Unlock()
	rec, err := e.cfg.Store.Get(ctx, RecordID(shard))
	var es []*entry
	switch {
	case errors.Is(err, prospero.ErrNotFound):
	case err != nil:
		return err
	default:
		if es, err = decodeShard(shard, rec.State); err != nil {
			return err
		}
	}
	for _, x := range es {
		if x.pval, err = e.cfg.Codec.Decode(x.ID.Kind, x.ptype, x.pdata); err != nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "reminder payload cannot be decoded; its ticks carry none",
				slog.String("actor", x.ID.String()), slog.String("reminder", x.Name), slog.Any("error", err))
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.shards[shard]; ok || e.closed {
		return nil
	}
	e.shards[shard] = &shardState{version: rec.Version}
	for _, x := range es {
		e.gen = max(e.gen, x.gen)
		e.sched.put(x)
	}
	e.poke()
	return nil
}

// Release writes the progress of shard and drops its reminders; called
// when the shard leaves this node (before its state is shipped). From
// then on no tick of the shard is accepted here, also one in flight.
func (e *Engine) Release(ctx context.Context, shard string) error {
	e.mu.Lock()
	st, ok := e.shards[shard]
	e.mu.Unlock()
	if !ok {
		return nil
	}
	err := e.flush(ctx, shard, st, 0, true)
	e.mu.Lock()
	if e.shards[shard] == st {
		delete(e.shards, shard)
		e.sched.dropShard(shard)
	}
	e.mu.Unlock()
	return err
}

// Held reports whether shard is held.
func (e *Engine) Held(shard string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.shards[shard]
	return ok
}

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Counts: e.sched.Counts(), Reminders: e.sched.Len(), Shards: len(e.shards)}
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// self returns the identity a turn runs for.
func self(ctx actor.Context) (prospero.Identity, error) {
	if ctx == nil {
		return prospero.Identity{}, ErrNotInTurn
	}
	ref := ctx.Self()
	if !ref.IsVirtual() {
		return prospero.Identity{}, ErrNotInTurn
	}
	return prospero.IdentityOf(ref), nil
}

// Register stores r for the actor whose turn ctx is, replacing a
// reminder of the same name, and returns once it is at rest: a nil
// error means the reminder exists and will fire wherever the identity
// lives, across passivation, moves and restarts. Errors: ErrInvalid
// (with ErrPeriodTooShort, ErrDueInPast, ErrUnknownPayload, ErrBadName
// or ErrTooMany), ErrNotInTurn, ErrNotOwner, ErrClosed, or the store's
// error (then nothing was registered).
func (e *Engine) Register(ctx actor.Context, r Reminder) error {
	id, err := self(ctx)
	if err != nil {
		return err
	}
	return e.RegisterFor(context.Background(), id, r)
}

// RegisterFor is Register for id from outside a turn (operators,
// tests). The caller must run on id's owner.
func (e *Engine) RegisterFor(ctx context.Context, id prospero.Identity, r Reminder) error {
	r, err := r.validate(e.cfg.Clock.Now(), e.cfg.MinPeriod)
	if err != nil {
		return err
	}
	var ptype string
	var pdata []byte
	if r.Payload != nil {
		if ptype, pdata, err = e.cfg.Codec.Encode(id.Kind, r.Payload); err != nil {
			if !errors.Is(err, ErrUnknownPayload) {
				err = fmt.Errorf("%w: %w", ErrUnknownPayload, err)
			}
			return invalid(r.Name, ErrUnknownPayload, "%v", err)
		}
	}
	shard := e.cfg.ShardOf(id)
	e.mu.Lock()
	st, err := e.heldLocked(shard)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	k := Key{ID: id, Name: r.Name}
	cur := e.sched.of(id)
	prev := cur[r.Name]
	if prev == nil && len(cur) >= e.cfg.MaxPerIdentity {
		e.mu.Unlock()
		return invalid(r.Name, ErrTooMany, "%s has %d reminders (the limit)", id, len(cur))
	}
	e.gen++
	x := &entry{Key: k, shard: shard, first: r.Due, per: r.Period, pol: r.Catchup, maxN: r.MaxCatchup,
		ptype: ptype, pdata: pdata, pval: r.Payload, gen: e.gen, idx: -1}
	e.sched.put(x)
	st.mut++
	want := st.mut
	e.mu.Unlock()
	e.poke()
	if err := e.flush(ctx, shard, st, want, false); err != nil {
		e.mu.Lock()
		if e.sched.byKey[k] == x { // undo, unless replaced meanwhile
			e.sched.remove(k)
			if prev != nil {
				prev.outSeq, prev.burst = 0, 0
				e.sched.put(prev)
			}
		}
		e.mu.Unlock()
		return err
	}
	return nil
}

// Unregister removes the reminder name of the actor whose turn ctx is
// and returns once that is at rest. After it returns nil no tick of the
// reminder runs, also not one already queued or in flight. Errors:
// ErrNotFound, ErrNotInTurn, ErrNotOwner, ErrClosed, or the store's error
// (then the reminder stays).
func (e *Engine) Unregister(ctx actor.Context, name string) error {
	id, err := self(ctx)
	if err != nil {
		return err
	}
	return e.Cancel(context.Background(), id, name)
}

// Cancel is Unregister for id from outside a turn (operators). The
// caller must run on id's owner.
func (e *Engine) Cancel(ctx context.Context, id prospero.Identity, name string) error {
	shard := e.cfg.ShardOf(id)
	k := Key{ID: id, Name: name}
	e.mu.Lock()
	st, err := e.heldLocked(shard)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	prev := e.sched.byKey[k]
	if prev == nil {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s %q", ErrNotFound, id, name)
	}
	e.sched.remove(k)
	st.mut++
	want := st.mut
	e.mu.Unlock()
	if err := e.flush(ctx, shard, st, want, false); err != nil {
		e.mu.Lock()
		if _, again := e.sched.byKey[k]; !again {
			prev.outSeq, prev.burst = 0, 0
			e.sched.put(prev)
		}
		e.mu.Unlock()
		e.poke()
		return err
	}
	return nil
}

// List returns the reminders of the actor whose turn ctx is, by name.
func (e *Engine) List(ctx actor.Context) ([]Info, error) {
	id, err := self(ctx)
	if err != nil {
		return nil, err
	}
	return e.ListOf(id)
}

// ListOf returns the reminders of id, by name. Errors: ErrNotOwner when
// id's shard is not held here.
func (e *Engine) ListOf(id prospero.Identity) ([]Info, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.heldLocked(e.cfg.ShardOf(id)); err != nil {
		return nil, err
	}
	var out []Info
	for _, x := range e.sched.of(id) {
		next := x.scheduled(x.next)
		if x.outSeq != 0 {
			next = x.scheduled(x.outSeq)
		}
		out = append(out, Info{ID: id, Name: x.Name, Due: x.first, Period: x.per, Catchup: x.pol,
			MaxCatchup: x.maxN, Next: next, LastSeq: x.fired, Outstanding: x.outSeq != 0, PayloadType: x.ptype})
	}
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

func (e *Engine) heldLocked(shard string) (*shardState, error) {
	if e.closed {
		return nil, ErrClosed
	}
	st, ok := e.shards[shard]
	if !ok {
		return nil, fmt.Errorf("%w: shard %s", ErrNotOwner, shard)
	}
	return st, nil
}

// flush writes shard's record if it does not hold change want yet (want
// 0 with progress: write whatever is dirty). Concurrent callers share
// one write (group commit): a caller whose change another write already
// carried returns without writing.
func (e *Engine) flush(ctx context.Context, shard string, st *shardState, want uint64, progress bool) error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	e.mu.Lock()
	if want != 0 && st.durable >= want {
		e.mu.Unlock()
		return nil
	}
	if want == 0 && !st.dirty && st.durable >= st.mut {
		e.mu.Unlock()
		return nil
	}
	if _, held := e.shards[shard]; !held && !progress {
		e.mu.Unlock()
		return fmt.Errorf("%w: shard %s", ErrNotOwner, shard)
	}
	es := make([]*entry, 0, len(e.sched.byShard[shard]))
	for x := range e.sched.byShard[shard] {
		es = append(es, x)
	}
	slices.SortFunc(es, func(a, b *entry) int {
		if c := cmpStr(a.ID.String(), b.ID.String()); c != 0 {
			return c
		}
		return cmpStr(a.Name, b.Name)
	})
	var b []byte // no reminders left: the record goes
	if len(es) > 0 {
		b = encodeShard(es)
	}
	mut := st.mut
	st.dirty = false
	e.mu.Unlock()

	err := e.write(ctx, shard, st, b)
	e.mu.Lock()
	if err != nil {
		st.dirty = true
	} else {
		st.durable = max(st.durable, mut)
	}
	e.mu.Unlock()
	return err
}

// write puts the record, conditional on the version last written: the
// engine is the record's only writer while it holds the shard, so a
// conflict means the record arrived from elsewhere (a handoff) and is
// re-read once.
func (e *Engine) write(ctx context.Context, shard string, st *shardState, b []byte) error {
	id := RecordID(shard)
	for range 2 {
		var v uint64
		var err error
		if len(b) == 0 {
			err = e.cfg.Store.Delete(ctx, id, st.version)
		} else {
			v, err = e.cfg.Store.Put(ctx, id, st.version, prospero.Record{State: b})
		}
		if errors.Is(err, prospero.ErrVersionConflict) {
			cur, gerr := e.cfg.Store.Get(ctx, id)
			switch {
			case errors.Is(gerr, prospero.ErrNotFound):
				st.version = 0
			case gerr != nil:
				return gerr
			default:
				st.version = cur.Version
			}
			continue
		}
		if err != nil {
			return err
		}
		st.version = v
		return nil
	}
	return fmt.Errorf("reminders: shard %s: %w", shard, prospero.ErrVersionConflict)
}

func (e *Engine) flushAll(ctx context.Context) error {
	e.mu.Lock()
	type sh struct {
		name string
		st   *shardState
	}
	var todo []sh
	for name, st := range e.shards {
		if st.dirty || st.durable < st.mut {
			todo = append(todo, sh{name, st})
		}
	}
	e.mu.Unlock()
	var errs []error
	for _, s := range todo {
		if err := e.flush(ctx, s.name, s.st, 0, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// run fires due ticks and writes delivered progress every FlushInterval.
func (e *Engine) run(ctx context.Context) {
	defer close(e.done)
	flushC, stopFlush := e.cfg.Clock.NewTimer(e.cfg.FlushInterval)
	defer func() { stopFlush() }()
	var fires []Fire
	for {
		now := e.cfg.Clock.Now()
		e.mu.Lock()
		fires = e.sched.Due(now, fires[:0])
		next, ok := e.sched.Next()
		e.mu.Unlock()
		for i := range fires {
			e.dispatch(&fires[i], now)
		}
		clear(fires)
		var timerC <-chan time.Time
		stop := func() bool { return false }
		if ok {
			timerC, stop = e.cfg.Clock.NewTimer(max(next.Sub(now), 0))
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-e.wake:
		case <-timerC:
		case <-flushC:
			if err := e.flushAll(ctx); err != nil && ctx.Err() == nil {
				e.log.LogAttrs(ctx, slog.LevelWarn, "writing reminder progress", slog.Any("error", err))
			}
			flushC, stopFlush = e.cfg.Clock.NewTimer(e.cfg.FlushInterval)
		}
		stop()
	}
}

func (e *Engine) dispatch(f *Fire, now time.Time) {
	if e.cfg.Lateness != nil {
		e.cfg.Lateness(f.Late)
	}
	k, gen, seq, shard := f.Key, f.Gen, f.Seq, f.Shard
	accept := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		ok, _ := e.sched.Delivered(k, gen, seq, e.cfg.Clock.Now())
		if ok {
			if st := e.shards[shard]; st != nil {
				st.dirty = true
			}
		}
		e.poke()
		return ok
	}
	tick := Tick{Name: f.Name, Seq: f.Seq, Scheduled: f.Scheduled, Payload: f.payload}
	if err := e.cfg.Deliver.Deliver(f.ID.Ref(), tick, accept); err != nil {
		e.mu.Lock()
		e.sched.Failed(k, gen, seq, now, e.cfg.RetryAfter)
		e.mu.Unlock()
		e.log.LogAttrs(context.Background(), slog.LevelDebug, "reminder tick not delivered",
			slog.String("actor", f.ID.String()), slog.String("reminder", f.Name), slog.Any("error", err))
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Shards returns the shards held, sorted.
func (e *Engine) Shards() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.shards))
	for s := range e.shards {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
