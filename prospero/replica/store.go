package replica

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// Route is where a write of an identity must go, by this node's applied
// placement table.
type Route struct {
	// Replicated is false for identities kept on this node only (the
	// node's own bookkeeping); their writes commit locally.
	Replicated bool
	Shard      Shard
	Epoch      uint64
	// Followers are the in-sync replicas other than this node, which owns
	// the shard.
	Followers []string
}

// View is what the engine needs from placement. Its methods are called
// from the engine's goroutines, concurrently.
type View interface {
	// Route returns where a write of id goes. An error (this node does
	// not own id's shard, the table is not there yet) fails the write
	// with ErrNotCommitted, before it reaches the local store.
	Route(id prospero.Identity) (Route, error)
	// Shrink removes follower from the in-sync sets of shards, owned by
	// this node at the given epochs, through raft, and returns nil once
	// this node's applied table shows it removed from every one of them.
	// Any other outcome is an error, and the writes waiting for follower
	// are not committed. It returns how many of the sets it removed
	// follower from (those it was not in need nothing).
	Shrink(ctx context.Context, follower string, shards map[Shard]uint64) (int, error)
	// Accept reports whether a record of shard at epoch from node from
	// may be stored here: nil, or an error wrapping ErrStale.
	Accept(from string, shard Shard, epoch uint64) error
	// Fresh reports whether this node's ownership lease is fresh. An
	// owner whose lease lapsed cannot get an in-sync set changed, and
	// another node may soon take its shards over, so a replica that
	// stopped answering must not hold its writes (and their activations)
	// for Config.Timeout: see Interrupt.
	Fresh() bool
	// LeftSet reports whether this node's applied table shows shard
	// owned by this node at epoch and follower not in its in-sync set.
	// Records queued for a follower that has left their shard's set
	// since (this node or the leader removed it, through raft) commit
	// without it and are not sent, unless a catch-up of it runs.
	LeftSet(follower string, shard Shard, epoch uint64) bool
	// Down reports whether node is known to have failed (this node's
	// applied table marks it down). Nothing is sent to it, nor is it
	// dialled: the records waiting for it remove it from their sets at
	// once (see Failed).
	Down(node string) bool
}

// FollowedView is the part of View a Store uses, when its view has it,
// after a replica reported ErrLostRecords: every shard this node owns
// whose in-sync set holds follower, with the epoch it owns it at.
type FollowedView interface {
	FollowedBy(follower string) map[Shard]uint64
}

// ErrLeaseLapsed: a write waiting for a replica was not committed
// because this node's ownership lease lapsed meanwhile.
var ErrLeaseLapsed = errors.New("replica: this node's ownership lease lapsed")

// Dialer opens a replication stream to a peer.
type Dialer func(ctx context.Context, peer string) (net.Conn, error)

// Config configures a Store.
type Config struct {
	// Local is this node's state store.
	Local *prospero.BoltStore
	// Timeout bounds a batch's round trip to a replica (default 2 s);
	// a replica that does not answer in time leaves the in-sync set.
	Timeout time.Duration
	// SyncReplicas: a write is committed only once every in-sync replica
	// fsync'd it (survives losing power to the whole set). Default
	// false: once every replica received it, each fsyncing in the
	// background (survives any single crash, pause or partition).
	SyncReplicas bool
	// MinInSync is the fewest in-sync replicas, the owner included, that
	// must hold a write for it to commit (default 1). With 2, a write is
	// not committed (ErrUnderReplicated) while its shard's set is the
	// owner alone — after followers failed, or before new ones joined —
	// so that no acknowledged write lives on one disk only.
	MinInSync int
	// MaxBatchBytes bounds the records of one network write (default 1 MiB).
	MaxBatchBytes int
	// Logger (nil: discard).
	Logger *slog.Logger
}

// Stats counts the engine's work; all fields only grow.
type Stats struct {
	Batches     uint64 // batches sent to replicas
	Records     uint64 // records in them
	Shrinks     uint64 // followers removed from an in-sync set by this owner
	ShrinkFail  uint64 // removals that failed (their writes were not committed)
	Refused     uint64 // batches this replica refused (stale, bad checksum, disk)
	Applied     uint64 // records this replica stored
	CatchUps    uint64 // catch-ups of a follower this owner started
	Bulk        uint64 // records this owner sent in bulk copies
	BulkDeleted uint64 // deletions a catch-up sent for records the follower held and this owner no longer has
	Joins       uint64 // followers this owner added to an in-sync set, counted per shard
	BulkInvalid uint64 // records left out of bulk copies: their identity is not valid (written before keys were checked)

	// CatchUpFails counts the catch-ups that failed (CatchUpFailed): the
	// follower did not answer the probe, a bulk write, the listing or a
	// write meanwhile failed, or the join was not committed. A probe
	// fails before the catch-up starts, so this may exceed CatchUps.
	CatchUpFails uint64
}

// Store is a prospero.AsyncStore that replicates the writes of each
// shard this node owns to the shard's in-sync replicas. A write is sent
// as soon as the local store decided it (prospero.BoltStore.PutAsyncSent),
// before its local fsync, and committed (its done called with nil) once
// every in-sync replica acknowledged it: by default on receipt, the
// local fsync going on in the background (see PutAsync); with
// SyncReplicas once every replica and the local store fsync'd it. A
// replica that fails to acknowledge is removed
// from the set through raft (View.Shrink) before the write commits
// without it. Records of many actors share one network write and one
// remote fsync per replica (group commit).
//
// Until Attach, every write is local (a node not in a cluster). Store is
// safe for concurrent use; Close stops its goroutines.
type Store struct {
	cfg   Config
	local *prospero.BoltStore
	log   *slog.Logger
	att   atomic.Pointer[attachment]

	mu       sync.Mutex
	peers    map[string]*peer
	catching map[string]*catchUp // follower → its catch-up in progress
	closed   bool
	wg       sync.WaitGroup

	apply *applier // replica side: background writes

	stats struct {
		batches, records, shrinks, shrinkFail, refused, applied, catchUps, catchUpFails, bulk, bulkDeleted, joins, bulkInvalid atomic.Uint64
	}
	seen        sync.Map      // Shard → *atomic.Uint64, newest epoch seen from a stream
	uncommitted sync.Map      // Shard → true: a write landed here and was not committed (Uncommitted)
	interrupts  atomic.Uint64 // calls of Interrupt
}

type attachment struct {
	view View
	dial Dialer
}

var (
	_ prospero.AsyncStore    = (*Store)(nil)
	_ prospero.AsyncDeleter  = (*Store)(nil)
	_ prospero.PrefixScanner = (*Store)(nil)
	_ prospero.DoubtingStore = (*Store)(nil)
)

// New returns a Store over cfg.Local.
func New(cfg Config) (*Store, error) {
	if cfg.Local == nil {
		return nil, errors.New("replica: Config.Local is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 1 << 20
	}
	if cfg.MinInSync <= 0 {
		cfg.MinInSync = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{cfg: cfg, local: cfg.Local, log: cfg.Logger, peers: map[string]*peer{}, catching: map[string]*catchUp{}}
	s.apply = newApplier(s)
	return s, nil
}

// Attach starts replicating: from now on writes go to the replicas view
// names, over streams dial opens.
func (s *Store) Attach(view View, dial Dialer) { s.att.Store(&attachment{view: view, dial: dial}) }

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Batches: s.stats.batches.Load(), Records: s.stats.records.Load(),
		Shrinks: s.stats.shrinks.Load(), ShrinkFail: s.stats.shrinkFail.Load(),
		Refused: s.stats.refused.Load(), Applied: s.stats.applied.Load(),
		CatchUps: s.stats.catchUps.Load(), CatchUpFails: s.stats.catchUpFails.Load(), Bulk: s.stats.bulk.Load(), BulkDeleted: s.stats.bulkDeleted.Load(),
		Joins: s.stats.joins.Load(), BulkInvalid: s.stats.bulkInvalid.Load(),
	}
}

// CommitStats counts the group commits of the local store, which this
// node's own writes and the records it stores as a replica share
// (prospero.CommitCounter).
func (s *Store) CommitStats() prospero.CommitStats { return s.local.CommitStats() }

// Uncommitted reports whether a write of shard sh landed on this node's
// disk and then failed to commit (a replica did not acknowledge it and
// could not be removed from the set, or this node's lease lapsed) since
// the store was created. The shard's followers may lack that record, so
// a planned move of sh must ship its state rather than promote a
// follower. Conservative: it stays true until the process restarts.
func (s *Store) Uncommitted(sh Shard) bool {
	_, ok := s.uncommitted.Load(sh)
	return ok
}

// RecordsInDoubt implements prospero.DoubtingStore: once attached, a
// record at rest may be a write whose commit failed or never finished
// (this process or an earlier one crashed), or a copy its owner sent and
// did not commit.
func (s *Store) RecordsInDoubt() bool { return s.att.Load() != nil }

// Local returns the local store.
func (s *Store) Local() *prospero.BoltStore { return s.local }

// Get implements prospero.StateStore: the local copy.
func (s *Store) Get(ctx context.Context, id prospero.Identity) (prospero.Record, error) {
	return s.local.Get(ctx, id)
}

// ScanPrefix implements prospero.PrefixScanner: the local copies.
func (s *Store) ScanPrefix(ctx context.Context, kind, prefix string) ([]prospero.Keyed, error) {
	return s.local.ScanPrefix(ctx, kind, prefix)
}

// Put implements prospero.StateStore: PutAsync, waited for.
func (s *Store) Put(ctx context.Context, id prospero.Identity, expected uint64, rec prospero.Record) (uint64, error) {
	type res struct {
		v   uint64
		err error
	}
	ch := make(chan res, 1)
	s.PutAsync(id, expected, rec, func(v uint64, err error) { ch <- res{v, err} })
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// PutAsync implements prospero.AsyncStore. done gets the new version
// once the write is committed, or an error wrapping ErrNotCommitted
// when the local write succeeded but a replica could not be removed
// from the set after it failed to acknowledge, or when this node may
// not write id (see notWritable: then the local store is not touched).
//
// When the shard has followers, the write goes to them as soon as the
// local store decided it (BoltStore.PutAsyncSent: version taken, logged
// in the pending file), before the local commit. In the default mode it is committed once every in-sync
// follower (at least one) has received it, whether or not the local
// fsync has finished: every member of the set holds it, each making it
// durable in the background, and a local commit that fails after that
// damages the local store rather than let this node serve without it.
// With SyncReplicas, or when the set is this node alone, it is
// committed once the local commit and every follower's fsync are done.
func (s *Store) PutAsync(id prospero.Identity, expected uint64, rec prospero.Record, done func(uint64, error)) {
	a := s.att.Load()
	if a == nil {
		s.local.PutAsync(id, expected, rec, done)
		return
	}
	rt, err := a.view.Route(id)
	if err != nil {
		// done may need a lock the caller holds (the supervisor's).
		go done(0, notWritable(id, err))
		return
	}
	// The record is stored under the epoch this node owns the shard at,
	// as its followers store it: every copy is ordered by (epoch,
	// version), so that a late copy of an older owner never replaces it.
	rec.Epoch = rt.Epoch
	if !rt.Replicated || len(rt.Followers) == 0 {
		// No follower to send it to while the local commit runs: commit,
		// then replicate (to a follower catching up, if any; a route
		// that fails by then fails the write there).
		s.local.PutAsync(id, expected, rec, func(v uint64, err error) {
			if err != nil {
				done(0, err)
				return
			}
			r := &Record{Replicated: prospero.Replicated{ID: id, Epoch: rec.Epoch, Version: v, Incarnation: rec.Incarnation, State: rec.State}}
			s.replicate(r, func(err error) {
				if err != nil {
					done(0, err)
					return
				}
				done(v, nil)
			})
		})
		return
	}
	c := &commitWait{syncAll: s.cfg.SyncReplicas, done: done}
	// Whether the release waits for the local commit: if not, the write
	// need not hurry it.
	lazy := !s.cfg.SyncReplicas && len(rt.Followers)+1 >= s.cfg.MinInSync
	s.local.PutAsyncSent(id, expected, rec, lazy, func(v uint64) {
		c.mu.Lock()
		c.v = v
		c.mu.Unlock()
		r := &Record{Replicated: prospero.Replicated{ID: id, Epoch: rec.Epoch, Version: v, Incarnation: rec.Incarnation, State: rec.State}}
		s.replicateAcked(r, c.replicated)
	}, c.local)
}

// commitWait joins a write's two halves, the local commit and the
// followers' acknowledgements, and calls done once.
type commitWait struct {
	syncAll bool
	done    func(uint64, error)

	mu                  sync.Mutex
	v                   uint64
	localDone, replDone bool
	localErr, replErr   error
	acked               int // in-sync followers that acknowledged
	released            bool
}

func (c *commitWait) local(v uint64, err error) {
	c.mu.Lock()
	c.localDone, c.localErr = true, err
	if err == nil {
		c.v = v
	}
	c.decide()
}

func (c *commitWait) replicated(acked int, err error) {
	c.mu.Lock()
	c.replDone, c.replErr, c.acked = true, err, acked
	c.decide()
}

// decide calls done if the outcome is known; called with mu held, which
// it releases. Failures wait for the local commit's outcome: a failure
// found while sending (no route, no peer) is found on the goroutine that
// called PutAsync, which may hold a lock done needs (the supervisor's),
// while the local outcome comes from the store's goroutine.
func (c *commitWait) decide() {
	var (
		fire bool
		v    uint64
		err  error
	)
	switch {
	case c.released:
	case c.localDone && c.localErr != nil:
		fire, err = true, c.localErr
	case c.replDone && c.replErr != nil:
		fire, err = c.localDone, c.replErr
	case c.replDone && (c.localDone || (c.acked > 0 && !c.syncAll)):
		fire, v = true, c.v
	}
	c.released = c.released || fire
	c.mu.Unlock()
	if fire {
		c.done(v, err)
	}
}

// notWritable is the error of a write (or deletion) of id that this node
// may not make: View.Route failed with err (another node owns the
// shard, or the table is not there yet). Such a write fails before it
// reaches the local store. Landing there, it would replace the copy this
// node holds as a replica of the shard with state nobody committed, and
// at a version of this node's own sequence, which can stay ahead of the
// versions of the owner's later records, so that the copy would refuse
// them and a promotion of this replica would serve the stale state; a
// deletion would leave a promoted replica without the owner's record.
func notWritable(id prospero.Identity, err error) error {
	return &prospero.CommitError{ID: id, Err: err}
}

// Delete implements prospero.StateStore: the deletion is committed like
// a write, so that a replica taking over does not bring the record back.
func (s *Store) Delete(ctx context.Context, id prospero.Identity, expected uint64) error {
	if a := s.att.Load(); a != nil {
		if _, err := a.view.Route(id); err != nil {
			return notWritable(id, err)
		}
	}
	cur, err := s.local.Get(ctx, id)
	switch {
	case errors.Is(err, prospero.ErrNotFound):
		return s.local.Delete(ctx, id, expected)
	case err != nil:
		return err
	}
	if expected == prospero.AnyVersion {
		expected = cur.Version
	}
	if err := s.local.Delete(ctx, id, expected); err != nil {
		return err
	}
	ch := make(chan error, 1)
	s.replicate(&Record{Replicated: prospero.Replicated{ID: id, Version: expected, Deleted: true}}, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DeleteAsync implements prospero.AsyncDeleter: Delete, queued. The
// local deletion joins the local store's next group commit; the deletion
// then goes to the replicas as Delete's does, in the batches other
// records travel in. done gets nil once the deletion is committed, or
// an error wrapping ErrNotCommitted when the local deletion succeeded and
// a replica could not be removed from the set after it failed to
// acknowledge it, or when this node may not delete id (notWritable).
func (s *Store) DeleteAsync(id prospero.Identity, expected uint64, done func(error)) {
	if a := s.att.Load(); a != nil {
		if _, err := a.view.Route(id); err != nil {
			go done(notWritable(id, err)) // see PutAsync
			return
		}
	}
	if expected == prospero.AnyVersion {
		// The replicas are told the version deleted, as by Delete.
		switch cur, err := s.local.Get(context.Background(), id); {
		case errors.Is(err, prospero.ErrNotFound):
		case err != nil:
			done(err)
			return
		default:
			expected = cur.Version
		}
	}
	s.local.DeleteAsync(id, expected, func(err error) {
		if err != nil || expected == 0 || expected == prospero.AnyVersion {
			// Failed, or nothing was stored to delete (version 0 matches
			// no record): nothing to replicate.
			done(err)
			return
		}
		s.replicate(&Record{Replicated: prospero.Replicated{ID: id, Version: expected, Deleted: true}}, done)
	})
}

// replicate sends r to the in-sync followers of its shard and calls done
// once each acknowledged it or left the set.
func (s *Store) replicate(r *Record, done func(error)) {
	s.replicateAcked(r, func(_ int, err error) { done(err) })
}

// replicateAcked is replicate, telling done how many in-sync followers
// acknowledged r.
func (s *Store) replicateAcked(r *Record, done func(acked int, err error)) {
	a := s.att.Load()
	if a == nil {
		done(0, nil)
		return
	}
	catching := s.catchUps() // before the route (see catchUps)
	rt, err := a.view.Route(r.ID)
	if err != nil {
		done(0, &prospero.CommitError{ID: r.ID, Err: err})
		return
	}
	next := done
	done = func(acked int, err error) {
		if err != nil {
			// The local write landed; a follower may lack it.
			s.uncommitted.Store(rt.Shard, true)
		}
		next(acked, err)
	}
	if r.Epoch != 0 && r.Epoch != rt.Epoch {
		// Stored here under the epoch of the route its write took: the
		// shard's epoch moved on since (an aborted move, or a change of
		// owner and back), so the record is not this epoch's to send.
		done(0, &prospero.CommitError{ID: r.ID, Err: fmt.Errorf("%w: written under epoch %d, the shard is at epoch %d", ErrStale, r.Epoch, rt.Epoch)})
		return
	}
	if !rt.Replicated {
		done(0, nil)
		return
	}
	inSync := rt.Followers
	followers := inSync
	for _, f := range s.catchingFor(catching, rt.Shard, rt.Epoch) {
		if !slices.Contains(followers, f) {
			followers = append(slices.Clip(followers), f)
		}
	}
	need := s.cfg.MinInSync - 1 // in-sync followers that must acknowledge
	if len(followers) == 0 {
		if need > 0 {
			done(0, &prospero.CommitError{ID: r.ID, Err: underReplicated(rt.Shard, 1, s.cfg.MinInSync)})
			return
		}
		done(0, nil)
		return
	}
	r.Shard, r.Epoch = rt.Shard, rt.Epoch
	if r.Deleted {
		// The owner deletes its current version: every copy of it, or of
		// an older one, a follower may hold.
		r.DeletesEpoch = rt.Epoch
	}
	var (
		mu    sync.Mutex
		left  = len(followers)
		acked = 0
		first error
	)
	one := func(f string, err error) {
		mu.Lock()
		switch {
		case err == nil:
			if slices.Contains(inSync, f) {
				acked++
			}
		case errors.Is(err, errLeftSet):
		case first == nil:
			first = err
		}
		left--
		last := left == 0
		mu.Unlock()
		if last {
			switch {
			case first != nil:
				done(acked, &prospero.CommitError{ID: r.ID, Err: first})
			case acked < need:
				done(acked, &prospero.CommitError{ID: r.ID, Err: underReplicated(rt.Shard, acked+1, s.cfg.MinInSync)})
			default:
				done(acked, nil)
			}
		}
	}
	for _, f := range followers {
		p, err := s.peer(f)
		if err != nil {
			one(f, err)
			continue
		}
		p.enqueue(r, func(err error) { one(f, err) })
	}
}

// ErrUnderReplicated: a write was not committed because fewer in-sync
// replicas than Config.MinInSync hold it. Nothing retries it: the
// turn's outputs fail with prospero.ErrNotCommitted, wrapping it.
var ErrUnderReplicated = errors.New("replica: fewer in-sync replicas than the minimum")

func underReplicated(sh Shard, have, min int) error {
	return fmt.Errorf("%w: shard %s/%d has %d of the %d required", ErrUnderReplicated, sh.Group, sh.Index, have, min)
}

// errLeftSet answers a write sent to a follower that failed and was
// removed from the in-sync set: the write may commit without it, but it
// is no acknowledgement.
var errLeftSet = errors.New("replica: follower left the in-sync set")

// ErrReplicaDown: a replica the placement table marks down was not sent
// a batch; it leaves the batch's sets before the batch commits.
var ErrReplicaDown = errors.New("replica: marked down")

// peer returns the sender to name, starting it if needed.
func (s *Store) peer(name string) (*peer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, prospero.ErrStoreClosed
	}
	p, ok := s.peers[name]
	if !ok {
		p = &peer{s: s, name: name}
		p.cond = sync.NewCond(&p.mu)
		s.peers[name] = p
		s.wg.Add(1)
		go p.loop()
	}
	return p, nil
}

// Close stops the senders (writes waiting for a replica fail with
// ErrStoreClosed), commits the replica writes queued, and closes the
// local store.
func (s *Store) Close() error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	if !already {
		for _, p := range peers {
			p.close()
		}
		s.wg.Wait()
		s.apply.close()
	}
	return s.local.Close()
}

// pending is one record waiting for one replica's acknowledgement.
type pending struct {
	r    *Record
	done func(error)
	at   time.Time // when it was queued
}

// peer sends batches to one replica over one stream: up to window
// batches in flight, so a record waits for a network write rather than
// for the round trip of the batch before it. Records queued while the
// window is full go in the next batch.
type peer struct {
	s    *Store
	name string

	mu     sync.Mutex
	cond   *sync.Cond // queue, link state and closed changed
	queue  []pending  // not sent yet
	closed bool
	link   *link // the stream, nil until dialled
	// limbo are records the loop took from the queue and has not put in
	// flight yet (a dial), or took off an ended link and is failing (a
	// removal through raft): Lags counts them in flight.
	limbo   []pending
	dialing func(error) // ends a dial in flight (Interrupt, Failed, close)
	dialGen uint64      // Store.interrupts when that dial began
	fails   uint64      // calls of Store.Failed for this replica
	seq     uint64
	lastAck time.Time // of the last batch acknowledged
	acked   uint64    // records acknowledged
	// removing ends the removal of this replica from in-sync sets in
	// flight (fail): Interrupt ends it like a round trip, close at once.
	removing      func(cause error)
	removingSince uint64 // Store.interrupts when it began
	// lost is set while the replica reported lost records
	// (ErrLostRecords) and could not yet be removed from every set this
	// node shares with it: it reports that once, so this node must not
	// forget it. Every batch for it, and every catch-up of it, tries the
	// removal first; a planned move does not promote it (Suspect).
	lost bool
}

// window bounds the batches in flight to one replica. With
// Config.SyncReplicas it is 1: there each batch costs the replica an
// fsync, and the records queued during one round trip sharing the next
// batch is the group commit.
func (p *peer) window() int {
	if p.s.cfg.SyncReplicas {
		return 1
	}
	return 4
}

// link is one stream to the replica. The peer's loop writes batches to
// it; its reader (read) takes their acknowledgements, in order. The
// first error of either ends the link, and every batch in flight on it
// with that error: the loop handles them as one failure, then dials
// afresh for the next batch.
type link struct {
	conn   net.Conn
	r      *bufio.Reader
	ctx    context.Context // ended by kill
	kill   context.CancelCauseFunc
	sent   []sentBatch // in flight, oldest first
	err    error       // why it ended; nil while it works
	inSent int         // records in sent
	// lost is the replica's refusal reporting lost records
	// (ErrLostRecords), kept even when the link had ended for another
	// cause first: the replica reports it once, and the owner must then
	// remove it from every set it shares with it.
	lost error
}

// sentBatch is one batch in flight.
type sentBatch struct {
	seq     uint64
	batch   []pending
	started uint64    // Store.interrupts when it was sent
	at      time.Time // when it was sent
}

func (p *peer) enqueue(r *Record, done func(error)) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		done(prospero.ErrStoreClosed)
		return
	}
	p.queue = append(p.queue, pending{r: r, done: done, at: time.Now()})
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Interrupt ends, with ErrLeaseLapsed, the round trips to replicas that
// were already in flight at the previous call: a replica answering
// within one interval between calls is not disturbed. The node calls it
// at short intervals while its ownership lease is lapsed (a leader
// election, or this node cut off), so that a write waits for a replica
// that stopped answering for two intervals at most, and then fails,
// instead of Config.Timeout; an interrupted replica is not counted as
// failed (it leaves no in-sync set).
func (s *Store) Interrupt() {
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	g := s.interrupts.Add(1)
	for _, p := range peers {
		p.mu.Lock()
		if l := p.link; l != nil && len(l.sent) > 0 && l.sent[0].started+1 < g {
			p.endLocked(l, ErrLeaseLapsed)
		}
		if p.dialing != nil && p.dialGen+1 < g {
			p.dialing(ErrLeaseLapsed)
		}
		if p.removing != nil && p.removingSince+1 < g {
			p.removing(ErrLeaseLapsed)
		}
		p.mu.Unlock()
	}
}

// Failed ends, as a failure, the round trips in flight to node, a dial
// included: the node calls it as soon as its applied table marks node
// down, so that the writes waiting for node remove it from their sets
// (through raft, before they commit) within a raft round trip, instead
// of when Config.Timeout runs out. Later batches for node see
// View.Down and are not sent at all.
func (s *Store) Failed(node string) {
	s.mu.Lock()
	p := s.peers[node]
	s.mu.Unlock()
	if p == nil {
		return
	}
	cause := fmt.Errorf("%w: %s", ErrReplicaDown, node)
	p.mu.Lock()
	p.fails++
	if l := p.link; l != nil && len(l.sent) > 0 {
		p.endLocked(l, cause)
	}
	if p.dialing != nil {
		p.dialing(cause)
	}
	p.mu.Unlock()
}

// endLocked ends l with cause (the first cause stands), closing its
// stream so that its reader and a write in progress return.
func (p *peer) endLocked(l *link, cause error) {
	if l.err != nil {
		return
	}
	l.kill(cause)
	l.err = cause
	_ = l.conn.Close()
	p.cond.Broadcast()
}

func (p *peer) close() {
	p.mu.Lock()
	p.closed = true
	if l := p.link; l != nil {
		p.endLocked(l, prospero.ErrStoreClosed)
	}
	if p.dialing != nil {
		p.dialing(prospero.ErrStoreClosed)
	}
	if p.removing != nil {
		p.removing(prospero.ErrStoreClosed)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *peer) loop() {
	defer p.s.wg.Done()
	var buf []byte
	for {
		p.mu.Lock()
		for !p.closed && (p.link == nil || p.link.err == nil) &&
			(len(p.queue) == 0 || p.link != nil && len(p.link.sent) >= p.window()) {
			p.cond.Wait()
		}
		if l := p.link; l != nil && l.err != nil {
			// The link ended: what was in flight on it fails as one.
			p.link = nil
			sent := l.sent
			l.sent, l.inSent = nil, 0
			cause := l.err
			if l.lost != nil {
				cause = l.lost
			}
			for _, b := range sent {
				p.limbo = append(p.limbo, b.batch...)
			}
			p.mu.Unlock()
			p.failSent(sent, cause)
			p.clearLimbo()
			continue
		}
		if p.closed {
			q := p.queue
			p.queue = nil
			p.mu.Unlock()
			for _, w := range q {
				w.done(prospero.ErrStoreClosed)
			}
			return
		}
		// Take what fits one network write.
		n, size := 0, 0
		for n < len(p.queue) && (n == 0 || size+len(p.queue[n].r.State)+64 <= p.s.cfg.MaxBatchBytes) {
			size += len(p.queue[n].r.State) + 64
			n++
		}
		batch := p.queue[:n:n]
		p.queue = p.queue[n:]
		p.limbo = batch
		lost := p.lost
		// An interruption counts this batch's wait from now, its dial
		// included, as it counts a round trip's.
		gen := p.s.interrupts.Load()
		p.mu.Unlock()

		var left []pending
		batch, left = p.leftSets(batch)
		if len(left) > 0 {
			// No longer waiting for the follower: out of limbo before
			// they are answered.
			p.mu.Lock()
			p.limbo = batch
			p.mu.Unlock()
		}
		for _, w := range left {
			w.done(errLeftSet)
		}
		if len(batch) == 0 {
			continue
		}
		recs := make([]*Record, len(batch))
		for i := range batch {
			recs[i] = batch[i].r
		}
		if lost {
			// Not sent: first the removal it still owes.
			err := p.fail(recs, fmt.Errorf("%w (reported earlier)", ErrLostRecords))
			if err == nil {
				err = errLeftSet
			}
			p.clearLimbo()
			for _, w := range batch {
				w.done(err)
			}
			continue
		}
		var err error
		if buf, err = p.send(buf[:0], batch, recs, gen); err != nil {
			// Not in flight: it failed before its write (a dial).
			p.failSent([]sentBatch{{batch: batch}}, err)
		}
		p.clearLimbo()
	}
}

func (p *peer) clearLimbo() {
	p.mu.Lock()
	p.limbo = nil
	p.mu.Unlock()
}

// failSent handles batches the replica did not acknowledge (their link
// ended with err, or they were never sent): interrupted, they fail;
// otherwise the replica leaves their sets first, and they commit
// without it.
func (p *peer) failSent(sent []sentBatch, err error) {
	var all []pending
	for _, b := range sent {
		all = append(all, b.batch...)
	}
	if len(all) == 0 {
		return
	}
	switch {
	case errors.Is(err, ErrLeaseLapsed):
		// Interrupted: no sign that the replica failed.
	case errors.Is(err, prospero.ErrStoreClosed):
	case !p.s.att.Load().view.Fresh():
		if errors.Is(err, ErrLostRecords) {
			// The replica reports this once, and its removal needs the
			// lease: remember it, so that the next batch for it removes
			// it from every set it shares with this node first, and it
			// is Suspect meanwhile.
			p.mu.Lock()
			p.lost = true
			p.mu.Unlock()
		}
		err = fmt.Errorf("%w (replica %s: %v)", ErrLeaseLapsed, p.name, err)
	default:
		recs := make([]*Record, len(all))
		for i := range all {
			recs[i] = all[i].r
		}
		if err = p.fail(recs, err); err == nil {
			err = errLeftSet
		}
	}
	for _, w := range all {
		w.done(err)
	}
}

// leftSets splits batch into the records to send and those of shards
// whose in-sync set this follower has left since they were queued (and
// is not catching up on): those commit without it.
func (p *peer) leftSets(batch []pending) (send, left []pending) {
	a := p.s.att.Load()
	p.s.mu.Lock()
	_, catching := p.s.catching[p.name]
	p.s.mu.Unlock()
	if catching {
		return batch, nil
	}
	send = batch[:0:0]
	for _, w := range batch {
		if a.view.LeftSet(p.name, w.r.Shard, w.r.Epoch) {
			left = append(left, w)
		} else {
			send = append(send, w)
		}
	}
	return send, left
}

// send writes one batch to the replica, dialling first if there is no
// link; its acknowledgement comes to the link's reader. An error means
// the batch is not in flight: the dial failed, or the replica is down
// (the batch fails alone; the batches in flight before it go on, so a
// refusal the replica sent for one of them is still read). A failed write
// ends the link, and the batch with it.
func (p *peer) send(buf []byte, batch []pending, recs []*Record, gen uint64) ([]byte, error) {
	buf, stale, err := p.sendOn(buf, batch, recs, gen)
	if stale {
		// The link had ended while idle (its stream went with a
		// connection that is gone: a partition that healed, a peer
		// that came back), which only a write shows. Nothing of the
		// batch reached the replica: one more try on a new link, rather
		// than a removal from the in-sync sets for a replica that
		// never failed.
		buf, _, err = p.sendOn(buf, batch, recs, gen) // dials: not stale again
	}
	return buf, err
}

// sendOn is send on the current link, or a new one when there is none.
// stale reports a write that failed on a link that was idle before it
// and had not been ended (killed): the batch is then back in limbo, not
// in flight, and the link gone.
func (p *peer) sendOn(buf []byte, batch []pending, recs []*Record, gen uint64) (_ []byte, stale bool, _ error) {
	a := p.s.att.Load()
	p.mu.Lock()
	l, fails := p.link, p.fails
	p.mu.Unlock()
	// A Failed from now on shows in p.fails when the batch is put in
	// flight, and one before it in the table here.
	if a.view.Down(p.name) {
		return buf, false, fmt.Errorf("%w: %s", ErrReplicaDown, p.name)
	}
	dialed := l == nil
	if dialed {
		var err error
		if l, err = p.dial(a, gen); err != nil {
			return buf, false, err
		}
	}
	flags := uint8(0)
	if p.s.cfg.SyncReplicas {
		flags |= flagSync
	}
	p.seq++
	buf = append(buf[:0], 0, 0, 0, 0)
	buf = appendBatch(buf, p.seq, flags, recs)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	p.mu.Lock()
	if p.fails != fails {
		p.mu.Unlock()
		return buf, false, fmt.Errorf("%w: %s", ErrReplicaDown, p.name)
	}
	if l.err != nil {
		// Ended since: the loop fails it, and this batch with it.
		l.sent = append(l.sent, sentBatch{seq: p.seq, batch: batch})
		l.inSent += len(batch)
		p.limbo = nil
		p.mu.Unlock()
		return buf, false, nil
	}
	seq := p.seq
	l.sent = append(l.sent, sentBatch{seq: seq, batch: batch, started: gen, at: time.Now()})
	l.inSent += len(batch)
	p.limbo = nil
	p.cond.Broadcast() // the reader waits for something in flight
	p.mu.Unlock()
	_ = l.conn.SetWriteDeadline(time.Now().Add(p.s.cfg.Timeout))
	if _, err := l.conn.Write(buf); err != nil {
		p.mu.Lock()
		// Idle before: nothing else in flight, so no acknowledgement is
		// owed on it; not killed, not timed out (a slow replica is not
		// sent the batch twice).
		stale = !dialed && p.link == l && l.err == nil && l.ctx.Err() == nil &&
			!errors.Is(err, os.ErrDeadlineExceeded) && len(l.sent) == 1 && l.sent[0].seq == seq
		if stale {
			l.sent, l.inSent = nil, 0
			p.limbo = batch
			p.link = nil // the next sendOn dials
		}
		p.endLocked(l, p.ended(l, err))
		p.mu.Unlock()
	}
	return buf, stale, nil
}

// ended is the error a link's stream returned, with the cause of its
// end if it was ended (killed) first.
func (p *peer) ended(l *link, err error) error {
	if l.ctx.Err() != nil {
		return fmt.Errorf("%w (round trip to %s ended: %v)", context.Cause(l.ctx), p.name, err)
	}
	return err
}

// dial opens a link to the replica and starts its reader; gen is the
// interruption count its batch's wait began at.
func (p *peer) dial(a *attachment, gen uint64) (*link, error) {
	ictx, interrupt := context.WithCancelCause(context.Background())
	defer interrupt(nil)
	ctx, cancel := context.WithTimeout(ictx, p.s.cfg.Timeout)
	defer cancel()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, prospero.ErrStoreClosed
	}
	p.dialing, p.dialGen = interrupt, gen
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.dialing = nil
		p.mu.Unlock()
	}()
	// Checked after p.dialing is set: a Failed from now on ends this
	// dial, and one before it shows here.
	if a.view.Down(p.name) {
		return nil, fmt.Errorf("%w: %s", ErrReplicaDown, p.name)
	}
	c, err := a.dial(ctx, p.name)
	if err != nil {
		if cause := context.Cause(ictx); cause != nil && ictx.Err() != nil {
			if errors.Is(cause, ErrLeaseLapsed) {
				return nil, ErrLeaseLapsed
			}
			return nil, fmt.Errorf("dial: %w", cause)
		}
		return nil, fmt.Errorf("dial: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return nil, prospero.ErrStoreClosed
	}
	if ictx.Err() != nil { // interrupted while dialling
		_ = c.Close()
		if cause := context.Cause(ictx); !errors.Is(cause, ErrLeaseLapsed) {
			return nil, fmt.Errorf("dial: %w", cause)
		}
		return nil, ErrLeaseLapsed
	}
	lctx, kill := context.WithCancelCause(context.Background())
	l := &link{conn: c, r: bufio.NewReader(c), ctx: lctx, kill: kill}
	p.link = l
	p.s.wg.Add(1)
	go p.read(l)
	return l, nil
}

// read takes the acknowledgements of l's batches, in order, until l
// ends; the first error ends it.
func (p *peer) read(l *link) {
	defer p.s.wg.Done()
	// free is when the reader was last free to read: the time it spent in
	// the callbacks of one batch is not charged to the next batch's round
	// trip (it was not the replica's).
	var free time.Time
	for {
		p.mu.Lock()
		for len(l.sent) == 0 && l.err == nil {
			p.cond.Wait()
		}
		if l.err != nil {
			p.mu.Unlock()
			return
		}
		head := l.sent[0]
		p.mu.Unlock()
		err := p.readAck(l, head, free)
		p.mu.Lock()
		if err != nil {
			if errors.Is(err, ErrLostRecords) {
				switch {
				case p.link != l:
					// The loop took the link's batches already, failed for
					// the cause that ended it first: the removal from every
					// set is owed all the same (the next batch makes it).
					p.lost = true
				case l.lost == nil:
					l.lost = err
				}
			}
			p.endLocked(l, p.ended(l, err))
			p.mu.Unlock()
			return
		}
		if l.err != nil {
			// Ended meanwhile: the loop fails what is in flight, this
			// batch included, though its acknowledgement came.
			p.mu.Unlock()
			return
		}
		l.sent = l.sent[1:]
		l.inSent -= len(head.batch)
		p.lastAck = time.Now()
		p.acked += uint64(len(head.batch))
		p.cond.Broadcast() // room in the window
		p.mu.Unlock()
		p.s.stats.batches.Add(1)
		p.s.stats.records.Add(uint64(len(head.batch)))
		for _, w := range head.batch {
			w.done(nil)
		}
		free = time.Now()
	}
}

// readAck reads the acknowledgement of head, the oldest batch in flight
// on l, within Config.Timeout of its sending, or of free when the reader
// became free to read it later than that.
func (p *peer) readAck(l *link, head sentBatch, free time.Time) error {
	from := head.at
	if free.After(from) {
		from = free
	}
	_ = l.conn.SetReadDeadline(from.Add(p.s.cfg.Timeout))
	b, err := readFrame(l.r)
	if err != nil {
		return err
	}
	seq, refused, err := decodeAck(b)
	if err != nil {
		return err
	}
	if seq != head.seq {
		return fmt.Errorf("%w: ack for batch %d, sent %d", ErrBadRecord, seq, head.seq)
	}
	if refused != nil {
		return fmt.Errorf("replica %s refused: %w", p.name, refused)
	}
	return nil
}

// fail handles a batch the replica did not acknowledge: it removes the
// replica from the in-sync set of every shard in the batch, through
// raft, before any of the batch's writes commits without it. It returns
// nil once that is done (the writes commit), or why not.
func (p *peer) fail(recs []*Record, cause error) error {
	a := p.s.att.Load()
	shards := map[Shard]uint64{}
	if fv, ok := a.view.(FollowedView); ok && errors.Is(cause, ErrLostRecords) {
		// What it lost may be of any shard this node shares with it.
		shards = fv.FollowedBy(p.name)
	}
	for _, r := range recs {
		if e, ok := shards[r.Shard]; !ok || r.Epoch > e {
			shards[r.Shard] = r.Epoch
		}
	}
	p.s.log.LogAttrs(context.Background(), slog.LevelWarn, "replica failed; removing it from the in-sync set",
		slog.String("replica", p.name), slog.Int("shards", len(shards)), slog.Any("error", cause))
	// A removal goes through the raft leader: an owner cut off from it
	// cannot get it committed, and once its lease lapses a new owner may
	// take its shards over, so the removal ends at the lease-lapse
	// interruptions (Interrupt) as a round trip does, and the writes
	// waiting on it fail (ErrLeaseLapsed) rather than hold their
	// activations for the whole timeout.
	ictx, interrupt := context.WithCancelCause(context.Background())
	defer interrupt(nil)
	ctx, cancel := context.WithTimeout(ictx, 4*p.s.cfg.Timeout)
	defer cancel()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return prospero.ErrStoreClosed
	}
	p.removing, p.removingSince = interrupt, p.s.interrupts.Load()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.removing = nil
		p.mu.Unlock()
	}()
	p.s.abortCatchUp(ctx, p.name)
	n, err := a.view.Shrink(ctx, p.name, shards)
	p.mu.Lock()
	if errors.Is(cause, ErrLostRecords) {
		p.lost = err != nil
	}
	p.mu.Unlock()
	if err != nil {
		p.s.stats.shrinkFail.Add(1)
		if c := context.Cause(ictx); ictx.Err() != nil && c != nil {
			err = fmt.Errorf("%w: %w", c, err)
		}
		return fmt.Errorf("replica %s failed (%v) and could not leave the in-sync set: %w", p.name, cause, err)
	}
	p.s.stats.shrinks.Add(uint64(n))
	return nil
}

// Suspect reports whether follower reported records it acknowledged to
// this node as lost and has not been removed from every set this node
// shares with it yet: it must not take a shard over from its own copy.
func (s *Store) Suspect(follower string) bool {
	s.mu.Lock()
	p := s.peers[follower]
	s.mu.Unlock()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// Lag is how far one follower is behind this node, as the owner of the
// shards it replicates to it: what is waiting for its acknowledgement.
type Lag struct {
	Follower string
	// Queued are records not sent yet; InFlight those sent and not
	// acknowledged yet.
	Queued, InFlight int
	// Oldest is the age of the oldest record not acknowledged yet (0 when
	// every record is): how long a commit waiting for this follower
	// has waited so far.
	Oldest time.Duration
	// SinceAck is the time since the follower last acknowledged a batch
	// (-1 if it never did).
	SinceAck time.Duration
	// Acked counts the records the follower acknowledged.
	Acked uint64
	// CatchingUp is true while a catch-up (bulk copy, then join) of the
	// follower runs.
	CatchingUp bool
}

// Lags returns the lag of every follower this node sent records to or
// is catching up, sorted by name.
func (s *Store) Lags() []Lag {
	now := time.Now()
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	catching := map[string]bool{}
	for f := range s.catching {
		catching[f] = true
	}
	s.mu.Unlock()
	out := make([]Lag, 0, len(peers))
	for _, p := range peers {
		l := Lag{Follower: p.name, SinceAck: -1, CatchingUp: catching[p.name]}
		delete(catching, p.name)
		p.mu.Lock()
		l.Queued, l.InFlight, l.Acked = len(p.queue), len(p.limbo), p.acked
		var oldest time.Time
		if k := p.link; k != nil {
			l.InFlight += k.inSent
			if len(k.sent) > 0 {
				oldest = k.sent[0].batch[0].at
			}
		}
		for _, q := range [][]pending{p.limbo, p.queue} {
			if len(q) > 0 && (oldest.IsZero() || q[0].at.Before(oldest)) {
				oldest = q[0].at
			}
		}
		if !p.lastAck.IsZero() {
			l.SinceAck = now.Sub(p.lastAck)
		}
		p.mu.Unlock()
		if !oldest.IsZero() {
			l.Oldest = max(now.Sub(oldest), 0)
		}
		out = append(out, l)
	}
	for f := range catching {
		out = append(out, Lag{Follower: f, SinceAck: -1, CatchingUp: true})
	}
	slices.SortFunc(out, func(a, b Lag) int { return strings.Compare(a.Follower, b.Follower) })
	return out
}

// readFrame reads one length-prefixed frame.
func readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes", ErrBadRecord, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("truncated frame: %w", err)
	}
	return b, nil
}
