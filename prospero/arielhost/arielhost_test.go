package arielhost_test

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/tempest-actors/tempest/clock"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/arielhost"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// manualClock is the supervisor's clock, moved by the test; its ticker
// never fires, so tests drive supervision with Supervisor.Tick.
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

// eventLog records lifecycle events and lets a test wait for them.
type eventLog struct {
	mu     sync.Mutex
	events []prospero.Event
	signal chan struct{}
}

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

func (l *eventLog) waitFor(t *testing.T, typ prospero.EventType, id prospero.Identity, n int) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for l.count(typ, id) < n {
		select {
		case <-l.signal:
		case <-deadline.C:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("timed out waiting for %d %v events of %s; log: %v", n, typ, id, l.events)
		}
	}
}

// counter is a persistent actor.
type counter struct {
	n       uint64
	started *atomic.Int64
	release chan struct{}
	entered chan struct{} // "held add" shows up here, then waits for release
}

func (c *counter) Receive(ctx actor.Context, msg any) {
	switch msg {
	case "inc":
		c.n++
	case "get":
		ctx.Reply(c.n)
	case "add":
		c.n++
		ctx.Reply(c.n)
	case "self":
		ctx.Reply(ctx.Self())
	case "boom":
		panic("boom")
	case "block":
		<-c.release
	case "held add":
		c.entered <- struct{}{}
		<-c.release
		c.n++
		ctx.Reply(c.n)
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
	sched  *ariel.Scheduler
	store  prospero.StateStore
	clock  *manualClock
	events *eventLog
}

type options struct {
	turnBudget time.Duration
	store      prospero.StateStore
	started    *atomic.Int64
	release    chan struct{}
	entered    chan struct{}
	kind       prospero.KindOptions
	workers    int
}

func newNode(t *testing.T, o options) *node {
	t.Helper()
	n := &node{clock: &manualClock{now: t0}, events: &eventLog{signal: make(chan struct{}, 1)}, store: o.store}
	if n.store == nil {
		n.store = prospero.NewMemStore()
	}
	sup, err := prospero.NewSupervisor(prospero.Config{Store: n.store, Clock: n.clock, Events: n.events})
	if err != nil {
		t.Fatal(err)
	}
	factory := func(string) actor.Actor { return &counter{started: o.started, release: o.release, entered: o.entered} }
	if _, err := sup.Register("counter", factory, o.kind); err != nil {
		t.Fatal(err)
	}
	if o.workers == 0 {
		o.workers = 2
	}
	sched, err := ariel.New(ariel.Config{Workers: o.workers, TurnBudget: o.turnBudget,
		Activator: arielhost.Activator(sup), Faults: arielhost.Faults(sup)})
	if err != nil {
		t.Fatal(err)
	}
	if err := arielhost.Start(sup, sched); err != nil {
		t.Fatal(err)
	}
	n.sup, n.sched = sup, sched
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := sup.Close(ctx); err != nil {
			t.Errorf("supervisor Close: %v", err)
		}
		if err := sched.Close(ctx); err != nil {
			t.Errorf("scheduler Close: %v", err)
		}
	})
	return n
}

func (n *node) ask(t *testing.T, to actor.Ref, msg any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := n.sched.Ask(ctx, to, msg)
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

func TestUnknownKind(t *testing.T) {
	n := newNode(t, options{kind: persistent})
	if err := n.sched.Tell(actor.Virtual("nope", "1"), "inc"); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("Tell to an unknown kind: %v, want ErrUnknownKind", err)
	}
}

// Idle passivation writes the counter at rest and releases it; the next
// message hydrates it under the same incarnation before that message
// runs.
func TestPassivationAndHydration(t *testing.T) {
	n := newNode(t, options{kind: persistent})
	ref := actor.Virtual("counter", "a")
	id := prospero.IdentityOf(ref)
	for range 3 {
		if err := n.sched.Tell(ref, "inc"); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.ask(t, ref, "get"); got != uint64(3) {
		t.Fatalf("count %v, want 3", got)
	}
	self := n.ask(t, ref, "self").(actor.Ref)
	n.clock.Advance(time.Minute)
	n.sup.Tick()
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	if st := n.status(t, self); st.State != actor.Dormant || st.Active {
		t.Fatalf("status while dormant %+v", st)
	}
	if err := n.sched.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	if got := n.ask(t, ref, "get"); got != uint64(4) {
		t.Fatalf("count after hydration %v, want 4", got)
	}
	n.events.waitFor(t, prospero.EventHydrated, id, 1)
	if st := n.status(t, self); st.State != actor.Valid || st.Incarnation != 1 {
		t.Fatalf("status after hydration %+v", st)
	}
}

// One thousand concurrent first messages to a dormant identity: one
// activation, every message handled once.
func TestConcurrentFirstMessages(t *testing.T) {
	store := prospero.NewMemStore()
	id := prospero.Identity{Kind: "counter", Key: "hot"}
	if _, err := store.Put(context.Background(), id, 0, prospero.Record{Incarnation: 1, State: binary.AppendUvarint(nil, 5)}); err != nil {
		t.Fatal(err)
	}
	var started atomic.Int64
	opts := persistent
	opts.MailboxDepth = 2048
	n := newNode(t, options{store: store, started: &started, kind: opts})
	const senders = 1000
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.sched.Tell(id.Ref(), "inc"); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d tells failed", failed.Load())
	}
	if got := n.ask(t, id.Ref(), "get"); got != uint64(5+senders) {
		t.Fatalf("count %v, want %d", got, 5+senders)
	}
	if got := started.Load(); got != 1 {
		t.Fatalf("%d activations, want 1", got)
	}
}

// A panic restarts the actor from its last state at rest under a new
// incarnation; the stale Self reference reads ActorTerminated and ariel
// refuses sends through it.
func TestRestartRemints(t *testing.T) {
	n := newNode(t, options{kind: persistent})
	ref := actor.Virtual("counter", "r")
	id := prospero.IdentityOf(ref)
	old := n.ask(t, ref, "self").(actor.Ref)
	if err := n.sched.Tell(ref, "inc"); err != nil {
		t.Fatal(err)
	}
	if err := n.sched.Tell(ref, "boom"); err != nil {
		t.Fatal(err)
	}
	n.events.waitFor(t, prospero.EventRestarted, id, 1)
	if got := n.ask(t, ref, "get"); got != uint64(0) {
		t.Fatalf("count after restart %v, want 0 (nothing was at rest)", got)
	}
	self := n.ask(t, ref, "self").(actor.Ref)
	if self.Incarnation() != old.Incarnation()+1 {
		t.Fatalf("Self after restart %v, old %v", self, old)
	}
	if st := n.status(t, old); st.State != actor.ActorTerminated {
		t.Fatalf("stale ref %+v, want ActorTerminated", st)
	}
	if err := n.sched.Tell(old, "inc"); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("send through the stale ref: %v, want ErrActorTerminated", err)
	}
}

// ControlPlaneImmunity: while turns that never return hold every worker,
// the watchdog abandons them and Prospero restarts each at once: the new
// incarnations answer on replacement workers before any stuck turn
// returns.
func TestSupervisionUnderSaturation(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	kind := prospero.KindOptions{IdleTimeout: prospero.NeverIdle}
	n := newNode(t, options{turnBudget: 300 * time.Millisecond, release: release, kind: kind})
	t.Cleanup(unblock) // runs before the node's Close
	refs := []actor.Ref{actor.Virtual("counter", "1"), actor.Virtual("counter", "2"), actor.Virtual("counter", "3")}
	for _, r := range refs {
		if err := n.sched.Tell(r, "block"); err != nil {
			t.Fatal(err)
		}
		if err := n.sched.Tell(r, "inc"); err != nil { // waits behind the stuck turn
			t.Fatal(err)
		}
	}
	for _, r := range refs {
		n.events.waitFor(t, prospero.EventRestarted, prospero.IdentityOf(r), 1)
		if got := n.ask(t, r, "get"); got != uint64(1) {
			t.Fatalf("%v after its restart: count %v, want 1 (the mail that waited)", r, got)
		}
		if self := n.ask(t, r, "self").(actor.Ref); self.Incarnation() != 2 {
			t.Fatalf("%v runs as %v, want incarnation 2", r, self)
		}
	}
	if st := n.sched.Stats(); st.Stuck != len(refs) || st.Workers != 2 {
		t.Fatalf("scheduler stats %+v, want %d stuck turns beside a full pool", st, len(refs))
	}
}
