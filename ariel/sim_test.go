package ariel_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// gossip is a small actor system whose turn order depends on scheduling:
// a root spawns workers, fans a token out, the workers relay among each
// other and ask each other, and everything is traced.
type gossip struct {
	id    int
	peers *[]actor.Ref
	trace func(string)
}

type hop struct{ ttl, origin int }

func (g *gossip) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case hop:
		g.trace(fmt.Sprintf("%d<-hop(%d,%d)", g.id, m.ttl, m.origin))
		if m.ttl > 0 {
			peers := *g.peers
			_ = ctx.Tell(peers[(g.id*7+m.ttl)%len(peers)], hop{m.ttl - 1, g.id})
			if m.ttl%3 == 0 {
				ctx.Ask(peers[(g.id+1)%len(peers)], "id?", func(ctx actor.Context, reply any, err error) {
					g.trace(fmt.Sprintf("%d<-reply(%v,%v)", g.id, reply, err))
				})
			}
		}
	case string:
		ctx.Reply(g.id)
	}
}

func runGossip(t *testing.T, seed uint64) []string {
	t.Helper()
	s := newSched(t, ariel.Config{Simulated: true, Seed: seed})
	var mu sync.Mutex
	var trace []string
	rec := func(x string) { mu.Lock(); trace = append(trace, x); mu.Unlock() }
	var peers []actor.Ref
	root, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg != "start" {
			return
		}
		for i := 0; i < 8; i++ {
			r, _ := ctx.Spawn(&gossip{id: i, peers: &peers, trace: rec})
			peers = append(peers, r)
		}
		for i, p := range peers {
			_ = ctx.Tell(p, hop{ttl: 6 + i%3, origin: -1})
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(root, "start"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(trace)
}

func TestSimulatedReplayIsDeterministic(t *testing.T) {
	a, b := runGossip(t, 42), runGossip(t, 42)
	if len(a) < 50 {
		t.Fatalf("trace too short to mean anything: %d turns", len(a))
	}
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different traces:\n%q\n%q", a, b)
	}
	if c := runGossip(t, 43); slices.Equal(a, c) {
		t.Fatal("different seeds gave the same trace: the seed does not drive the choice")
	}
}

func TestSimulatedTimersUseVirtualTime(t *testing.T) {
	clock := ariel.NewSimClock(time.Unix(1000, 0))
	s := newSched(t, ariel.Config{Simulated: true, Seed: 1, Clock: clock})
	type event struct {
		what string
		at   time.Time
	}
	events := make(chan event, 16)
	silent, _ := s.Spawn(mute())
	ref, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch msg.(type) {
		case actor.Started:
			ctx.After(3*time.Second, "tick")
			ctx.SetReceiveTimeout(10 * time.Second)
			ctx.Ask(silent, "hello?", func(ctx actor.Context, _ any, err error) {
				if errors.Is(err, actor.ErrDeadlineExceeded) {
					events <- event{"ask-deadline", ctx.Now()}
				}
			}, actor.WithTimeout(time.Second))
		case string:
			events <- event{"tick", ctx.Now()}
		case actor.ReceiveTimeout:
			events <- event{"timeout", ctx.Now()}
			ctx.SetReceiveTimeout(0)
		}
	}))
	_ = ref
	waitIdle(t, s)
	start := time.Unix(1000, 0)
	want := []event{{"ask-deadline", start.Add(time.Second)}, {"tick", start.Add(3 * time.Second)},
		{"timeout", start.Add(13 * time.Second)}}
	for _, w := range want {
		got := <-events
		if got.what != w.what || !got.at.Equal(w.at) {
			t.Fatalf("got %s at %v, want %s at %v", got.what, got.at.Sub(start), w.what, w.at.Sub(start))
		}
	}
}
