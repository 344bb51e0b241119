package ariel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// ErrClosed is returned for work submitted after Close. It wraps
// actor.ErrProcessUnavailable.
var ErrClosed = fmt.Errorf("%w: scheduler closed", actor.ErrProcessUnavailable)

// ErrActive is returned by Attach for a cell that already has an actor.
var ErrActive = errors.New("tempest: actor already active")

// ErrNotAttached is returned by Passivate for a cell with no actor value
// attached: nothing to put to rest.
var ErrNotAttached = errors.New("ariel: no actor attached")

// Scheduler runs actors on a pool of workers (or, in simulated mode, on one
// deterministic goroutine). All methods are safe for concurrent use.
type Scheduler struct {
	node  string // cfg.Node, kept apart for the per-message path
	cfg   Config
	clock Clock
	// mono, set when clock is the real clock, is the base of elapsed
	// (a monotonic reading costs half of a time.Now).
	mono      time.Time
	log       *slog.Logger
	faults    FaultHook
	activator Activator
	latency   LatencyObserver
	tracer    TurnTracer
	vet       func(actor.Ref, any) (any, error)
	vetReply  func(actor.Ref, any) (any, error) // Config.VetReply, else vet
	vetErr    func(actor.Ref, error) error
	refusal   error                                             // a full mailbox's (Config.Refuse)
	pinned    error                                             // a reference pinned to another incarnation's (Config.Refuse)
	foreign   func(string) (time.Duration, time.Duration, bool) // Config.ForeignAskTimeouts

	router atomic.Pointer[routerBox]
	local  localRouter

	ids     idTable
	virtual sync.Map     // vkey -> *Cell
	ncells  atomic.Int64 // cells in virtual
	kindsMu sync.RWMutex
	kinds   map[string]kindInfo
	nextID  atomic.Uint64
	nextAsk atomic.Uint64
	asks    sync.Map // ask id -> *pending (asks forwarded to other nodes)

	// pool; the often-written words get their own cache lines so the
	// read-mostly fields above are not invalidated by every wake.
	workers  atomic.Pointer[[]*worker]
	sim      *simRunner
	_        [64]byte
	inj      injector
	_        [64]byte
	spinning atomic.Int32
	nparked  atomic.Int32
	idleMu   sync.Mutex
	idle     []*worker
	_        [64]byte

	// quiescence
	active  atomic.Int64
	_       [64]byte
	waiters atomic.Int32
	idleCh  chan struct{}
	idleMuQ sync.Mutex

	g        globalCounters
	exMu     sync.Mutex
	allCnt   []*counters
	nworkers atomic.Int32
	stuck    atomic.Int32 // abandoned goroutines still running
	// minBudget is the smallest turn budget in force (the scheduler's or
	// a kind's), in nanoseconds: it sets the watchdog's period.
	minBudget atomic.Int64
	// leaseEnd is when the lease given by SetLease runs out, as a reading
	// of elapsed; math.MaxInt64 until one is given.
	leaseEnd atomic.Int64
	// lapsedCells are the cells whose mail waits for the lease (parkLapsed).
	lapsedMu    sync.Mutex
	lapsedCells []*Cell
	rearm       chan struct{} // tells the watchdog that minBudget changed

	lifeMu  sync.Mutex
	closing atomic.Bool
	closed  chan struct{}
	wg      sync.WaitGroup
}

type vkey struct{ kind, key string }

type kindInfo struct {
	factory func(key string) actor.Actor
	mailbox int
	after   AfterTurn
	holds   bool // SetHoldOutputs
	reent   actor.Reentrancy
	budget  time.Duration // 0: the scheduler's TurnBudget
	leased  bool          // SetLeased
	// askDefault and askMax are the kind's deadline policy (see
	// SetAskTimeouts); 0: actor.DefaultAskTimeout and no maximum.
	askDefault, askMax time.Duration
}

var (
	_ actor.Client = (*Scheduler)(nil)
	_ StatsSource  = (*Scheduler)(nil)
)

// New validates cfg and starts a scheduler: its workers and its watchdog
// (or the simulated runner). Close stops them.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Scheduler{
		node:     cfg.Node,
		cfg:      cfg,
		log:      cfg.Logger,
		latency:  cfg.Latency,
		tracer:   cfg.Tracer,
		vet:      cfg.Vet,
		vetReply: cfg.VetReply,
		vetErr:   cfg.VetError,
		refusal:  refuse(cfg.Refuse, actor.ErrRefused),
		pinned:   refuse(cfg.Refuse, actor.ErrActorTerminated),
		foreign:  cfg.ForeignAskTimeouts,
		kinds:    map[string]kindInfo{},
		idleCh:   make(chan struct{}),
		closed:   make(chan struct{}),
		rearm:    make(chan struct{}, 1),
	}
	if s.vetReply == nil {
		s.vetReply = s.vet
	}
	s.minBudget.Store(int64(cfg.TurnBudget))
	s.clock = cfg.Clock
	if cfg.Simulated && s.clock == nil {
		s.clock = NewSimClock(time.Unix(0, 0).UTC())
	}
	if s.clock == nil {
		s.clock = RealClock{}
	}
	if _, ok := s.clock.(RealClock); ok {
		s.mono = time.Now()
	}
	s.leaseEnd.Store(math.MaxInt64) // no lease given yet: nothing lapses
	s.faults = cfg.Faults
	if s.faults == nil {
		s.faults = &LogFaults{Logger: cfg.Logger}
	}
	s.activator = cfg.Activator
	if s.activator == nil {
		s.activator = FactoryActivator{S: s}
	}
	s.local = localRouter{s}
	s.router.Store(&routerBox{r: s.local, local: true})
	if cfg.Simulated {
		s.sim = newSimRunner(s)
		s.wg.Add(1)
		go s.sim.run()
		return s, nil
	}
	ws := make([]*worker, cfg.Workers)
	for i := range ws {
		ws[i] = s.newWorker(i)
	}
	s.workers.Store(&ws)
	s.nworkers.Store(int32(len(ws)))
	for _, w := range ws {
		s.wg.Add(1)
		go w.run()
	}
	s.wg.Add(1)
	go s.watchdog()
	return s, nil
}

// Config returns the effective configuration (defaults filled in).
func (s *Scheduler) Config() Config { return s.cfg }

// Clock returns the scheduler's clock.
func (s *Scheduler) Clock() Clock { return s.clock }

// Close stops every goroutine the scheduler started. Mail still queued is
// dropped; pending asks from program code fail with ErrClosed at their
// deadline or context. Close waits for running turns to return, up to ctx (not for turns the
// watchdog abandoned: their goroutines end whenever their handlers return).
// It is idempotent.
func (s *Scheduler) Close(ctx context.Context) error {
	s.lifeMu.Lock()
	if !s.closing.Load() {
		s.closing.Store(true)
		close(s.closed)
	}
	s.lifeMu.Unlock()
	s.wakeAll()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.finishStranded()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ariel: close: %w", ctx.Err())
	}
}

// Register makes virtual actors of kind activatable on this node: the first
// mail for kind/key creates factory(key). mailbox bounds their mailboxes (0:
// the configured default). Registering a kind twice replaces its factory for
// future activations.
func (s *Scheduler) Register(kind string, factory func(key string) actor.Actor, mailbox int) error {
	if kind == "" || factory == nil {
		return errors.New("ariel: Register needs a kind and a factory")
	}
	if mailbox < 0 || mailbox > maxMailbox {
		return fmt.Errorf("ariel: mailbox %d out of range", mailbox)
	}
	s.kindsMu.Lock()
	old := s.kinds[kind]
	s.kinds[kind] = kindInfo{factory: factory, mailbox: mailbox, after: old.after, holds: old.holds, reent: old.reent, budget: old.budget,
		askDefault: old.askDefault, askMax: old.askMax, leased: old.leased}
	s.kindsMu.Unlock()
	return nil
}

func (s *Scheduler) kind(kind string) (kindInfo, bool) {
	s.kindsMu.RLock()
	k, ok := s.kinds[kind]
	s.kindsMu.RUnlock()
	return k, ok
}

// newCell builds a cell. A virtual cell starts with incarnation 0 (not
// known until an actor is attached); a spawned one with 1.
func (s *Scheduler) newCell(ref actor.Ref, mailbox int, info kindInfo) *Cell {
	if mailbox <= 0 {
		mailbox = s.cfg.MailboxCapacity
	}
	c := &Cell{limit: int32(mailbox), ref: ref.Unpinned(), s: s, after: info.after,
		holds: info.after != nil || info.holds, reent: info.reent, leased: info.leased && ref.IsVirtual()}
	if !ref.IsVirtual() {
		c.inc.Store(1)
	}
	return c
}

// storeCell publishes a new virtual cell unless one exists, and returns
// the cell in the map.
func (s *Scheduler) storeCell(k vkey, c *Cell) *Cell {
	v, loaded := s.virtual.LoadOrStore(k, c)
	if !loaded {
		s.ncells.Add(1)
	}
	return v.(*Cell)
}

// forget removes the virtual cell c from the map, if it is still there.
func (s *Scheduler) forget(c *Cell) {
	if s.virtual.CompareAndDelete(vkey{c.ref.Kind(), c.ref.Key()}, c) {
		s.ncells.Add(-1)
	}
}

// Spawn starts a top-level actor (no parent) and returns its reference.
func (s *Scheduler) Spawn(a actor.Actor, opts ...actor.SpawnOption) (actor.Ref, error) {
	return s.spawn(nil, a, opts, nil)
}

func (s *Scheduler) spawn(parent *Cell, a actor.Actor, opts []actor.SpawnOption, ex *executor) (actor.Ref, error) {
	if s.closing.Load() {
		return actor.Ref{}, ErrClosed
	}
	if a == nil {
		return actor.Ref{}, errors.New("ariel: Spawn of a nil actor")
	}
	var o actor.SpawnOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.Mailbox < 0 || o.Mailbox > maxMailbox {
		return actor.Ref{}, fmt.Errorf("ariel: mailbox %d out of range", o.Mailbox)
	}
	id := s.nextID.Add(1)
	if o.Reentrancy > actor.NonReentrant {
		return actor.Ref{}, fmt.Errorf("ariel: unknown reentrancy %v", o.Reentrancy)
	}
	c := s.newCell(actor.Spawned(s.cfg.Node, id, 0), o.Mailbox, kindInfo{reent: o.Reentrancy})
	c.act = a
	c.sys = []envelope{{kind: kStart}}
	c.pend.Store(1)
	if parent != nil {
		c.ext = &cellExt{parent: parent}
		pe := parent.extension()
		parent.mu.Lock()
		pe.children = append(pe.children, c)
		parent.mu.Unlock()
	}
	s.ids.put(id, c)
	c.state.Store(stReady)
	s.activeInc()
	s.enqueue(c, ex)
	return c.Ref(), nil
}

// Tell sends msg to to from program code. See actor.Client.
func (s *Scheduler) Tell(to actor.Ref, msg any) error {
	if s.vet != nil && to.IsVirtual() {
		var err error
		if msg, err = s.vet(to, msg); err != nil {
			s.g.undelivered.Add(1)
			return err
		}
	}
	return s.sendNow(nil, to, msg, nil, 0, nil)
}

// TellTraced is Tell for a tell that carries trace, an opaque value (see
// WithTrace): to Outbound.Trace when to lives elsewhere, to Config.Tracer
// when it runs here. A nil trace, or no tracer, is Tell.
func (s *Scheduler) TellTraced(to actor.Ref, msg any, trace any) error {
	if !s.traces() {
		trace = nil
	}
	if s.vet != nil && to.IsVirtual() {
		var err error
		if msg, err = s.vet(to, msg); err != nil {
			s.g.undelivered.Add(1)
			return err
		}
	}
	return s.sendNow(nil, to, msg, nil, 0, trace)
}

// sendNow delivers one message immediately (not batched): program code,
// timers, replies to other nodes. tr is a traced tell's trace (an ask's is
// in p).
func (s *Scheduler) sendNow(from *Cell, to actor.Ref, msg any, p *pending, deadline int64, tr any) error {
	if s.closing.Load() {
		return ErrClosed
	}
	for {
		c, rt, err := s.resolve(to)
		if err != nil {
			s.g.undelivered.Add(1)
			return err
		}
		if c == nil {
			return s.forward(from, to, msg, p, deadline, nil, tr, rt)
		}
		if err := c.reserve(); err != nil {
			s.countRefusal(err)
			return err
		}
		e := envelope{msg: msg, from: from, ask: p, deadline: deadline}
		if s.latency != nil {
			e.enq = s.clock.Now().UnixNano()
		}
		if tracingBuilt && p != nil && p.trace != nil {
			p.trace.queued = s.clock.Now()
		} else if tracingBuilt && tr != nil {
			e.x = &xinfo{trace: &msgTrace{trace: tr, queued: s.clock.Now()}}
		}
		if !c.pushOne(e) {
			c.unreserve(1)
			if c.gone() {
				// Passivated and removed while we looked it up: the
				// identity gets a fresh cell.
				s.forget(c)
				continue
			}
			s.g.undelivered.Add(1)
			return actor.ErrActorTerminated
		}
		s.wake(c, nil)
		return nil
	}
}

func (s *Scheduler) countRefusal(err error) {
	if errors.Is(err, actor.ErrRefused) {
		s.g.refused.Add(1)
	}
	s.g.undelivered.Add(1)
}

// forward hands a message for another node to the router; tr is a traced
// tell's trace (an ask's is in p), rt the router's decision for it when
// it has just resolved it (RouteResolver).
func (s *Scheduler) forward(from *Cell, to actor.Ref, msg any, p *pending, deadline int64, chain *callChain, tr any, rt Route) error {
	m := Outbound{To: to, Msg: msg, Chain: chain.Refs(), Trace: tr, Route: rt}
	if from != nil {
		m.From = from.Ref()
	}
	if p != nil {
		m.AskID = s.registerAsk(p)
		m.Deadline = time.Unix(0, deadline)
		if tracingBuilt && p.trace != nil {
			m.Trace = p.trace.trace
		}
	}
	err := s.route().Forward(m)
	if err != nil {
		if p != nil {
			s.asks.Delete(m.AskID)
		}
		s.g.undelivered.Add(1)
	}
	return err
}

// Ask sends msg to to and blocks the calling goroutine until the reply, the
// deadline (from ctx, default actor.DefaultAskTimeout) or ctx's end. See
// actor.Client.
func (s *Scheduler) Ask(ctx context.Context, to actor.Ref, msg any) (any, error) {
	now := s.clock.Now()
	deadline, _ := ctx.Deadline()
	deadline = s.AskDeadline(to, now, deadline)
	d := deadline.Sub(now)
	if d <= 0 {
		return nil, actor.ErrDeadlineExceeded
	}
	if onTurnGoroutine() {
		s.g.asksInTurn.Add(1)
		return nil, fmt.Errorf("%w: ask of %v", actor.ErrAskInTurn, to)
	}
	if s.vet != nil && to.IsVirtual() {
		var err error
		if msg, err = s.vet(to, msg); err != nil {
			s.g.undelivered.Add(1)
			return nil, err
		}
	}
	p := &pending{s: s, ch: make(chan result, 1)}
	if tr := s.traceOf(ctx); tr != nil {
		p.trace = &msgTrace{trace: tr}
	}
	p.arm(d)
	if err := s.sendNow(nil, to, msg, p, deadline.UnixNano(), nil); err != nil {
		p.complete(nil, err, nil)
	}
	select {
	case r := <-p.ch:
		return r.v, r.err
	case <-ctx.Done():
		err := ctx.Err()
		expired := errors.Is(err, context.DeadlineExceeded)
		if expired {
			err = fmt.Errorf("%w (%w)", actor.ErrDeadlineExceeded, err)
		}
		if p.complete(nil, err, nil) {
			if expired {
				s.cancelForwarded(p)
			} else {
				s.gaveUp(p)
			}
		}
		r := <-p.ch
		return r.v, r.err
	case <-s.closed:
		if p.complete(nil, ErrClosed, nil) {
			s.gaveUp(p)
		}
		r := <-p.ch
		return r.v, r.err
	}
}

// gaveUp withdraws the ask p, which its caller stopped waiting for before
// its deadline (its context was cancelled, or the scheduler closed): an
// owner on this node drops it at dequeue if its turn has not started
// (counted in Stats.Cancelled), and an ask forwarded to another node is
// withdrawn there through the router's AskCanceller.
func (s *Scheduler) gaveUp(p *pending) {
	p.withdraw()
	s.cancelForwarded(p)
}

// cancelForwarded withdraws the ask p, answered on this node already, from
// the node it was forwarded to, through the router's AskCanceller. An ask
// that reached its deadline is withdrawn too: its deadline travelled with
// it as a duration, so its owner's copy ends one one-way delay later, and
// a turn could start in between. (One run on this node is dropped at
// dequeue at its deadline: Stats.Expired.)
func (s *Scheduler) cancelForwarded(p *pending) {
	if id := p.id.Load(); id != 0 {
		if c, ok := s.route().(AskCanceller); ok {
			c.CancelAsk(id)
		}
	}
}

// AskDeadline returns the deadline an ask to to gets on this node, given
// the one its caller set (zero: none), under the deadline policy of to's
// kind (SetAskTimeouts; for a kind not registered here,
// Config.ForeignAskTimeouts): the kind's default when the caller set
// none, and at most now plus the kind's maximum. A kind whose policy is
// not known here, or a spawned actor, gets actor.DefaultAskTimeout when
// none is set and no maximum. Safe for concurrent use.
func (s *Scheduler) AskDeadline(to actor.Ref, now, deadline time.Time) time.Time {
	def, max := actor.DefaultAskTimeout, time.Duration(0)
	if to.IsVirtual() {
		if k, ok := s.kind(to.Kind()); ok {
			if k.askDefault > 0 {
				def = k.askDefault
			}
			max = k.askMax
		} else if s.foreign != nil {
			if d, m, ok := s.foreign(to.Kind()); ok {
				if d > 0 {
					def = d
				}
				max = m
			}
		}
	}
	if deadline.IsZero() {
		deadline = now.Add(def)
	}
	if max > 0 && deadline.Sub(now) > max {
		deadline = now.Add(max)
	}
	return deadline
}

// Stop stops the actor ref: it receives actor.Stopping as its last message;
// queued mail is then answered ErrActorTerminated. Stopping an actor that
// is not running (or not local) is a no-op.
func (s *Scheduler) Stop(ref actor.Ref) {
	c, err := s.local.Resolve(ref)
	if err != nil || c == nil {
		return
	}
	if c.pushSys(envelope{kind: kStop}) {
		s.wake(c, nil)
	}
}

// wake makes c runnable after mail was added: a cell that is idle is made
// ready and queued (only the CAS winner queues it); a cell without an actor
// rings the Activator once per transition to "has mail".
func (s *Scheduler) wake(c *Cell, ex *executor) {
	for {
		switch c.state.Load() {
		case stIdle:
			if c.state.CompareAndSwap(stIdle, stReady) {
				s.activeInc()
				s.enqueue(c, ex)
				return
			}
		case stDetached:
			if c.state.CompareAndSwap(stDetached, stPending) {
				if s.traces() {
					c.rungAt.Store(s.clock.Now().UnixNano())
				}
				s.activator.Ring(c.Ref())
				return
			}
		default:
			return
		}
	}
}

// wakeAttached is wake for a push the caller made while c had an actor
// attached (Passivate, Restart, Retire: the supervisor's calls, made under
// its own lock). It never rings the Activator, which takes that lock: a
// cell found without an actor was detached after the push by the
// watchdog (abandon), which settles the pushed envelope and rings for the
// mail it leaves once the fault is reported.
func (s *Scheduler) wakeAttached(c *Cell) {
	if c.state.Load() == stIdle && c.state.CompareAndSwap(stIdle, stReady) {
		s.activeInc()
		s.enqueue(c, nil)
	}
}

// enqueue puts a ready cell on a run queue: the executing worker's LIFO slot
// when called from a turn, the shared injector otherwise.
func (s *Scheduler) enqueue(c *Cell, ex *executor) {
	if s.sim != nil {
		s.sim.push(c)
		return
	}
	if ex != nil && ex.w != nil {
		ex.w.pushNext(c)
		if ex.fenced() {
			// Woken from a turn the watchdog abandoned meanwhile: its
			// worker's queue is nobody's any more.
			ex.w.handOff()
		}
		return
	}
	s.inj.push(c)
	s.notify()
}

// elapsed is a reading of the clock in nanoseconds for measuring how
// long something ran (the fairness budget): only differences between
// two readings mean anything.
func (s *Scheduler) elapsed() int64 {
	if !s.mono.IsZero() {
		return int64(time.Since(s.mono))
	}
	return s.clock.Now().UnixNano()
}

// activeInc/activeDec count cells that are ready or running; zero means
// quiescent.
func (s *Scheduler) activeInc() { s.active.Add(1) }

func (s *Scheduler) activeDec() {
	if s.active.Add(-1) == 0 && s.waiters.Load() > 0 {
		s.idleMuQ.Lock()
		close(s.idleCh)
		s.idleCh = make(chan struct{})
		s.idleMuQ.Unlock()
	}
}

// WaitIdle blocks until the scheduler is quiescent: every mailbox of an
// active actor empty and no turn running (in simulated mode also no virtual
// timer pending), or ctx ends. Mail waiting for an activation (a rung
// doorbell) does not count: it is the supervisor's to schedule; nor does
// the mail of a leased actor that waits for the lease (SetLeased). Mail sent concurrently from program code may make it return early or
// late; call it after the senders are done.
func (s *Scheduler) WaitIdle(ctx context.Context) error {
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	for {
		s.idleMuQ.Lock()
		ch := s.idleCh
		s.idleMuQ.Unlock()
		if s.active.Load() == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stats returns a snapshot of the counters.
func (s *Scheduler) Stats() Stats {
	st := Stats{
		Refused:      s.g.refused.Load(),
		Undelivered:  s.g.undelivered.Load(),
		Panics:       s.g.panics.Load(),
		Exhausted:    s.g.exhausted.Load(),
		Expired:      s.g.expired.Load(),
		Cancelled:    s.g.cancelled.Load(),
		Lapsed:       s.g.lapsed.Load(),
		TimerSkipped: s.g.timerSkipped.Load(),
		StrayReplies: s.g.strayReplies.Load(),
		NoReply:      s.g.noReply.Load(),
		AsksInTurn:   s.g.asksInTurn.Load(),
		Deadlocks:    s.g.deadlocks.Load(),
		Fenced:       s.g.fenced.Load(),
		Unreplaced:   s.g.unreplaced.Load(),
		Workers:      int(s.nworkers.Load()),
		Stuck:        int(s.stuck.Load()),
		Cells:        int(s.ncells.Load()),
	}
	st.Degraded = s.sim == nil && !s.closing.Load() && st.Workers < s.cfg.Workers
	s.exMu.Lock()
	for _, c := range s.allCnt {
		st.Turns += c.turns.Load()
		st.Messages += c.messages.Load()
		st.Refused += c.refused.Load()
		st.Undelivered += c.undelivered.Load()
		st.BudgetYields += c.yields.Load()
		st.Steals += c.steals.Load()
		st.Parks += c.parks.Load()
		st.Seized += c.seized.Load()
		st.Shares += c.shares.Load()
		st.Recruited += c.recruited.Load()
	}
	s.exMu.Unlock()
	return st
}

func (s *Scheduler) newCounters() *counters {
	c := &counters{}
	s.exMu.Lock()
	s.allCnt = append(s.allCnt, c)
	s.exMu.Unlock()
	return c
}

// idTable maps spawned-actor ids to cells without locks on lookup: a
// copy-on-write directory of fixed-size chunks.
type idTable struct {
	mu     sync.Mutex
	chunks atomic.Pointer[[]*idChunk]
}

const idChunkBits = 12

type idChunk [1 << idChunkBits]atomic.Pointer[Cell]

func (t *idTable) get(id uint64) *Cell {
	p := t.chunks.Load()
	if p == nil {
		return nil
	}
	ci := id >> idChunkBits
	if ci >= uint64(len(*p)) {
		return nil
	}
	return (*p)[ci][id&(1<<idChunkBits-1)].Load()
}

func (t *idTable) put(id uint64, c *Cell) {
	ci := id >> idChunkBits
	p := t.chunks.Load()
	if p == nil || ci >= uint64(len(*p)) {
		t.mu.Lock()
		p = t.chunks.Load()
		var cur []*idChunk
		if p != nil {
			cur = *p
		}
		if ci >= uint64(len(cur)) {
			next := make([]*idChunk, ci+1, (ci+1)*2)
			copy(next, cur)
			for i := len(cur); i < len(next); i++ {
				next[i] = new(idChunk)
			}
			p = &next
			t.chunks.Store(p)
		}
		t.mu.Unlock()
	}
	(*p)[ci][id&(1<<idChunkBits-1)].Store(c)
}

// refuse is sentinel in the form f gives it (Config.Refuse).
func refuse(f func(error) error, sentinel error) error {
	if f == nil {
		return sentinel
	}
	return f(sentinel)
}
