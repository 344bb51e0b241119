package membership_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/membership"
)

func member(name, addr string, boot uint64) membership.Member {
	return membership.Member{Name: name, Status: membership.StatusAlive,
		Meta: membership.Meta{QUICAddr: addr, BootID: boot}}
}

func names(ms []membership.Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// TestProverDecisions drives the prover's decision core by hand: whom it
// tries, when it tries again, and what a new address, a new process or
// a departure takes back.
func TestProverDecisions(t *testing.T) {
	clk := ariel.NewSimClock(time.Unix(1000, 0))
	changed := 0
	p := membership.NewProver(membership.ProverConfig{Self: "a", Connector: nil, Clock: clk,
		Changed: func() { changed++ }})
	a, b, c := member("a", "a:1", 1), member("b", "b:1", 1), member("c", "c:1", 1)
	if !p.Proven(a) || p.Proven(b) {
		t.Fatal("self must be proven, others not before a link")
	}
	due := p.Due([]membership.Member{a, b, c})
	if got := names(due); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("due %v, want b and c (never self)", got)
	}
	if again := p.Due([]membership.Member{a, b, c}); len(again) != 0 {
		t.Fatalf("attempts running were returned again: %v", names(again))
	}
	p.Done(b, nil)
	p.Done(c, errors.New("bad certificate"))
	if !p.Proven(b) || p.Proven(c) || changed != 1 || p.Failed() != 1 {
		t.Fatalf("after the outcomes: b %v c %v changed %d failed %d", p.Proven(b), p.Proven(c), changed, p.Failed())
	}
	// c backs off ProveRetryMin, then doubles.
	if d := p.Due([]membership.Member{a, b, c}); len(d) != 0 {
		t.Fatalf("tried again at once: %v", names(d))
	}
	clk.Advance(membership.ProveRetryMin)
	if d := names(p.Due([]membership.Member{a, b, c})); !slices.Equal(d, []string{"c"}) {
		t.Fatalf("due %v after the back-off, want c", d)
	}
	p.Done(c, errors.New("bad certificate"))
	clk.Advance(membership.ProveRetryMin)
	if d := p.Due([]membership.Member{a, b, c}); len(d) != 0 {
		t.Fatalf("second back-off did not double: %v due", names(d))
	}
	clk.Advance(membership.ProveRetryMin)
	if d := names(p.Due([]membership.Member{a, b, c})); !slices.Equal(d, []string{"c"}) {
		t.Fatalf("due %v after the doubled back-off, want c", d)
	}
	p.Done(c, errors.New("still bad"))
	// A new address for b, or a new process, is not what was proven.
	moved := member("b", "b:2", 1)
	if p.Proven(moved) {
		t.Fatal("a new address counted as proven")
	}
	if d := names(p.Due([]membership.Member{a, moved, c})); !slices.Equal(d, []string{"b"}) || changed != 2 {
		t.Fatalf("due %v changed %d after b moved, want b and a change", d, changed)
	}
	p.Done(moved, nil)
	restarted := member("b", "b:2", 2)
	if p.Proven(restarted) {
		t.Fatal("a new process counted as proven")
	}
	// A facts change while c is failing starts its back-off afresh.
	cNew := member("c", "c:9", 1)
	if d := names(p.Due([]membership.Member{a, restarted, cNew})); !slices.Equal(d, []string{"b", "c"}) {
		t.Fatalf("due %v, want b (restarted) and c (new address, no back-off)", d)
	}
	p.Done(restarted, nil)
	p.Done(cNew, nil)
	// A member that leaves loses its proof; one that comes back proves
	// itself again.
	gone := restarted
	gone.Status = membership.StatusLeft
	before := changed
	p.Due([]membership.Member{a, gone, cNew})
	if p.Proven(restarted) || changed != before+1 {
		t.Fatalf("departed b still proven (%v) or no change reported", p.Proven(restarted))
	}
	if d := names(p.Due([]membership.Member{a, restarted, cNew})); !slices.Equal(d, []string{"b"}) {
		t.Fatalf("due %v when b came back, want b", d)
	}
}

// connectFunc adapts a function to membership.Connector.
type connectFunc func(ctx context.Context, peer string) error

func (f connectFunc) Connect(ctx context.Context, peer string) error { return f(ctx, peer) }

// TestProverRunProvesWhoConnects runs the loop on a fake membership: a
// member whose link succeeds is proven, one whose link fails is not, and
// Run returns when its context ends.
func TestProverRunProvesWhoConnects(t *testing.T) {
	f := membership.NewFake(member("a", "a:1", 1))
	defer f.Close()
	f.Join(member("good", "g:1", 1))
	f.Join(member("rogue", "r:1", 1))
	tried := make(chan string, 16)
	p := membership.NewProver(membership.ProverConfig{Self: "a",
		Connector: connectFunc(func(_ context.Context, peer string) error {
			tried <- peer
			if peer == "rogue" {
				return errors.New("certificate names another node")
			}
			return nil
		})})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, f); close(done) }()
	seen := map[string]bool{}
	for len(seen) < 2 {
		seen[<-tried] = true
	}
	cancel()
	<-done
	var good, rogue membership.Member
	for _, m := range f.Members() {
		switch m.Name {
		case "good":
			good = m
		case "rogue":
			rogue = m
		}
	}
	if !p.Proven(good) || p.Proven(rogue) {
		t.Fatalf("proven: good %v rogue %v", p.Proven(good), p.Proven(rogue))
	}
}
