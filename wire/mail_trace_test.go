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

// A tell's trace context reaches the owner's TraceDelivery as sent (with
// no reply: a tell); a tell without one keeps the plain Tell envelope and
// its path; an oversized one is refused before anything is sent; a
// delivery that takes no trace contexts gets the traced tell as a tell.
func TestMailTellCarriesTraceContext(t *testing.T) {
	net := NewMemNetwork(1, nil)
	reg := testRegistry(t)
	a := newMailNode(t, net, "a", reg, nil)
	tl := &traceLocal{fakeLocal: newFakeLocal()}
	b := newMailNode(t, net, "b", reg, func(c *MailConfig) { c.Local = tl })
	b.local = tl.fakeLocal
	c := newMailNode(t, net, "c", reg, nil) // no TraceDelivery
	tc := &TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	if err := a.m.TellTraced("b", 0, userRef, childRef, testPing{Kind: "x"}, tc); err != nil {
		t.Fatal(err)
	}
	if err := a.m.TellTraced("b", 0, userRef, actor.Ref{}, testPing{Kind: "y"}, nil); err != nil {
		t.Fatal(err)
	}
	got := b.local.waitN(t, 2)
	tl.mu.Lock()
	traces := tl.traces
	tl.mu.Unlock()
	if len(traces) != 1 || traces[0] != *tc {
		t.Fatalf("traces delivered = %+v, want just %+v", traces, *tc)
	}
	if got[0].reply != nil || got[0].from != childRef || got[0].msg != (testPing{Kind: "x"}) {
		t.Fatalf("traced tell delivered as %+v, want a tell from %v", got[0], childRef)
	}
	long := &TraceContext{Parent: tc.Parent, State: strings.Repeat("k", MaxTraceState+1)}
	if err := a.m.TellTraced("b", 0, userRef, actor.Ref{}, testPing{}, long); !errors.Is(err, bare.ErrLimit) {
		t.Fatalf("oversized trace context: %v, want bare.ErrLimit", err)
	}
	if err := a.m.TellTraced("c", 0, userRef, actor.Ref{}, testPing{Kind: "z"}, tc); err != nil {
		t.Fatal(err)
	}
	if d := c.local.waitN(t, 1); d[0].msg != (testPing{Kind: "z"}) {
		t.Fatalf("delivered %+v without TraceDelivery", d[0])
	}
	if s := a.m.Stats(); s.TellsSent != 3 {
		t.Fatalf("TellsSent = %d, want 3 (the refused one is not)", s.TellsSent)
	}
}

// A TracedTell whose trace context is over the bounds is malformed: the
// frame is refused as a decoding error and nothing is delivered.
func TestMailTracedTellBounds(t *testing.T) {
	local := newFakeLocal()
	m, err := NewMailer(MailConfig{Registry: testRegistry(t), Local: local,
		Complete: func(uint64, any, error) {}, Undelivered: func(actor.Ref, actor.Ref, any, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	body, _ := (&testPing{Kind: "k"}).AppendBARE(nil)
	tell := Tell{To: ActorIDOf(userRef), Tag: 100, Body: body}
	for _, tc := range []TraceContext{
		{Parent: strings.Repeat("0", MaxTraceParent+1)},
		{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: strings.Repeat("k", MaxTraceState+1)},
	} {
		frame, err := MarshalEnvelope(&TracedTell{Trace: tc, Tell: tell})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Handle("peer", 1, frame); !errors.Is(err, bare.ErrLimit) {
			t.Fatalf("trace context of %d+%d bytes: %v, want bare.ErrLimit", len(tc.Parent), len(tc.State), err)
		}
		if err := m.Handle("peer", 1, frame[:len(frame)-1]); err == nil {
			t.Fatal("a truncated TracedTell was accepted")
		}
	}
	local.mu.Lock()
	n := len(local.got)
	local.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d delivered from malformed frames", n)
	}
	if s := m.Stats(); s.DecodeErrors != 4 {
		t.Fatalf("DecodeErrors = %d, want 4", s.DecodeErrors)
	}
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
