package wire

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/testmsg"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Test message types: generated BARE structs, used here as user
// messages.
type (
	testPing = testmsg.DeadlinePolicy // tag 100
	testPong = testmsg.HandoffDone    // tag 101
)

func testRegistry(t testing.TB) *Registry {
	t.Helper()
	r := NewRegistry()
	if err := Register[testPing](r, 100); err != nil {
		t.Fatal(err)
	}
	if err := Register[testPong](r, 101); err != nil {
		t.Fatal(err)
	}
	return r
}

// delivered is one message handed to fakeLocal.
type delivered struct {
	to, from actor.Ref
	msg      any
	deadline time.Time
	reply    func(any, error)
}

// fakeLocal is the local side of a Mailer: it records deliveries and
// answers asks with behave (when set) or leaves them for the test.
type fakeLocal struct {
	mu     sync.Mutex
	got    []delivered
	notify chan struct{}
	admit  error // returned by Deliver when set
	behave func(d delivered)
}

func newFakeLocal() *fakeLocal { return &fakeLocal{notify: make(chan struct{}, 1)} }

func (f *fakeLocal) Deliver(to, from actor.Ref, msg any, deadline time.Time, reply func(any, error)) error {
	f.mu.Lock()
	if f.admit != nil {
		err := f.admit
		f.mu.Unlock()
		return err
	}
	d := delivered{to, from, msg, deadline, reply}
	f.got = append(f.got, d)
	behave := f.behave
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
	if behave != nil {
		behave(d)
	}
	return nil
}

func (f *fakeLocal) waitN(t testing.TB, n int) []delivered {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		f.mu.Lock()
		if len(f.got) >= n {
			got := append([]delivered(nil), f.got...)
			f.mu.Unlock()
			return got
		}
		f.mu.Unlock()
		select {
		case <-f.notify:
		case <-deadline:
			t.Fatalf("timed out waiting for %d deliveries", n)
		}
	}
}

// outcome is one Complete call.
type outcome struct {
	id    uint64
	reply any
	err   error
}

type undelivered struct {
	from, to actor.Ref
	msg      any
	err      error
}

// mailNode is one node of a mail test: a Mem transport and its Mailer.
type mailNode struct {
	m       *Mailer
	tr      *Mem
	local   *fakeLocal
	done    chan outcome
	undeliv chan undelivered
}

func (n *mailNode) wait(t testing.TB) outcome {
	t.Helper()
	select {
	case o := <-n.done:
		return o
	case <-time.After(waitTimeout):
		t.Fatal("ask not completed")
		return outcome{}
	}
}

func newMailNode(t testing.TB, net *MemNetwork, name string, reg *Registry, edit func(*MailConfig)) *mailNode {
	t.Helper()
	n := &mailNode{local: newFakeLocal(), done: make(chan outcome, 64), undeliv: make(chan undelivered, 64)}
	cfg := MailConfig{
		Registry: reg,
		Local:    n.local,
		Complete: func(id uint64, reply any, err error) { n.done <- outcome{id, reply, err} },
		Undelivered: func(from, to actor.Ref, msg any, err error) {
			n.undeliv <- undelivered{from, to, msg, err}
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := NewMailer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := net.Join(MemConfig{Name: name, Handler: m.Handle, Events: m.LinkEvent})
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(tr)
	n.m, n.tr = m, tr
	t.Cleanup(func() { tr.Close(); m.Close() })
	return n
}

func newMailPair(t testing.TB) (a, b *mailNode, net *MemNetwork) {
	net = NewMemNetwork(1, nil)
	reg := testRegistry(t)
	return newMailNode(t, net, "a", reg, nil), newMailNode(t, net, "b", reg, nil), net
}

var (
	userRef  = actor.Virtual("user", "42")
	childRef = actor.Spawned("a", 7, 3)
)

func TestMailTellCarriesRefsAndMessage(t *testing.T) {
	a, b, _ := newMailPair(t)
	msg := testPing{Kind: "k", DefaultDeadlineNs: 5, TurnBudgetNs: 6}
	if err := a.m.Tell("b", userRef.WithIncarnation(2), childRef, msg); err != nil {
		t.Fatal(err)
	}
	if err := a.m.Tell("b", actor.Spawned("b", 9, 0), actor.Ref{}, &msg); err != nil {
		t.Fatal(err)
	}
	got := b.local.waitN(t, 2)
	if !got[0].to.IsVirtual() { // different recipients may take different lanes
		got[0], got[1] = got[1], got[0]
	}
	if got[0].to != userRef.WithIncarnation(2) || got[0].from != childRef || got[0].msg != any(msg) || got[0].reply != nil {
		t.Fatalf("first delivery = %+v", got[0])
	}
	if got[1].to != actor.Spawned("b", 9, 0) || !got[1].from.IsZero() || got[1].msg != any(msg) {
		t.Fatalf("second delivery = %+v (a pointer message arrives as a value)", got[1])
	}
	if s := a.m.Stats(); s.TellsSent != 2 {
		t.Fatalf("TellsSent = %d", s.TellsSent)
	}
	if s := b.m.Stats(); s.TellsReceived != 2 {
		t.Fatalf("TellsReceived = %d", s.TellsReceived)
	}
}

func TestMailUnregisteredTypeIsRefusedLocally(t *testing.T) {
	a, _, _ := newMailPair(t)
	if err := a.m.Tell("b", userRef, actor.Ref{}, "plain string"); !errors.Is(err, ErrUnregistered) {
		t.Fatalf("Tell(string) = %v, want ErrUnregistered", err)
	}
	if err := a.m.Ask("b", 1, userRef, actor.Ref{}, 42, time.Now().Add(time.Minute)); !errors.Is(err, ErrUnregistered) {
		t.Fatalf("Ask(int) = %v, want ErrUnregistered", err)
	}
	if a.m.Pending() != 0 {
		t.Fatal("a failed ask stays pending")
	}
}

func TestMailAskReplies(t *testing.T) {
	a, b, _ := newMailPair(t)
	b.local.behave = func(d delivered) {
		p := d.msg.(testPing)
		switch p.Kind {
		case "ok":
			d.reply(testPong{Count: p.TurnBudgetNs * 2}, nil)
		case "nil":
			d.reply(nil, nil)
		case "sentinel":
			d.reply(nil, fmt.Errorf("gone: %w", actor.ErrActorTerminated))
		case "other":
			d.reply(nil, errors.New("custom failure"))
		case "unregistered":
			d.reply(struct{}{}, nil)
		}
	}
	deadline := time.Now().Add(time.Minute)
	ask := func(id uint64, kind string) outcome {
		t.Helper()
		if err := a.m.Ask("b", id, userRef, childRef, testPing{Kind: kind, TurnBudgetNs: 21}, deadline); err != nil {
			t.Fatal(err)
		}
		o := a.wait(t)
		if o.id != id {
			t.Fatalf("completed id %d, want %d", o.id, id)
		}
		return o
	}
	if o := ask(1, "ok"); o.err != nil || o.reply != any(testPong{Count: 42}) {
		t.Fatalf("ok: %+v", o)
	}
	got := b.local.waitN(t, 1)
	if left := got[0].deadline.Sub(deadline); left > time.Second || left < -time.Second {
		t.Fatalf("receiver deadline %v, caller's %v", got[0].deadline, deadline)
	}
	if o := ask(2, "nil"); o.err != nil || o.reply != nil {
		t.Fatalf("nil: %+v", o)
	}
	o := ask(3, "sentinel")
	var re *RemoteError
	if !errors.Is(o.err, actor.ErrActorTerminated) || !errors.As(o.err, &re) || re.Message != "gone: tempest: actor terminated" {
		t.Fatalf("sentinel: %+v", o)
	}
	if o := ask(4, "other"); o.err == nil || o.err.Error() != "custom failure" || errors.Is(o.err, actor.ErrRefused) {
		t.Fatalf("other: %+v", o)
	}
	if o := ask(5, "unregistered"); !errors.Is(o.err, ErrUnregistered) && o.err == nil {
		t.Fatalf("unregistered reply: %+v", o)
	}
	if a.m.Pending() != 0 {
		t.Fatalf("%d asks still pending", a.m.Pending())
	}
}

func TestMailRefusals(t *testing.T) {
	cases := []struct {
		admit  error
		reason RefusedReason
		want   error
	}{
		{actor.ErrRefused, RefusedReasonMailboxFull, actor.ErrRefused},
		{actor.ErrUnknownKind, RefusedReasonUnknownKind, actor.ErrUnknownKind},
		{actor.ErrActorTerminated, RefusedReasonTerminatedIncarnation, actor.ErrActorTerminated},
		{actor.ErrProcessUnavailable, RefusedReasonNotOwner, ErrNotOwner},
		{errors.New("shutting down"), RefusedReasonNodeOverloaded, actor.ErrRefused},
		{NotOwner("c"), RefusedReasonNotOwner, actor.ErrProcessUnavailable},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i, c.reason), func(t *testing.T) {
			a, b, _ := newMailPair(t)
			b.local.admit = c.admit
			if err := a.m.Ask("b", uint64(i+1), userRef, actor.Ref{}, testPing{}, time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			o := a.wait(t)
			var re *RefusedError
			if !errors.Is(o.err, c.want) || !errors.As(o.err, &re) || re.Reason != c.reason || re.Node != "b" {
				t.Fatalf("ask outcome %v, want %v (%v)", o.err, c.want, c.reason)
			}
			if _, hinted := c.admit.(*RefusedError); hinted && re.OwnerHint != "c" {
				t.Fatalf("owner hint %q, want c", re.OwnerHint)
			}
			// A refused tell from an actor comes back as Undelivered.
			msg := testPing{Kind: "lost"}
			if err := a.m.Tell("b", userRef, childRef, msg); err != nil {
				t.Fatal(err)
			}
			select {
			case u := <-a.undeliv:
				if u.from != childRef || u.to != userRef || u.msg != any(msg) || !errors.Is(u.err, c.want) {
					t.Fatalf("undelivered = %+v", u)
				}
			case <-time.After(waitTimeout):
				t.Fatal("no undelivered notice")
			}
			if s := a.m.Stats(); s.RefusedIn[c.reason] != 2 {
				t.Fatalf("RefusedIn[%v] = %d, want 2", c.reason, s.RefusedIn[c.reason])
			}
			if s := b.m.Stats(); s.RefusedOut[c.reason] != 2 {
				t.Fatalf("RefusedOut[%v] = %d, want 2", c.reason, s.RefusedOut[c.reason])
			}
		})
	}
}

func TestMailUnknownTag(t *testing.T) {
	net := NewMemNetwork(1, nil)
	a := newMailNode(t, net, "a", testRegistry(t), nil)
	b := newMailNode(t, net, "b", NewRegistry(), nil) // knows no tags
	if err := a.m.Ask("b", 9, userRef, actor.Ref{}, testPing{}, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if o := a.wait(t); !errors.Is(o.err, actor.ErrUnknownKind) {
		t.Fatalf("ask with an unknown tag: %v, want ErrUnknownKind", o.err)
	}
	if err := a.m.Tell("b", userRef, actor.Ref{}, testPing{}); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "unknown tags counted", func() bool { return b.m.Stats().UnknownTags == 2 })
	b.local.mu.Lock()
	defer b.local.mu.Unlock()
	if len(b.local.got) != 0 {
		t.Fatal("a message with an unknown tag was delivered")
	}
}

// waitCond polls cond, yielding in between, up to waitTimeout.
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMailExpiredAskIsNotDelivered(t *testing.T) {
	a, b, _ := newMailPair(t)
	// An ask whose remaining deadline is zero when it arrives.
	env := &Ask{Id: 5, To: ActorIDOf(userRef), DeadlineNs: 0, Tag: 100}
	env.Body, _ = (&testPing{}).AppendBARE(nil)
	frame, err := MarshalEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.tr.Send("b", 1, frame); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "EXPIRED refusal", func() bool { return a.m.Stats().RefusedIn[RefusedReasonExpired] == 1 })
	b.local.mu.Lock()
	n := len(b.local.got)
	b.local.mu.Unlock()
	if s := b.m.Stats(); s.ExpiredOnArrival != 1 || n != 0 {
		t.Fatalf("expired ask: stats %+v, delivered %d", s, n)
	}
	// The sender does not even send an ask whose deadline has passed.
	if err := a.m.Ask("b", 6, userRef, actor.Ref{}, testPing{}, time.Now().Add(-time.Millisecond)); !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("Ask past its deadline = %v", err)
	}
}

func TestMailLinkDownFailsPendingAsks(t *testing.T) {
	a, b, net := newMailPair(t)
	// b admits and never answers.
	for id := uint64(1); id <= 3; id++ {
		if err := a.m.Ask("b", id, userRef, actor.Ref{}, testPing{}, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	b.local.waitN(t, 3)
	net.Partition("a", "b")
	seen := map[uint64]bool{}
	for range 3 {
		o := a.wait(t)
		// b admitted them: whether it ran them is unknown, which the
		// identity says, so that no sender sends them again.
		if !errors.Is(o.err, ErrLinkLost) || !errors.Is(o.err, ErrUnavailable) || !errors.Is(o.err, actor.ErrProcessUnavailable) {
			t.Fatalf("ask %d: %v, want ErrLinkLost (ErrUnavailable, ErrProcessUnavailable)", o.id, o.err)
		}
		seen[o.id] = true
	}
	if len(seen) != 3 || a.m.Stats().AsksLinkDown != 3 || a.m.Pending() != 0 {
		t.Fatalf("completed %v, stats %+v", seen, a.m.Stats())
	}
	// An ask the transport refuses while the link is down never left: Ask
	// says so at once, nothing is pending, and it is not ErrLinkLost.
	err := a.m.Ask("b", 4, userRef, actor.Ref{}, testPing{}, time.Now().Add(time.Hour))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLinkLost) || a.m.Pending() != 0 {
		t.Fatalf("ask across the partition = %v (pending %d), want ErrUnavailable, not ErrLinkLost, nothing pending", err, a.m.Pending())
	}
}

func TestMailDeadlineSweep(t *testing.T) {
	net := NewMemNetwork(1, nil)
	reg := testRegistry(t)
	clk := newFakeClock()
	a := newMailNode(t, net, "a", reg, func(c *MailConfig) { c.Clock = clk; c.SweepInterval = time.Second })
	b := newMailNode(t, net, "b", reg, nil)
	if err := a.m.Ask("b", 1, userRef, actor.Ref{}, testPing{}, clk.Now().Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	b.local.waitN(t, 1)
	for range 2 { // not yet due
		waitCond(t, "sweep timer", func() bool { return clk.pending() > 0 })
		clk.Advance(time.Second)
	}
	waitCond(t, "sweep timer", func() bool { return clk.pending() > 0 })
	select {
	case o := <-a.done:
		t.Fatalf("completed before the deadline: %+v", o)
	default:
	}
	clk.Advance(time.Second)
	if o := a.wait(t); !errors.Is(o.err, actor.ErrDeadlineExceeded) {
		t.Fatalf("at the deadline: %v", o.err)
	}
	// The late reply is ignored.
	b.local.waitN(t, 1)[0].reply(testPong{}, nil)
	waitCond(t, "late reply counted", func() bool { return a.m.Stats().LateReplies == 1 })
}

func TestMailInboundBytesBound(t *testing.T) {
	net := NewMemNetwork(1, nil)
	reg := testRegistry(t)
	a := newMailNode(t, net, "a", reg, nil)
	b := newMailNode(t, net, "b", reg, func(c *MailConfig) { c.MaxInboundBytes = 100 })
	if err := a.m.Ask("b", 1, userRef, actor.Ref{}, testPing{Kind: "small"}, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	held := b.local.waitN(t, 1)
	if err := a.m.Ask("b", 2, userRef, actor.Ref{}, testPing{Kind: string(make([]byte, 80))}, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if o := a.wait(t); o.id != 2 || !errors.Is(o.err, actor.ErrRefused) {
		t.Fatalf("over the inbound bound: %+v", o)
	}
	held[0].reply(nil, nil)
	if o := a.wait(t); o.id != 1 || o.err != nil {
		t.Fatalf("held ask: %+v", o)
	}
	if n := b.m.Stats().InboundBytes; n != 0 {
		t.Fatalf("InboundBytes = %d after the answer", n)
	}
}

func TestMailMalformedFrames(t *testing.T) {
	a, _, _ := newMailPair(t)
	bad := [][]byte{
		{},
		{0xff},
		{1, 0xff, 0xff},
		{3, 1, 2},    // truncated Reply
		{16, 0, 0},   // control envelope on a mail lane
		{0x80, 0x80}, // bad uint
	}
	for _, f := range bad {
		if err := a.m.Handle("b", 1, f); err == nil {
			t.Fatalf("frame %x accepted", f)
		}
	}
	// An id that names no actor is malformed too.
	env := &Tell{To: ActorID{Kind: "@b", Key: "zero"}, Tag: 100}
	frame, _ := MarshalEnvelope(env)
	if err := a.m.Handle("b", 1, frame); !errors.Is(err, ErrBadActorID) {
		t.Fatalf("bad actor id: %v", err)
	}
	if got := a.m.Stats().DecodeErrors; got != uint64(len(bad)+1) {
		t.Fatalf("DecodeErrors = %d", got)
	}
	// Control frames are the federation protocol's: the Mailer does not
	// decode them, and without a Control handler counts and drops them.
	if err := a.m.Handle("b", ControlLane, []byte{1}); err != nil {
		t.Fatalf("control frame without a handler: %v", err)
	}
	if got := a.m.Stats().ControlReceived; got != 1 {
		t.Fatalf("ControlReceived = %d", got)
	}
}

func TestMailCloseFailsPending(t *testing.T) {
	a, b, _ := newMailPair(t)
	if err := a.m.Ask("b", 1, userRef, actor.Ref{}, testPing{}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	b.local.waitN(t, 1)
	a.m.Close()
	if o := a.wait(t); !errors.Is(o.err, ErrClosed) {
		t.Fatalf("after Close: %v", o.err)
	}
	if err := a.m.Ask("b", 2, userRef, actor.Ref{}, testPing{}, time.Now().Add(time.Hour)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ask after Close = %v", err)
	}
	a.m.Close()
}

func TestActorIDRoundTrip(t *testing.T) {
	for _, r := range []actor.Ref{userRef, userRef.WithIncarnation(9), childRef, actor.Spawned("n.1", 1, 0)} {
		id := ActorIDOf(r)
		got, err := RefOf(&id)
		if err != nil || got != r {
			t.Fatalf("RefOf(ActorIDOf(%v)) = %v, %v", r, got, err)
		}
	}
	for _, id := range []ActorID{{}, {Kind: "k"}, {Key: "x"}, {Kind: "@", Key: "1"}, {Kind: "@n", Key: "0"}, {Kind: "a/b", Key: "1"}} {
		if _, err := RefOf(&id); !errors.Is(err, ErrBadActorID) {
			t.Fatalf("RefOf(%+v) = %v", id, err)
		}
	}
}

// FuzzMailHandle feeds arbitrary frames to a Mailer: it may refuse them,
// never panic, and the counters must add up.
func FuzzMailHandle(f *testing.F) {
	body, _ := (&testPing{Kind: "k"}).AppendBARE(nil)
	from := ActorIDOf(childRef)
	for _, env := range []Envelope{
		&Tell{To: ActorIDOf(userRef), From: &from, Tag: 100, Body: body},
		&Ask{Id: 1, To: ActorIDOf(userRef), DeadlineNs: 1e9, Tag: 100, Body: body},
		&Ask{Id: 2, To: ActorIDOf(childRef), Tag: 7, Body: body},
		&Reply{Id: 3, Tag: TagError, Body: AppendError(nil, actor.ErrRefused)},
		&Refused{To: ActorIDOf(userRef), From: &from, Tag: 100, Body: body},
		&TracedTell{Trace: TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			Tell: Tell{To: ActorIDOf(userRef), From: &from, Tag: 100, Body: body}},
	} {
		frame, err := MarshalEnvelope(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(1), frame)
	}
	f.Add(uint8(0), []byte{19, 1, 'k', 1, 'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	local := newFakeLocal()
	local.behave = func(d delivered) {
		if d.reply != nil {
			d.reply(d.msg, nil)
		}
	}
	m, err := NewMailer(MailConfig{
		Registry: testRegistry(f), Local: local,
		Complete:    func(uint64, any, error) {},
		Undelivered: func(actor.Ref, actor.Ref, any, error) {},
		Control:     func(string, []byte) error { return nil },
	})
	if err != nil {
		f.Fatal(err)
	}
	defer m.Close()
	f.Fuzz(func(t *testing.T, lane uint8, frame []byte) {
		_ = m.Handle("peer", Lane(lane%3), frame)
		checkDecodeAgrees(t, m, frame)
		if s := m.Stats(); s.InboundBytes != 0 {
			t.Fatalf("InboundBytes = %d after answered asks", s.InboundBytes)
		}
	})
}

// checkDecodeAgrees checks the Mailer's interning decoders against the
// generated ones.
func checkDecodeAgrees(t *testing.T, m *Mailer, frame []byte) {
	t.Helper()
	cfg := bare.Config{ZeroCopy: true, MaxMessageBytes: len(frame) + 1}
	var d1, d2 bare.Decoder
	d1.Reset(frame, cfg)
	d2.Reset(frame, cfg)
	tag := d1.Uint()
	d2.Uint()
	var got, want any
	switch tag {
	case 1:
		var a, b Tell
		v, err := parseTell(&d1, frame)
		if err == nil {
			a.Epoch, a.Tag, a.Body = v.epoch, v.tag, v.body
			if a.To, err = m.decodeIDBytes(v.to); err == nil && v.from != nil {
				a.From = new(ActorID)
				*a.From, err = m.decodeIDBytes(v.from)
			}
		}
		b.DecodeBARE(&d2)
		e2 := d2.Finish()
		if (err == nil) != (e2 == nil) {
			t.Fatalf("decoders disagree on %x: %v vs generated %v", frame, err, e2)
		}
		if err == nil && !reflect.DeepEqual(a, b) {
			t.Fatalf("decoders disagree on %x: %+v vs generated %+v", frame, a, b)
		}
		return
	case 2:
		var a, b Ask
		m.decodeAsk(&d1, &a)
		b.DecodeBARE(&d2)
		got, want = a, b
	case 5:
		// Handle's reading of a TracedTell: the trace context, then the
		// tell's fields.
		var a, b TracedTell
		if d1.Enter() {
			a.Trace.DecodeBARE(&d1)
			v := parseTellFields(&d1, frame)
			d1.Leave()
			if d1.Err() == nil {
				a.Tell.Epoch, a.Tell.Tag, a.Tell.Body = v.epoch, v.tag, v.body
				var err error
				if a.Tell.To, err = m.decodeIDBytes(v.to); err == nil && v.from != nil {
					a.Tell.From = new(ActorID)
					*a.Tell.From, err = m.decodeIDBytes(v.from)
				}
				if err != nil {
					return // names the generated decoder does not intern-check
				}
			}
		}
		b.DecodeBARE(&d2)
		got, want = a, b
	default:
		return
	}
	e1, e2 := d1.Finish(), d2.Finish()
	if (e1 == nil) != (e2 == nil) {
		t.Fatalf("decoders disagree on %x: %v vs generated %v", frame, e1, e2)
	}
	if e1 == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decoders disagree on %x: %+v vs generated %+v", frame, got, want)
	}
}

func TestMailDecodeAgreesWithGenerated(t *testing.T) {
	m, err := NewMailer(MailConfig{Registry: NewRegistry(), Local: newFakeLocal(), Complete: func(uint64, any, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	from := ActorIDOf(childRef)
	for _, env := range []Envelope{
		&Tell{To: ActorIDOf(userRef), From: &from, Epoch: 3, Tag: 100, Body: []byte("abc")},
		&Tell{To: ActorID{Kind: "k", Key: string(make([]byte, 100))}},
		&Ask{Id: 1, To: ActorIDOf(userRef), DeadlineNs: 1e9, Tag: 100, Body: []byte("x")},
		&Ask{Id: 2, To: ActorIDOf(childRef), From: &from},
	} {
		frame, err := MarshalEnvelope(env)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i <= len(frame); i++ { // every truncation too
			checkDecodeAgrees(t, m, frame[:i])
		}
		bad := append([]byte(nil), frame...)
		bad[3] = 0xff // inside the first name
		checkDecodeAgrees(t, m, bad)
	}
	// The same name decodes to the same string without a new allocation.
	frame, _ := MarshalEnvelope(&Ask{Id: 1, To: ActorIDOf(userRef), DeadlineNs: 1, Tag: 100})
	checkDecodeAgrees(t, m, frame)
	var d bare.Decoder
	if n := testing.AllocsPerRun(50, func() {
		d.Reset(frame, bare.Config{ZeroCopy: true})
		d.Uint()
		var v Ask
		m.decodeAsk(&d, &v)
	}); n != 0 {
		t.Fatalf("decoding a known name allocates %v times", n)
	}
}

// An ask admitted and then refused unrun (NotRun) reaches the asker as a
// Refused of its reason, naming the refusing node, as an admission
// refusal does, and is counted as one; an ask answered with the same
// refusal unmarked (an actor relaying what its own ask got) stays a
// reply, which its caller's node must not send again.
func TestMailNotRunReplyIsRefusal(t *testing.T) {
	a, b, _ := newMailPair(t)
	b.local.behave = func(d delivered) {
		switch d.msg.(testPing).Kind {
		case "fenced":
			d.reply(nil, NotRun(NotOwner("c")))
		case "relayed":
			d.reply(nil, NotOwner("c"))
		}
	}
	deadline := time.Now().Add(time.Minute)
	if err := a.m.Ask("b", 1, userRef, actor.Ref{}, testPing{Kind: "fenced"}, deadline); err != nil {
		t.Fatal(err)
	}
	o := a.wait(t)
	var re *RefusedError
	if !errors.As(o.err, &re) || re.Reason != RefusedReasonNotOwner || re.Node != "b" || re.OwnerHint != "c" || !errors.Is(o.err, ErrNotOwner) {
		t.Fatalf("fenced ask = %v, want refused NOT_OWNER by b naming c", o.err)
	}
	if s := b.m.Stats(); s.RefusedOut[RefusedReasonNotOwner] != 1 || s.RepliesSent != 0 {
		t.Fatalf("b sent %d NOT_OWNER refusals and %d replies, want 1 and 0", s.RefusedOut[RefusedReasonNotOwner], s.RepliesSent)
	}
	if err := a.m.Ask("b", 2, userRef, actor.Ref{}, testPing{Kind: "relayed"}, deadline); err != nil {
		t.Fatal(err)
	}
	o = a.wait(t)
	var rem *RemoteError
	if !errors.As(o.err, &rem) || errors.As(o.err, &re) {
		t.Fatalf("relayed refusal = %v (%T), want a reply error", o.err, o.err)
	}
	if !IsNotRun(NotRun(NotOwner("c"))) || IsNotRun(NotOwner("c")) || IsNotRun(fmt.Errorf("wrapped: %w", NotRun(NotOwner("c")))) {
		t.Fatal("IsNotRun must see NotRun's mark itself only")
	}
}
