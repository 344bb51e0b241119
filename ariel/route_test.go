package ariel_test

import (
	"context"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

// routeRouter places kind "far" on another node: its ResolveRoute decides
// the route once, and Forward reports the Outbound it is handed.
type routeRouter struct {
	ariel.Router
	resolved chan struct{}
	out      chan ariel.Outbound
}

func (r *routeRouter) Resolve(to actor.Ref) (*ariel.Cell, error) {
	c, _, err := r.ResolveRoute(to)
	return c, err
}

func (r *routeRouter) ResolveRoute(to actor.Ref) (*ariel.Cell, ariel.Route, error) {
	if to.IsVirtual() && to.Kind() == "far" {
		r.resolved <- struct{}{}
		return nil, ariel.Route{Node: "n2", Epoch: 7, Set: true}, nil
	}
	c, err := r.Router.Resolve(to)
	return c, ariel.Route{}, err
}

func (r *routeRouter) Forward(m ariel.Outbound) error {
	r.out <- m
	return nil
}

// TestRouteResolverDecisionReachesForward: a Router that implements
// RouteResolver is asked once per message, and Forward gets that decision
// in Outbound.Route, for program code's sends and a turn's.
func TestRouteResolverDecisionReachesForward(t *testing.T) {
	s := newSched(t, ariel.Config{Workers: 2})
	rr := &routeRouter{Router: s.LocalRouter(), resolved: make(chan struct{}, 8), out: make(chan ariel.Outbound, 8)}
	s.SetRouter(rr)
	far := actor.Virtual("far", "x")
	sender, err := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if msg == "go" {
			_ = ctx.Tell(far, "from a turn")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, m ariel.Outbound) {
		t.Helper()
		if want := (ariel.Route{Node: "n2", Epoch: 7, Set: true}); m.Route != want {
			t.Errorf("%s: Forward got route %+v, want %+v", what, m.Route, want)
		}
		if n := len(rr.resolved); n != 1 {
			t.Errorf("%s: resolved %d times, want once", what, n)
		}
		for len(rr.resolved) > 0 {
			<-rr.resolved
		}
	}
	if err := s.Tell(far, "program tell"); err != nil {
		t.Fatal(err)
	}
	check("program tell", <-rr.out)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	go func() { _, _ = s.Ask(ctx, far, "program ask") }() // never answered: ends at its deadline
	check("program ask", <-rr.out)

	if err := s.Tell(sender, "go"); err != nil {
		t.Fatal(err)
	}
	check("a turn's tell", <-rr.out)
}
