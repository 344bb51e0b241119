package prospero

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// ErrNotCommitted: the state a turn changed could not be made durable, so
// what the turn answered and sent was not released. It is the actor
// package's sentinel (it keeps its identity across nodes); the
// supervisor fails the held outputs with a *CommitError naming the
// identity, which a clustered node hands its askers in the form it has
// once it crossed the wire (the same on every node).
var ErrNotCommitted = actor.ErrNotCommitted

// CommitError fails the outputs of a turn whose state was not committed:
// the ask it answered, the asks and tells it sent. ID names the actor;
// Err is the cause (the store's error, or why the write was not tried).
// It matches ErrNotCommitted and the cause with errors.Is.
type CommitError struct {
	ID  Identity
	Err error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("prospero: state of %s not committed: %v", e.ID, e.Err)
}

// Unwrap returns ErrNotCommitted and the cause.
func (e *CommitError) Unwrap() []error { return []error{ErrNotCommitted, e.Err} }

// commitError is err as the CommitError of id: err itself when it is one
// for id already (a replicated store fails a write with one), so that its
// text does not name the actor twice.
func commitError(id Identity, err error) error {
	var ce *CommitError
	if errors.As(err, &ce) && ce.ID == id {
		return err
	}
	return &CommitError{ID: id, Err: err}
}

// AsyncStore is a StateStore that takes writes without making its caller
// wait for them (group commit). The supervisor uses it, when its store
// implements it, for the writes of turn-driven persistence and of
// passivation, so that no scheduler worker ever waits on an fsync.
type AsyncStore interface {
	StateStore
	// PutAsync queues the conditional write Put(id, expected, rec) and
	// returns at once. done is called exactly once, on a goroutine of the
	// store, when the write is committed (its new version, nil): durable
	// on the store's disk, or, for a replicated store, as it defines
	// committed (prospero/replica: held by every in-sync replica) — or failed
	// (0 and the error Put would return). Writes queued while the store
	// commits earlier ones are committed together: one transaction and
	// one fsync for all, each still conditional on its own expected
	// version. Writes are applied in the order they were queued. The
	// store copies rec.State. done must not block for long. When the
	// store is closed, done is called with ErrStoreClosed before PutAsync
	// returns: callers must not hold a lock done needs.
	PutAsync(id Identity, expected uint64, rec Record, done func(version uint64, err error))
}

// AsyncDeleter is a StateStore that takes deletions as an AsyncStore
// takes writes, so that many deletions (and the writes queued with them)
// share one commit instead of one transaction and one fsync each. The
// reminder engine uses it, when its store implements it, for the
// records of cancelled and finished reminders.
type AsyncDeleter interface {
	StateStore
	// DeleteAsync queues the conditional deletion Delete(id, expected)
	// and returns at once. done is called exactly once, on a goroutine of
	// the store, when the deletion is durable (nil) or failed (the error
	// Delete would return). Deletions and writes queued while the store
	// commits earlier ones are committed together, in the order queued,
	// each conditional on its own. done must not block for long. When the
	// store is closed, done is called with ErrStoreClosed before
	// DeleteAsync returns: callers must not hold a lock done needs.
	DeleteAsync(id Identity, expected uint64, done func(err error))
}

// CommitStats counts the group commits of a store (BoltStore.CommitStats):
// Writes / Groups is the mean number of writes that shared one commit.
type CommitStats struct {
	Groups uint64 // transactions run (each made durable by its fsyncs), counted as each starts
	Writes uint64 // writes and deletions in them, successful or not
	// Replicated counts the batches of another node's records a replica
	// stored in them (BoltStore.ApplyReplicatedAsync), sharing those
	// commits with the node's own writes.
	Replicated uint64
}

// CommitCounter is implemented by a StateStore that counts its group
// commits. The supervisor reports them in Stats.Store (and so the node in its
// metrics) when its store implements it: BoltStore does, and so does a
// store that commits through one (the replicated store).
type CommitCounter interface {
	CommitStats() CommitStats
}

// asyncPut is one queued write (or, with del, deletion; with repl, a
// batch of replicated records) of a group committer.
type asyncPut struct {
	id       Identity
	expected uint64
	rec      Record
	del      bool
	repl     []Replicated
	// lazy: the write may wait up to lingerLazy for writes that cannot
	// wait, to share their commit, instead of starting one of its own.
	lazy bool
	// decided: the sequence number of a write PutAsyncSent decided ahead
	// (version holds its version); it is stored as it is.
	decided uint64
	done    func(uint64, error)
	// set by the commit function: the new version (for repl, how many
	// of the records applied) and the outcome
	version uint64
	err     error
}

// groupCommitter queues writes and commits them in groups on one
// goroutine it owns: while a group is being committed the next one
// gathers, so that under load many writes share one commit. commit
// fills version and err of each write in the group.
//
// Lazy writes (a replica's batches written in the background) do not
// start a group by themselves: they wait for a write that cannot wait,
// whose group they join, or until the oldest of them waited lingerLazy.
type groupCommitter struct {
	commit func([]asyncPut)

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []asyncPut
	eager  int       // writes in queue that are not lazy
	oldest time.Time // when queue's first write was queued
	waking bool      // a timer will wake loop for the lazy writes
	urgent bool      // commit what is queued now, lazy or not (hurry)
	// abandoned: a test crash; what is queued, or queued from now on,
	// fails with ErrStoreClosed and is never committed.
	abandoned bool
	closed    bool
	done      chan struct{}
	stats     CommitStats   // guarded by mu
	linger    time.Duration // lingerLazy; tests change it
}

// lingerLazy bounds how long a lazy write waits for a group to join:
// long enough for a node that owns shards to fold the batches it
// receives as a follower into its own commits, short enough that a node
// that only follows still writes them within a few milliseconds.
const lingerLazy = 2 * time.Millisecond

func (g *groupCommitter) commitStats() CommitStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

func newGroupCommitter(commit func([]asyncPut)) *groupCommitter {
	g := &groupCommitter{commit: commit, done: make(chan struct{}), linger: lingerLazy}
	g.cond = sync.NewCond(&g.mu)
	go g.loop()
	return g
}

func (g *groupCommitter) put(id Identity, expected uint64, rec Record, done func(uint64, error)) {
	rec.State = append([]byte(nil), rec.State...)
	g.queued(asyncPut{id: id, expected: expected, rec: rec, done: done})
}

// del queues the deletion Delete(id, expected).
func (g *groupCommitter) del(id Identity, expected uint64, done func(error)) {
	g.queued(asyncPut{id: id, expected: expected, del: true, done: func(_ uint64, err error) { done(err) }})
}

func (g *groupCommitter) queued(w asyncPut) {
	if w.repl == nil {
		if err := w.id.Validate(); err != nil {
			w.done(0, err)
			return
		}
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		w.done(0, ErrStoreClosed)
		return
	}
	if len(g.queue) == 0 {
		g.oldest = time.Now()
	}
	g.queue = append(g.queue, w)
	if !w.lazy {
		g.eager++
	}
	g.cond.Signal()
	g.mu.Unlock()
}

// ready reports whether loop should commit what is queued now; if only
// lazy writes wait, it arranges to be woken when the oldest has waited
// lingerLazy. Called with mu held.
func (g *groupCommitter) ready() bool {
	if g.closed || g.eager > 0 || g.urgent || (g.abandoned && len(g.queue) > 0) {
		return true
	}
	if len(g.queue) == 0 {
		return false
	}
	wait := g.linger - time.Since(g.oldest)
	if wait <= 0 {
		return true
	}
	if !g.waking {
		g.waking = true
		time.AfterFunc(wait, func() {
			g.mu.Lock()
			g.waking = false
			g.cond.Signal()
			g.mu.Unlock()
		})
	}
	return false
}

func (g *groupCommitter) loop() {
	defer close(g.done)
	for {
		g.mu.Lock()
		for !g.ready() {
			g.cond.Wait()
		}
		group := g.queue
		g.queue, g.eager, g.urgent = nil, 0, false
		abandoned := g.abandoned
		g.mu.Unlock()
		if len(group) == 0 {
			return // closed and drained
		}
		if abandoned {
			for i := range group {
				group[i].done(0, ErrStoreClosed)
			}
			continue
		}
		// Counted as the transaction starts: a reader woken by its commit
		// (BoltStore.settle) sees it counted.
		g.mu.Lock()
		g.stats.Groups++
		for i := range group {
			if group[i].repl != nil {
				g.stats.Replicated++
			} else {
				g.stats.Writes++
			}
		}
		g.mu.Unlock()
		g.commit(group)
		for i := range group {
			w := &group[i]
			w.done(w.version, w.err)
		}
	}
}

// abandon has everything queued from now on fail instead of commit (a
// test crash: crashhook.Abandon).
func (g *groupCommitter) abandon() {
	g.mu.Lock()
	g.abandoned = true
	g.cond.Signal()
	g.mu.Unlock()
}

// hurry has what is queued committed without waiting for lazy writes'
// linger: somebody waits for one of them.
func (g *groupCommitter) hurry() {
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.urgent = true
		g.cond.Signal()
	}
	g.mu.Unlock()
}

// closeNoWait is close for a store whose transactions may never end (a
// faulted one holds bbolt's locks): what is queued fails once the loop
// can take it, later puts fail at once, and the loop is not waited for.
func (g *groupCommitter) closeNoWait() {
	g.mu.Lock()
	g.closed, g.abandoned = true, true
	g.cond.Signal()
	g.mu.Unlock()
}

// close commits what is queued, then stops the goroutine. Later puts
// fail with ErrStoreClosed. It is idempotent.
func (g *groupCommitter) close() {
	g.mu.Lock()
	g.closed = true
	g.cond.Signal()
	g.mu.Unlock()
	<-g.done
}

// syncCommitter gives a StateStore without PutAsync the same interface:
// its writes run one by one on the committer's goroutine, never on the
// caller's.
func syncCommitter(s StateStore) *groupCommitter {
	return newGroupCommitter(func(group []asyncPut) {
		for i := range group {
			w := &group[i]
			switch {
			case w.repl != nil:
				w.err = errors.New("prospero: this store takes no replicated records")
				continue
			case w.del:
				w.err = s.Delete(context.Background(), w.id, w.expected)
				continue
			}
			w.version, w.err = s.Put(context.Background(), w.id, w.expected, w.rec)
		}
	})
}
