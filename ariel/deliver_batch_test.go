package ariel_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// inboxRec keeps what its actors received, in order, per key.
type inboxRec struct {
	mu   sync.Mutex
	got  map[string][]any
	from map[string][]actor.Ref
	gate chan struct{} // when set, the message "block" waits on it
	in   chan struct{} // signalled when "block" is being handled
}

func newInboxRec() *inboxRec {
	return &inboxRec{got: map[string][]any{}, from: map[string][]actor.Ref{}}
}

func (r *inboxRec) factory(key string) actor.Actor {
	return actor.Func(func(ctx actor.Context, msg any) {
		switch msg.(type) {
		case actor.Started, actor.Stopping:
			return
		}
		if msg == "block" && r.gate != nil {
			r.in <- struct{}{}
			<-r.gate
		}
		r.mu.Lock()
		r.got[key] = append(r.got[key], msg)
		r.from[key] = append(r.from[key], ctx.Sender())
		r.mu.Unlock()
	})
}

func (r *inboxRec) received(key string) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.got[key]...)
}

func TestInboxTellKeepsOrderAndSender(t *testing.T) {
	s := newSched(t, ariel.Config{Node: "n1"})
	rec := newInboxRec()
	if err := s.Register("rec", rec.factory, 0); err != nil {
		t.Fatal(err)
	}
	in, err := s.Inbox(actor.Virtual("rec", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !in.Live() {
		t.Fatal("a fresh inbox is not live")
	}
	sender := actor.Virtual("far", "x")
	for i := range 100 {
		if err := in.Tell(sender, i); err != nil {
			t.Fatalf("Tell %d: %v", i, err)
		}
	}
	msgs := make([]any, 100)
	for i := range msgs {
		msgs[i] = 100 + i
	}
	if n, err := in.TellBatch(sender, msgs); n != len(msgs) || err != nil {
		t.Fatalf("TellBatch = %d, %v", n, err)
	}
	waitIdle(t, s)
	got := rec.received("a")
	if len(got) != 200 {
		t.Fatalf("received %d messages, want 200", len(got))
	}
	for i, m := range got {
		if m != i {
			t.Fatalf("message %d is %v: order broken", i, m)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, f := range rec.from["a"] {
		if f != sender {
			t.Fatalf("message %d has sender %v, want %v", i, f, sender)
		}
	}
}

func TestInboxBatchAdmitsPrefixOfFullMailbox(t *testing.T) {
	s := newSched(t, ariel.Config{Node: "n1"})
	rec := newInboxRec()
	rec.gate, rec.in = make(chan struct{}), make(chan struct{})
	if err := s.Register("rec", rec.factory, 4); err != nil {
		t.Fatal(err)
	}
	in, err := s.Inbox(actor.Virtual("rec", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Tell(actor.Ref{}, "block"); err != nil {
		t.Fatal(err)
	}
	<-rec.in // the actor holds "block"; its mailbox is empty
	before := s.Stats().Refused
	msgs := make([]any, 10)
	for i := range msgs {
		msgs[i] = i
	}
	n, err := in.TellBatch(actor.Ref{}, msgs)
	if n != 4 || !errors.Is(err, actor.ErrRefused) {
		t.Fatalf("TellBatch into 4 free slots = %d, %v; want 4, ErrRefused", n, err)
	}
	if got := s.Stats().Refused - before; got != 6 {
		t.Fatalf("refusals counted %d, want 6", got)
	}
	if err := in.Tell(actor.Ref{}, 99); !errors.Is(err, actor.ErrRefused) {
		t.Fatalf("Tell into a full mailbox = %v, want ErrRefused", err)
	}
	close(rec.gate)
	waitIdle(t, s)
	want := []any{"block", 0, 1, 2, 3}
	got := rec.received("a")
	if len(got) != len(want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("received %v, want %v", got, want)
		}
	}
}

func TestInboxAfterStop(t *testing.T) {
	s := newSched(t, ariel.Config{Node: "n1"})
	rec := newInboxRec()
	if err := s.Register("rec", rec.factory, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("rec", "v")
	in, err := s.Inbox(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Tell(actor.Ref{}, 1); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	s.Stop(ref)
	waitIdle(t, s)
	if in.Live() {
		t.Fatal("inbox of a stopped actor is live")
	}
	// A virtual actor lives on: the stale inbox still delivers, to a new
	// activation.
	if err := in.Tell(actor.Ref{}, 2); err != nil {
		t.Fatalf("Tell through a stale inbox: %v", err)
	}
	if n, err := in.TellBatch(actor.Ref{}, []any{3, 4}); n != 2 || err != nil {
		t.Fatalf("TellBatch through a stale inbox = %d, %v", n, err)
	}
	waitIdle(t, s)
	if got := rec.received("v"); len(got) != 4 || got[1] != 2 || got[3] != 4 {
		t.Fatalf("received %v, want [1 2 3 4]", got)
	}
	fresh, err := s.Inbox(ref)
	if err != nil || !fresh.Live() {
		t.Fatalf("fresh inbox: %v, live %v", err, err == nil && fresh.Live())
	}

	// A spawned actor does not: its stale inbox refuses as Deliver does.
	kid, err := s.Spawn(rec.factory("kid"))
	if err != nil {
		t.Fatal(err)
	}
	kin, err := s.Inbox(kid)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop(kid)
	waitIdle(t, s)
	if err := kin.Tell(actor.Ref{}, 1); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("Tell to a stopped spawned actor = %v, want ErrActorTerminated", err)
	}
	if _, err := s.Inbox(actor.Virtual("nokind", "x")); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("Inbox of an unknown kind = %v", err)
	}
}
