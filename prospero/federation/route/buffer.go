package route

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero/federation/mailq"
)

// Limits of the handoff buffers.
const (
	handoffBufferPerShard = 1024
	handoffBufferWait     = tellRetryWait
)

// inHandoff reports whether a locator error says the recipient's shard is
// being handed off, and the shard's name for the buffer bound.
func inHandoff(err error) (shard string, ok bool) {
	if !errors.Is(err, placement.ErrHandoff) {
		return "", false
	}
	var h *Hint
	if errors.As(err, &h) && h.Shard != "" {
		return h.Shard, true
	}
	return "?", true
}

// shardOf names the bucket of the buffer bound for mail to `to` that
// waits because of err: the moving shard when the error names it, else
// the recipient's shard by this node's table, else (not placed, no
// table) the recipient's kind. A busy owner of one shard so fills only
// that shard's bucket, not every recipient's of its kind.
func (r *Router) shardOf(to actor.Ref, err error) string {
	var h *Hint
	if errors.As(err, &h) && h.Shard != "" {
		return h.Shard
	}
	if r.shardName != nil {
		if s, ok := r.shardName(to); ok {
			return s
		}
	}
	return "kind:" + to.Kind()
}

// mayPark reports whether m may wait in the buffer rather than fail at
// once: every ask, and a tell from an actor. A tell from program code
// returns its error to Node.Tell, which waits in the caller's goroutine.
func mayPark(m ariel.Outbound) bool {
	return m.To.IsVirtual() && (m.AskID != 0 || !m.From.IsZero())
}

// buffer queues mail whose recipient's shard is in flux (locErr
// resendable), or that must wait behind mail already buffered for its
// recipient. handled reports that m was taken (err is then its admission
// outcome).
func (r *Router) buffer(m ariel.Outbound, locErr error) (handled bool, err error) {
	if r.buf == nil || !mayPark(m) {
		return false, nil
	}
	if locErr == nil {
		if r.buf.Waiting() == 0 { // the common case: nothing waits anywhere
			return false, nil
		}
		return r.buf.Add(mailq.Item{M: m}, "", r.sched.Clock().Now(), true)
	}
	if !Resendable(locErr) {
		return false, nil
	}
	now := r.sched.Clock().Now()
	it := mailq.Item{M: m}
	if _, moving := inHandoff(locErr); !moving {
		it.Due = now.Add(Backoff(0)) // a lease or a table catching up is no table change
	}
	return r.buf.Add(it, r.shardOf(m.To, locErr), now, false)
}

// retry takes mail that node refused with err (resendable) after it was
// sent by this node's table at sentEpoch (0: not known), this node's own
// fence included: it is sent again at once if the table routes it
// elsewhere now, else it waits. p is its place in its recipient's queue
// when it was sent from there (zero: sent directly; a tell's is found with
// its start). It reports whether it took m; a false means the caller
// reports err.
func (r *Router) retry(m ariel.Outbound, sentEpoch uint64, p mailq.Place, err error) bool {
	if r.buf == nil || !m.To.IsVirtual() || m.Msg == nil || !Resendable(err) {
		return false
	}
	if m.AskID != 0 && !r.sched.AskPending(m.AskID) {
		return true // answered meanwhile (its deadline, its caller gone): nothing to send
	}
	now := r.sched.Clock().Now()
	refuser, notOwner := refusedBy(err)
	var since time.Time
	if m.AskID == 0 {
		since, p = r.buf.PlaceOf(m, now, r.sameMsg)
	}
	it := mailq.Item{M: m, Since: since, Seq: p.Seq, Unrun: p.Unrun, Attempt: p.Attempt}
	backoff := func() time.Time { // grows with each refusal of m
		d := Backoff(it.Attempt)
		it.Attempt++
		return now.Add(d)
	}
	if notOwner {
		node, epoch, local, lerr := r.locate(m.To)
		switch {
		case lerr == nil && !r.buf.Queued(m.To) && (local || node != refuser || (sentEpoch != 0 && epoch != sentEpoch)):
			noted := m.AskID == 0 && !local
			if noted {
				if it.Seq == 0 {
					it.Seq = r.buf.NextSeq() // the record names it by that
				}
				r.noteResent(it)
			}
			serr := r.route(m, it.Place())
			if serr != nil && noted {
				r.buf.ForgetResent(mailq.Key(m.To), it.Seq) // not sent
			}
			switch {
			case serr == nil:
				r.buf.CountResent()
				return true
			case !Resendable(serr):
				r.buf.CountResent()
				r.fail(m, serr)
				return true
			}
			// Refused at once, nothing sent (no link to the node the
			// table names now): it waits for a change or the back-off.
			err = serr
			it.Due = backoff()
		case lerr == nil && !local && node == refuser && (sentEpoch == 0 || epoch == sentEpoch):
			it.Avoid, it.AvoidEpoch = node, epoch // until the table routes it elsewhere
		case lerr == nil:
			// The table moved on already, but mail for the recipient
			// waits ahead of this: it goes in its turn.
		default:
			if _, moving := inHandoff(lerr); !moving {
				it.Due = backoff()
			}
		}
	} else if wait, busy := busyFor(err); busy {
		it.Due = now.Add(wait)
	} else {
		it.Due = backoff()
	}
	if _, berr := r.buf.Add(it, r.shardOf(m.To, err), now, false); berr != nil {
		r.fail(m, berr)
	}
	return true
}

// flushBuffered routes buffered mail again: each recipient's queue, in
// order, as far as its head may go now; the others keep theirs, minus
// what expired. It returns the earliest time a head waits for, or the
// record of tells sent again is to be swept (zero: only a table change). The retry loop calls it; one goroutine at a time.
func (r *Router) flushBuffered() (next time.Time) {
	if r.buf == nil {
		return time.Time{}
	}
	now := r.sched.Clock().Now()
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	earlier(r.buf.Sweep(now)) // also once nothing waits: the record ends
	if r.buf.Waiting() == 0 {
		return next
	}
	for _, k := range r.buf.Keys() {
		for _, it := range r.buf.Expire(k, now) {
			if it.M.AskID != 0 {
				r.fail(it.M, actor.ErrDeadlineExceeded)
				continue
			}
			if !it.M.From.IsZero() {
				r.buf.CountGaveUp() // program code's: fail counts it
			}
			r.fail(it.M, fmt.Errorf("%w: placement did not settle in time", actor.ErrProcessUnavailable))
		}
		for {
			it, ok := r.buf.Head(k)
			if !ok {
				break
			}
			if it.M.AskID != 0 && !r.sched.AskPending(it.M.AskID) {
				r.buf.Remove(k, it.Seq) // answered meanwhile (its deadline, its caller gone)
				continue
			}
			if now.Before(it.Due) {
				earlier(it.Due)
				earlier(r.buf.Expiry(it))
				break
			}
			node, epoch, local, err := r.locate(it.M.To)
			if err == nil && it.Avoid != "" && !local && node == it.Avoid && epoch == it.AvoidEpoch {
				earlier(r.buf.Expiry(it)) // the table still names the refuser: wait for a change
				break
			}
			if err != nil {
				if Resendable(err) {
					it.Attempt++
					it.Due = time.Time{} // a move ends with a table change
					if _, moving := inHandoff(err); !moving {
						it.Due = now.Add(Backoff(it.Attempt))
					}
					r.buf.Update(k, it)
					earlier(it.Due)
					earlier(r.buf.Expiry(it))
					break
				}
				r.fail(it.M, err)
				r.buf.Remove(k, it.Seq)
				continue
			}
			r.buf.Remove(k, it.Seq)
			if it.M.AskID == 0 && !local {
				r.noteResent(it)
			}
			if serr := r.sendRouted(it.M, node, epoch, local, it.Place()); serr != nil {
				if it.M.AskID == 0 && !local {
					r.buf.ForgetResent(k, it.Seq) // not sent
				}
				if Resendable(serr) {
					// Refused at once, nothing sent (no link to the owner
					// yet): it keeps its place and waits again.
					it.Attempt++
					it.Due = now.Add(Backoff(it.Attempt))
					it.Avoid, it.AvoidEpoch = "", 0
					r.buf.Requeue(it, r.shardOf(it.M.To, serr))
					earlier(it.Due)
					earlier(r.buf.Expiry(it))
					break
				}
				r.buf.CountResent()
				r.fail(it.M, serr)
			} else {
				r.buf.CountResent()
			}
		}
	}
	return next
}

// noteResent records the tell it as sent again to another node, with its
// message in the form a refusal echoes it (a registered *T as its T).
func (r *Router) noteResent(it mailq.Item) {
	msg := it.M.Msg
	if r.reg != nil {
		if v, err := r.reg.Value(msg); err == nil {
			msg = v
		}
	}
	r.buf.NoteResent(mailq.Key(it.M.To), it, msg)
}

// sameMsg reports whether a refusal's echo b is the message a this node
// sent: equal values, or (a codec whose decoding is not the very value
// encoded, a nil slice decoded empty) the same encoding.
func (r *Router) sameMsg(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	if r.reg == nil {
		return false
	}
	ta, ea, err := r.reg.Append(nil, a)
	if err != nil {
		return false
	}
	tb, eb, err := r.reg.Append(nil, b)
	return err == nil && ta == tb && bytes.Equal(ea, eb)
}

// route sends mail where its recipient lives now: a local actor through
// the scheduler, a remote one through the Mailer, stamped. p is its
// place in a retry queue (zero: none).
func (r *Router) route(m ariel.Outbound, p mailq.Place) error {
	node, epoch, local, err := r.locate(m.To)
	if err != nil {
		return err
	}
	return r.sendRouted(m, node, epoch, local, p)
}

// sendRouted sends m as routed to node at epoch (local: this node). Mail
// routed here is this node's own again (ariel.Scheduler.DeliverRouted):
// an ask is answered to its caller directly, and mail fenced off here once
// more comes back in its recipient's batch (ResendAll) and waits again.
func (r *Router) sendRouted(m ariel.Outbound, node string, epoch uint64, local bool, p mailq.Place) error {
	if local {
		return r.sched.DeliverRouted(m)
	}
	return r.sendTo(node, epoch, m, p)
}

// fail reports buffered mail that could not be delivered to its sender:
// an ask completes with err, a tell comes back as actor.Undelivered (from
// program code nobody is left to tell: it is counted as given up,
// Stats().Retry.GaveUp, whether its wait ended, its queue was full or its
// route failed otherwise).
func (r *Router) fail(m ariel.Outbound, err error) {
	if m.AskID != 0 {
		r.sched.CompleteAsk(m.AskID, nil, err)
		return
	}
	if m.From.IsZero() {
		if r.buf != nil {
			r.buf.CountGaveUp()
		}
		return
	}
	r.notify(m.From, m.To, m.Msg, err)
}

// RetryLoop routes waiting mail again when the table changes (changed
// returns the channel closed at the next change), when a head's back-off
// or wait ends, and when mail is queued, until ctx ends.
func (r *Router) RetryLoop(ctx context.Context, changed func() <-chan struct{}) {
	clk := r.sched.Clock()
	wake := make(chan struct{}, 1)
	var timer ariel.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := changed()
		next := r.flushBuffered()
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if !next.IsZero() {
			timer = clk.AfterFunc(max(next.Sub(clk.Now()), time.Millisecond), func() {
				select {
				case wake <- struct{}{}:
				default:
				}
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-wake:
		case <-r.buf.Kicked():
		}
	}
}
