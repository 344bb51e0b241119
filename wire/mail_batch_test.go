package wire

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// recLocal is a LocalDelivery that resolves inboxes admitting batches: it
// records every admitted message per recipient, in admission order, and
// gives each recipient room for a bounded number of messages.
type recLocal struct {
	mu      sync.Mutex
	got     map[actor.Ref][]string // "from:seq" per recipient
	room    map[actor.Ref]int      // messages still admitted; absent: unbounded
	batches int                    // TellBatch calls
	noBatch bool                   // inboxes without TellBatch
}

func newRecLocal() *recLocal {
	return &recLocal{got: map[actor.Ref][]string{}, room: map[actor.Ref]int{}}
}

func (l *recLocal) admit(to, from actor.Ref, msg any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.room[to]; ok {
		if r == 0 {
			return actor.ErrRefused
		}
		l.room[to] = r - 1
	}
	seq := uint64(0)
	if p, ok := msg.(testPing); ok {
		seq = p.DefaultDeadlineNs
	}
	l.got[to] = append(l.got[to], fmt.Sprintf("%v:%d", from, seq))
	return nil
}

func (l *recLocal) Deliver(to, from actor.Ref, msg any, _ time.Time, reply func(any, error)) error {
	if err := l.admit(to, from, msg); err != nil {
		return err
	}
	if reply != nil {
		reply(msg, nil)
	}
	return nil
}

func (l *recLocal) Inbox(to actor.Ref) (Inbox, error) {
	if l.noBatch {
		return plainInbox{l, to}, nil
	}
	return &recInbox{l, to}, nil
}

type plainInbox struct {
	l  *recLocal
	to actor.Ref
}

func (in plainInbox) Tell(from actor.Ref, msg any) error { return in.l.admit(in.to, from, msg) }
func (in plainInbox) Live() bool                         { return true }

type recInbox struct {
	l  *recLocal
	to actor.Ref
}

func (in *recInbox) Tell(from actor.Ref, msg any) error { return in.l.admit(in.to, from, msg) }
func (in *recInbox) Live() bool                         { return true }
func (in *recInbox) TellBatch(from actor.Ref, msgs []any) (int, error) {
	in.l.mu.Lock()
	in.l.batches++
	in.l.mu.Unlock()
	for i, m := range msgs {
		if err := in.l.admit(in.to, from, m); err != nil {
			return i, err
		}
	}
	return len(msgs), nil
}

func (l *recLocal) snapshot() map[actor.Ref][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[actor.Ref][]string, len(l.got))
	for k, v := range l.got {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func recMailer(t testing.TB, l *recLocal) *Mailer {
	t.Helper()
	m, err := NewMailer(MailConfig{
		Registry: testRegistry(t), Local: l,
		Complete:    func(uint64, any, error) {},
		Undelivered: func(actor.Ref, actor.Ref, any, error) {},
		Control:     func(string, []byte) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var (
	batchRcpts   = []actor.Ref{actor.Virtual("user", "1"), actor.Virtual("user", "2"), actor.Spawned("a", 9, 1)}
	batchSenders = []actor.Ref{{}, actor.Spawned("a", 7, 3), actor.Virtual("user", "3")}
)

// batchFrame builds frame number seq from the op byte c: mostly tells
// to one of three recipients from one of three senders, and asks,
// replies, refusals, a body of an unknown tag and garbage.
func batchFrame(t testing.TB, c byte, seq uint64) []byte {
	t.Helper()
	to := ActorIDOf(batchRcpts[int(c)%len(batchRcpts)])
	body, _ := (&testPing{Kind: "k", DefaultDeadlineNs: seq}).AppendBARE(nil)
	var env Envelope
	switch (c / 9) % 8 {
	case 0, 1, 2, 3:
		tl := &Tell{To: to, Tag: 100, Body: body}
		if s := batchSenders[int(c/3)%len(batchSenders)]; !s.IsZero() {
			f := ActorIDOf(s)
			tl.From = &f
		}
		env = tl
	case 4:
		env = &Ask{Id: seq + 1, To: to, DeadlineNs: 1e9, Tag: 100, Body: body}
	case 5:
		env = &Reply{Id: seq + 1, Tag: TagError, Body: AppendError(nil, actor.ErrRefused)}
	case 6:
		env = &Tell{To: to, Tag: 77, Body: body} // unknown tag: refused
	default:
		if c%2 == 0 {
			return []byte{byte(EnvelopeTagTell), 1, 'k'} // truncated: malformed
		}
		env = &Refused{To: to, Tag: 100, Body: body}
	}
	frame, err := MarshalEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// runBoth hands frames to one Mailer frame by frame (Handle) and to
// another in runs of the given lengths (HandleBatch), as a lane reader
// would (stopping at the first error), and checks that both delivered the
// same messages to each recipient in the same order, refused as many and
// failed on the same frame.
func runBoth(t *testing.T, frames [][]byte, cuts []int, room int, noBatch bool) (batched *recLocal) {
	t.Helper()
	la, lb := newRecLocal(), newRecLocal()
	lb.noBatch = noBatch
	if room >= 0 {
		for _, r := range batchRcpts {
			la.room[r], lb.room[r] = room, room
		}
	}
	ma, mb := recMailer(t, la), recMailer(t, lb)
	failA := -1
	for i, f := range frames {
		if err := ma.Handle("peer", 1, f); err != nil {
			failA = i
			break
		}
	}
	failB := -1
	for i, ci := 0, 0; i < len(frames); ci++ {
		n := 1
		if ci < len(cuts) {
			n = max(1, cuts[ci])
		}
		n = min(n, len(frames)-i, MaxBatchFrames)
		run := frames[i : i+n]
		if err := mb.HandleBatch("peer", 1, run); err != nil {
			// The frames before the bad one were handled; find it as
			// Handle would have reported it.
			failB = i
			for j, f := range run {
				if checkMalformed(t, f) {
					failB = i + j
					break
				}
			}
			break
		}
		i += n
	}
	if failA != failB {
		t.Fatalf("per-frame failed at frame %d, runs at %d", failA, failB)
	}
	ga, gb := la.snapshot(), lb.snapshot()
	if !reflect.DeepEqual(ga, gb) {
		t.Fatalf("deliveries differ:\nper frame %v\nruns      %v", ga, gb)
	}
	sa, sb := ma.Stats(), mb.Stats()
	if !reflect.DeepEqual(sa, sb) {
		t.Fatalf("counters differ:\nper frame %+v\nruns      %+v", sa, sb)
	}
	return lb
}

// checkMalformed reports whether Handle rejects frame on a fresh Mailer.
func checkMalformed(t *testing.T, frame []byte) bool {
	return recMailer(t, newRecLocal()).Handle("peer", 1, frame) != nil
}

func TestHandleBatchGroupsByRecipientInOrder(t *testing.T) {
	// Tells to two recipients from two senders interleaved, an ask in the
	// middle, then more tells: every recipient sees its mail in arrival
	// order, and the tells are admitted in a few batches, not one by one.
	var frames [][]byte
	ops := []byte{0, 1, 0, 1, 3, 4, 3, 4, 0, 1, 36, 0, 1, 0, 3, 0}
	for i, c := range ops {
		frames = append(frames, batchFrame(t, c, uint64(i)))
	}
	l := runBoth(t, frames, []int{len(frames)}, -1, false)
	if l.batches == 0 || l.batches >= len(frames)-1 {
		t.Fatalf("%d TellBatch calls for %d frames", l.batches, len(frames))
	}
	got := l.snapshot()[batchRcpts[0]]
	if len(got) < 6 {
		t.Fatalf("recipient 0 got %v", got)
	}
}

func TestHandleBatchRefusesWhatDoesNotFit(t *testing.T) {
	// Room for three messages per recipient: the rest of a run's tells are
	// refused, one refusal each, and the admitted ones are the first.
	var frames [][]byte
	for i := range 10 {
		frames = append(frames, batchFrame(t, 3, uint64(i))) // recipient 0, one sender
	}
	l := runBoth(t, frames, []int{10}, 3, false)
	want := []string{}
	for i := range 3 {
		want = append(want, fmt.Sprintf("%v:%d", batchSenders[1], i))
	}
	if got := l.snapshot()[batchRcpts[0]]; !reflect.DeepEqual(got, want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
}

func TestHandleBatchWithoutBatchInbox(t *testing.T) {
	var frames [][]byte
	for i, c := range []byte{0, 1, 2, 0, 36, 1, 0} {
		frames = append(frames, batchFrame(t, c, uint64(i)))
	}
	if l := runBoth(t, frames, []int{7}, -1, true); l.batches != 0 {
		t.Fatalf("%d batches through inboxes without TellBatch", l.batches)
	}
}

// FuzzHandleBatch checks that a run handed to HandleBatch has the effect
// of its frames handed to Handle one by one: the same messages admitted to
// each recipient in the same order, the same refusals and counters, the
// same frame rejected.
func FuzzHandleBatch(f *testing.F) {
	f.Add([]byte{0, 1, 0, 3, 4, 36, 0}, []byte{7}, int8(-1))
	f.Add([]byte{3, 3, 3, 3, 3, 3}, []byte{2, 4}, int8(2))
	f.Add([]byte{0, 54, 0, 63, 0, 45, 1}, []byte{3, 3, 3}, int8(1))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, []byte{12}, int8(5))
	f.Fuzz(func(t *testing.T, ops, cuts []byte, room int8) {
		if len(ops) > 300 {
			ops = ops[:300]
		}
		frames := make([][]byte, len(ops))
		for i, c := range ops {
			frames[i] = batchFrame(t, c, uint64(i))
		}
		ci := make([]int, len(cuts))
		for i, c := range cuts {
			ci[i] = int(c)
		}
		runBoth(t, frames, ci, int(room), len(cuts) > 0 && cuts[0]%5 == 0)
	})
}

// TestFrameReaderRuns reads frames in runs, as the lane reader does, and
// checks every frame of a run is still intact once the run is complete.
func TestFrameReaderRuns(t *testing.T) {
	var stream []byte
	var want [][]byte
	for i := range 400 {
		n := (i * 37) % 90 // some frames span the 64-byte buffer's end, some exceed it
		p := bytes.Repeat([]byte{byte(i)}, n)
		want = append(want, p)
		stream = appendFrame(stream, p)
	}
	for _, chunk := range []int{1, 7, 64, 1 << 20} {
		fr := newFrameReader(&chunkReader{b: stream, n: chunk}, 64, 1<<10)
		var got [][]byte
		runs := 0
		for {
			f, err := fr.next()
			if err != nil {
				break
			}
			run := [][]byte{f}
			for fr.ready() {
				if f, err = fr.next(); err != nil {
					t.Fatal(err)
				}
				run = append(run, f)
			}
			for _, f := range run {
				got = append(got, bytes.Clone(f))
			}
			runs++
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("chunk %d: frames differ after reading in runs", chunk)
		}
		if chunk > 64 && runs >= len(want) {
			t.Fatalf("chunk %d: %d runs for %d frames: ready never held", chunk, runs, len(want))
		}
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[k:]
	return k, nil
}
