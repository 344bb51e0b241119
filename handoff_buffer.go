package tempest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/placement"
)

// Mail from actors to a shard being handed off waits in bounded per-shard
// buffers in the routing layer instead of being refused: while its
// recipient's shard moves, a message (tell or ask) from an actor is
// queued; when the table changes, each recipient's queue is routed again
// in order (to whichever node owns the shard now, this one included). Once
// a recipient has a queue, later mail for it joins the queue even if the
// move has completed meanwhile, so mail from one sender to one recipient
// keeps its order. A shard's buffer holds at most handoffBufferPerShard
// messages (beyond that the sender gets actor.ErrRefused, as for a full
// mailbox); a tell still buffered after handoffBufferWait is reported
// Undelivered to its sender with actor.ErrProcessUnavailable, and an ask
// is dropped at its deadline (the scheduler fails it then). A move that
// is aborted leaves the shard with its old owner, where the buffered mail
// then goes. Program code does not use the buffers: Node.Tell and
// Node.Ask wait for placement themselves.

// Limits of the handoff buffers.
const (
	handoffBufferPerShard = 1024
	handoffBufferWait     = actor.DefaultAskTimeout
)

// handoffBuffer is the routing layer's buffers, keyed by recipient
// identity and bounded per shard.
type handoffBuffer struct {
	n        atomic.Int64 // messages buffered (the fast path reads only this)
	mu       sync.Mutex
	queues   map[string]*bufQueue // by recipient kind/key
	perShard map[string]int
	limit    int
	wait     time.Duration
}

type bufQueue struct {
	to    actor.Ref
	shard string
	items []bufItem
}

type bufItem struct {
	m     ariel.Outbound
	since time.Time
}

func newHandoffBuffer(limit int, wait time.Duration) *handoffBuffer {
	return &handoffBuffer{queues: map[string]*bufQueue{}, perShard: map[string]int{}, limit: limit, wait: wait}
}

func bufKey(to actor.Ref) string { return to.Kind() + "/" + to.Key() }

// queued reports whether mail for to waits in a buffer.
func (b *handoffBuffer) queued(to actor.Ref) bool {
	if b.n.Load() == 0 {
		return false
	}
	b.mu.Lock()
	_, ok := b.queues[bufKey(to)]
	b.mu.Unlock()
	return ok
}

// add queues m behind mail already waiting for its recipient. shard names
// the recipient's shard for the bound; it is taken from the existing
// queue when there is one. With mustExist, m is queued only if a queue
// exists (ok false otherwise).
func (b *handoffBuffer) add(m ariel.Outbound, shard string, now time.Time, mustExist bool) (ok bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := bufKey(m.To)
	q := b.queues[k]
	if q == nil {
		if mustExist {
			return false, nil
		}
		q = &bufQueue{to: m.To.WithIncarnation(0), shard: shard}
		b.queues[k] = q
	}
	if b.perShard[q.shard] >= b.limit {
		if len(q.items) == 0 {
			delete(b.queues, k)
		}
		return true, fmt.Errorf("%w: handoff buffer of %s full", actor.ErrRefused, q.shard)
	}
	q.items = append(q.items, bufItem{m: m, since: now})
	b.perShard[q.shard]++
	b.n.Add(1)
	return true, nil
}

// head returns the first waiting message for key.
func (b *handoffBuffer) head(k string) (bufItem, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil || len(q.items) == 0 {
		return bufItem{}, false
	}
	return q.items[0], true
}

// pop removes the first waiting message for key, and the queue when it
// is empty then.
func (b *handoffBuffer) pop(k string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil || len(q.items) == 0 {
		return
	}
	q.items[0] = bufItem{}
	q.items = q.items[1:]
	b.n.Add(-1)
	if b.perShard[q.shard]--; b.perShard[q.shard] <= 0 {
		delete(b.perShard, q.shard)
	}
	if len(q.items) == 0 {
		delete(b.queues, k)
	}
}

func (b *handoffBuffer) keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.queues))
	for k := range b.queues {
		out = append(out, k)
	}
	return out
}

// expire removes the messages of key that waited too long: tells older
// than the wait, asks past their deadline. It returns them.
func (b *handoffBuffer) expire(k string, now time.Time) []bufItem {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil {
		return nil
	}
	var gone []bufItem
	kept := q.items[:0]
	for _, it := range q.items {
		if (it.m.AskID != 0 && !now.Before(it.m.Deadline)) || (it.m.AskID == 0 && now.Sub(it.since) >= b.wait) {
			gone = append(gone, it)
			continue
		}
		kept = append(kept, it)
	}
	for i := len(kept); i < len(q.items); i++ {
		q.items[i] = bufItem{}
	}
	q.items = kept
	b.n.Add(-int64(len(gone)))
	if b.perShard[q.shard] -= len(gone); b.perShard[q.shard] <= 0 {
		delete(b.perShard, q.shard)
	}
	if len(q.items) == 0 {
		delete(b.queues, k)
	}
	return gone
}

// inHandoff reports whether a locator error says the recipient's shard is
// being handed off, and the shard's name for the buffer bound.
func inHandoff(err error) (shard string, ok bool) {
	if !errors.Is(err, placement.ErrHandoff) {
		return "", false
	}
	var h *remoteHint
	if errors.As(err, &h) && h.shard != "" {
		return h.shard, true
	}
	return "?", true
}

// buffer queues actor mail whose recipient's shard is being handed off, or
// that must wait behind mail already buffered for its recipient. handled
// reports that m was taken (err is then its admission outcome).
func (r *remote) buffer(m ariel.Outbound, locErr error) (handled bool, err error) {
	if r.buf == nil || m.From.IsZero() || !m.To.IsVirtual() {
		return false, nil
	}
	if locErr == nil {
		if r.buf.n.Load() == 0 { // the common case: nothing waits anywhere
			return false, nil
		}
		return r.buf.add(m, "", r.sched.Clock().Now(), true)
	}
	now := r.sched.Clock().Now()
	shard, ok := inHandoff(locErr)
	if !ok {
		return false, nil
	}
	return r.buf.add(m, shard, now, false)
}

// flushBuffered routes buffered mail again: each recipient whose shard is
// no longer being handed off gets its queue in order; the others keep
// theirs, minus what expired. The cluster calls it when the table changes
// and periodically; one goroutine at a time.
func (r *remote) flushBuffered() {
	if r.buf == nil || r.buf.n.Load() == 0 {
		return
	}
	now := r.sched.Clock().Now()
	for _, k := range r.buf.keys() {
		for _, it := range r.buf.expire(k, now) {
			if it.m.AskID != 0 {
				r.fail(it.m, actor.ErrDeadlineExceeded)
				continue
			}
			r.fail(it.m, fmt.Errorf("%w: %w: still moving after %v", actor.ErrProcessUnavailable, placement.ErrHandoff, r.buf.wait))
		}
		for {
			it, ok := r.buf.head(k)
			if !ok {
				break
			}
			if err := r.route(it.m); err != nil {
				if _, moving := inHandoff(err); moving {
					break // moving (again): wait for the next change
				}
				r.fail(it.m, err)
			}
			r.buf.pop(k)
		}
	}
}

// route sends buffered mail where its recipient lives now: a local actor
// through the scheduler, a remote one through the Mailer, stamped.
func (r *remote) route(m ariel.Outbound) error {
	node, epoch, local, err := r.locate(m.To)
	if err != nil {
		return err
	}
	if local {
		var reply func(any, error)
		if m.AskID != 0 {
			id := m.AskID
			reply = func(v any, err error) { r.sched.CompleteAsk(id, v, err) }
		}
		return r.sched.Deliver(m.To, m.From, m.Msg, m.Deadline, reply)
	}
	if m.AskID != 0 {
		return r.mail.AskAt(node, m.AskID, epoch, m.To, m.From, m.Msg, m.Deadline)
	}
	return r.mail.TellAt(node, epoch, m.To, m.From, m.Msg)
}

// fail reports buffered mail that could not be delivered to its sender:
// an ask completes with err, a tell comes back as actor.Undelivered.
func (r *remote) fail(m ariel.Outbound, err error) {
	if m.AskID != 0 {
		r.sched.CompleteAsk(m.AskID, nil, err)
		return
	}
	r.notify(m.From, m.To, m.Msg, err)
}

// bufferLoop flushes the handoff buffers when the table changes, and
// every bufferSweep to expire what waited too long.
func (c *cluster) bufferLoop() {
	defer c.wg.Done()
	tick, stop := c.n.cfg.Clock.NewTicker(bufferSweep)
	defer stop()
	for {
		changed := c.pl.Changed()
		select {
		case <-c.ctx.Done():
			return
		case <-changed:
		case <-tick:
		}
		c.rem.flushBuffered()
	}
}

// bufferSweep is how often buffered mail is checked against its limits
// when the table does not change.
const bufferSweep = 100 * time.Millisecond
