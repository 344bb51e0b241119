package reminders

import (
	"context"
	"errors"
	"fmt"
	"github.com/tempest-actors/tempest/clock"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// it returns true. A queued tick dropped before accept was asked (its
	// activation refused or failed, the identity stopped) must be
	// reported to failed, once, from any goroutine: the reminder then
	// fires again after RetryAfter instead of waiting out the
	// DeliveryTimeout. An error means the tick was not queued (and
	// failed is not called).
	Deliver(ref actor.Ref, tick Tick, accept func() bool, failed func(error)) error
}

// DoneDeliverer is a Deliverer that also reports the outcome of the turn
// a tick ran in (the node's: its scheduler knows when a durable turn's
// state committed). With it, accept only checks that the tick is still
// wanted, and the tick counts as delivered once done(nil) reports its
// turn's effects kept; done(err) (the turn's state write failed, and the
// actor went back to its state at rest) fires the tick again after
// RetryAfter, as failed does, so no occurrence is lost to a write that
// did not commit.
type DoneDeliverer interface {
	Deliverer
	DeliverDone(ref actor.Ref, tick Tick, accept func() bool, done, failed func(error)) error
}

// Clock is the engine's time source, the project's one (package clock;
// tests pass a fake one).
type Clock = clock.Clock

// Observer receives the lateness of every tick dispatched (now minus its
// scheduled time), for a histogram. It must be fast and safe for
// concurrent use.
type Observer func(late time.Duration)

// Config configures an Engine. Zero fields take defaults.
type Config struct {
	// Store keeps the reminders at rest: a record per reminder and one
	// of delivered progress per shard (RecordKind). It must list a
	// shard's records by prefix (prospero.PrefixScanner: BoltStore,
	// MemStore, the replicated store). Required.
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
	// InDoubt, when set, reports whether the records of shard at rest
	// here may hold writes that never committed: with a replicated store,
	// a follower holds whatever its owner sent, committed or not, and an
	// owner killed between its write and its replicas' acknowledgements
	// comes back with that write. Acquire then writes each record it
	// loads once more, as a new version, through Store (so that it
	// commits as the store defines it) before any reminder of the shard
	// fires, and fails if one of those writes does: no tick is ever
	// delivered from a registration that a later failover could take
	// back. Default: never (a store that commits every write it holds).
	InDoubt func(shard string) bool
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
	case !isScanner(c.Store):
		return fmt.Errorf("%w: Store %T cannot list a shard's records (prospero.PrefixScanner)", ErrInvalidConfig, c.Store)
	case c.MinPeriod != 0 && c.MinPeriod < FloorMinPeriod:
		return fmt.Errorf("%w: MinPeriod %v below %v", ErrInvalidConfig, c.MinPeriod, FloorMinPeriod)
	case c.MaxPerIdentity < 0 || c.DeliveryTimeout < 0 || c.RetryAfter < 0 || c.FlushInterval < 0:
		return fmt.Errorf("%w: negative limit", ErrInvalidConfig)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.Real{}
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
	Paused    int // shards held but paused (Pause): their reminders do not fire
	// Recommitted counts records written again, and committed, by
	// Acquire because they were in doubt (Config.InDoubt).
	Recommitted uint64
}

func isScanner(s prospero.StateStore) bool {
	_, ok := s.(prospero.PrefixScanner)
	return ok
}

// shardState is what the engine knows of one held shard's records.
type shardState struct {
	// hlock serialises writes of the progress record: a token held
	// across the write, taken within the writer's context (a write can
	// wait seconds for the replicas, and a release must not wait behind
	// a periodic flush longer than its own context allows).
	hlock    chan struct{}
	hversion uint64 // store version of the progress record (0: none); guarded by hlock
	dirty    bool   // delivered progress not written yet; guarded by Engine.mu
	// pending holds the reminder records with a change not written yet:
	// a registration's write in progress or failed, a removal (unregister,
	// a one-shot done) whose record is still to be deleted. Guarded by
	// Engine.mu.
	pending map[Key]*recState
	// releasing counts the Releases and Drops under way (one that fails
	// ends without dropping the shard); while any is, the shard takes no
	// registration or cancellation (ErrNotOwner) and starts no periodic
	// flush. inflight counts those and the flushes still writing, drained
	// (shared by the Releases waiting) is closed
	// when the last one ends, dropped is set once the shard is no longer
	// held. Guarded by Engine.mu.
	releasing int
	inflight  int
	drained   chan struct{}
	dropped   bool
}

func (st *shardState) unwritten() bool { return len(st.pending) > 0 || st.dirty }

// recState is what the engine knows of one reminder's record. It
// outlives the entries of the reminder's successive registrations (each
// takes over its predecessor's), and a removal until the record is
// deleted, so that the record's writes are serialised and the last one
// carries the last change.
type recState struct {
	// wmu serialises writes of the record: held (a value in it) by the
	// one writing, which may wait for the store (a replicated write waits
	// for its followers). A channel, not a mutex: a writer waiting for
	// another's write is then durably blocked in a bubble of
	// testing/synctest, where waiting for a mutex would stop the clock
	// that the write in progress needs (the simulation hung so once).
	wmu     chan struct{}
	version uint64 // store version (0: none); guarded by wmu
	mut     uint64 // changes made; guarded by Engine.mu
	durable uint64 // changes written; guarded by Engine.mu
}

func newRecState(version uint64) *recState {
	return &recState{wmu: make(chan struct{}, 1), version: version}
}

// changedLocked records a change of k's record, whose state is rs, and
// returns the change's number for flushRecord.
func (st *shardState) changedLocked(k Key, rs *recState) uint64 {
	rs.mut++
	st.pending[k] = rs
	return rs.mut
}

// recOfLocked returns the record state of k in st: its entry's (or its
// removal's being committed), or that of a removal not written yet, or a
// new one.
func (e *Engine) recOfLocked(st *shardState, k Key) *recState {
	if x := e.headLocked(k); x != nil && x.rec != nil {
		return x.rec
	}
	if rs := st.pending[k]; rs != nil {
		return rs
	}
	return newRecState(0)
}

// intentLocked returns the registration k's record should hold: the
// newest one, being committed or registered, or nil (the record goes;
// also while a removal of k is being committed).
func (e *Engine) intentLocked(k Key) *entry {
	if x := e.committingOfLocked(k); x != nil {
		if x.gone {
			return nil // a removal's tombstone
		}
		return x
	}
	return e.sched.byKey[k]
}

// Engine is the thin shell around a Schedule: one goroutine fires due
// ticks and writes progress at rest; a turn's registrations are written
// by a goroutine of their own (Commit), an operator's before it returns.
// Methods are safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger

	// life ends when the engine closes: it bounds the writes of
	// registrations made in turns (which carry no context of their own).
	life    context.Context
	endLife context.CancelFunc
	// flushers bounds the record writes of periodic flushes and releases
	// in flight at once.
	flushers chan struct{}

	// commits tracks the goroutines of Commit until their writes ended.
	commits     sync.WaitGroup
	recommitted atomic.Uint64 // Stats.Recommitted

	mu    sync.Mutex
	sched *Schedule
	// committing holds the registrations whose records are being
	// committed (Commit), by identity and name: not armed yet.
	committing map[prospero.Identity]map[string]*entry
	shards     map[string]*shardState
	// loading holds, per shard an Acquire is loading (and writing again
	// its records in doubt), a channel closed when that call ends.
	loading map[string]chan struct{}
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
	life, end := context.WithCancel(context.Background())
	return &Engine{cfg: cfg, log: cfg.Logger, sched: NewSchedule(cfg.DeliveryTimeout), life: life, endLife: end,
		flushers:   make(chan struct{}, maxFlushers),
		committing: map[prospero.Identity]map[string]*entry{},
		shards:     map[string]*shardState{}, loading: map[string]chan struct{}{}, wake: make(chan struct{}, 1), done: make(chan struct{})}, nil
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
// It returns ctx's error if ctx ends first (the writes under way are
// then cancelled, and end without it). It is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	started := e.started
	e.mu.Unlock()
	// The run goroutine is stopped before the commits are waited for: a
	// commit's write may wait behind a periodic flush of the same record
	// (or for a flusher's slot), and that flush ends only with run's ctx.
	e.endLife()
	if started {
		e.cancel()
	}
	commits := make(chan struct{})
	go func() { // ends with the commits, whose writes' ctx (life) has ended
		e.commits.Wait()
		close(commits)
	}()
	select {
	case <-commits:
	case <-ctx.Done():
		return ctx.Err()
	}
	if started {
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
// shard is a no-op; a call made while another loads the same shard waits
// for that one (within ctx) and does not load it again.
func (e *Engine) Acquire(ctx context.Context, shard string) error {
	e.mu.Lock()
	for {
		if e.closed {
			e.mu.Unlock()
			return ErrClosed
		}
		if _, ok := e.shards[shard]; ok {
			e.mu.Unlock()
			return nil
		}
		busy, ok := e.loading[shard]
		if !ok {
			break
		}
		e.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.mu.Lock()
	}
	busy := make(chan struct{})
	e.loading[shard] = busy
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.loading, shard)
		e.mu.Unlock()
		close(busy)
	}()
	st := &shardState{pending: map[Key]*recState{}, hlock: make(chan struct{}, 1)}
	es, maxGen, loaded, err := e.load(ctx, shard, st)
	if err != nil {
		return err
	}
	if e.cfg.InDoubt != nil && e.cfg.InDoubt(shard) {
		if err := e.recommit(ctx, shard, loaded); err != nil {
			return fmt.Errorf("reminders: shard %s: writing again its records in doubt: %w", shard, err)
		}
	}
	for _, x := range es {
		if x.ptype == "" {
			continue // no payload
		}
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
	e.shards[shard] = st
	// New registrations in this shard get generations above any its
	// progress record covers (progress.firedOf).
	e.gen = max(e.gen, maxGen)
	for _, x := range es {
		e.gen = max(e.gen, x.gen)
		e.sched.put(x)
	}
	e.poke()
	return nil
}

// loadedRecord is a record load read, as it was at rest: its identity,
// where the engine keeps its version, its bytes.
type loadedRecord struct {
	id      prospero.Identity
	version *uint64
	state   []byte
}

// recommit writes each of recs again, at a new version, in parallel so
// that the writes share commits; each version is updated. A record
// changed since it was read is a conflict, not overwritten.
func (e *Engine) recommit(ctx context.Context, shard string, recs []loadedRecord) error {
	err := e.each(len(recs), func(i int) error {
		r := recs[i]
		v, err := e.put(ctx, r.id, *r.version, r.state)
		if err != nil {
			return err
		}
		*r.version = v
		e.recommitted.Add(1)
		return nil
	})
	return err
}

// load reads shard's records (its progress record and one prefix scan
// for its reminders): the reminders with their delivered progress, the
// highest generation the progress covers, each record's version into
// st, and the records read as they were at rest (the progress record
// and those of the reminders loaded). One-shot reminders whose tick was
// delivered are not loaded; their records are left in st.pending, to be
// deleted. A shard stored in an earlier version's format (one record, or
// 64 buckets) is rewritten in this one first.
func (e *Engine) load(ctx context.Context, shard string, st *shardState) ([]*entry, uint64, []loadedRecord, error) {
	head, err := e.cfg.Store.Get(ctx, RecordID(shard))
	var (
		p      *progress
		legacy []*entry            // reminders in an earlier version's records
		old    []prospero.Identity // those records
		v1     bool
	)
	switch {
	case errors.Is(err, prospero.ErrNotFound):
	case err != nil:
		return nil, 0, nil, err
	case len(head.State) == 0: // emptied by a handoff of an earlier version
		st.hversion = head.Version
	default:
		st.hversion = head.Version
		if p, legacy, err = decodeShardRecord(shard, head.State); err != nil {
			return nil, 0, nil, err
		}
		v1 = p == nil
	}
	recs, err := e.cfg.Store.(prospero.PrefixScanner).ScanPrefix(ctx, RecordKind, RecordPrefix(shard))
	if err != nil {
		return nil, 0, nil, err
	}
	var (
		es     []*entry
		loaded []loadedRecord
	)
	if p != nil && !v1 {
		loaded = append(loaded, loadedRecord{id: RecordID(shard), version: &st.hversion, state: head.State})
	}
	have := map[Key]bool{}
	for _, r := range recs {
		suffix := r.Key[len(RecordPrefix(shard)):]
		switch {
		case len(r.State) == 0: // emptied by a handoff of an earlier version
			continue
		case isLegacyBucket(suffix):
			bes, err := decodeBucket(shard, r.State)
			if err != nil {
				return nil, 0, nil, err
			}
			for _, x := range bes {
				x.fired = p.firedOf(x)
			}
			legacy = append(legacy, bes...)
			old = append(old, prospero.Identity{Kind: RecordKind, Key: r.Key})
			continue
		case !isDigest(suffix):
			continue // another shard's, whose name extends this one's with "/"
		}
		x, err := decodeReminder(shard, r.State)
		if err == nil && ReminderID(shard, x.Key).Key != r.Key {
			err = fmt.Errorf("%w: shard %s: %s %q is stored under another reminder's key", ErrBadRecord, shard, x.ID, x.Name)
		}
		if err != nil {
			// One damaged record must not keep the shard's other
			// reminders from firing: it is left in place, unloaded.
			e.log.LogAttrs(ctx, slog.LevelError, "reminder record does not decode; it is not loaded",
				slog.String("record", r.Key), slog.Any("error", err))
			continue
		}
		x.rec = newRecState(r.Version)
		x.fired = p.firedOf(x)
		have[x.Key] = true
		if x.per == 0 && x.fired > 0 {
			// A one-shot delivered before its record was deleted: done.
			st.changedLocked(x.Key, x.rec)
			continue
		}
		es = append(es, x)
		loaded = append(loaded, loadedRecord{id: prospero.Identity{Kind: RecordKind, Key: r.Key}, version: &x.rec.version, state: r.State})
	}
	var maxGen uint64
	if p != nil {
		maxGen = p.MaxGen
	}
	for _, x := range legacy {
		maxGen = max(maxGen, x.gen)
	}
	if len(legacy) > 0 || len(old) > 0 {
		var err error
		if es, err = e.migrate(ctx, shard, st, es, have, legacy, old, v1, maxGen); err != nil {
			return nil, 0, nil, err
		}
	}
	return es, maxGen, loaded, nil
}

// migrate rewrites the reminders of an earlier version's records
// (legacy, from the records old, or from a one-record shard when v1) as
// a record each, then deletes the old records, then, for a one-record
// shard, writes the progress record that replaces it. A migration cut
// short is done again at the next load: a reminder already in a record
// of its own is not taken from the old ones.
func (e *Engine) migrate(ctx context.Context, shard string, st *shardState, es []*entry, have map[Key]bool,
	legacy []*entry, old []prospero.Identity, v1 bool, maxGen uint64) ([]*entry, error) {
	var moved []*entry
	for _, x := range legacy {
		if have[x.Key] {
			continue
		}
		x.rec = newRecState(0)
		if x.per == 0 && x.fired > 0 {
			continue // a one-shot delivered: done
		}
		moved = append(moved, x)
	}
	err := e.each(len(moved), func(i int) error {
		x := moved[i]
		return e.write(ctx, shard, ReminderID(shard, x.Key), &x.rec.version, encodeReminder(x))
	})
	if err == nil {
		err = e.each(len(old), func(i int) error {
			return e.del(ctx, old[i], prospero.AnyVersion)
		})
	}
	if err != nil {
		return nil, err
	}
	es = append(es, moved...)
	if v1 {
		// The progress of format 2 replaces the one record; a progress
		// record of format 2 already covers the reminders moved.
		b := encodeProgress(e.cfg.Clock.Now(), maxGen, slices.Values(es))
		if err := e.write(ctx, shard, RecordID(shard), &st.hversion, b); err != nil {
			return nil, err
		}
	}
	return es, nil
}

// each runs op(0..n-1), at most maxFlushers at once, so that writes
// share the store's group commits, and returns their errors.
func (e *Engine) each(n int, op func(i int) error) error {
	if n == 1 {
		return op(0)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		e.flushers <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-e.flushers }()
			if err := op(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Release writes what of shard is not at rest yet and drops its
// reminders; called when the shard leaves this node (before its state is
// shipped). From then on no tick of the shard is accepted here, also one
// in flight.
//
// A release that fails (a write of the shard's records failed, or ctx
// ended while registrations and cancellations were still writing) drops
// nothing: the shard stays held as it was before the release began, its
// reminders firing and its changes not at rest yet kept, for the periodic
// flush and the next Release to write. The error is the write's (or
// ctx's), so that a handoff fails rather than ship records that lack a
// change a caller was told of: a cancellation that failed after its
// deletion landed, for one, leaves its reminder registered in memory
// only until a write puts the record back.
func (e *Engine) Release(ctx context.Context, shard string) error {
	return e.release(ctx, shard, true)
}

// Drop drops shard's reminders without writing anything: called when the
// shard has left this node without a handoff (its owner changed by a
// failover, perhaps to come back later at a newer epoch), so that what
// this node held in memory, and had not written, is stale. Writing it
// would put back, over the records of the owners since, a reminder they
// cancelled or the progress of ticks they delivered again; nothing it
// drops was acknowledged (a registration or cancellation is answered
// once its write is committed, so one still pending here failed). It
// waits for the shard's writes in flight (registrations, cancellations,
// a periodic flush), and fails, holding the shard as it was, only when
// ctx ends first.
func (e *Engine) Drop(ctx context.Context, shard string) error {
	return e.release(ctx, shard, false)
}

func (e *Engine) release(ctx context.Context, shard string, flush bool) error {
	e.mu.Lock()
	st, ok := e.shards[shard]
	if !ok {
		e.mu.Unlock()
		return nil
	}
	// Registrations and cancellations still writing finish first, so
	// that what is shipped or reloaded after the release holds them.
	st.releasing++
	var drained chan struct{}
	if st.inflight > 0 {
		if st.drained == nil {
			st.drained = make(chan struct{})
		}
		drained = st.drained
	}
	e.mu.Unlock()
	var err error
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil && flush {
		err = e.flushShard(ctx, shard, st)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		st.releasing--
		return fmt.Errorf("reminders: shard %s not released (still held here): %w", shard, err)
	}
	st.dropped = true
	if e.shards[shard] == st {
		delete(e.shards, shard)
		e.sched.dropShard(shard)
	}
	return nil
}

// endWrite ends a registration's or cancellation's write of st, letting
// a Release waiting for it go on.
func (e *Engine) endWrite(st *shardState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st.inflight--
	if st.inflight == 0 && st.drained != nil {
		close(st.drained)
		st.drained = nil
	}
}

// Pause stops the reminders of a held shard from firing, keeping them
// held, while this node may not serve the shard for a moment (its lease
// lapsed, its table marks it down) but still owns it at the epoch it
// acquired it in: while it is paused no tick of the shard is accepted
// here, also one in flight, as after a Release, but the shard is not written
// out and read back (nor flushed while paused: see flushAll). Resume
// lets them fire again. A shard whose owner or epoch
// changed must be released instead: another node may have changed its
// reminders. Pause reports whether the shard is held.
func (e *Engine) Pause(shard string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.shards[shard]; !ok {
		return false
	}
	e.sched.Pause(shard)
	return true
}

// Resume lets a paused shard's reminders fire again (Schedule.Resume);
// it is a no-op for a shard not paused. It reports whether the shard is
// held.
func (e *Engine) Resume(shard string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.shards[shard]; !ok {
		return false
	}
	if e.sched.Resume(shard) {
		e.poke()
	}
	return true
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
	return Stats{Counts: e.sched.Counts(), Reminders: e.sched.Len(), Shards: len(e.shards), Paused: len(e.sched.paused),
		Recommitted: e.recommitted.Load()}
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

// Change is one change of a reminder that a turn made: validated when
// the turn made it (PrepareRegister, PrepareUnregister), carried out
// with the turn's other changes once the turn has ended (Commit). The
// zero Change is not valid.
type Change struct {
	k     Key
	shard string
	x     *entry // the new registration; nil: the reminder is removed
}

// PrepareRegister validates the registration of r for id, whose turn
// made the changes staged already (earlier in the same turn, not
// committed yet; nil if none), and returns the change to commit with
// them. It writes nothing and changes nothing: what it refuses is
// refused now, at registration, never when the change is committed or
// fires. Errors: ErrInvalid (with ErrPeriodTooShort, ErrDueInPast,
// ErrUnknownPayload, ErrBadName, ErrBadCatchup or ErrTooMany),
// ErrNotOwner, ErrClosed.
func (e *Engine) PrepareRegister(id prospero.Identity, r Reminder, staged []Change) (Change, error) {
	r, ptype, pdata, err := e.checked(id, r)
	if err != nil {
		return Change{}, err
	}
	shard := e.cfg.ShardOf(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.heldLocked(shard); err != nil {
		return Change{}, err
	}
	_, counted := e.namesLocked(id, staged)
	if n := len(counted); !counted[r.Name] && n >= e.cfg.MaxPerIdentity {
		return Change{}, invalid(r.Name, ErrTooMany, "%s has %d reminders (the limit)", id, n)
	}
	k := Key{ID: id, Name: r.Name}
	return Change{k: k, shard: shard, x: &entry{Key: k, shard: shard, first: r.Due, per: r.Period, pol: r.Catchup,
		maxN: r.MaxCatchup, ptype: ptype, pdata: pdata, pval: r.Payload, idx: -1}}, nil
}

// checked validates r for id and encodes its payload: what every
// registration refuses at once, before it touches the schedule.
func (e *Engine) checked(id prospero.Identity, r Reminder) (Reminder, string, []byte, error) {
	r, err := r.validate(e.cfg.Clock.Now(), e.cfg.MinPeriod)
	if err != nil || r.Payload == nil {
		return r, "", nil, err
	}
	ptype, pdata, err := e.cfg.Codec.Encode(id.Kind, r.Payload)
	if err != nil {
		// The codec's text without the sentinel's, which the error
		// says once.
		why := err.Error()
		if errors.Is(err, ErrUnknownPayload) {
			why = strings.TrimPrefix(strings.TrimPrefix(why, ErrUnknownPayload.Error()), ": ")
		}
		if why == "" {
			why = fmt.Sprintf("%T", r.Payload)
		}
		return r, "", nil, invalid(r.Name, ErrUnknownPayload, "%s", why)
	}
	return r, ptype, pdata, nil
}

// PrepareUnregister validates the removal of id's reminder name, as
// PrepareRegister validates a registration. Errors: ErrBadName, ErrNotFound (no such
// reminder, counting the registrations of earlier turns not committed
// yet and the changes staged), ErrNotOwner, ErrClosed.
func (e *Engine) PrepareUnregister(id prospero.Identity, name string, staged []Change) (Change, error) {
	if err := checkName(name); err != nil {
		return Change{}, err // no reminder has it
	}
	shard := e.cfg.ShardOf(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.heldLocked(shard); err != nil {
		return Change{}, err
	}
	if names, _ := e.namesLocked(id, staged); !names[name] {
		return Change{}, fmt.Errorf("%w: %s %q", ErrNotFound, id, name)
	}
	return Change{k: Key{ID: id, Name: name}, shard: shard}, nil
}

// namesLocked returns the names of id's reminders: those registered,
// those whose registration is being committed, with the changes staged
// applied in order; and those that count against the limit: these and
// the reminders whose removal is still being committed (it may fail and
// put them back).
func (e *Engine) namesLocked(id prospero.Identity, staged []Change) (names, counted map[string]bool) {
	names, counted = map[string]bool{}, map[string]bool{}
	for n := range e.sched.of(id) {
		names[n] = true
	}
	for n, x := range e.committing[id] {
		if x.gone {
			counted[n] = true
		} else {
			names[n] = true
		}
	}
	for _, c := range staged {
		switch {
		case c.k.ID != id:
		case c.x == nil:
			delete(names, c.k.Name)
		default:
			names[c.k.Name] = true
		}
	}
	for n := range names {
		counted[n] = true
	}
	return names, counted
}

// Commit carries out changes, those of one turn in the order the turn
// made them, and calls done once, on a goroutine of the engine, when
// their records are committed (nil) or not (the errors); when it writes
// nothing (the shard left since the turn, ErrNotOwner or ErrClosed, or
// the reminders to remove are gone already) it calls done before it
// returns. It never waits for the store: a turn's after-turn work calls
// it, and the turn's outputs wait for done instead of the worker.
//
// The caller then says, with the returned Commit's Finish, whether the
// turn as a whole committed: done reports the reminders' records, and
// the turn may have written more (its state) that failed. Until Finish a
// registration is not armed (the reminder it replaces, if any, keeps
// firing; List counts the new one), and a removal is in force: from the
// moment Commit returns no tick of the reminder is accepted, also one
// already queued or in flight. Finish(true) arms the registrations whose
// records were committed; Finish(false) gives each name the turn changed
// back what it held before the turn (see settle: a removal puts the
// reminder back, a registration what it replaced, also a registration
// of an earlier turn still being committed) and has the records written
// back by the next flush, which a release of the shard waits for. A record written for a
// failed turn may be loaded by another node if this one crashes before
// that flush, as a failed write whose outcome is unknown may have landed
// anyway.
func (e *Engine) Commit(changes []Change, done func(error)) *Commit {
	e.mu.Lock()
	for _, c := range changes {
		if _, err := e.heldLocked(c.shard); err != nil {
			// The shard left (or is leaving) since the turn: nothing is
			// applied.
			e.mu.Unlock()
			done(err)
			return &Commit{}
		}
	}
	// Only a name's last change in the turn counts (the turn's own earlier
	// ones are superseded within it); what the name held before the turn
	// is what a failure of the turn gives back.
	last := make(map[Key]int, len(changes))
	for i, c := range changes {
		last[c.k] = i
	}
	cm := &Commit{e: e, items: make([]commitItem, 0, len(last))}
	cm.wait.Store(2) // the writes, and Finish
	for i, c := range changes {
		if last[c.k] != i {
			continue
		}
		st := e.shards[c.shard]
		pred := e.headLocked(c.k)
		rs := e.recOfLocked(st, c.k) // the name's, shared by the changes of its chain
		if pred != nil && pred.rec == nil {
			pred.rec = rs // a reminder loaded before any change: the record it restores is this one
		}
		n := c.x
		if n == nil {
			if pred == nil {
				continue // removed meanwhile (an operator's Cancel): nothing to write
			}
			// A removal is in force at once: its tombstone stands for it
			// among the registrations being committed.
			n = &entry{Key: c.k, shard: c.shard, gone: true, idx: -1}
			e.sched.remove(c.k)
		} else {
			e.gen++
			n.gen = e.gen
		}
		n.rec, n.pred, n.committing = rs, pred, true
		e.committingPutLocked(n)
		cm.items = append(cm.items, commitItem{c: c, st: st, n: n, rs: rs, want: st.changedLocked(c.k, rs)})
		st.inflight++
	}
	if len(cm.items) == 0 {
		e.mu.Unlock()
		done(nil) // only removals of reminders already gone
		return cm
	}
	e.commits.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.commits.Done()
		_ = e.each(len(cm.items), func(i int) error {
			it := &cm.items[i]
			it.err = e.flushRecord(e.life, it.c.shard, it.st, it.c.k, it.rs, it.want, false)
			return nil
		})
		errs := make([]error, len(cm.items))
		for i := range cm.items {
			errs[i] = cm.items[i].err
		}
		// The writes' end counts before done: done may release the turn's
		// outputs, and by then a Finish it leads to must have been carried
		// out (a failed turn's records marked to be written back), or the
		// asker could flush before the engine knows what to write.
		cm.arrive()
		done(errors.Join(errs...))
	}()
	return cm
}

// Commit is the outcome of Engine.Commit still to be decided: Finish.
type Commit struct {
	e     *Engine
	items []commitItem
	// wait counts what the outcome waits for: the writes to end and
	// Finish to be called, in either order.
	wait     atomic.Int32
	finished atomic.Bool
	ok       atomic.Bool
}

// commitItem is one change of a Commit.
type commitItem struct {
	c    Change
	st   *shardState
	n    *entry // the registration, or the removal's tombstone
	rs   *recState
	want uint64
	err  error // the write's; set before done
}

// Finish decides c (see Engine.Commit): ok means the turn that made the
// changes committed as a whole (and its records were written: their
// done got nil). Called before the writes ended, it takes effect when
// they have. Only the first call counts.
func (c *Commit) Finish(ok bool) {
	if c.e == nil || !c.finished.CompareAndSwap(false, true) {
		return
	}
	c.ok.Store(ok)
	c.arrive()
}

// arrive counts down c.wait and carries the outcome out at zero.
func (c *Commit) arrive() {
	if c.wait.Add(-1) == 0 {
		c.settle(c.ok.Load())
	}
}

// A name's changes still being committed form a chain, kept by these
// invariants (Engine.mu):
//
//   - committing[k], the head, is the newest change of k by a turn whose
//     outcome is not known; each change's pred is what k held when it was
//     made. Following pred from the head passes the changes still being
//     committed and ends at the base: what k holds if each of them fails
//     (a registration committed, a committed removal's tombstone, or
//     nil). The base's pred is nil.
//   - The base is armed (in the schedule) if it is a registration, none
//     of the changes above it is a removal, and it has not ended since (a
//     one-shot that fired); otherwise the schedule holds nothing of k.
//   - A change that commits becomes the base (what was below it is
//     history); one that fails is cut out of the chain. When the head
//     leaves the chain, what is below it becomes the head; when that is
//     the base, the chain is gone and the schedule alone holds k.
//   - An operator's RegisterFor or Cancel drops the chain: its changes
//     still being committed then settle without effect.
//
// So a failed turn gives each name it changed back what the name held
// before the turn, in that change's own state: still being committed,
// committed (armed), or, if that failed too, what it held before.
func (c *Commit) settle(ok bool) {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range c.items {
		it := &c.items[i]
		k, st, n := it.c.k, it.st, it.n
		held := e.shards[it.c.shard] == st && !st.dropped
		kept := ok && it.err == nil
		n.committing, n.failed = false, !kept
		above, in := e.chainLocked(k, n)
		switch {
		case !in:
			// Dropped from the chain (an operator's change, or a turn's
			// RegisterFor since): what the name holds now is written by
			// that change.
		case !held:
			e.committingDelLocked(e.committingOfLocked(k)) // the shard left: nothing of it is armed again
		case kept:
			n.pred = nil // the base now
			e.armLocked(k)
		default:
			switch {
			case above != nil:
				above.pred = n.pred
			case n.pred != nil:
				e.committing[k.ID][k.Name] = n.pred
			default:
				e.committingDelLocked(n)
			}
			n.pred = nil // cut out
			e.armLocked(k)
		}
		if !kept && held {
			st.changedLocked(k, it.rs) // the record is written back to what the name holds
		}
	}
	for i := range c.items {
		st := c.items[i].st
		st.inflight--
		if st.inflight == 0 && st.drained != nil {
			close(st.drained)
			st.drained = nil
		}
	}
	e.poke()
}

// chainLocked reports whether n is in k's chain (see settle) and the
// change just above it (nil: n is the head).
func (e *Engine) chainLocked(k Key, n *entry) (above *entry, in bool) {
	for x := e.committingOfLocked(k); x != nil; above, x = x, x.pred {
		if x == n {
			return above, true
		}
	}
	return nil, false
}

// armLocked restores the invariants of k's chain (see settle) after a
// change left it or became its base: a head no longer being committed
// ends the chain, and the base is armed if nothing above it removes it.
func (e *Engine) armLocked(k Key) {
	h := e.committingOfLocked(k)
	if h != nil && !h.committing {
		e.committingDelLocked(h)
	}
	x, removed := h, false
	for ; x != nil && x.committing; x = x.pred {
		removed = removed || x.gone
	}
	if x == nil || removed || x.gone || x.ended() || e.sched.byKey[k] == x {
		return
	}
	x.outSeq, x.burst = 0, 0
	e.sched.put(x) // replaces the base it succeeds, if any
}

// headLocked returns what k holds: the newest change being committed (a
// removal's tombstone too), else the registration armed, else nil.
func (e *Engine) headLocked(k Key) *entry {
	if x := e.committingOfLocked(k); x != nil {
		return x
	}
	return e.sched.byKey[k]
}

// restoreLocked puts back the registration x whose removal by an
// operator failed: in the schedule, or, when its own record is still
// being committed, at the head of its chain (a registration whose commit
// failed is not put back).
func (e *Engine) restoreLocked(x *entry) {
	switch {
	case x.committing:
		// While the chain was dropped its changes below x settled without
		// effect: those that failed are cut out, and the first committed
		// one is the base.
		for y := x; y != nil; y = y.pred {
			p := y.pred
			for p != nil && p.failed {
				p = p.pred
			}
			y.pred = p
			if p != nil && !p.committing {
				p.pred = nil
				break
			}
		}
		e.committingPutLocked(x)
		e.armLocked(x.Key)
	case !x.failed && !x.gone && !x.ended():
		x.outSeq, x.burst, x.pred = 0, 0, nil
		e.sched.put(x)
	}
}

// committingOfLocked returns the registration of k whose record is
// being committed, or nil.
func (e *Engine) committingOfLocked(k Key) *entry { return e.committing[k.ID][k.Name] }

func (e *Engine) committingPutLocked(x *entry) {
	m := e.committing[x.ID]
	if m == nil {
		m = map[string]*entry{}
		e.committing[x.ID] = m
	}
	m[x.Name] = x
}

func (e *Engine) committingDelLocked(x *entry) {
	if m := e.committing[x.ID]; m[x.Name] == x {
		delete(m, x.Name)
		if len(m) == 0 {
			delete(e.committing, x.ID)
		}
	}
}

// RegisterFor stores r for id, from outside a turn (operators, tests),
// replacing a reminder of the same name, and returns once it is at rest:
// a nil error means the reminder exists and will fire wherever the
// identity lives, across passivation, moves and restarts. The caller must
// run on id's owner. Errors: those of PrepareRegister, or the store's
// (then nothing was registered).
func (e *Engine) RegisterFor(ctx context.Context, id prospero.Identity, r Reminder) error {
	r, ptype, pdata, err := e.checked(id, r)
	if err != nil {
		return err
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
	x := &entry{Key: k, shard: shard, first: r.Due, per: r.Period, pol: r.Catchup,
		maxN: r.MaxCatchup, ptype: ptype, pdata: pdata, pval: r.Payload, gen: e.gen, idx: -1}
	x.rec = e.recOfLocked(st, k)
	if s := e.committingOfLocked(k); s != nil {
		e.committingDelLocked(s) // superseded: it is not armed when its write ends
	}
	e.sched.put(x)
	want := st.changedLocked(k, x.rec)
	st.inflight++
	e.mu.Unlock()
	e.poke()
	err = e.flushRecord(ctx, shard, st, k, x.rec, want, false)
	defer e.endWrite(st)
	if err != nil {
		e.mu.Lock()
		if e.sched.byKey[k] == x && e.shards[shard] == st { // undo, unless replaced or released meanwhile
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

// Cancel removes id's reminder name, from outside a turn (operators),
// and returns once that is at rest. After it returns nil no tick of the
// reminder runs, also not one already queued or in flight; a
// registration of the name still being committed (Commit) is not armed.
// The caller must run on id's owner. Errors: ErrBadName (a name no
// reminder can have), ErrNotFound, ErrNotOwner, ErrClosed, or the store's
// error (then the reminder stays).
func (e *Engine) Cancel(ctx context.Context, id prospero.Identity, name string) error {
	if err := checkName(name); err != nil {
		return err // no reminder has it
	}
	shard := e.cfg.ShardOf(id)
	k := Key{ID: id, Name: name}
	e.mu.Lock()
	st, err := e.heldLocked(shard)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	prev := e.sched.byKey[k]
	if s := e.committingOfLocked(k); s != nil && !s.gone { // (a removal being committed: not found)
		e.committingDelLocked(s) // its chain is dropped
		if prev == nil {
			prev = s
		}
	}
	if prev == nil {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s %q", ErrNotFound, id, name)
	}
	e.sched.remove(k)
	if prev.rec == nil {
		prev.rec = e.recOfLocked(st, k)
	}
	want := st.changedLocked(k, prev.rec)
	st.inflight++
	e.mu.Unlock()
	err = e.flushRecord(ctx, shard, st, k, prev.rec, want, false)
	defer e.endWrite(st)
	if err != nil {
		e.mu.Lock()
		if _, again := e.sched.byKey[k]; !again && e.committingOfLocked(k) == nil && e.shards[shard] == st {
			e.restoreLocked(prev)
		}
		e.mu.Unlock()
		e.poke()
		return err
	}
	return nil
}

// List returns the reminders of the actor whose turn ctx is, by name,
// as its turns made them: with the registrations of earlier turns not
// committed yet and the changes staged by this turn (not committed
// either; Info.Uncommitted). Errors: those of ListOf, ErrNotInTurn.
func (e *Engine) List(ctx actor.Context, staged []Change) ([]Info, error) {
	id, err := self(ctx)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.heldLocked(e.cfg.ShardOf(id)); err != nil {
		return nil, err
	}
	byName := map[string]Info{}
	for _, x := range e.sched.of(id) {
		byName[x.Name] = infoOf(x, false)
	}
	for _, x := range e.committing[id] {
		if x.gone {
			delete(byName, x.Name) // a removal being committed
		} else {
			byName[x.Name] = infoOf(x, true)
		}
	}
	for _, c := range staged {
		switch {
		case c.k.ID != id:
		case c.x == nil:
			delete(byName, c.k.Name)
		default:
			byName[c.k.Name] = infoOf(c.x, true)
		}
	}
	return sortInfos(slices.Collect(maps.Values(byName))), nil
}

// ListOf returns the committed reminders of id, by name. Errors:
// ErrNotOwner when id's shard is not held here.
func (e *Engine) ListOf(id prospero.Identity) ([]Info, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.heldLocked(e.cfg.ShardOf(id)); err != nil {
		return nil, err
	}
	var out []Info
	for _, x := range e.sched.of(id) {
		out = append(out, infoOf(x, false))
	}
	return sortInfos(out), nil
}

func infoOf(x *entry, uncommitted bool) Info {
	next := x.first
	if x.next != 0 {
		next = x.scheduled(x.next)
	}
	if x.outSeq != 0 {
		next = x.scheduled(x.outSeq)
	}
	return Info{ID: x.ID, Name: x.Name, Due: x.first, Period: x.per, Catchup: x.pol, MaxCatchup: x.maxN,
		Next: next, LastSeq: x.fired, Outstanding: x.outSeq != 0, PayloadType: x.ptype, Uncommitted: uncommitted}
}

func sortInfos(out []Info) []Info {
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (e *Engine) heldLocked(shard string) (*shardState, error) {
	if e.closed {
		return nil, ErrClosed
	}
	st, ok := e.shards[shard]
	if !ok || st.releasing > 0 {
		return nil, fmt.Errorf("%w: shard %s", ErrNotOwner, shard)
	}
	return st, nil
}

// flushRecord writes the record of reminder k of shard, whose state is
// rs, if it does not hold change want yet (want 0: whatever changed):
// the reminder's current registration, or a deletion when it has none.
// Concurrent callers share one write: a caller whose change another
// write already carried returns without writing. A shard no longer held
// is not written: a registration's write fails with ErrNotOwner, a
// flush's (progress: a periodic flush that raced the release) is
// skipped, the release having written what was left.
func (e *Engine) flushRecord(ctx context.Context, shard string, st *shardState, k Key, rs *recState, want uint64, progress bool) error {
	// Not given up when ctx ends: the write in progress may carry this
	// caller's change, which is then durable (checked below).
	rs.wmu <- struct{}{}
	defer func() { <-rs.wmu }()
	e.mu.Lock()
	if (want != 0 && rs.durable >= want) || rs.durable >= rs.mut {
		e.mu.Unlock()
		return nil
	}
	if st.dropped || e.shards[shard] != st {
		e.mu.Unlock()
		if progress {
			return nil // released: what was left was written then (or failed then)
		}
		return fmt.Errorf("%w: shard %s", ErrNotOwner, shard)
	}
	var rec []byte // no registration: the record goes
	if x := e.intentLocked(k); x != nil && x.rec == rs {
		rec = encodeReminder(x)
	}
	mut := rs.mut
	e.mu.Unlock()

	err := e.write(ctx, shard, ReminderID(shard, k), &rs.version, rec)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	rs.durable = max(rs.durable, mut)
	if rs.durable >= rs.mut && st.pending[k] == rs {
		delete(st.pending, k)
	}
	if st.dropped && !progress {
		// Not expected: a release drops the shard only once the
		// registrations and cancellations writing have ended. Should one
		// still end after, what was shipped or reloaded may lack it.
		return fmt.Errorf("%w: shard %s was released while the reminder was written: its outcome is unknown", ErrNotOwner, shard)
	}
	return nil
}

// flushProgress writes shard's progress record if ticks were delivered
// since it was last written. The record lists only the reminders that
// are behind their schedule (see progress), so its cost is that of the
// late ones, not of the shard.
func (e *Engine) flushProgress(ctx context.Context, shard string, st *shardState) error {
	select {
	case st.hlock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-st.hlock }()
	e.mu.Lock()
	if !st.dirty {
		e.mu.Unlock()
		return nil
	}
	b := encodeProgress(e.cfg.Clock.Now(), e.gen, maps.Keys(e.sched.byShard[shard]))
	st.dirty = false
	e.mu.Unlock()
	err := e.write(ctx, shard, RecordID(shard), &st.hversion, b)
	if err != nil {
		e.mu.Lock()
		st.dirty = true
		e.mu.Unlock()
	}
	return err
}

// flushShard writes whatever of shard is not at rest: changed reminder
// records first (many at once, so that they share commits), then the
// progress record (which covers only what those records hold).
func (e *Engine) flushShard(ctx context.Context, shard string, st *shardState) error {
	type item struct {
		k  Key
		rs *recState
	}
	e.mu.Lock()
	todo := make([]item, 0, len(st.pending))
	for k, rs := range st.pending {
		todo = append(todo, item{k, rs})
	}
	e.mu.Unlock()
	err := e.each(len(todo), func(i int) error {
		return e.flushRecord(ctx, shard, st, todo[i].k, todo[i].rs, 0, true)
	})
	if err != nil {
		return err
	}
	return e.flushProgress(ctx, shard, st)
}

// write puts record id (rec nil: deletes it), conditional on the version
// last written, *version: the engine is the record's only writer while
// it holds the shard, so a conflict means the record arrived from
// elsewhere (a handoff) and is re-read once. A store that commits in
// groups (prospero.AsyncStore, prospero.AsyncDeleter) gets the write or
// the deletion queued, so that concurrent writes and deletions of many
// shards share one commit.
func (e *Engine) write(ctx context.Context, shard string, id prospero.Identity, version *uint64, rec []byte) error {
	for range 2 {
		var v uint64
		var err error
		if len(rec) == 0 {
			err = e.del(ctx, id, *version)
		} else {
			v, err = e.put(ctx, id, *version, rec)
		}
		if errors.Is(err, prospero.ErrVersionConflict) {
			cur, gerr := e.cfg.Store.Get(ctx, id)
			switch {
			case errors.Is(gerr, prospero.ErrNotFound):
				*version = 0
			case gerr != nil:
				return gerr
			default:
				*version = cur.Version
			}
			continue
		}
		if err != nil {
			return err
		}
		*version = v
		return nil
	}
	return fmt.Errorf("reminders: shard %s: %w", shard, prospero.ErrVersionConflict)
}

func (e *Engine) put(ctx context.Context, id prospero.Identity, expected uint64, rec []byte) (uint64, error) {
	as, ok := e.cfg.Store.(prospero.AsyncStore)
	if !ok {
		return e.cfg.Store.Put(ctx, id, expected, prospero.Record{State: rec})
	}
	type res struct {
		v   uint64
		err error
	}
	ch := make(chan res, 1)
	as.PutAsync(id, expected, prospero.Record{State: rec}, func(v uint64, err error) { ch <- res{v, err} })
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// del deletes record id if its version is expected, queued with the
// store's other writes when it commits in groups (prospero.AsyncDeleter):
// a cancellation, a one-shot done, a flush's deletions then share commits
// instead of taking one transaction (and one fsync) each.
func (e *Engine) del(ctx context.Context, id prospero.Identity, expected uint64) error {
	ad, ok := e.cfg.Store.(prospero.AsyncDeleter)
	if !ok {
		return e.cfg.Store.Delete(ctx, id, expected)
	}
	ch := make(chan error, 1)
	ad.DeleteAsync(id, expected, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxFlushers bounds the shards whose records flushAll writes at once,
// and the record writes of flushes in flight at once (Engine.each).
const maxFlushers = 64

// flushAll writes what every held shard has not at rest, many shards at
// once, so that their writes share commits. A shard paused (its node may
// not serve it now: its owner may be changing) or being released is not
// written: what it holds may be stale by the time the write lands, and
// written over its next owner's records it would bring back what they
// changed (a reminder they cancelled). A paused shard fires nothing, so
// its progress waits with it. Each flush counts as a write in flight of
// its shard, which a Release or Drop waits for.
func (e *Engine) flushAll(ctx context.Context) error {
	e.mu.Lock()
	type sh struct {
		name string
		st   *shardState
	}
	var todo []sh
	for name, st := range e.shards {
		if st.unwritten() && st.releasing == 0 && !e.sched.Paused(name) {
			st.inflight++
			todo = append(todo, sh{name, st})
		}
	}
	e.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, maxFlushers)
	)
	for _, s := range todo {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer e.endWrite(s.st)
			if err := e.flushShard(ctx, s.name, s.st); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RunDue dispatches every tick due at now and returns when the engine
// next has work (false: it holds nothing). It is the body of the
// engine's own loop, for an engine that is never started because its
// caller drives time: the deterministic simulation runs engines this
// way, on the one goroutine of ariel's simulated scheduler and its
// SimClock, together with Flush in place of the FlushInterval timer. On
// a started engine it does nothing and returns false.
func (e *Engine) RunDue(now time.Time) (time.Time, bool) {
	e.mu.Lock()
	started := e.started || e.closed
	e.mu.Unlock()
	if started {
		return time.Time{}, false
	}
	next, ok, _ := e.runDue(now, nil)
	return next, ok
}

// Flush writes what is not at rest yet (delivered progress, changes whose
// writes failed): what a started engine does every FlushInterval.
func (e *Engine) Flush(ctx context.Context) error { return e.flushAll(ctx) }

func (e *Engine) runDue(now time.Time, fires []Fire) (time.Time, bool, []Fire) {
	e.mu.Lock()
	fires = e.sched.Due(now, fires[:0])
	next, ok := e.sched.Next()
	e.mu.Unlock()
	for i := range fires {
		e.dispatch(&fires[i])
	}
	clear(fires)
	return next, ok, fires
}

// run fires due ticks and, every FlushInterval, has delivered progress
// written by a goroutine of its own: the writes wait on the store (an
// fsync, the replicas' acknowledgements), and ticks must not wait behind
// them. A flush still running when the next is due is not doubled.
func (e *Engine) run(ctx context.Context) {
	var flushing sync.WaitGroup
	defer close(e.done)
	defer flushing.Wait()
	flushC, stopFlush := e.cfg.Clock.NewTimer(e.cfg.FlushInterval)
	defer func() { stopFlush() }()
	flushed := make(chan struct{}, 1)
	busy := false
	var fires []Fire
	for {
		now := e.cfg.Clock.Now()
		var next time.Time
		var ok bool
		next, ok, fires = e.runDue(now, fires)
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
		case <-flushed:
			busy = false
		case <-flushC:
			if !busy {
				busy = true
				flushing.Add(1)
				go func() {
					defer flushing.Done()
					if err := e.flushAll(ctx); err != nil && ctx.Err() == nil {
						e.log.LogAttrs(ctx, slog.LevelWarn, "writing reminder progress", slog.Any("error", err))
					}
					flushed <- struct{}{}
				}()
			}
			flushC, stopFlush = e.cfg.Clock.NewTimer(e.cfg.FlushInterval)
		}
		stop()
	}
}

func (e *Engine) dispatch(f *Fire) {
	if e.cfg.Lateness != nil {
		e.cfg.Lateness(f.Late)
	}
	k, shard := f.Key, f.Shard
	fl := Fire{Key: f.Key, Gen: f.Gen, Seq: f.Seq, Flight: f.Flight} // what the callbacks name
	accept := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		x := e.sched.byKey[k]
		ok, removed := e.sched.Delivered(fl, e.cfg.Clock.Now())
		if st := e.shards[shard]; ok && st != nil {
			st.dirty = true
			if removed && x.rec != nil { // a one-shot is done: its record is deleted
				st.changedLocked(k, x.rec)
			}
		}
		e.poke()
		return ok
	}
	tick := Tick{Name: f.Name, Seq: f.Seq, Scheduled: f.Scheduled, Payload: f.payload}
	id := f.ID
	// A tick not queued (Deliver's error) or queued and dropped before
	// its turn (failed) fires again after RetryAfter.
	failed := func(err error) {
		e.mu.Lock()
		e.sched.Failed(fl, e.cfg.Clock.Now(), e.cfg.RetryAfter)
		e.mu.Unlock()
		e.poke()
		e.log.LogAttrs(context.Background(), slog.LevelDebug, "reminder tick not delivered",
			slog.String("actor", id.String()), slog.String("reminder", k.Name), slog.Any("error", err))
	}
	if dd, ok := e.cfg.Deliver.(DoneDeliverer); ok {
		current := func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.sched.Current(fl)
		}
		done := func(err error) {
			if err != nil {
				failed(err)
				return
			}
			accept() // false: cancelled or superseded meanwhile, nothing to count
		}
		if err := dd.DeliverDone(f.ID.Ref(), tick, current, done, failed); err != nil {
			failed(err)
		}
		return
	}
	if err := e.cfg.Deliver.Deliver(f.ID.Ref(), tick, accept, failed); err != nil {
		failed(err)
	}
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
