//go:build !tempest_notrace

package ariel_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// turnRec is a TurnTracer that records each traced turn: the trace it
// was handed, the recipient and the times.
// The trace of the turn itself is "turn of <trace>".
type turnRec struct {
	mu    sync.Mutex
	turns []recTurn
}

type recTurn struct {
	trace any
	to    actor.Ref
	tt    ariel.TurnTimes
}

func (r *turnRec) BeginTurn(trace any, tt ariel.TurnTimes) any {
	r.mu.Lock()
	r.turns = append(r.turns, recTurn{trace: trace, to: tt.To, tt: tt})
	r.mu.Unlock()
	return "turn of " + trace.(string)
}

func (r *turnRec) EndTurn(any, time.Time) {}

// hopper tells its message's next hop, once, and records who sent it.
type hopper struct {
	next actor.Ref
	got  chan actor.Ref
}

func (a *hopper) Receive(ctx actor.Context, msg any) {
	if _, ok := msg.(string); !ok {
		return
	}
	a.got <- ctx.Sender()
	if !a.next.IsZero() {
		_ = ctx.Tell(a.next, "hop")
	}
}

// A tell sent with a trace (TellTraced, or DeliverTraced with no reply,
// as from another node) reaches the tracer with that trace and the
// scheduler's timestamps in order; a tell the traced turn makes carries
// the turn's trace; a plain tell, and a tell from an untraced turn, reach
// the tracer not at all.
func TestTracedTells(t *testing.T) {
	rec := &turnRec{}
	s := newSched(t, ariel.Config{Workers: 2, Tracer: rec})
	got := make(chan actor.Ref, 16)
	b, err := s.Spawn(&hopper{got: got})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Spawn(&hopper{next: b, got: got})
	if err != nil {
		t.Fatal(err)
	}
	recv := func(n int) {
		t.Helper()
		for range n {
			<-got
		}
		waitIdle(t, s)
	}
	if err := s.TellTraced(a, "go", "T1"); err != nil {
		t.Fatal(err)
	}
	recv(2)
	if err := s.Tell(a, "go"); err != nil {
		t.Fatal(err)
	}
	recv(2)
	remote := actor.Spawned("elsewhere", 7, 1)
	if err := s.DeliverTraced(b, remote, "go", time.Time{}, nil, "T2", nil); err != nil {
		t.Fatal(err)
	}
	if from := <-got; from != remote {
		t.Fatalf("the traced tell's sender is %v, want %v", from, remote)
	}
	waitIdle(t, s)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []struct {
		trace string
		to    actor.Ref
	}{{"T1", a}, {"turn of T1", b}, {"T2", b}}
	if len(rec.turns) != len(want) {
		t.Fatalf("%d traced turns, want %d: %+v", len(rec.turns), len(want), rec.turns)
	}
	for i, w := range want {
		g := rec.turns[i]
		if g.trace != w.trace || g.to != w.to {
			t.Fatalf("traced turn %d: %v to %v, want %v to %v", i, g.trace, g.to, w.trace, w.to)
		}
		tt := g.tt
		if tt.Queued.IsZero() || tt.PickedUp.Before(tt.Queued) || tt.Entered.Before(tt.PickedUp) || !tt.Finished.IsZero() {
			t.Fatalf("traced turn %d: times out of order: %+v", i, tt)
		}
	}
}

// An untraced tell on a scheduler that traces allocates no more than on
// one that does not: nothing of the tracing path is taken for it.
func TestUntracedTellAllocatesNothingMore(t *testing.T) {
	allocs := func(tracer ariel.TurnTracer) float64 {
		s := newSched(t, ariel.Config{Workers: 1, Tracer: tracer})
		ref, err := s.Spawn(echo{})
		if err != nil {
			t.Fatal(err)
		}
		n := testing.AllocsPerRun(500, func() {
			if err := s.Tell(ref, 1); err != nil {
				t.Fatal(err)
			}
		})
		waitIdle(t, s)
		return n
	}
	off, on := allocs(nil), allocs(&turnRec{})
	if on > off {
		t.Fatalf("an untraced tell allocates %.2f with a tracer, %.2f without", on, off)
	}
}
