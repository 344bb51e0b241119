package prospero_test

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/tempest-actors/tempest/clock"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// manualClock is a supervisor clock moved by the test; its ticker never
// fires, so the test drives supervision with Supervisor.Tick.
type manualClock struct {
	clock.Real // the methods this package does not call
	mu         sync.Mutex
	now        time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *manualClock) NewTicker(time.Duration) (<-chan time.Time, func()) { return nil, func() {} }

// eventLog records lifecycle events and lets a test wait for one.
type eventLog struct {
	mu     sync.Mutex
	events []prospero.Event
	signal chan struct{}
}

func newEventLog() *eventLog { return &eventLog{signal: make(chan struct{}, 1)} }

func (l *eventLog) Emit(e prospero.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

func (l *eventLog) count(typ prospero.EventType, id prospero.Identity) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Type == typ && e.ID == id {
			n++
		}
	}
	return n
}

// waitFor blocks until n events of typ for id were seen, or fails after
// a generous bound (it never sleeps: it waits on the sink's signal).
func (l *eventLog) waitFor(t *testing.T, typ prospero.EventType, id prospero.Identity, n int) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for l.count(typ, id) < n {
		select {
		case <-l.signal:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d %v events of %s; log:\n%v", n, typ, id, l.dump())
		}
	}
}

func (l *eventLog) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := ""
	for _, e := range l.events {
		s += e.String() + "\n"
	}
	return s
}

// counter is a persistent actor: "inc" adds one, "get" replies the
// count, "self" replies its Self reference, "boom" panics.
type counter struct {
	n       uint64
	started *atomic.Int64
}

func (c *counter) Receive(ctx actor.Context, msg any) {
	switch msg {
	case "inc":
		c.n++
	case "get":
		ctx.Reply(c.n)
	case "self":
		ctx.Reply(ctx.Self())
	case "boom":
		panic("boom")
	}
	if _, ok := msg.(actor.Started); ok && c.started != nil {
		c.started.Add(1)
	}
}

func (c *counter) MarshalState() ([]byte, error) { return binary.AppendUvarint(nil, c.n), nil }

func (c *counter) UnmarshalState(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 || k != len(b) {
		return errors.New("counter: bad state")
	}
	c.n = n
	return nil
}

type node struct {
	sup    *prospero.Supervisor
	host   *fakeHost
	store  prospero.StateStore
	clock  *manualClock
	events *eventLog
}

type nodeOpts struct {
	maxActive int
	budget    int // hydration budget (0: the default)
	kinds     map[string]prospero.KindOptions
	store     prospero.StateStore
	started   *atomic.Int64
	factory   func(key string) actor.Actor // default: a counter
}

func newNode(t *testing.T, o nodeOpts) *node {
	t.Helper()
	n := &node{clock: &manualClock{now: t0}, events: newEventLog(), store: o.store, host: newFakeHost()}
	if n.store == nil {
		n.store = prospero.NewMemStore()
	}
	sup, err := prospero.NewSupervisor(prospero.Config{Store: n.store, Clock: n.clock, Events: n.events, MaxActive: o.maxActive,
		HydrationBudget: o.budget})
	if err != nil {
		t.Fatal(err)
	}
	factory := o.factory
	if factory == nil {
		factory = func(string) actor.Actor { return &counter{started: o.started} }
	}
	for name, ko := range o.kinds {
		if _, err := sup.Register(name, factory, ko); err != nil {
			t.Fatal(err)
		}
	}
	n.sup, n.host.sup = sup, sup
	if err := sup.Start(n.host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close: %v", err)
		}
		n.host.close()
	})
	return n
}

func (n *node) ask(t *testing.T, to actor.Ref, msg any) any {
	t.Helper()
	v, err := n.host.Ask(to, msg, 20*time.Second)
	if err != nil {
		t.Fatalf("Ask(%v, %v): %v", to, msg, err)
	}
	return v
}

func (n *node) status(t *testing.T, ref actor.Ref) prospero.Status {
	t.Helper()
	st, err := n.sup.Status(context.Background(), ref)
	if err != nil {
		t.Fatalf("Status(%v): %v", ref, err)
	}
	return st
}

var persistent = prospero.KindOptions{
	IdleTimeout: time.Minute,
	Persistence: prospero.Persistence{Mode: prospero.PersistOnPassivation},
}

func TestUnknownKindReachesSender(t *testing.T) {
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": persistent}})
	if err := n.host.Tell(actor.Virtual("nope", "1"), "inc"); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("Tell to unknown kind: %v", err)
	}
	if st, err := n.sup.Status(context.Background(), actor.Virtual("nope", "1")); !errors.Is(err, actor.ErrUnknownKind) || st.State != actor.Unknown {
		t.Fatalf("Status of unknown kind: %+v %v", st, err)
	}
}

// A persistent counter survives being dormant: idle passivation writes
// it at rest, releases it, and the next message hydrates it with the same
// incarnation before that message runs.
func TestPassivationAndHydrationKeepState(t *testing.T) {
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": persistent}})
	ref := actor.Virtual("counter", "a")
	id := prospero.IdentityOf(ref)
	for range 3 {
		if err := n.host.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.ask(t, ref, "get"); got != uint64(3) {
		t.Fatalf("count %v, want 3", got)
	}
	self := n.ask(t, ref, "self").(actor.Ref)
	if st := n.status(t, self); st.State != actor.Valid || st.Incarnation != 1 || !st.Active {
		t.Fatalf("active status %+v", st)
	}
	// Not idle yet.
	n.clock.Advance(59 * time.Second)
	n.sup.Tick()
	if got := n.events.count(prospero.EventPassivating, id); got != 0 {
		t.Fatalf("passivated before the idle timeout")
	}
	n.clock.Advance(time.Second)
	n.sup.Tick()
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	if st := n.status(t, ref); st.State != actor.Dormant || st.Active || st.Incarnation != 1 {
		t.Fatalf("dormant status %+v", st)
	}
	if st := n.status(t, self); st.State != actor.Dormant {
		t.Fatalf("pinned ref across dormancy %+v, want Dormant", st)
	}
	if s := n.sup.Stats(); s.Entries != 0 {
		t.Fatalf("dormant identity still in memory: %+v", s)
	}
	rec, err := n.store.Get(context.Background(), id)
	if err != nil || rec.Incarnation != 1 {
		t.Fatalf("state at rest %+v %v", rec, err)
	}
	// Mail for the dormant identity hydrates it, in order.
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	if got := n.ask(t, ref, "get"); got != uint64(4) {
		t.Fatalf("count after hydration %v, want 4", got)
	}
	n.events.waitFor(t, prospero.EventHydrated, id, 1)
	if st := n.status(t, self); st.State != actor.Valid || st.Incarnation != 1 {
		t.Fatalf("pinned ref after hydration %+v, want Valid #1", st)
	}
}

// One thousand concurrent first messages to one dormant identity make
// exactly one activation, and every message is handled exactly once.
func TestConcurrentFirstMessagesActivateOnce(t *testing.T) {
	store := prospero.NewMemStore()
	id := prospero.Identity{Kind: "counter", Key: "hot"}
	if _, err := store.Put(context.Background(), id, 0, prospero.Record{Incarnation: 1, State: binary.AppendUvarint(nil, 5)}); err != nil {
		t.Fatal(err)
	}
	var started atomic.Int64
	opts := persistent
	opts.MailboxDepth = 2048
	n := newNode(t, nodeOpts{store: store, started: &started, kinds: map[string]prospero.KindOptions{"counter": opts}})
	ref := id.Ref()
	const senders = 1000
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.host.Tell(ref, "inc"); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Tell: %v", err)
	}
	if got := n.ask(t, ref, "get"); got != uint64(5+senders) {
		t.Fatalf("count %v, want %d", got, 5+senders)
	}
	if got := started.Load(); got != 1 {
		t.Fatalf("%d activations (Started turns), want 1", got)
	}
	n.events.waitFor(t, prospero.EventHydrated, id, 1)
	if h, a := n.events.count(prospero.EventHydrated, id), n.events.count(prospero.EventActivated, id); h != 1 || a != 0 {
		t.Fatalf("%d Hydrated and %d Activated events, want 1 and 0", h, a)
	}
}

// A panic restarts the actor under a new incarnation from its last state
// at rest: the old Self reference reads ActorTerminated and refuses sends,
// the plain reference reaches the new incarnation.
func TestRestartRemintsIdentity(t *testing.T) {
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": persistent}})
	ref := actor.Virtual("counter", "r")
	id := prospero.IdentityOf(ref)
	n.ask(t, ref, "get")
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	// Put state at rest (count 1), then change it in memory only.
	if got := n.ask(t, ref, "get"); got != uint64(1) {
		t.Fatalf("count %v, want 1", got)
	}
	if !n.sup.Passivate(ref) {
		t.Fatal("Passivate: not active")
	}
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	if got := n.ask(t, ref, "get"); got != uint64(1) {
		t.Fatalf("count %v, want 1", got)
	}
	old := n.ask(t, ref, "self").(actor.Ref)
	if old.Incarnation() != 1 {
		t.Fatalf("Self %v, want incarnation 1", old)
	}
	if err := n.host.Tell(ref, "inc"); err != nil { // 2, never written at rest
		t.Fatal(err)
	}
	if err := n.host.Tell(ref, "boom"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRestarted, id, 1)
	if rec, err := n.store.Get(context.Background(), id); err != nil || len(rec.State) == 0 {
		t.Fatalf("record after restart: %+v %v", rec, err)
	}
	// The plain reference reaches the new incarnation, restarted from
	// the last state at rest.
	if got := n.ask(t, ref, "get"); got != uint64(1) {
		t.Fatalf("count after restart %v, want 1 (last state at rest); events:\n%s", got, n.events.dump())
	}
	self := n.ask(t, ref, "self").(actor.Ref)
	if self.Incarnation() != 2 {
		t.Fatalf("new Self %v, want incarnation 2", self)
	}
	if st := n.status(t, old); st.State != actor.ActorTerminated || st.Incarnation != 2 {
		t.Fatalf("stale pinned ref %+v, want ActorTerminated", st)
	}
	if err := n.host.Tell(old, "inc"); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("send through stale ref: %v, want ErrActorTerminated", err)
	}
	if st := n.status(t, ref); st.State != actor.Valid || st.Incarnation != 2 {
		t.Fatalf("plain ref %+v", st)
	}
	rec, err := n.store.Get(context.Background(), id)
	if err != nil || rec.Incarnation != 2 {
		t.Fatalf("re-mint not at rest: %+v %v", rec, err)
	}
}

// Four panics within the restart period escalate to Retire: the state at
// rest keeps only the next incarnation, and the next message starts a
// fresh, empty actor under it.
func TestRestartIntensityEscalatesToRetire(t *testing.T) {
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": persistent}})
	ref := actor.Virtual("counter", "loop")
	id := prospero.IdentityOf(ref)
	for i := 1; i <= 3; i++ {
		n.ask(t, ref, "get")
		if err := n.host.Tell(ref, "boom"); err != nil {
			t.Fatal(err)
		}
		n.events.waitFor(t, prospero.EventRestarting, id, i)
		// Back-off after the first restart: move time past it.
		n.clock.Advance(time.Second)
		n.sup.Tick()
		n.events.waitFor(t, prospero.EventRestarted, id, i)
	}
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.ask(t, ref, "get")
	if err := n.host.Tell(ref, "boom"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRetired, id, 1)
	if got := n.events.count(prospero.EventEscalated, id); got != 1 {
		t.Fatalf("%d Escalated events, want 1", got)
	}
	rec, err := n.store.Get(context.Background(), id)
	if err != nil || rec.Incarnation != 5 || len(rec.State) != 0 {
		t.Fatalf("after retire the record is %+v %v, want incarnation 5 and no state", rec, err)
	}
	if st := n.status(t, ref.WithIncarnation(4)); st.State != actor.ActorTerminated {
		t.Fatalf("retired incarnation reads %+v", st)
	}
}

func TestSupervisorOnBoltStore(t *testing.T) {
	store, err := prospero.NewBoltStore(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() }) // after the supervisor's Close (cleanups run last-in first-out)
	n := newNode(t, nodeOpts{store: store, kinds: map[string]prospero.KindOptions{"counter": persistent}})
	ref := actor.Virtual("counter", "disk")
	for i := range 5 {
		if err := n.host.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			n.ask(t, ref, "get")
			n.sup.Passivate(ref)
		}
	}
	if got := n.ask(t, ref, "get"); got != uint64(5) {
		t.Fatalf("count %v, want 5", got)
	}
	n.events.waitFor(t, prospero.EventHydrated, prospero.IdentityOf(ref), 3)
}

// With PersistEveryTurn the state reaches the store after the turns,
// without any passivation. Turns that change the state while a write is
// in flight are written together by the next one, so there are at most
// as many writes as turns, and the last holds the newest state.
func TestPersistEveryTurn(t *testing.T) {
	kind := prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}}
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": kind}})
	ref := actor.Virtual("counter", "durable")
	id := prospero.IdentityOf(ref)
	// One inc at a time, each waited for: every turn that changes the
	// state writes it. (Turns sent together may share a write: the store
	// can then show the last one before the event of the write carrying
	// it, so the counts below would not be exact.)
	for k := 1; k <= 3; k++ {
		if err := n.host.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
		n.events.waitFor(t, prospero.EventPersisted, id, k)
		rec, err := n.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := binary.Uvarint(rec.State); got != uint64(k) {
			t.Fatalf("state at rest %d after persisted event %d, want %d", got, k, k)
		}
	}
	// A turn that leaves the state as it is writes nothing.
	n.ask(t, ref, "get")
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventPersisted, id, 4)
	n.ask(t, ref, "get")
	if after := n.events.count(prospero.EventPersisted, id); after != 4 {
		t.Fatalf("persisted %d times after three incs, a get and an inc, want 4", after)
	}
	if got := n.events.count(prospero.EventPassivated, id); got != 0 {
		t.Fatalf("passivated %d times", got)
	}
}

// The supervisor's own tick loop, on the fake time of a synctest
// bubble, passivates an idle actor after its idle timeout and not
// before.
func TestTickLoopPassivatesIdleActors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		events := newEventLog()
		host := newFakeHost()
		sup, err := prospero.NewSupervisor(prospero.Config{Store: prospero.NewMemStore(), Events: events,
			TickInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sup.Register("counter", func(string) actor.Actor { return &counter{} }, persistent); err != nil {
			t.Fatal(err)
		}
		host.sup = sup
		if err := sup.Start(host); err != nil {
			t.Fatal(err)
		}
		ref := actor.Virtual("counter", "idle")
		id := prospero.IdentityOf(ref)
		if err := host.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := events.count(prospero.EventActivated, id); got != 1 {
			t.Fatalf("%d activations", got)
		}
		time.Sleep(persistent.IdleTimeout - 2*time.Second)
		synctest.Wait()
		if got := events.count(prospero.EventPassivating, id); got != 0 {
			t.Fatalf("passivated before the idle timeout")
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := events.count(prospero.EventPassivated, id); got != 1 {
			t.Fatalf("%d passivations after the idle timeout, want 1", got)
		}
		if err := sup.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		host.close()
	})
}

// The Hydrate remedy reloads the last state at rest and keeps identity:
// the old Self reference stays Valid.
func TestHydrateRemedyKeepsIdentity(t *testing.T) {
	kind := persistent
	kind.Remedy = prospero.Hydrate
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": kind}})
	ref := actor.Virtual("counter", "h")
	id := prospero.IdentityOf(ref)
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	self := n.ask(t, ref, "self").(actor.Ref)
	n.sup.Passivate(ref)
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	if err := n.host.Tell(ref, "inc"); err != nil { // 2 in memory only
		t.Fatal(err)
	}
	if err := n.host.Tell(ref, "boom"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRehydrated, id, 1)
	if got := n.ask(t, ref, "get"); got != uint64(1) {
		t.Fatalf("count after Hydrate %v, want 1; events:\n%s", got, n.events.dump())
	}
	if st := n.status(t, self); st.State != actor.Valid || st.Incarnation != 1 {
		t.Fatalf("Self after Hydrate %+v, want Valid #1", st)
	}
	if got := n.ask(t, ref, "self"); got != self {
		t.Fatalf("Self changed to %v", got)
	}
}

// Above MaxActive the least recently used actor is passivated, its state
// written at rest.
func TestMaxActivePassivatesLeastRecentlyUsed(t *testing.T) {
	n := newNode(t, nodeOpts{maxActive: 2, kinds: map[string]prospero.KindOptions{"counter": persistent}})
	refs := []actor.Ref{actor.Virtual("counter", "1"), actor.Virtual("counter", "2"), actor.Virtual("counter", "3")}
	for _, r := range refs[:2] {
		if err := n.host.Tell(r, "inc"); err != nil {
			t.Fatal(err)
		}
		n.ask(t, r, "get")
		n.clock.Advance(time.Second)
	}
	n.ask(t, refs[0], "get") // 2 is now the least recently used
	n.clock.Advance(time.Second)
	n.ask(t, refs[2], "get")
	victim := prospero.IdentityOf(refs[1])
	n.events.waitFor(t, prospero.EventPassivated, victim, 1)
	for _, r := range []actor.Ref{refs[0], refs[2]} {
		if got := n.events.count(prospero.EventPassivating, prospero.IdentityOf(r)); got != 0 {
			t.Fatalf("%v passivated instead of the least recently used", r)
		}
	}
	if st := n.status(t, refs[1]); st.State != actor.Dormant {
		t.Fatalf("victim status %+v", st)
	}
	if got := n.ask(t, refs[1], "get"); got != uint64(1) {
		t.Fatalf("victim count after hydration %v, want 1", got)
	}
}

// holder records what a turn's held outputs were released with.
type holder struct {
	waited  bool
	release chan error
}

func (h *holder) Wait() func(error) {
	h.waited = true
	return func(err error) { h.release <- err }
}

// A turn of an actor value that is not the activation's (a remedy
// replaced it; the scheduler runs its last turns before the swap) writes
// nothing, and under PersistEveryTurn its outputs fail with a
// CommitError instead of leaving.
func TestTurnOfAReplacedValueIsNotAcknowledged(t *testing.T) {
	kind := prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}}
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": kind}})
	ref := actor.Virtual("counter", "r")
	id := prospero.IdentityOf(ref)
	n.ask(t, ref, "get")
	h := &holder{release: make(chan error, 1)}
	n.sup.AfterTurn(ref.WithIncarnation(1), 1, &counter{n: 99}, true, h)
	if !h.waited {
		t.Fatal("the stale turn's outputs were not held")
	}
	err := <-h.release
	var ce *prospero.CommitError
	if !errors.Is(err, actor.ErrNotCommitted) || !errors.As(err, &ce) || ce.ID != id {
		t.Fatalf("stale turn released with %v, want a CommitError for %s", err, id)
	}
	if _, err := n.store.Get(context.Background(), id); !errors.Is(err, prospero.ErrNotFound) {
		t.Fatalf("the stale value was written: %v", err)
	}
}

// failingStore fails every Put while fail is set.
type failingStore struct {
	prospero.StateStore
	fail atomic.Bool
}

func (s *failingStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	if s.fail.Load() {
		return 0, errors.New("disk full")
	}
	return s.StateStore.Put(ctx, id, expected, rec)
}

// A state whose write at rest failed is kept in memory and written by
// the next activation, unless the store moved on meanwhile (a handoff or
// a replica brought a newer record): then the store's record is the
// identity's state, and the activation must not fail on the stale
// write's version check (it did, at every activation).
func TestUnsavedStateGivesWayToANewerRecord(t *testing.T) {
	for _, moved := range []bool{false, true} {
		n, store, ref, id := unsavedCounter(t)
		want := uint64(3)
		if moved {
			// A newer record arrives (a handoff back to this node).
			if _, err := store.Put(context.Background(), id, 0, prospero.Record{Incarnation: 1, State: binary.AppendUvarint(nil, 10)}); err != nil {
				t.Fatal(err)
			}
			want = 10
		}
		if got := n.ask(t, ref, "get"); got != want {
			t.Fatalf("moved=%v: count after activation %v, want %d", moved, got, want)
		}
		st := n.sup.Stats()
		if st.Unsaved != 0 || (st.Superseded == 1) != moved {
			t.Fatalf("moved=%v: stats %+v", moved, st)
		}
		rec, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := binary.Uvarint(rec.State); v != want {
			t.Fatalf("moved=%v: state at rest %d, want %d", moved, v, want)
		}
	}
}

// unsavedCounter is a node whose counter u counted to 3 and was
// passivated while its store failed writes: the state is kept unsaved
// in memory. The store takes writes again when it returns.
func unsavedCounter(t *testing.T) (*node, *failingStore, actor.Ref, prospero.Identity) {
	t.Helper()
	store := &failingStore{StateStore: prospero.NewMemStore()}
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": persistent}, store: store})
	ref := actor.Virtual("counter", "u")
	id := prospero.IdentityOf(ref)
	for range 3 {
		if err := n.host.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.ask(t, ref, "get"); got != uint64(3) {
		t.Fatalf("count %v, want 3", got)
	}
	store.fail.Store(true)
	if !n.sup.Passivate(ref) {
		t.Fatal("passivate refused")
	}
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	if st := n.sup.Stats(); st.Unsaved != 1 {
		t.Fatalf("stats after the failed write %+v, want one unsaved state", st)
	}
	store.fail.Store(false)
	return n, store, ref, id
}

// Close writes the states whose write failed earlier, once the store
// takes writes again.
func TestCloseWritesUnsavedState(t *testing.T) {
	n, store, _, id := unsavedCounter(t)
	if err := n.sup.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := n.sup.Stats(); st.Unsaved != 0 {
		t.Fatalf("stats after Close %+v, want nothing unsaved", st)
	}
	rec, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := binary.Uvarint(rec.State); v != 3 {
		t.Fatalf("state at rest %d, want 3", v)
	}
}

// landingStore lands the next failN writes in the store and then fails
// them, as a replicated store does when its local write succeeded and a
// replica did not acknowledge: the record is on this node's disk, not
// committed. It logs every write.
type landingStore struct {
	prospero.StateStore
	failN atomic.Int32
	mu    sync.Mutex
	puts  []landed
}

type landed struct {
	state []byte
	err   error
}

func (s *landingStore) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	v, err := s.StateStore.Put(ctx, id, expected, rec)
	if err == nil && s.failN.Add(-1) >= 0 {
		v, err = 0, &prospero.CommitError{ID: id, Err: errors.New("a replica did not acknowledge")}
	}
	s.mu.Lock()
	s.puts = append(s.puts, landed{state: rec.State, err: err})
	s.mu.Unlock()
	return v, err
}

func (s *landingStore) log() []landed {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.puts)
}

// A write whose commit failed may have landed in the local store: the
// activation that reloads from it writes that record again, and commits
// it, before any turn can answer from it. Otherwise a read served a
// state that a failover to a replica without it took back (a counter
// went backwards in the simulation).
func TestReloadAfterAFailedCommitCommitsWhatItServes(t *testing.T) {
	kind := prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}}
	store := &landingStore{StateStore: prospero.NewMemStore()}
	n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": kind}, store: store})
	ref := actor.Virtual("counter", "doubt")
	id := prospero.IdentityOf(ref)
	if err := n.host.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventPersisted, id, 1)
	store.failN.Store(1)
	if err := n.host.Tell(ref, "inc"); err != nil { // state 2 lands, uncommitted
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRehydrated, id, 1)
	if got := n.ask(t, ref, "get"); got != uint64(2) {
		t.Fatalf("count after the reload %v, want the landed 2", got)
	}
	log := store.log()
	failed := slices.IndexFunc(log, func(l landed) bool { return l.err != nil })
	if failed < 0 {
		t.Fatalf("no write failed: %+v", log)
	}
	again := slices.IndexFunc(log[failed+1:], func(l landed) bool {
		v, _ := binary.Uvarint(l.state)
		return l.err == nil && v == 2
	})
	if again < 0 {
		t.Fatalf("the reloaded state was served without being committed; writes: %+v", log)
	}
	if st := n.sup.Stats(); st.Recommitted != 1 || st.CommitFailures != 1 {
		t.Fatalf("stats %+v, want one failure and one record committed again", st)
	}
}

// doubtingStore is a landingStore whose records are in doubt
// (prospero.DoubtingStore), as a replicated store's are in a cluster.
type doubtingStore struct {
	*landingStore
	doubt bool
}

func (s *doubtingStore) RecordsInDoubt() bool { return s.doubt }

// A store that doubts its records (a replicated one) gets every record
// an activation loads written again, and committed, before the actor
// serves it, unless this supervisor committed that very record when the
// identity's last activation here ended: a record found after a restart
// (the crashed process's write may never have committed) and a copy that
// arrived from elsewhere (a follower's, a handoff's) are committed again;
// a record this node passivated is not.
func TestRecordsInDoubtAreCommittedBeforeTheyAreServed(t *testing.T) {
	for _, doubt := range []bool{true, false} {
		store := &doubtingStore{landingStore: &landingStore{StateStore: prospero.NewMemStore()}, doubt: doubt}
		n := newNode(t, nodeOpts{kinds: map[string]prospero.KindOptions{"counter": persistent}, store: store})
		ref := actor.Virtual("counter", "restarted")
		id := prospero.IdentityOf(ref)
		// A record a crashed process left, or a replica brought.
		if _, err := store.StateStore.Put(context.Background(), id, 0, prospero.Record{Incarnation: 1, State: binary.AppendUvarint(nil, 5)}); err != nil {
			t.Fatal(err)
		}
		writes := func() int { return len(store.log()) }
		if got := n.ask(t, ref, "get"); got != uint64(5) {
			t.Fatalf("doubt=%v: count %v, want 5", doubt, got)
		}
		want := 0
		if doubt {
			want = 1
		}
		if got := writes(); got != want {
			t.Fatalf("doubt=%v: %d writes before the first answer, want %d: %+v", doubt, got, want, store.log())
		}
		if err := n.host.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
		if got := n.ask(t, ref, "get"); got != uint64(6) {
			t.Fatalf("doubt=%v: count %v, want 6", doubt, got)
		}
		passivate := func(k int) {
			t.Helper()
			if !n.sup.Passivate(ref) {
				t.Fatal("passivate refused")
			}
			n.events.waitFor(t, prospero.EventPassivated, id, k)
		}
		passivate(1)
		want++ // the passivation's write of 6
		if got := n.ask(t, ref, "get"); got != uint64(6) || writes() != want {
			t.Fatalf("doubt=%v: after the passivation: count %v, %d writes, want 6 and %d (the record this node committed is trusted)", doubt, got, writes(), want)
		}
		passivate(2)
		want++ // on passivation, the state is written again, changed or not
		// The record changes behind this node's back (a copy a replica
		// or a handoff brought).
		cur, err := store.StateStore.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.StateStore.Put(context.Background(), id, cur.Version, prospero.Record{Incarnation: 1, State: binary.AppendUvarint(nil, 9)}); err != nil {
			t.Fatal(err)
		}
		if doubt {
			want++
		}
		if got := n.ask(t, ref, "get"); got != uint64(9) || writes() != want {
			t.Fatalf("doubt=%v: after a copy arrived: count %v, %d writes, want 9 and %d: %+v\n%s", doubt, got, writes(), want, store.log(), n.events.dump())
		}
		if st := n.sup.Stats(); (st.Recommitted == 2) != doubt || (st.Recommitted == 0) == doubt {
			t.Fatalf("doubt=%v: stats %+v", doubt, st)
		}
	}
}
