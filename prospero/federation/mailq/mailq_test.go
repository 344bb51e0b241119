package mailq_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero/federation/mailq"
)

// drain takes every message waiting for to, in queue order.
func drain(q *mailq.Queues, to actor.Ref) []any {
	var got []any
	for {
		it, ok := q.Head(mailq.Key(to))
		if !ok {
			return got
		}
		got = append(got, it.M.Msg)
		q.Remove(mailq.Key(to), it.Seq)
	}
}

// TestUnrunMailGoesAheadInMailboxOrder: fenced-off mail goes ahead of
// the mail queued for its recipient (sent after it), and mail fenced off
// later (it reached the mailbox after the first batch left it) goes
// behind the earlier batch, not ahead of it; a batch the shard's queues
// cannot hold is refused whole.
func TestUnrunMailGoesAheadInMailboxOrder(t *testing.T) {
	b := mailq.New(4, time.Minute)
	to := actor.Virtual("log", "x")
	item := func(n int) mailq.Item { return mailq.Item{M: ariel.Outbound{To: to, Msg: n}} }
	now := time.Now()
	if ok, err := b.Add(item(3), "s", now, false); !ok || err != nil {
		t.Fatalf("add = %v, %v", ok, err)
	}
	if !b.AddUnrun([]mailq.Item{item(1)}, "s", now) || !b.AddUnrun([]mailq.Item{item(2)}, "s", now) {
		t.Fatal("a batch the queue has room for was refused")
	}
	if b.AddUnrun([]mailq.Item{item(4), item(5)}, "s", now) {
		t.Fatal("a batch beyond the shard's bound was taken")
	}
	if got := fmt.Sprint(drain(b, to)); got != "[1 2 3]" {
		t.Fatalf("queue = %v, want [1 2 3]", got)
	}
	if b.Waiting() != 0 {
		t.Fatalf("%d counted after the queue emptied", b.Waiting())
	}
}

// TestBoundIsPerShard: one shard's queues are bounded together, other
// shards are not affected, a full shard refuses with actor.ErrRefused,
// and a message taken out and put back (Requeue) keeps its place even
// above the bound.
func TestBoundIsPerShard(t *testing.T) {
	b := mailq.New(2, time.Minute)
	now := time.Now()
	x, y, z := actor.Virtual("log", "x"), actor.Virtual("log", "y"), actor.Virtual("log", "z")
	add := func(to actor.Ref, shard string, n int) error {
		_, err := b.Add(mailq.Item{M: ariel.Outbound{To: to, Msg: n}}, shard, now, false)
		return err
	}
	if add(x, "s1", 1) != nil || add(y, "s1", 2) != nil {
		t.Fatal("refused below the bound")
	}
	if err := add(x, "s1", 3); !errors.Is(err, actor.ErrRefused) {
		t.Fatalf("third message of a shard bounded at 2: %v, want ErrRefused", err)
	}
	if err := add(z, "s2", 4); err != nil {
		t.Fatalf("another shard refused: %v", err)
	}
	// Once a recipient has a queue, later mail joins it (mustExist) under
	// that queue's shard; without a queue it is not taken.
	if ok, err := b.Add(mailq.Item{M: ariel.Outbound{To: z, Msg: 5}}, "", now, true); !ok || err != nil {
		t.Fatalf("mail behind z's queue: %v %v", ok, err)
	}
	if ok, _ := b.Add(mailq.Item{M: ariel.Outbound{To: actor.Virtual("log", "w"), Msg: 6}}, "", now, true); ok {
		t.Fatal("mail for a recipient with no queue was taken with mustExist")
	}
	head, _ := b.Head(mailq.Key(x))
	b.Remove(mailq.Key(x), head.Seq)
	if add(x, "s1", 7) != nil {
		t.Fatal("refused after a message of the shard left")
	}
	b.Requeue(head, "s1") // refused again at once: back at its place
	if got := fmt.Sprint(drain(b, x)); got != "[1 7]" {
		t.Fatalf("x's queue %s, want [1 7]: the requeued message first", got)
	}
	if st := b.Stats(); st.Parked != 5 {
		t.Fatalf("parked %d, want 5 (neither the refused message nor the requeue waits anew)", st.Parked)
	}
}

// TestExpireTellsAfterTheWaitAsksAtTheirDeadline: Expire takes out the
// tells that waited the wait since they began to and the asks past their
// deadline, and leaves the rest in order; Expiry says when each goes.
func TestExpireTellsAfterTheWaitAsksAtTheirDeadline(t *testing.T) {
	wait := 10 * time.Second
	b := mailq.New(10, wait)
	to := actor.Virtual("log", "x")
	t0 := time.Unix(1000, 0)
	tell := mailq.Item{M: ariel.Outbound{To: to, Msg: "tell"}}
	older := mailq.Item{M: ariel.Outbound{To: to, Msg: "older"}, Since: t0.Add(-5 * time.Second)}
	ask := mailq.Item{M: ariel.Outbound{To: to, Msg: "ask", AskID: 1, Deadline: t0.Add(20 * time.Second)}}
	for _, it := range []mailq.Item{tell, older, ask} {
		if _, err := b.Add(it, "s", t0, false); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := b.Head(mailq.Key(to))
	if at := b.Expiry(h); !at.Equal(t0.Add(wait)) {
		t.Fatalf("a tell waiting from now expires at %s, want %s", at, t0.Add(wait))
	}
	if gone := b.Expire(mailq.Key(to), t0.Add(wait-time.Second)); len(gone) != 1 || gone[0].M.Msg != "older" {
		t.Fatalf("expired %+v, want only the tell that began to wait earlier", gone)
	}
	if gone := b.Expire(mailq.Key(to), t0.Add(wait)); len(gone) != 1 || gone[0].M.Msg != "tell" {
		t.Fatalf("expired %+v at the wait's end, want the tell", gone)
	}
	if gone := b.Expire(mailq.Key(to), t0.Add(20*time.Second)); len(gone) != 1 || gone[0].M.Msg != "ask" {
		t.Fatalf("expired %+v at the ask's deadline, want the ask", gone)
	}
	if b.Waiting() != 0 || len(b.Keys()) != 0 {
		t.Fatalf("%d waiting, %d queues after everything expired", b.Waiting(), len(b.Keys()))
	}
}

// TestResentTellKeepsItsStartAndPlace: the refusal of a tell noted as
// sent again gets the tell's start and place back (the newest equal
// tell's, once), a direct send of an equal tell takes the place away, and
// a note is swept two waits after its start.
func TestResentTellKeepsItsStartAndPlace(t *testing.T) {
	wait := 10 * time.Second
	b := mailq.New(10, wait)
	to, from := actor.Virtual("log", "x"), actor.Virtual("pump", "p")
	t0 := time.Unix(1000, 0)
	same := func(a, b any) bool { return a == b }
	m := ariel.Outbound{To: to, From: from, Msg: "m"}
	it := mailq.Item{M: m, Since: t0, Seq: 5}
	b.NoteResent(mailq.Key(to), it, "m")
	since, p := b.PlaceOf(m, t0.Add(time.Second), same)
	if !since.Equal(t0) || p != it.Place() {
		t.Fatalf("refusal of a resent tell: since %s place %+v, want %s %+v", since, p, t0, it.Place())
	}
	if since, p := b.PlaceOf(m, t0.Add(2*time.Second), same); !since.Equal(t0.Add(2*time.Second)) || p != (mailq.Place{}) {
		t.Fatalf("a second refusal reused the note: %s %+v", since, p)
	}
	b.NoteResent(mailq.Key(to), it, "m")
	b.SentDirect(to, from)
	if since, p := b.PlaceOf(m, t0.Add(3*time.Second), same); !since.Equal(t0) || p != (mailq.Place{}) {
		t.Fatalf("after a direct send: %s %+v, want the start kept and no place", since, p)
	}
	b.NoteResent(mailq.Key(to), it, "m")
	if next := b.Sweep(t0.Add(2*wait - time.Nanosecond)); b.ResentNotes() != 1 || !next.Equal(t0.Add(2*wait)) {
		t.Fatalf("swept early: %d notes, next %s", b.ResentNotes(), next)
	}
	if b.Sweep(t0.Add(2 * wait)); b.ResentNotes() != 0 {
		t.Fatalf("%d notes left two waits after the start", b.ResentNotes())
	}
}
