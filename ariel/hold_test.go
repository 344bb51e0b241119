package ariel_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// record is a thread-safe list of what actors saw.
type record struct {
	mu  sync.Mutex
	got []string
}

func (r *record) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *record) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// writer changes its state on "w" and only reads it on "r"; each turn
// tells the sink, tells a remote actor and replies with the value.
type writer struct {
	n     int
	wrote bool
	sink  actor.Ref
}

func (w *writer) Receive(ctx actor.Context, msg any) {
	switch msg {
	case "w":
		w.n++
		w.wrote = true
	case "r":
		w.wrote = false
	default:
		return
	}
	_ = ctx.Tell(w.sink, fmt.Sprintf("%s%d", msg, w.n))
	_ = ctx.Tell(actor.Virtual("remote", "x"), fmt.Sprintf("%s%d", msg, w.n))
	ctx.Reply(w.n)
}

// remoteRouter sends the "remote" kind to another node, which records
// what was forwarded.
type remoteRouter struct {
	local ariel.Router
	fwd   *record
}

func (r remoteRouter) Resolve(to actor.Ref) (*ariel.Cell, error) {
	if to.IsVirtual() && to.Kind() == "remote" {
		return nil, nil
	}
	return r.local.Resolve(to)
}

func (r remoteRouter) Forward(m ariel.Outbound) error {
	r.fwd.add(m.Msg.(string))
	return nil
}

// A turn whose hook holds its outputs sends nothing (reply, local tell,
// remote tell) until release; the worker goes on meanwhile, a later turn
// that holds nothing queues its outputs behind, and release delivers both
// in turn order. A failed release fails the held turn's outputs and those
// of the turns queued behind it.
func TestHeldOutputsLeaveAfterRelease(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	var sink, fwd, replies record
	sinkRef, err := s.Spawn(actor.Func(func(_ actor.Context, msg any) {
		if m, ok := msg.(string); ok {
			sink.add(m)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	s.SetRouter(remoteRouter{local: s.LocalRouter(), fwd: &fwd})
	if err := s.Register("d", func(string) actor.Actor { return &writer{sink: sinkRef} }, 0); err != nil {
		t.Fatal(err)
	}
	rels := make(chan func(error), 4)
	var hooked record
	if err := s.SetAfterTurn("d", func(_ actor.Ref, _ uint64, a actor.Actor, _ bool, h ariel.Hold) {
		w := a.(*writer)
		hooked.add(fmt.Sprint(w.n))
		if w.wrote {
			rels <- h.Wait()
		}
	}); err != nil {
		t.Fatal(err)
	}
	d := actor.Virtual("d", "1")
	asker, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg != "go" {
			return
		}
		for _, m := range []string{"w", "r"} {
			ctx.Ask(d, m, func(_ actor.Context, v any, err error) {
				if err != nil {
					replies.add(m + ":" + err.Error())
					return
				}
				replies.add(fmt.Sprintf("%s:%v", m, v))
			})
		}
	}))
	if err != nil {
		t.Fatal(err)
	}

	if err := s.Tell(asker, "go"); err != nil {
		t.Fatal(err)
	}
	release := <-rels
	waitIdle(t, s)
	if got := hooked.take(); !slices.Equal(got, []string{"1", "1"}) {
		t.Fatalf("hooks ran after %v, want both turns to have run while the first is held", got)
	}
	if got, fw, rp := sink.take(), fwd.take(), replies.take(); len(got)+len(fw)+len(rp) != 0 {
		t.Fatalf("before release: sink %v, forwarded %v, replies %v; want nothing", got, fw, rp)
	}
	release(nil)
	release(errors.New("ignored: second call"))
	waitIdle(t, s)
	if got := sink.take(); !slices.Equal(got, []string{"w1", "r1"}) {
		t.Fatalf("sink after release = %v, want [w1 r1]", got)
	}
	if got := fwd.take(); !slices.Equal(got, []string{"w1", "r1"}) {
		t.Fatalf("forwarded after release = %v, want [w1 r1]", got)
	}
	if got := replies.take(); !slices.Equal(got, []string{"w:1", "r:1"}) {
		t.Fatalf("replies after release = %v, want [w:1 r:1]", got)
	}

	// A failed commit: neither the held turn's outputs nor those of the
	// read queued behind it leave; the asks fail with the error.
	if err := s.Tell(asker, "go"); err != nil {
		t.Fatal(err)
	}
	release = <-rels
	waitIdle(t, s)
	hooked.take()
	boom := errors.New("boom: not committed")
	release(boom)
	waitIdle(t, s)
	if got, fw := sink.take(), fwd.take(); len(got)+len(fw) != 0 {
		t.Fatalf("after a failed release: sink %v, forwarded %v; want nothing", got, fw)
	}
	want := []string{"w:" + boom.Error(), "r:" + boom.Error()}
	if got := replies.take(); !slices.Equal(got, want) {
		t.Fatalf("replies after a failed release = %v, want %v", got, want)
	}

	// Nothing held any more: outputs leave at the end of the turn.
	if got, err := s.Ask(askCtx(t), d, "r"); err != nil || got != 2 {
		t.Fatalf("Ask r = %v, %v, want 2", got, err)
	}
	waitIdle(t, s)
	if got := sink.take(); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("sink = %v, want [r2]", got)
	}
}
