package wire

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire/bare"
)

// traceLocal is a fakeLocal that takes trace contexts.
type traceLocal struct {
	*fakeLocal
	mu     sync.Mutex
	traces []TraceContext
}

func (l *traceLocal) DeliverTraced(to, from actor.Ref, msg any, deadline time.Time, _ []actor.Ref, tc *TraceContext, reply func(any, error)) error {
	l.mu.Lock()
	l.traces = append(l.traces, *tc)
	l.mu.Unlock()
	return l.Deliver(to, from, msg, deadline, reply)
}

// An ask's trace context reaches the owner's TraceDelivery as sent; an
// ask without one is delivered as before; an oversized one is refused
// before anything is sent.
func TestMailAskCarriesTraceContext(t *testing.T) {
	net := NewMemNetwork(1, nil)
	reg := testRegistry(t)
	a := newMailNode(t, net, "a", reg, nil)
	tl := &traceLocal{fakeLocal: newFakeLocal()}
	b := newMailNode(t, net, "b", reg, func(c *MailConfig) { c.Local = tl })
	b.local = tl.fakeLocal
	tc := &TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	dl := time.Now().Add(time.Minute)
	if err := a.m.AskTraced("b", 1, 0, userRef, actor.Ref{}, testPing{Kind: "x"}, dl, nil, tc); err != nil {
		t.Fatal(err)
	}
	if err := a.m.AskChain("b", 2, 0, userRef, actor.Ref{}, testPing{Kind: "y"}, dl, nil); err != nil {
		t.Fatal(err)
	}
	b.local.waitN(t, 2)
	tl.mu.Lock()
	got := tl.traces
	tl.mu.Unlock()
	if len(got) != 1 || got[0] != *tc {
		t.Fatalf("traces delivered = %+v, want just %+v", got, *tc)
	}
	long := &TraceContext{Parent: tc.Parent, State: strings.Repeat("k", MaxTraceState+1)}
	if err := a.m.AskTraced("b", 3, 0, userRef, actor.Ref{}, testPing{}, dl, nil, long); !errors.Is(err, bare.ErrLimit) {
		t.Fatalf("oversized trace context: %v, want bare.ErrLimit", err)
	}
	if a.m.Pending() != 2 {
		t.Fatalf("%d asks pending, want 2: the refused one is not", a.m.Pending())
	}
}
