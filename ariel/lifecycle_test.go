package ariel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// recorder logs every message it receives (as text) into a shared log.
type recorder struct {
	name string
	mu   *sync.Mutex
	log  *[]string
}

func (r *recorder) Receive(ctx actor.Context, msg any) {
	r.mu.Lock()
	*r.log = append(*r.log, fmt.Sprintf("%s:%T:%v", r.name, msg, msg))
	r.mu.Unlock()
	if s, ok := msg.(string); ok && s == "?" {
		ctx.Reply(r.name)
	}
}

type logbook struct {
	mu  sync.Mutex
	log []string
}

func (l *logbook) actor(name string) *recorder { return &recorder{name: name, mu: &l.mu, log: &l.log} }

func (l *logbook) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}

func TestVirtualActorActivation(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	var lb logbook
	if err := s.Register("user", func(key string) actor.Actor { return lb.actor("user/" + key) }, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("user", "7")
	if st := s.State(ref); st != actor.Dormant {
		t.Fatalf("State before first mail = %v, want Dormant", st)
	}
	if err := s.Tell(ref, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Ask(askCtx(t), ref, "?"); err != nil || got != "user/7" {
		t.Fatalf("Ask = %v, %v", got, err)
	}
	want := []string{"user/7:actor.Started:{}", "user/7:int:1", "user/7:string:?"}
	if got := lb.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
	if err := s.Tell(actor.Virtual("nope", "1"), 1); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("Tell to an unknown kind = %v, want ErrUnknownKind", err)
	}
}

// doorbell records rings.
type doorbell struct {
	mu    sync.Mutex
	rings []actor.Ref
}

func (d *doorbell) Ring(ref actor.Ref) {
	d.mu.Lock()
	d.rings = append(d.rings, ref)
	d.mu.Unlock()
}

func (d *doorbell) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.rings)
}

func TestMailboxPrecedesActorDoorbellAndPassivation(t *testing.T) {
	bell := &doorbell{}
	s := newSched(t, ariel.Config{Workers: 2, Activator: bell})
	ref := actor.Virtual("room", "a")
	if err := s.EnsureCell(ref, 4, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := s.Tell(ref, i); err != nil {
			t.Fatal(err)
		}
	}
	if n := bell.count(); n != 1 {
		t.Fatalf("doorbell rang %d times for 3 messages, want 1", n)
	}
	if st := s.State(ref); st != actor.Dormant {
		t.Fatalf("State = %v, want Dormant", st)
	}
	var lb logbook
	if err := s.Attach(ref, lb.actor("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Attach(ref, lb.actor("b")); !errors.Is(err, ariel.ErrActive) {
		t.Fatalf("second Attach = %v, want ErrActive", err)
	}
	waitIdle(t, s)
	want := []string{"a:actor.Started:{}", "a:int:0", "a:int:1", "a:int:2"}
	if got := lb.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
	if got := s.State(ref.WithIncarnation(4)); got != actor.Valid {
		t.Fatalf("State(pinned to 4) = %v, want Valid", got)
	}

	saved := make(chan actor.Actor, 1)
	if err := s.Passivate(ref, func(a actor.Actor) { saved <- a }); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if a := <-saved; a == nil {
		t.Fatal("final hook got no actor value")
	}
	if st := s.State(ref); st != actor.Dormant {
		t.Fatalf("State after passivation = %v, want Dormant", st)
	}
	// Nothing is attached: nothing to put to rest, and no doorbell (the
	// supervisor calls Passivate under the lock its doorbell takes).
	if err := s.Passivate(ref, func(actor.Actor) { t.Error("final of a passivation of no actor ran") }); !errors.Is(err, ariel.ErrNotAttached) {
		t.Fatalf("Passivate of a cell at rest = %v, want ErrNotAttached", err)
	}
	if n := bell.count(); n != 1 {
		t.Fatalf("doorbell rang %d times after a Passivate of a cell at rest, want 1", n)
	}
	if err := s.Tell(ref, 9); err != nil {
		t.Fatal(err)
	}
	if n := bell.count(); n != 2 {
		t.Fatalf("doorbell rang %d times, want 2 (once more after passivation)", n)
	}
	if err := s.Attach(ref, lb.actor("c")); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	got := lb.snapshot()
	wantTail := []string{"a:actor.Passivating:{}", "c:actor.Started:{}", "c:int:9"}
	if !slices.Equal(got[len(got)-3:], wantTail) {
		t.Fatalf("log = %q, want tail %q", got, wantTail)
	}
}

func TestRestartReMintsIncarnation(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	var lb logbook
	old, _ := s.Spawn(lb.actor("v1"))
	if err := s.Restart(old, lb.actor("v2")); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if err := s.Tell(old, 1); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("Tell to the old incarnation = %v, want ErrActorTerminated", err)
	}
	if st := s.State(old); st != actor.ActorTerminated {
		t.Fatalf("State(old) = %v", st)
	}
	cur := old.WithIncarnation(2)
	if got, err := s.Ask(askCtx(t), cur, "?"); err != nil || got != "v2" {
		t.Fatalf("Ask new incarnation = %v, %v", got, err)
	}
	if got, err := s.Ask(askCtx(t), old.Unpinned(), "?"); err != nil || got != "v2" {
		t.Fatalf("Ask unpinned = %v, %v", got, err)
	}
}

func TestStopStopsChildrenAndAnswersQueuedAsks(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	var lb logbook
	kids := make(chan actor.Ref, 2)
	parent, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(actor.Started); ok {
			for _, n := range []string{"k1", "k2"} {
				r, err := ctx.Spawn(lb.actor(n))
				if err != nil {
					panic(err)
				}
				kids <- r
			}
		}
	}))
	k1, k2 := <-kids, <-kids
	waitIdle(t, s)
	s.Stop(parent)
	waitIdle(t, s)
	for _, k := range []actor.Ref{parent, k1, k2} {
		if err := s.Tell(k, 1); !errors.Is(err, actor.ErrActorTerminated) {
			t.Fatalf("Tell to stopped %v = %v", k, err)
		}
	}
	got := lb.snapshot()
	for _, n := range []string{"k1", "k2"} {
		if !slices.Contains(got, n+":actor.Stopping:{}") {
			t.Fatalf("%s did not get Stopping: %q", n, got)
		}
	}

	// Asks queued behind a stop are answered ErrActorTerminated.
	b := newBlocker()
	ref, _ := s.Spawn(b)
	_ = s.Tell(ref, "block")
	<-b.entered
	s.Stop(ref)
	errc := make(chan error, 1)
	go func() { _, err := s.Ask(askCtx(t), ref, "q"); errc <- err }()
	// The ask is either queued before the stop runs or refused after it.
	close(b.release)
	if err := <-errc; !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("queued ask = %v, want ErrActorTerminated", err)
	}
}

// remote is a Router that sends node "far" references to a fake network.
type remote struct {
	local ariel.Router
	mu    sync.Mutex
	out   []ariel.Outbound
	asks  chan ariel.Outbound
}

func (r *remote) Resolve(to actor.Ref) (*ariel.Cell, error) {
	if to.Node() == "far" {
		return nil, nil
	}
	return r.local.Resolve(to)
}

func (r *remote) Forward(m ariel.Outbound) error {
	r.mu.Lock()
	r.out = append(r.out, m)
	r.mu.Unlock()
	if m.AskID != 0 {
		r.asks <- m
	}
	return nil
}

func (r *remote) sent() []ariel.Outbound {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.out)
}

func TestRouterSeamForwardsAndCompletesAsks(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	rt := &remote{local: s.LocalRouter(), asks: make(chan ariel.Outbound, 4)}
	s.SetRouter(rt)
	far := actor.Spawned("far", 1, 1)

	// A tell from an actor carries the sender.
	a, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "go" {
			_ = ctx.Tell(far, "hello")
		}
	}))
	_ = s.Tell(a, "go")
	waitIdle(t, s)
	out := rt.sent()
	if len(out) != 1 || out[0].To != far || out[0].From != a || out[0].Msg != "hello" || out[0].AskID != 0 {
		t.Fatalf("forwarded %+v", out)
	}

	// An ask is completed by id from another goroutine.
	res := make(chan any, 1)
	go func() {
		v, err := s.Ask(askCtx(t), far, "q")
		if err != nil {
			v = err
		}
		res <- v
	}()
	m := <-rt.asks
	if m.AskID == 0 || m.Deadline.IsZero() {
		t.Fatalf("ask forwarded without correlation or deadline: %+v", m)
	}
	if !s.CompleteAsk(m.AskID, "answer", nil) {
		t.Fatal("CompleteAsk did not find the ask")
	}
	if v := <-res; v != "answer" {
		t.Fatalf("Ask = %v", v)
	}
	if s.CompleteAsk(m.AskID, "again", nil) {
		t.Fatal("an ask completed twice")
	}

	// A remote ask nobody answers fails at its deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Ask(ctx, far, "silence"); !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("unanswered remote ask = %v", err)
	}
}

func TestDeliverFromAnotherNode(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	ref, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "who" {
			ctx.Reply(ctx.Sender().String())
		}
	}))
	got := make(chan any, 1)
	from := actor.Virtual("client", "9")
	if err := s.Deliver(ref, from, "who", time.Now().Add(5*time.Second), func(v any, err error) { got <- v }); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != from.String() {
		t.Fatalf("reply = %v, want %v", v, from)
	}
}
