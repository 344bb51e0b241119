package route

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/wire"

	"github.com/tempest-actors/tempest/prospero/federation/mailq"
)

// newBufRemote is a routing layer with retry queues on a virtual clock
// and no peers: locate answers with loc.
func newBufRemote(tb testing.TB, loc Locator) (*Router, *ariel.SimClock) {
	tb.Helper()
	clk := ariel.NewSimClock(time.Unix(1_000_000, 0))
	s, err := ariel.New(ariel.Config{Node: "a", Workers: 1, Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close(context.Background()) })
	return &Router{self: "a", sched: s, locate: loc, buf: mailq.New(handoffBufferPerShard, handoffBufferWait)}, clk
}

// parkRefused queues n tells, each to its own recipient, as refused
// NOT_SERVING by their owner: each waits for its back-off.
func parkRefused(tb testing.TB, r *Router, n int) {
	tb.Helper()
	r.buf.SetLimit(n + 1)
	for i := range n {
		m := ariel.Outbound{To: actor.Virtual("log", fmt.Sprint(i)), From: actor.Virtual("pump", "p"), Msg: rtSeq{Kind: "seq"}}
		if !r.retry(m, 0, mailq.Place{}, wire.NotServing(fmt.Errorf("lease not fresh"))) {
			tb.Fatalf("tell %d not taken", i)
		}
	}
}

// BenchmarkFlushBufferedRecipients: one pass of the retry loop over n
// waiting recipients, each refused once, none due: its cost per
// recipient must not grow with n (a pass once swept every recipient's
// refusal record once per recipient, under the lock every send takes).
func BenchmarkFlushBufferedRecipients(b *testing.B) {
	for _, n := range []int{2000, 8000} {
		b.Run(fmt.Sprint("recipients=", n), func(b *testing.B) {
			r, _ := newBufRemote(b, func(actor.Ref) (string, uint64, bool, error) { return "b", 1, false, nil })
			parkRefused(b, r, n)
			b.ResetTimer()
			for range b.N {
				r.flushBuffered()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/recipient")
		})
	}
}

// TestRetryQueueFullCountsProgramTells: a tell from program code refused
// by its owner and turned away by a full retry queue is lost, as is one
// that waited out the retry wait: both are counted given up, once each
// (nobody else is left to tell).
func TestRetryQueueFullCountsProgramTells(t *testing.T) {
	r, clk := newBufRemote(t, func(actor.Ref) (string, uint64, bool, error) { return "b", 1, false, nil })
	r.buf.SetLimit(1)
	refusal := wire.NotServing(fmt.Errorf("lease not fresh"))
	to := actor.Virtual("log", "x")
	for i := range 2 {
		if !r.retry(ariel.Outbound{To: to, Msg: rtSeq{Kind: "seq", DefaultDeadlineNs: uint64(i)}}, 0, mailq.Place{}, refusal) {
			t.Fatalf("tell %d not taken", i)
		}
	}
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 1 || g != 1 {
		t.Fatalf("queue full: %d waiting, %d given up; want 1 and 1", w, g)
	}
	clk.Advance(handoffBufferWait)
	r.flushBuffered()
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 0 || g != 2 {
		t.Fatalf("after the wait: %d waiting, %d given up; want 0 and 2", w, g)
	}
}

// TestRetryQueueBoundPerShard: refusals of recipients in different
// shards of one kind fill their own shard's bound, not one the whole
// kind shares; recipients whose shard is not known share their kind's.
func TestRetryQueueBoundPerShard(t *testing.T) {
	r, _ := newBufRemote(t, func(actor.Ref) (string, uint64, bool, error) { return "b", 1, false, nil })
	r.shardName = func(to actor.Ref) (string, bool) { return "log/" + to.Key(), to.Key() != "unplaced" }
	r.buf.SetLimit(2)
	refusal := wire.Busy(10*time.Millisecond, "hydration backlog")
	tell := func(key string) {
		t.Helper()
		if !r.retry(ariel.Outbound{To: actor.Virtual("log", key), Msg: rtSeq{Kind: "seq"}}, 0, mailq.Place{}, refusal) {
			t.Fatalf("tell to %s not taken", key)
		}
	}
	for _, k := range []string{"a", "b", "c", "a", "b", "c"} {
		tell(k)
	}
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 6 || g != 0 {
		t.Fatalf("%d waiting, %d given up; want 6 and 0", w, g)
	}
	tell("a") // a's shard is full
	for range 3 {
		tell("unplaced")
	}
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 8 || g != 2 {
		t.Fatalf("%d waiting, %d given up; want 8 and 2", w, g)
	}
}

// TestRetryWaitPerTell: a tell's retry wait starts at its own first
// refusal, not at the first refusal of another tell to its recipient: a
// new tell refused 4.9 s into a BUSY episode still waits its 5 s. A tell
// this node sent again keeps the start of its wait when it is refused
// again, so none is resent longer than the wait.
func TestRetryWaitPerTell(t *testing.T) {
	r, clk := newBufRemote(t, func(actor.Ref) (string, uint64, bool, error) { return "b", 1, false, nil })
	busy := wire.Busy(time.Minute, "hydration backlog") // no resend in this test
	to := actor.Virtual("log", "x")
	tell := func(n uint64) ariel.Outbound {
		return ariel.Outbound{To: to, Msg: rtSeq{Kind: "seq", DefaultDeadlineNs: n}}
	}
	r.retry(tell(1), 0, mailq.Place{}, busy)
	clk.Advance(handoffBufferWait - 100*time.Millisecond)
	r.retry(tell(2), 0, mailq.Place{}, busy)
	clk.Advance(100 * time.Millisecond)
	r.flushBuffered()
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 1 || g != 1 {
		t.Fatalf("at the first tell's end: %d waiting, %d given up; want 1 and 1", w, g)
	}
	clk.Advance(handoffBufferWait - 100*time.Millisecond - time.Millisecond)
	r.flushBuffered()
	if w := r.buf.Waiting(); w != 1 {
		t.Fatalf("the second tell left %d before its wait ended", 1-w)
	}
	clk.Advance(time.Millisecond)
	r.flushBuffered()
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 0 || g != 2 {
		t.Fatalf("at the second tell's end: %d waiting, %d given up; want 0 and 2", w, g)
	}

	// Tell 3 waited 4.9 s and was sent again; its refusal keeps its start,
	// while tell 4, new, refused at the same time, starts its own wait.
	start := clk.Now()
	clk.Advance(handoffBufferWait - 100*time.Millisecond)
	r.noteResent(mailq.Item{M: tell(3), Since: start})
	r.retry(tell(4), 0, mailq.Place{}, busy)
	r.retry(tell(3), 0, mailq.Place{}, busy)
	clk.Advance(100 * time.Millisecond)
	r.flushBuffered()
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 1 || g != 3 {
		t.Fatalf("at the resent tell's end: %d waiting, %d given up; want 1 and 3", w, g)
	}
	if it, ok := r.buf.Head(mailq.Key(to)); !ok || it.M.Msg.(rtSeq).DefaultDeadlineNs != 4 {
		t.Fatalf("waiting: %+v, want tell 4", it.M.Msg)
	}
	// The echo of a resent tell whose codec decodes an empty slice as nil
	// is still that tell: the same encoding.
	r.reg = rtRegistry(t, false)
	clk.Advance(handoffBufferWait) // tell 4 is given up
	r.flushBuffered()
	start = clk.Now()
	clk.Advance(handoffBufferWait - 100*time.Millisecond)
	r.noteResent(mailq.Item{M: ariel.Outbound{To: to, Msg: rtPayload{State: []byte{}}}, Since: start})
	r.retry(ariel.Outbound{To: to, Msg: rtPayload{}}, 0, mailq.Place{}, busy)
	clk.Advance(100 * time.Millisecond)
	r.flushBuffered()
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 0 || g != 5 {
		t.Fatalf("at the resent payload's end: %d waiting, %d given up; want 0 and 5", w, g)
	}

	// The record of the resend was used up by its refusal; one of a
	// resend never refused is swept once no refusal can echo it.
	r.noteResent(mailq.Item{M: tell(5), Since: clk.Now()})
	clk.Advance(2 * handoffBufferWait)
	r.flushBuffered()
	if left := r.buf.ResentNotes(); left != 0 {
		t.Fatalf("%d resent tells' records kept after twice the wait", left)
	}
}

// seqRetry is a routing layer whose owner "b" refuses with BUSY for a
// minute (nothing is resent on its own), for tells from pump/p to log/x
// numbered by their DefaultDeadlineNs.
type seqRetry struct {
	r    *Router
	to   actor.Ref
	from actor.Ref
	busy error
}

func newSeqRetry(t *testing.T) *seqRetry {
	r, _ := newBufRemote(t, func(actor.Ref) (string, uint64, bool, error) { return "b", 1, false, nil })
	return &seqRetry{r: r, to: actor.Virtual("log", "x"), from: actor.Virtual("pump", "p"),
		busy: wire.Busy(time.Minute, "hydration backlog")}
}

func (s *seqRetry) tell(n uint64) ariel.Outbound {
	return ariel.Outbound{To: s.to, From: s.from, Msg: rtSeq{Kind: "seq", DefaultDeadlineNs: n}}
}

// refused is the owner's refusal of tell n coming back.
func (s *seqRetry) refused(n uint64) { s.r.retry(s.tell(n), 0, mailq.Place{}, s.busy) }

// resend takes the i-th waiting message out and notes it sent again, as
// flushBuffered does; it returns the message.
func (s *seqRetry) resend(i int) mailq.Item {
	it := s.r.buf.Items(mailq.Key(s.to))[i]
	s.r.buf.Remove(mailq.Key(s.to), it.Seq)
	s.r.noteResent(it)
	return it
}

// queue is the numbers of the tells waiting, in queue order.
func (s *seqRetry) queue() []uint64 {
	var out []uint64
	for _, it := range s.r.buf.Items(mailq.Key(s.to)) {
		out = append(out, it.M.Msg.(rtSeq).DefaultDeadlineNs)
	}
	return out
}

// TestRetryResentKeepsPlace: a tell sent again from its recipient's queue
// and refused once more goes back ahead of the mail that was queued
// behind it, not to the end of the queue, so that one sender's mail to one
// recipient keeps its order across any number of refusals.
func TestRetryResentKeepsPlace(t *testing.T) {
	s := newSeqRetry(t)
	s.refused(1)
	s.refused(2)
	// The retry loop sends the head again, and mail sent meanwhile joins
	// the queue.
	s.resend(0)
	if ok, err := s.r.buf.Add(mailq.Item{M: s.tell(3)}, "", time.Now(), true); !ok || err != nil {
		t.Fatalf("tell 3 did not join the queue: %v %v", ok, err)
	}
	s.refused(1) // its refusal comes back
	if got := s.queue(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("queue after the resent head was refused again = %v, want [1 2 3]", got)
	}
	// The second is sent and refused too; then the first again.
	for _, i := range []int{1, 0} {
		it := s.resend(i)
		s.refused(it.M.Msg.(rtSeq).DefaultDeadlineNs)
	}
	if got := s.queue(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("queue after more refusals = %v, want [1 2 3]", got)
	}
}

// TestRetryLoopRemovesTheMessageItTook: the retry loop reads a queue's
// head, routes it and then takes it out; a refusal that put an earlier
// message back ahead of it meanwhile must not make it take that one out
// instead (lost) and leave its own (sent twice).
func TestRetryLoopRemovesTheMessageItTook(t *testing.T) {
	s := newSeqRetry(t)
	s.refused(1)
	s.refused(2)
	s.resend(0)                                 // tell 1 is sent again
	second, _ := s.r.buf.Head(mailq.Key(s.to))  // the loop reads tell 2 next
	s.refused(1)                                // tell 1's refusal comes back
	s.r.buf.Remove(mailq.Key(s.to), second.Seq) // the loop takes tell 2 out
	if got := s.queue(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("queue after the loop took tell 2 = %v, want [1]", got)
	}
}

// TestRetryResentFencedOffMailKeepsItsPlace: mail this node fenced off
// waits ahead of mail queued for its recipient (sent after it); sent on
// and refused again, it goes back ahead of that mail, not behind it.
func TestRetryResentFencedOffMailKeepsItsPlace(t *testing.T) {
	s := newSeqRetry(t)
	s.refused(2) // queued while the shard moves
	if !s.r.buf.AddUnrun([]mailq.Item{{M: s.tell(1)}}, "s", time.Now()) {
		t.Fatal("fenced-off mail not taken")
	}
	if got := s.queue(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("queue = %v, want [1 2]", got)
	}
	s.resend(0)
	s.refused(1)
	if got := s.queue(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("queue after the fenced-off tell was refused again = %v, want [1 2]", got)
	}
}

// TestRetryDirectSendForgetsAResendsPlace: a tell resent earlier and not
// refused leaves its record; a later, equal tell sent directly must not
// take that record's place ahead of mail refused before it.
func TestRetryDirectSendForgetsAResendsPlace(t *testing.T) {
	s := newSeqRetry(t)
	s.refused(1)
	s.resend(0) // sent again and, this time, run: no refusal
	// Tells 2 and 1 are sent directly (nothing waits), both refused.
	s.r.buf.SentDirect(s.to, s.from)
	s.r.buf.SentDirect(s.to, s.from)
	s.refused(2)
	s.refused(1)
	if got := s.queue(); !slices.Equal(got, []uint64{2, 1}) {
		t.Fatalf("queue = %v, want [2 1], the order they were sent", got)
	}
}

// TestRetryRefusalTakesTheNewestEqualResend: of equal tells resent, the
// refusal takes the newest record, so one resent earlier that ran leaves
// a record no later refusal takes for itself: Inc, Set, Inc resent, the
// first Inc run and the others refused, wait as Set, Inc.
func TestRetryRefusalTakesTheNewestEqualResend(t *testing.T) {
	s := newSeqRetry(t)
	const inc, set = 1, 5
	for _, n := range []uint64{inc, set, inc} {
		s.refused(n)
	}
	for range 3 { // the loop sends all three on
		s.resend(0)
	}
	s.refused(set) // the first Inc ran; Set and
	s.refused(inc) // the second Inc are refused
	if got := s.queue(); !slices.Equal(got, []uint64{set, inc}) {
		t.Fatalf("queue = %v, want [%d %d]", got, set, inc)
	}
}

// TestRetryForgetsAResendWhoseSendFailed: the record of a resend whose
// send failed at once is dropped by the tell's number, also after a
// direct send cleared its place.
func TestRetryForgetsAResendWhoseSendFailed(t *testing.T) {
	s := newSeqRetry(t)
	it := mailq.Item{M: s.tell(0), Seq: 7}
	s.r.noteResent(it)
	s.r.buf.SentDirect(s.to, s.from)
	s.r.buf.ForgetResent(mailq.Key(s.to), it.Seq)
	if left := s.r.buf.ResentNotes(); left != 0 {
		t.Fatalf("%d records left after the failed resend was forgotten", left)
	}
}

// TestRetryQueueNoLinkKeepsPlace: actors' tells to a recipient whose
// owner's link is down never leave; they wait in its queue, in order, and
// a resend refused the same way keeps its place at the head (nothing
// sent, nothing counted resent) until the tell's wait ends.
func TestRetryQueueNoLinkKeepsPlace(t *testing.T) {
	r, clk := newBufRemote(t, func(actor.Ref) (string, uint64, bool, error) { return "b", 1, false, nil })
	r.links.Event(wire.LinkEvent{Peer: "b"})
	to := actor.Virtual("log", "x")
	for i := range 3 {
		m := ariel.Outbound{To: to, From: actor.Virtual("pump", "p"), Msg: rtSeq{Kind: "seq", DefaultDeadlineNs: uint64(i)}}
		if err := r.Forward(m); err != nil {
			t.Fatalf("tell %d: %v", i, err)
		}
	}
	for range 3 {
		clk.Advance(retryBackoffMax)
		r.flushBuffered()
	}
	head, ok := r.buf.Head(mailq.Key(to))
	if w, res := r.buf.Waiting(), r.buf.Stats().Resent; !ok || w != 3 || res != 0 {
		t.Fatalf("link down: %d waiting, %d resent; want 3 and 0", w, res)
	}
	if got := head.M.Msg.(rtSeq).DefaultDeadlineNs; got != 0 || head.Attempt != 3 {
		t.Fatalf("head is tell %d after %d attempts, want tell 0 after 3", got, head.Attempt)
	}
	clk.Advance(handoffBufferWait)
	r.flushBuffered()
	if w, g := r.buf.Waiting(), r.buf.Stats().GaveUp; w != 0 || g != 3 {
		t.Fatalf("after the wait: %d waiting, %d given up; want 0 and 3", w, g)
	}
}
