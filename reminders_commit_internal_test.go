package tempest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
)

// gatedRemStore holds the reminder engine's record writes open until the
// test opens its gate, and then lets them through or fails them.
type gatedRemStore struct {
	prospero.StateStore
	entered chan prospero.Identity // one per write held

	mu     sync.Mutex
	gate   chan struct{} // nil: writes pass at once
	failed error         // what writes held by the gate fail with (nil: they pass)
	wg     sync.WaitGroup
}

func newGatedRemStore(s prospero.StateStore) *gatedRemStore {
	return &gatedRemStore{StateStore: s, entered: make(chan prospero.Identity, 64)}
}

// close holds the writes from now on.
func (g *gatedRemStore) close(fail error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.failed = make(chan struct{}), fail
}

// open lets the writes held go (or fail).
func (g *gatedRemStore) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

// hold runs write once the gate opens (at once if it is open), or fails
// it with the gate's error.
func (g *gatedRemStore) hold(id prospero.Identity, write func(), fail func(error)) {
	g.mu.Lock()
	gate, failed := g.gate, g.failed
	g.mu.Unlock()
	if gate == nil || id.Kind != reminders.RecordKind {
		write()
		return
	}
	g.entered <- id
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		<-gate
		if failed != nil {
			fail(failed)
			return
		}
		write()
	}()
}

func (g *gatedRemStore) PutAsync(id prospero.Identity, expected uint64, rec prospero.Record, done func(uint64, error)) {
	rec.State = append([]byte(nil), rec.State...)
	g.hold(id, func() { g.StateStore.(prospero.AsyncStore).PutAsync(id, expected, rec, done) },
		func(err error) { done(0, err) })
}

func (g *gatedRemStore) DeleteAsync(id prospero.Identity, expected uint64, done func(error)) {
	g.hold(id, func() { g.StateStore.(prospero.AsyncDeleter).DeleteAsync(id, expected, done) }, done)
}

func (g *gatedRemStore) ScanPrefix(ctx context.Context, kind, prefix string) ([]prospero.Keyed, error) {
	return g.StateStore.(prospero.PrefixScanner).ScanPrefix(ctx, kind, prefix)
}

type remRegister struct{ r reminders.Reminder }
type remUnregister struct{ name string }

// remActor registers and unregisters reminders when asked and answers
// "ok" (or the error Register gave).
type remActor struct{ rem *Reminders }

func (a *remActor) Receive(ctx actor.Context, msg any) {
	var err error
	switch m := msg.(type) {
	case remRegister:
		err = a.rem.Register(ctx, m.r)
	case remUnregister:
		err = a.rem.Unregister(ctx, m.name)
	case string:
		ctx.Reply("pong " + m)
		return
	default:
		return
	}
	if err != nil {
		ctx.ReplyError(err)
		return
	}
	ctx.Reply("ok")
}

// startGatedRemNode runs a standalone node with one worker, whose
// reminder records pass through a gatedRemStore.
func startGatedRemNode(t *testing.T) (*Node, *gatedRemStore) {
	t.Helper()
	cfg := Config{Name: "n1", DataDir: t.TempDir()}
	cfg.Scheduler.Workers = 1
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var g *gatedRemStore
	n.remStore = func(s prospero.StateStore) prospero.StateStore {
		g = newGatedRemStore(s)
		return g
	}
	rem := n.Reminders()
	for _, kind := range []string{"biller", "echo"} {
		if err := n.Register(kind, func(string) actor.Actor { return &remActor{rem: rem} },
			KindOptions{Reminders: kind == "biller"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.open()
		if err := n.Close(context.Background()); err != nil {
			t.Error(err)
		}
		g.wg.Wait()
	})
	return n, g
}

type askResult struct {
	v   any
	err error
}

func askAsync(n *Node, ref actor.Ref, msg any) <-chan askResult {
	ch := make(chan askResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v, err := n.Ask(ctx, ref, msg)
		ch <- askResult{v, err}
	}()
	return ch
}

// mustAnswerWhileHeld asks echo/x on n, whose one worker would be taken
// by a turn waiting on the store, and fails the test if it is not
// answered.
func mustAnswerWhileHeld(t *testing.T, n *Node) {
	t.Helper()
	// The deadline only turns a hang into a failure; it does not measure.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if v, err := n.Ask(ctx, n.Ref("echo", "x"), "ping"); err != nil || v != "pong ping" {
		t.Fatalf("another actor's ask while a reminder commit is held open: %v, %v (the worker waits on the store)", v, err)
	}
}

// A registration does not make the worker wait for its commit: with the
// reminder's record held open in the store, another actor's turn runs on
// the node's only worker, and the registering turn's reply arrives only
// once the record is committed, when the reminder is also listed (and
// armed). Unregister likewise.
func TestReminderCommitDoesNotHoldTheWorker(t *testing.T) {
	n, g := startGatedRemNode(t)
	ref := n.Ref("biller", "a")
	rem := n.Reminders()

	g.close(nil)
	reg := askAsync(n, ref, remRegister{reminders.Reminder{Name: "r", Period: time.Hour}})
	<-g.entered // the record reached the store, which holds it
	mustAnswerWhileHeld(t, n)
	select {
	case r := <-reg:
		t.Fatalf("Register's turn answered (%v, %v) before its record was committed", r.v, r.err)
	default:
	}
	if l, err := rem.ListOf(t.Context(), ref); err != nil || len(l.Reminders) != 0 {
		t.Fatalf("ListOf before the commit: %+v, %v; want no reminder", l.Reminders, err)
	}
	g.open()
	if r := <-reg; r.err != nil || r.v != "ok" {
		t.Fatalf("Register after the commit: %v, %v", r.v, r.err)
	}
	if l, err := rem.ListOf(t.Context(), ref); err != nil || len(l.Reminders) != 1 {
		t.Fatalf("ListOf after the commit: %+v, %v; want the reminder", l.Reminders, err)
	}
	if got := rem.Stats().Reminders; got != 1 {
		t.Fatalf("%d reminders armed, want 1", got)
	}

	// A kind that did not opt in cannot hold its turns for a commit.
	if r := <-askAsync(n, n.Ref("echo", "y"), remRegister{reminders.Reminder{Name: "r", Period: time.Hour}}); !errors.Is(r.err, ErrNotHeld) {
		t.Fatalf("Register in a kind without KindOptions.Reminders: %v, %v; want ErrNotHeld", r.v, r.err)
	}
	// It says so first, before what it would otherwise refuse, and it is
	// ariel's too.
	if r := <-askAsync(n, n.Ref("echo", "y"), remRegister{reminders.Reminder{Name: "r", Period: time.Nanosecond}}); !errors.Is(r.err, ErrNotHeld) || !errors.Is(r.err, ariel.ErrNotHeld) {
		t.Fatalf("Register of a bad reminder in a kind without KindOptions.Reminders: %v, %v; want ErrNotHeld", r.v, r.err)
	}

	g.close(nil)
	unreg := askAsync(n, ref, remUnregister{"r"})
	<-g.entered
	mustAnswerWhileHeld(t, n)
	select {
	case r := <-unreg:
		t.Fatalf("Unregister's turn answered (%v, %v) before the deletion was committed", r.v, r.err)
	default:
	}
	if got := rem.Stats().Reminders; got != 0 {
		t.Fatalf("%d reminders armed once Unregister's turn ended, want 0", got)
	}
	g.open()
	if r := <-unreg; r.err != nil || r.v != "ok" {
		t.Fatalf("Unregister after the commit: %v, %v", r.v, r.err)
	}
}

// A registration whose record is not committed fails its turn's reply
// with ErrNotCommitted, and the reminder is not armed; a removal that is
// not committed fails likewise and the reminder stays.
func TestReminderCommitFailureFailsTheTurn(t *testing.T) {
	n, g := startGatedRemNode(t)
	ref := n.Ref("biller", "a")
	rem := n.Reminders()
	errDisk := errors.New("disk on fire")

	g.close(errDisk)
	reg := askAsync(n, ref, remRegister{reminders.Reminder{Name: "r", Period: time.Hour}})
	<-g.entered
	g.open()
	r := <-reg
	if !errors.Is(r.err, actor.ErrNotCommitted) {
		t.Fatalf("Register whose record failed: %v, %v; want ErrNotCommitted", r.v, r.err)
	}
	if l, err := rem.ListOf(t.Context(), ref); err != nil || len(l.Reminders) != 0 {
		t.Fatalf("ListOf after a failed registration: %+v, %v; want none", l.Reminders, err)
	}
	if got := rem.Stats().Reminders; got != 0 {
		t.Fatalf("%d reminders armed after a failed registration, want 0", got)
	}

	if r := <-askAsync(n, ref, remRegister{reminders.Reminder{Name: "r", Period: time.Hour}}); r.err != nil {
		t.Fatal(r.err)
	}
	g.close(errDisk)
	unreg := askAsync(n, ref, remUnregister{"r"})
	<-g.entered
	g.open()
	if r := <-unreg; !errors.Is(r.err, actor.ErrNotCommitted) {
		t.Fatalf("Unregister whose deletion failed: %v, %v; want ErrNotCommitted", r.v, r.err)
	}
	if got := rem.Stats().Reminders; got != 1 {
		t.Fatalf("%d reminders armed after a failed removal, want 1 (it stays)", got)
	}
}

// durableRem is a kind persisted every turn whose state cannot be
// marshalled when told so: its turn's state is then not committed.
type durableRem struct {
	rem  *Reminders
	n    int
	fail bool
}

type remRegisterFailing struct{ r reminders.Reminder }

func (a *durableRem) Receive(ctx actor.Context, msg any) {
	m, ok := msg.(remRegisterFailing)
	if !ok {
		return
	}
	a.n++
	a.fail = true
	if err := a.rem.Register(ctx, m.r); err != nil {
		ctx.ReplyError(err)
		return
	}
	ctx.Reply("ok")
}

var errMarshal = errors.New("state cannot be marshalled")

func (a *durableRem) MarshalState() ([]byte, error) {
	if a.fail {
		return nil, errMarshal
	}
	return []byte{byte(a.n)}, nil
}

func (a *durableRem) UnmarshalState(b []byte) error {
	if len(b) == 1 {
		a.n = int(b[0])
	}
	return nil
}

// A turn of a durable kind whose reminder record commits but whose state
// does not is a failed turn: its asker gets ErrNotCommitted and the
// reminder is not armed, nor left at rest once the reminders are flushed.
func TestReminderOfATurnWhoseStateFailedIsNotArmed(t *testing.T) {
	cfg := Config{Name: "n1", DataDir: t.TempDir()}
	cfg.Scheduler.Workers = 1
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rem := n.Reminders()
	if err := n.Register("account", func(string) actor.Actor { return &durableRem{rem: rem} }, KindOptions{
		KindOptions: prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	ref := n.Ref("account", "a")
	r := <-askAsync(n, ref, remRegisterFailing{reminders.Reminder{Name: "r", Period: time.Hour}})
	// The asker gets the error as one on another node would: its
	// sentinel and its text.
	if !errors.Is(r.err, actor.ErrNotCommitted) || !strings.Contains(r.err.Error(), errMarshal.Error()) {
		t.Fatalf("a turn whose state failed: %v, %v; want ErrNotCommitted for the state", r.v, r.err)
	}
	if l, err := rem.ListOf(t.Context(), ref); err != nil || len(l.Reminders) != 0 {
		t.Fatalf("ListOf after the failed turn: %+v, %v; want none", l.Reminders, err)
	}
	if got := rem.Stats().Reminders; got != 0 {
		t.Fatalf("%d reminders armed after the failed turn, want 0", got)
	}
	e, err := rem.engine()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	recs, err := reminders.Records(t.Context(), n.store, localShard)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Key != reminders.RecordID(localShard).Key {
			t.Fatalf("the failed turn's reminder record is still at rest after a flush: %s", rec.Key)
		}
	}
}
