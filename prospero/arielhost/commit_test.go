package arielhost_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// gatedStore is an AsyncStore whose asynchronous writes wait for the test:
// each PutAsync shows up on puts, and the test commits it (or fails it).
type gatedStore struct {
	*prospero.MemStore
	puts chan *gatedPut
}

type gatedPut struct {
	s        *gatedStore
	id       prospero.Identity
	expected uint64
	rec      prospero.Record
	done     func(uint64, error)
}

func newGatedStore() *gatedStore {
	return &gatedStore{MemStore: prospero.NewMemStore(), puts: make(chan *gatedPut, 16)}
}

func (s *gatedStore) PutAsync(id prospero.Identity, expected uint64, rec prospero.Record, done func(uint64, error)) {
	rec.State = append([]byte(nil), rec.State...)
	s.puts <- &gatedPut{s: s, id: id, expected: expected, rec: rec, done: done}
}

func (p *gatedPut) commit() {
	p.done(p.s.Put(context.Background(), p.id, p.expected, p.rec))
}

func (s *gatedStore) next(t *testing.T) *gatedPut {
	t.Helper()
	select {
	case p := <-s.puts:
		return p
	case <-time.After(20 * time.Second):
		t.Fatal("no write reached the store")
		return nil
	}
}

var durable = prospero.KindOptions{
	IdleTimeout: time.Minute,
	Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn},
}

// answers is what an asking actor's continuations saw, in order.
type answers struct {
	mu  sync.Mutex
	got []string
}

func (a *answers) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.got
	a.got = nil
	return got
}

// asker asks to whatever it is told ("add" to to), recording the answers.
func (n *node) asker(t *testing.T, to actor.Ref, a *answers) actor.Ref {
	t.Helper()
	ref, err := n.sched.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		m, ok := msg.(string)
		if !ok {
			return
		}
		ctx.Ask(to, m, func(_ actor.Context, v any, err error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if err != nil {
				a.got = append(a.got, "error")
				return
			}
			a.got = append(a.got, fmt.Sprint(v))
		})
	}))
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func (n *node) idle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.sched.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

// Reply after commit: an ask whose turn changed durable state is answered
// only once its write is committed. The worker does not wait for it (with
// one worker, other actors and later turns of the same actor run while
// the write is in flight); the later turn's write waits for the first and
// its reply for the first reply. A turn that changes nothing writes
// nothing.
func TestReplyAfterCommit(t *testing.T) {
	store := newGatedStore()
	n := newNode(t, options{store: store, kind: durable, workers: 1})
	ref := actor.Virtual("counter", "a")
	var got answers
	asker := n.asker(t, ref, &got)

	if err := n.sched.Tell(asker, "add"); err != nil {
		t.Fatal(err)
	}
	first := store.next(t)
	n.idle(t)
	if a := got.take(); len(a) != 0 {
		t.Fatalf("answered %v before the write was committed", a)
	}
	// The only worker is free: another actor answers meanwhile.
	if v := n.ask(t, actor.Virtual("counter", "b"), "get"); v != uint64(0) {
		t.Fatalf("counter/b = %v, want 0", v)
	}
	// A later turn of the same actor runs, and its write waits for the
	// first one.
	if err := n.sched.Tell(asker, "add"); err != nil {
		t.Fatal(err)
	}
	n.idle(t)
	select {
	case p := <-store.puts:
		t.Fatalf("second write %v issued while the first is in flight", p.id)
	default:
	}
	first.commit()
	second := store.next(t)
	n.idle(t)
	if a := got.take(); len(a) != 1 || a[0] != "1" {
		t.Fatalf("answers after the first commit = %v, want [1]", a)
	}
	second.commit()
	n.idle(t)
	if a := got.take(); len(a) != 1 || a[0] != "2" {
		t.Fatalf("answers after the second commit = %v, want [2]", a)
	}
	rec, err := store.Get(context.Background(), prospero.IdentityOf(ref))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := decodeCount(rec.State); v != 2 {
		t.Fatalf("state at rest %d, want 2", v)
	}
	// A read changes nothing: it is answered without a write.
	if v := n.ask(t, ref, "get"); v != uint64(2) {
		t.Fatalf("get = %v, want 2", v)
	}
	select {
	case p := <-store.puts:
		t.Fatalf("a read wrote %v", p.rec.State)
	default:
	}
}

// A write that fails fails the ask with a CommitError naming the actor
// (ErrNotCommitted, and the store's error); the activation then reloads
// its last committed state, so the lost update is never observed.
func TestCommitFailureFailsTheAskAndReloads(t *testing.T) {
	store := newGatedStore()
	n := newNode(t, options{store: store, kind: durable})
	ref := actor.Virtual("counter", "a")
	id := prospero.IdentityOf(ref)
	done := make(chan error, 1)
	go func() {
		_, err := n.sched.Ask(context.Background(), ref, "add")
		done <- err
	}()
	store.next(t).commit()
	if err := <-done; err != nil {
		t.Fatalf("first add: %v", err)
	}
	go func() {
		_, err := n.sched.Ask(context.Background(), ref, "add")
		done <- err
	}()
	disk := errors.New("disk on fire")
	p := store.next(t)
	p.done(0, disk)
	err := <-done
	var ce *prospero.CommitError
	if !errors.Is(err, actor.ErrNotCommitted) || !errors.Is(err, disk) || !errors.As(err, &ce) || ce.ID != id {
		t.Fatalf("failed add = %v, want a CommitError for %s wrapping ErrNotCommitted and the store's error", err, id)
	}
	n.events.waitFor(t, prospero.EventRehydrated, id, 1)
	if v := n.ask(t, ref, "get"); v != uint64(1) {
		t.Fatalf("after the failed write get = %v, want the committed 1", v)
	}
	if got := n.events.count(prospero.EventStoreError, id); got == 0 {
		t.Fatal("no StoreError event for the failed write")
	}
	if st := n.sup.Stats(); st.Commits != 1 || st.CommitFailures != 1 {
		t.Fatalf("Stats commits %d, failures %d; want 1 and 1", st.Commits, st.CommitFailures)
	}
	// A store that fails the write with a CommitError of its own (the
	// replicated one does) is not wrapped in another: the error names the
	// actor once.
	go func() {
		_, err := n.sched.Ask(context.Background(), ref, "add")
		done <- err
	}()
	store.next(t).done(0, &prospero.CommitError{ID: id, Err: disk})
	err = <-done
	if !errors.Is(err, actor.ErrNotCommitted) || !errors.Is(err, disk) || strings.Count(err.Error(), "not committed") != 1 {
		t.Fatalf("failed add = %q, want one CommitError naming %s once", err, id)
	}
}

// Many actors' writes go through the group commits of a BoltStore, and
// each reply comes after its own state is at rest: while the actors are
// still active, the store holds every acknowledged value.
func TestReplyAfterCommitOnBoltStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	store, err := prospero.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	n := newNode(t, options{store: store, kind: durable})
	const actors, adds = 16, 20
	acked := make([]uint64, actors)
	var wg sync.WaitGroup
	for i := range actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := actor.Virtual("counter", fmt.Sprint(i))
			for range adds {
				v, err := n.sched.Ask(context.Background(), ref, "add")
				if err != nil {
					t.Errorf("add %s: %v", ref, err)
					return
				}
				acked[i] = v.(uint64)
			}
		}()
	}
	wg.Wait()
	// Every actor's first add was written on its own, later ones perhaps
	// together; all of them through the store's group commits.
	st := n.sup.Stats()
	if st.Commits < actors || st.Commits > actors*adds || st.Store.Groups == 0 || st.Store.Writes < st.Commits || st.Store.Groups > st.Store.Writes {
		t.Fatalf("Stats commits %d, store %+v: want %d to %d commits through the group commits", st.Commits, st.Store, actors, actors*adds)
	}
	for i := range actors {
		rec, err := store.Get(context.Background(), prospero.Identity{Kind: "counter", Key: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := decodeCount(rec.State); v != acked[i] || v != adds {
			t.Fatalf("counter/%d at rest %d, acknowledged %d, want %d", i, v, acked[i], adds)
		}
	}
}

func decodeCount(b []byte) (uint64, int) { return binary.Uvarint(b) }

// heldAddWhilePassivating starts an add whose turn holds until the test
// lets it go, and decides the passivation of its actor while it runs: the
// turn ends with its entry passivating.
func heldAddWhilePassivating(t *testing.T, n *node, ref actor.Ref, entered, release chan struct{}, ask func()) {
	t.Helper()
	ask()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the held add never ran")
	}
	if !n.sup.Passivate(ref) {
		t.Fatal("passivate refused")
	}
	close(release)
}

// A turn that ends after its activation's passivation was decided is
// still a turn of a PersistEveryTurn kind: its reply waits for its own
// write. It used to leave at once, the state being written only by the
// passivation's final write, so a failure of that write lost an update
// already acknowledged. Now the failed write fails the ask
// (ErrNotCommitted), the passivation writes nothing after it and keeps
// nothing to write later, and the next activation reads the last
// committed state.
func TestTurnEndingWhilePassivatingFailsWithItsWrite(t *testing.T) {
	store := newGatedStore()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	n := newNode(t, options{store: store, kind: durable, entered: entered, release: release})
	ref := actor.Virtual("counter", "a")
	id := prospero.IdentityOf(ref)
	done := make(chan error, 1)
	ask := func(msg string) func() {
		return func() {
			go func() {
				_, err := n.sched.Ask(context.Background(), ref, msg)
				done <- err
			}()
		}
	}
	ask("add")()
	store.next(t).commit()
	if err := <-done; err != nil {
		t.Fatalf("first add: %v", err)
	}
	heldAddWhilePassivating(t, n, ref, entered, release, ask("held add"))
	disk := errors.New("disk on fire")
	store.next(t).done(0, disk)
	if err := <-done; !errors.Is(err, prospero.ErrNotCommitted) || !errors.Is(err, disk) {
		t.Fatalf("add whose write failed while passivating answered %v, want ErrNotCommitted wrapping the store's error", err)
	}
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	select {
	case p := <-store.puts:
		t.Fatalf("the passivation wrote %v after a failed write", p.rec.State)
	default:
	}
	if st := n.sup.Stats(); st.Unsaved != 0 {
		t.Fatalf("stats %+v: a state whose ask failed is kept to be written later", st)
	}
	if v := n.ask(t, ref, "get"); v != uint64(1) {
		t.Fatalf("after the failed write get = %v, want the committed 1", v)
	}
}

// Without a failure the turn's reply leaves only once its write is
// committed, and the passivation's final write, finding that state
// already written, writes nothing more.
func TestTurnEndingWhilePassivatingRepliesAfterItsWrite(t *testing.T) {
	store := newGatedStore()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	n := newNode(t, options{store: store, kind: durable, entered: entered, release: release})
	ref := actor.Virtual("counter", "a")
	id := prospero.IdentityOf(ref)
	var got answers
	asker := n.asker(t, ref, &got)
	if err := n.sched.Tell(asker, "add"); err != nil {
		t.Fatal(err)
	}
	store.next(t).commit()
	n.idle(t)
	if a := got.take(); len(a) != 1 || a[0] != "1" {
		t.Fatalf("first add answered %v, want [1]", a)
	}
	heldAddWhilePassivating(t, n, ref, entered, release, func() {
		if err := n.sched.Tell(asker, "held add"); err != nil {
			t.Fatal(err)
		}
	})
	p := store.next(t)
	committed := false
	defer func() {
		if !committed { // a failed check: let the node close
			p.commit()
		}
	}()
	n.idle(t) // the turn, the passivation's last turn and any answer have run
	if a := got.take(); len(a) != 0 {
		t.Fatalf("answered %v before the write was committed", a)
	}
	if v, _ := decodeCount(p.rec.State); v != 2 {
		t.Fatalf("the write in flight holds %d, want the held add's 2", v)
	}
	p.commit()
	committed = true
	n.events.waitFor(t, prospero.EventPassivated, id, 1)
	n.idle(t)
	if a := got.take(); len(a) != 1 || a[0] != "2" {
		t.Fatalf("answers after the commit = %v, want [2]", a)
	}
	select {
	case p := <-store.puts:
		t.Fatalf("the passivation wrote %v again", p.rec.State)
	default:
	}
	rec, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := decodeCount(rec.State); v != 2 || rec.Incarnation != 1 {
		t.Fatalf("state at rest %d (incarnation %d), want 2 (1)", v, rec.Incarnation)
	}
	if st := n.sup.Stats(); st.Unsaved != 0 || st.Commits != 2 {
		t.Fatalf("stats %+v, want 2 commits and nothing unsaved", st)
	}
}
