package replica

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tempest-actors/tempest/prospero"
)

// Serve is the replica's side of one replication stream from node from
// (the stream's authenticated peer): it reads batches, checks every
// record (checksum, identity, epoch: View.Accept and the newest epoch
// seen on any stream for the shard), stores them and acknowledges each
// batch. A batch with one bad record is refused whole and nothing of it
// is stored; the stream then ends with a *StreamError naming the node
// and the shard. With the batch's sync flag the acknowledgement follows
// the fsync; otherwise it follows the checks, and the records are
// written in the background (a write that fails there refuses the next
// batch, so the owner removes this replica from the set).
func (s *Store) Serve(conn net.Conn, from string) error {
	defer conn.Close()
	r := bufio.NewReader(conn)
	var out []byte
	for {
		b, err := readFrame(r)
		if err != nil {
			if errors.Is(err, ErrBadRecord) || !isEOF(err) {
				s.stats.refused.Add(1)
				return &StreamError{Node: from, Err: err}
			}
			return nil // the owner closed the stream
		}
		if len(b) > 0 && b[0] == frameList {
			if err := s.serveList(conn, from, b); err != nil {
				return err
			}
			continue
		}
		seq, flags, recs, shard, err := decodeBatch(b)
		if err != nil {
			s.stats.refused.Add(1)
			err = &StreamError{Node: from, Shard: shard, Err: err}
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "replica: batch refused", slog.Any("error", err))
			s.writeAck(conn, out, seq, err)
			return err
		}
		// Held from before the check until queued: see BoltStore.Hold.
		release := s.local.Hold(recordIDs(recs)...)
		err = s.accept(from, recs)
		if err == nil {
			err = s.apply.failed(from)
		}
		if err == nil {
			if flags&flagSync != 0 {
				// Durable on this replica: these records, and every one
				// acknowledged to from before them (a catch-up confirms
				// its copy this way before the follower joins).
				if err = s.apply.now(from, recs); err == nil {
					s.apply.drain()
					err = s.apply.failed(from)
				}
			} else {
				err = s.apply.later(from, recs)
			}
		}
		release()
		if err != nil {
			s.stats.refused.Add(1)
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "replica: batch refused", slog.String("from", from), slog.Any("error", err))
		}
		if werr := s.writeAck(conn, out, seq, err); werr != nil {
			return werr
		}
	}
}

// heldPart bounds the entries of one part of a list.
const heldPart = 4096

// serveList answers a catch-up's list request: every record this store
// holds of the shards asked for, with its epoch and version, in parts.
// The owner removes those it no longer has (deleted while this replica
// was away).
func (s *Store) serveList(conn net.Conn, from string, b []byte) error {
	shards, err := decodeList(b)
	if err != nil {
		s.stats.refused.Add(1)
		err = &StreamError{Node: from, Err: err}
		_, _ = conn.Write(frameOf(appendHeld(nil, err, true, nil)))
		return err
	}
	want := map[Shard]bool{}
	for _, sh := range shards {
		want[sh] = true
	}
	var j Joiner
	if a := s.att.Load(); a != nil {
		j, _ = a.view.(Joiner)
	}
	if j == nil {
		err := &StreamError{Node: from, Err: errors.New("replica: this node cannot map identities to shards")}
		_, _ = conn.Write(frameOf(appendHeld(nil, err, true, nil)))
		return err
	}
	var held []Held
	shardOf := map[prospero.Identity]Shard{}
	err = s.local.ScanHeld(context.Background(), func(id prospero.Identity) bool {
		sh, ok := j.ShardOf(id)
		if ok && want[sh] {
			shardOf[id] = sh
			return true
		}
		return false
	}, func(id prospero.Identity, epoch, version uint64) error {
		held = append(held, Held{Shard: shardOf[id], ID: id, Epoch: epoch, Version: version})
		return nil
	})
	if err != nil {
		_, _ = conn.Write(frameOf(appendHeld(nil, err, true, nil)))
		return err
	}
	for {
		n, size := 0, 0
		for n < len(held) && n < heldPart && size < maxFrame/2 {
			size += len(held[n].ID.Kind) + len(held[n].ID.Key) + len(held[n].Shard.Group) + 40
			n++
		}
		if _, err := conn.Write(frameOf(appendHeld(nil, nil, n == len(held), held[:n]))); err != nil {
			return err
		}
		if held = held[n:]; len(held) == 0 {
			return nil
		}
	}
}

// frameOf prefixes body with its length.
func frameOf(body []byte) []byte {
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	return append(out, body...)
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

func (s *Store) writeAck(conn net.Conn, buf []byte, seq uint64, err error) error {
	buf = append(buf[:0], 0, 0, 0, 0)
	buf = appendAck(buf, seq, err)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	_, werr := conn.Write(buf)
	return werr
}

// accept checks the epochs of recs: none may be older than the newest
// epoch seen for its shard, and each must pass View.Accept.
func (s *Store) accept(from string, recs []Record) error {
	a := s.att.Load()
	for i := range recs {
		r := &recs[i]
		v, _ := s.seen.LoadOrStore(r.Shard, new(atomic.Uint64))
		seen := v.(*atomic.Uint64)
		if e := seen.Load(); r.Epoch < e {
			sh := r.Shard
			return &StreamError{Node: from, Shard: &sh, Err: fmt.Errorf("%w: epoch %d, this replica has seen %d", ErrStale, r.Epoch, e)}
		}
		if a == nil {
			sh := r.Shard
			return &StreamError{Node: from, Shard: &sh, Err: fmt.Errorf("%w: this node is not in a cluster", ErrStale)}
		}
		if err := a.view.Accept(from, r.Shard, r.Epoch); err != nil {
			sh := r.Shard
			return &StreamError{Node: from, Shard: &sh, Err: err}
		}
		for {
			e := seen.Load()
			if r.Epoch <= e || seen.CompareAndSwap(e, r.Epoch) {
				break
			}
		}
	}
	return nil
}

// applier writes replicated records to the local store, in arrival
// order: each batch joins the local store's next group commit
// (prospero.BoltStore.ApplyReplicatedAsync), so that the batches from
// every owner and this node's own writes share one transaction and one
// fsync, instead of a transaction of their own contending with the
// node's commits for bbolt's single writer. Batches acknowledged on
// receipt (the default mode) start no commit of their own while the
// node commits writes of its own within a few milliseconds
// (ApplyReplicatedLater).
type applier struct {
	s    *Store
	mu   sync.Mutex
	cond *sync.Cond
	// seq numbers the batches queued; out holds those not yet written,
	// so that drain waits only for the batches queued before it was
	// called, not for a moment with none (steady replication from other
	// owners need never leave one).
	seq    uint64
	out    map[uint64]struct{}
	closed bool // no batch is taken any more
	// errs is, per sending node, the failure of a background write of
	// its batches, reported to that node's stream once (failed) and
	// to every Flush until then.
	errs map[string]error
}

func newApplier(s *Store) *applier {
	a := &applier{s: s, out: map[uint64]struct{}{}, errs: map[string]error{}}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func flat(recs []Record) []prospero.Replicated {
	out := make([]prospero.Replicated, len(recs))
	for i := range recs {
		out[i] = recs[i].Replicated
	}
	return out
}

// queue hands recs to the local store's group commit; done, if not nil,
// gets the outcome once they are durable (or failed). Once the applier
// is closed it takes nothing and returns ErrStoreClosed.
func (a *applier) queue(from string, recs []Record, done func(error)) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return prospero.ErrStoreClosed
	}
	a.seq++
	id := a.seq
	a.out[id] = struct{}{}
	a.mu.Unlock()
	apply := a.s.local.ApplyReplicatedAsync
	if done == nil {
		apply = a.s.local.ApplyReplicatedLater // nobody waits: share the node's next commit
	}
	apply(flat(recs), func(n int, err error) {
		a.s.stats.applied.Add(uint64(n))
		a.mu.Lock()
		delete(a.out, id)
		if err != nil && done == nil {
			if a.errs[from] == nil {
				a.errs[from] = err
			}
			a.s.log.LogAttrs(context.Background(), slog.LevelError, "replica: background write failed",
				slog.String("from", from), slog.Any("error", err))
		}
		a.cond.Broadcast()
		a.mu.Unlock()
		if done != nil {
			done(err)
		}
	})
	return nil
}

// later queues recs for a background write.
func (a *applier) later(from string, recs []Record) error { return a.queue(from, recs, nil) }

// now writes recs (after what is queued) and returns once they are fsync'd.
func (a *applier) now(from string, recs []Record) error {
	ch := make(chan error, 1)
	if err := a.queue(from, recs, func(err error) { ch <- err }); err != nil {
		return err
	}
	return <-ch
}

// drain waits until every batch queued so far is written (batches
// queued meanwhile are not waited for).
func (a *applier) drain() {
	a.mu.Lock()
	upto := a.seq
	for a.waitingLocked(upto) {
		a.cond.Wait()
	}
	a.mu.Unlock()
}

// waitingLocked reports whether a batch numbered upto or lower is not
// written yet.
func (a *applier) waitingLocked(upto uint64) bool {
	for id := range a.out {
		if id <= upto {
			return true
		}
	}
	return false
}

// Flush returns once every record this replica acknowledged so far is
// written to the local store, or the error of a background write that
// failed (then some were not). A follower calls it before it takes a
// shard over by promotion, so that it serves from every record it
// acknowledged.
func (s *Store) Flush() error {
	s.apply.drain()
	s.apply.mu.Lock()
	defer s.apply.mu.Unlock()
	for _, from := range slices.Sorted(maps.Keys(s.apply.errs)) {
		return fmt.Errorf("replica: records acknowledged earlier to %s were not stored: %w", from, s.apply.errs[from])
	}
	return nil
}

// failed returns (and clears) the failure of a background write of
// from's batches: that node's stream refuses its next batch with it, so
// the node learns that what it was told was received is not stored.
func (a *applier) failed(from string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.errs[from]
	delete(a.errs, from)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLostRecords, err)
	}
	return nil
}

// close waits for the batches queued to be written; later ones fail
// with ErrStoreClosed.
func (a *applier) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.drain()
}

// recordIDs lists the identities of recs.
func recordIDs(recs []Record) []prospero.Identity {
	out := make([]prospero.Identity, len(recs))
	for i := range recs {
		out[i] = recs[i].ID
	}
	return out
}
