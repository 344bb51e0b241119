package federation_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/wire"
	"github.com/tempest-actors/tempest/wire/bare"
	"github.com/tempest-actors/tempest/wire/bare/gen"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFederationCodeIsFresh(t *testing.T) {
	if err := gen.CheckFile("federation.bare", "federation_bare.go", "federation"); err != nil {
		t.Fatalf("%v (run go generate ./prospero/federation)", err)
	}
}

var (
	errNotLeader = errors.New("test: not the leader")
	errStale     = errors.New("test: stale move")
)

var codes = federation.Codes{
	federation.CodeNotLeader: {errNotLeader},
	federation.CodeStaleMove: {errStale},
	federation.CodeBusy:      {federation.ErrBusy},
	federation.CodeDuplicate: {federation.ErrDuplicate},
}

// handler answers from functions a test sets; unset ones answer OK.
type handler struct {
	forward func(ctx context.Context, from string, m *federation.ForwardCommand) error
	status  func(ctx context.Context, from string, m *federation.StatusRequest) (federation.StatusReply, error)
	list    func(ctx context.Context, from string, m *federation.ReminderListRequest) (federation.ReminderListReply, error)
	cancel  func(ctx context.Context, from string, m *federation.ReminderCancelRequest) error
	aborts  chan federation.HandoffAbort
	cancels chan uint64 // CancelAsk ids; a set answers OK the first time
	queued  map[uint64]bool
	hydrate func(ctx context.Context, from string, m *federation.HydrateRequest) error
	witness func(ctx context.Context, from string, m *federation.LeaseWitnessRequest) (federation.LeaseWitnessReply, error)
}

func (h *handler) Hydrate(ctx context.Context, from string, m *federation.HydrateRequest) error {
	if h.hydrate != nil {
		return h.hydrate(ctx, from, m)
	}
	return nil
}

func (h *handler) Forward(ctx context.Context, from string, m *federation.ForwardCommand) error {
	if h.forward != nil {
		return h.forward(ctx, from, m)
	}
	return nil
}
func (h *handler) LeaseWitness(ctx context.Context, from string, m *federation.LeaseWitnessRequest) (federation.LeaseWitnessReply, error) {
	if h.witness != nil {
		return h.witness(ctx, from, m)
	}
	return federation.LeaseWitnessReply{}, nil
}
func (h *handler) Move(context.Context, string, *federation.MoveRequest) error          { return nil }
func (h *handler) HandoffBegin(context.Context, string, *federation.HandoffBegin) error { return nil }
func (h *handler) HandoffDone(context.Context, string, *federation.HandoffDone) error   { return nil }
func (h *handler) Passivate(context.Context, string, *federation.PassivateRequest) error {
	return nil
}
func (h *handler) Status(ctx context.Context, from string, m *federation.StatusRequest) (federation.StatusReply, error) {
	if h.status != nil {
		return h.status(ctx, from, m)
	}
	return federation.StatusReply{}, nil
}
func (h *handler) ReminderList(ctx context.Context, from string, m *federation.ReminderListRequest) (federation.ReminderListReply, error) {
	if h.list != nil {
		return h.list(ctx, from, m)
	}
	return federation.ReminderListReply{}, nil
}
func (h *handler) ReminderCancel(ctx context.Context, from string, m *federation.ReminderCancelRequest) error {
	if h.cancel != nil {
		return h.cancel(ctx, from, m)
	}
	return nil
}
func (h *handler) CancelAsk(_ string, m *federation.CancelAsk) federation.Code {
	code := federation.CodeUnknownAsk
	if h.queued[m.Id] {
		delete(h.queued, m.Id)
		code = federation.CodeOk
	}
	if h.cancels != nil {
		h.cancels <- m.Id
	}
	return code
}
func (h *handler) HandoffAbort(_ string, m *federation.HandoffAbort) {
	if h.aborts != nil {
		h.aborts <- *m
	}
}

// pair is two endpoints linked by an in-memory network.
type pair struct {
	net    *wire.MemNetwork
	a, b   *federation.Endpoint
	ha, hb *handler
	ta, tb *wire.Mem
}

func newPair(t *testing.T, maxInFlight int) *pair {
	t.Helper()
	return newPairOf(t, maxInFlight, codes)
}

// newPairWithCodes is newPair with another Codes table.
func newPairWithCodes(t *testing.T, cs federation.Codes) *pair {
	t.Helper()
	return newPairOf(t, 0, cs)
}

func newPairOf(t *testing.T, maxInFlight int, codes federation.Codes) *pair {
	t.Helper()
	p := &pair{net: wire.NewMemNetwork(1, nil), ha: &handler{}, hb: &handler{}}
	join := func(name string, h *handler, ep **federation.Endpoint, tr **wire.Mem) {
		s := &lateSender{}
		e, err := federation.New(federation.Config{Sender: s, Handler: h, Codes: codes, MaxInFlight: maxInFlight,
			Unavailable: wire.ErrUnavailable})
		if err != nil {
			t.Fatal(err)
		}
		m, err := p.net.Join(wire.MemConfig{Name: name,
			Handler: func(from string, lane wire.Lane, frame []byte) error {
				if lane != wire.ControlLane {
					return errors.New("mail on a federation test link")
				}
				return e.Handle(from, frame)
			},
			Events: func(ev wire.LinkEvent) {
				if !ev.Up {
					e.LinkDown(ev.Peer)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		s.m = m
		*ep, *tr = e, m
	}
	join("a", p.ha, &p.a, &p.ta)
	join("b", p.hb, &p.b, &p.tb)
	t.Cleanup(func() {
		p.a.Close()
		p.b.Close()
		_ = p.ta.Close()
		_ = p.tb.Close()
	})
	return p
}

type lateSender struct{ m *wire.Mem }

func (s *lateSender) SendControlWait(ctx context.Context, peer string, frame []byte) error {
	return s.m.SendControlWait(ctx, peer, frame)
}
func (s *lateSender) SendControl(peer string, frame []byte) error {
	return s.m.SendControl(peer, frame)
}

func TestCallAnswersOK(t *testing.T) {
	p := newPair(t, 0)
	var got []byte
	p.hb.forward = func(_ context.Context, from string, m *federation.ForwardCommand) error {
		if from != "a" {
			t.Errorf("from = %q", from)
		}
		got = bytes.Clone(m.Command)
		return nil
	}
	if err := p.a.Call(t.Context(), "b", &federation.ForwardCommand{Command: []byte("cmd")}); err != nil {
		t.Fatal(err)
	}
	if string(got) != "cmd" {
		t.Fatalf("command = %q", got)
	}
	if s := p.b.Stats(); s.Answered[federation.CodeOk] != 1 || s.Refused != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// An error answered by the peer matches, on the caller, the sentinel it
// matched on the peer: by code, never by text.
func TestCallErrorKeepsIdentity(t *testing.T) {
	p := newPair(t, 0)
	p.hb.forward = func(context.Context, string, *federation.ForwardCommand) error {
		return errors.Join(errors.New("some words"), errNotLeader)
	}
	err := p.a.Call(t.Context(), "b", &federation.ForwardCommand{})
	var fe *federation.Error
	if !errors.As(err, &fe) || fe.Code != federation.CodeNotLeader {
		t.Fatalf("err = %v, want a NOT_LEADER answer", err)
	}
	if !errors.Is(err, errNotLeader) || errors.Is(err, errStale) {
		t.Fatalf("errors.Is on %v does not match the sentinel it had on the peer", err)
	}
	// An error no code names is OTHER and matches no sentinel.
	p.hb.forward = func(context.Context, string, *federation.ForwardCommand) error { return errors.New("odd") }
	err = p.a.Call(t.Context(), "b", &federation.ForwardCommand{})
	if !errors.As(err, &fe) || fe.Code != federation.CodeOther || errors.Is(err, errNotLeader) {
		t.Fatalf("err = %v, want OTHER", err)
	}
	if s := p.b.Stats(); s.Refused != 2 || s.Answered[federation.CodeNotLeader] != 1 || s.Answered[federation.CodeOther] != 1 {
		t.Fatalf("refusals not counted by code: %+v", s)
	}
}

func TestStatusReply(t *testing.T) {
	p := newPair(t, 0)
	p.hb.status = func(_ context.Context, _ string, m *federation.StatusRequest) (federation.StatusReply, error) {
		if m.Actor.Kind != "counter" || m.Actor.Key != "c1" || m.Epoch != 7 {
			t.Errorf("request = %+v", m)
		}
		return federation.StatusReply{State: federation.ReferenceStateValid, Incarnation: 3, Active: true}, nil
	}
	r, err := p.a.Status(t.Context(), "b", &federation.StatusRequest{Actor: federation.Actor{Kind: "counter", Key: "c1"}, Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != federation.ReferenceStateValid || r.Incarnation != 3 || !r.Active {
		t.Fatalf("reply = %+v", r)
	}
	p.hb.status = func(context.Context, string, *federation.StatusRequest) (federation.StatusReply, error) {
		return federation.StatusReply{}, errStale
	}
	if _, err := p.a.Status(t.Context(), "b", &federation.StatusRequest{}); !errors.Is(err, errStale) {
		t.Fatalf("err = %v", err)
	}
}

// TestLeaseWitness: the term reaches the voter, its age comes back, and
// a refusal keeps its sentinel (the caller asks again on NO_WITNESS).
func TestLeaseWitness(t *testing.T) {
	p := newPair(t, 0)
	errNoWitness := errors.New("no witness")
	p.hb.witness = func(_ context.Context, from string, m *federation.LeaseWitnessRequest) (federation.LeaseWitnessReply, error) {
		if from != "a" {
			t.Errorf("from %q", from)
		}
		if m.Term < 7 {
			return federation.LeaseWitnessReply{}, errNoWitness
		}
		return federation.LeaseWitnessReply{AgeNs: uint64(m.Term) * 1e8}, nil
	}
	age, err := p.a.LeaseWitness(t.Context(), "b", 9)
	if err != nil || age != 900*time.Millisecond {
		t.Fatalf("witness of term 9: %s, %v", age, err)
	}
	pc := newPairWithCodes(t, federation.Codes{federation.CodeNoWitness: {errNoWitness}})
	pc.hb.witness = p.hb.witness
	if age, err := pc.a.LeaseWitness(t.Context(), "b", 3); !errors.Is(err, errNoWitness) || age != 0 {
		t.Fatalf("refused witness: %s, %v; want the NO_WITNESS sentinel", age, err)
	}
}

// A reminder list comes back whole; a refusal of a list or a cancel
// keeps its sentinel, and a cancel's name and budget reach the owner.
func TestReminderListAndCancel(t *testing.T) {
	p := newPair(t, 0)
	want := []federation.ReminderInfo{
		{Name: "a", DueUnixNs: 1e18, PeriodNs: 1e9, Catchup: federation.CatchupFireUpTo, MaxCatchup: 3, NextUnixNs: 1e18 + 5e9, LastSeq: 5, PayloadType: "12"},
		{Name: "b", DueUnixNs: 2e18, Outstanding: true},
	}
	p.hb.list = func(_ context.Context, _ string, m *federation.ReminderListRequest) (federation.ReminderListReply, error) {
		if m.Actor.Kind != "acct" || m.Actor.Key != "k" || m.Epoch != 3 {
			t.Errorf("request = %+v", m)
		}
		return federation.ReminderListReply{Reminders: want}, nil
	}
	r, err := p.a.ReminderList(t.Context(), "b", &federation.ReminderListRequest{Actor: federation.Actor{Kind: "acct", Key: "k"}, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Reminders, want) {
		t.Fatalf("reminders = %+v, want %+v", r.Reminders, want)
	}
	p.hb.list = func(context.Context, string, *federation.ReminderListRequest) (federation.ReminderListReply, error) {
		return federation.ReminderListReply{Reminders: want}, errStale
	}
	if r, err := p.a.ReminderList(t.Context(), "b", &federation.ReminderListRequest{}); !errors.Is(err, errStale) || r != nil {
		t.Fatalf("refused list = %v, %v", r, err)
	}
	got := make(chan *federation.ReminderCancelRequest, 1)
	p.hb.cancel = func(_ context.Context, _ string, m *federation.ReminderCancelRequest) error {
		got <- m
		return errNotLeader
	}
	err = p.a.Call(t.Context(), "b", &federation.ReminderCancelRequest{Actor: federation.Actor{Kind: "acct", Key: "k"}, Name: "a", BudgetNs: 1e9})
	if !errors.Is(err, errNotLeader) {
		t.Fatalf("cancel err = %v", err)
	}
	if m := <-got; m.Name != "a" || m.BudgetNs != 1e9 {
		t.Fatalf("cancel request = %+v", m)
	}
}

// Beyond MaxInFlight a request is answered BUSY without running; the
// ones running are not disturbed.
func TestBusyBeyondMaxInFlight(t *testing.T) {
	p := newPair(t, 1)
	release := make(chan struct{})
	started := make(chan struct{})
	p.hb.forward = func(ctx context.Context, _ string, m *federation.ForwardCommand) error {
		if string(m.Command) == "slow" {
			close(started)
			<-release
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- p.a.Call(t.Context(), "b", &federation.ForwardCommand{Command: []byte("slow")}) }()
	<-started
	err := p.a.Call(t.Context(), "b", &federation.ForwardCommand{Command: []byte("fast")})
	if !errors.Is(err, federation.ErrBusy) {
		t.Fatalf("second request = %v, want BUSY", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first request = %v", err)
	}
	if got := p.b.Stats().Answered[federation.CodeBusy]; got != 1 {
		t.Fatalf("BUSY answers = %d", got)
	}
}

// A replayed request (the same id from the same peer while the first is
// in progress) is refused DUPLICATE and counted; the first is answered.
func TestReplayRefused(t *testing.T) {
	p := newPair(t, 0)
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	p.hb.forward = func(context.Context, string, *federation.ForwardCommand) error {
		started <- struct{}{}
		<-release
		return nil
	}
	frame, err := federation.AppendMessage(nil, &federation.ForwardCommand{Id: 99, Command: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.b.Handle("a", frame); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := p.b.Handle("a", frame); err != nil {
		t.Fatal(err)
	}
	close(release)
	p.b.Close() // waits for the first request's answer
	s := p.b.Stats()
	if s.Answered[federation.CodeDuplicate] != 1 || s.Answered[federation.CodeOk] != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if len(started) != 0 {
		t.Fatal("the replay ran")
	}
}

// A request whose link goes down before its answer fails at once with
// ErrUnanswered, which also matches the transport's unavailable error.
func TestLinkDownFailsPending(t *testing.T) {
	p := newPair(t, 0)
	started := make(chan struct{})
	p.hb.forward = func(ctx context.Context, _ string, _ *federation.ForwardCommand) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- p.a.Call(t.Context(), "b", &federation.ForwardCommand{}) }()
	<-started
	p.net.Partition("a", "b")
	err := <-done
	if !errors.Is(err, federation.ErrUnanswered) || !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnanswered matching wire.ErrUnavailable", err)
	}
	if got := p.a.Stats().Unanswered; got != 1 {
		t.Fatalf("Unanswered = %d", got)
	}
}

// Malformed and unknown-tag frames return an error (the transport resets
// the lane) and are counted; none reaches the handler.
func TestMalformedFramesCounted(t *testing.T) {
	p := newPair(t, 0)
	ran := false
	p.hb.forward = func(context.Context, string, *federation.ForwardCommand) error { ran = true; return nil }
	good, _ := federation.AppendMessage(nil, &federation.ForwardCommand{Id: 1})
	bad := [][]byte{
		nil,
		{0x7f},                       // unknown tag
		{0x02},                       // truncated
		append(bytes.Clone(good), 0), // trailing byte
		{0x01, 0x01, 0x40},           // Result with an unknown code
	}
	for _, f := range bad {
		if err := p.b.Handle("a", f); err == nil {
			t.Errorf("frame %x accepted", f)
		}
	}
	if got := p.b.Stats().Malformed; got != uint64(len(bad)) {
		t.Fatalf("Malformed = %d, want %d", got, len(bad))
	}
	if ran {
		t.Fatal("a malformed frame reached the handler")
	}
}

func TestNoticeDelivered(t *testing.T) {
	p := newPair(t, 0)
	p.hb.aborts = make(chan federation.HandoffAbort, 1)
	want := federation.HandoffAbort{Group: "g", Shard: 3, Epoch: 9, Code: federation.CodeStaleMove}
	if err := p.a.Notify(t.Context(), "b", &want); err != nil {
		t.Fatal(err)
	}
	if got := <-p.hb.aborts; got != want {
		t.Fatalf("abort = %+v, want %+v", got, want)
	}
	if err := p.a.Notify(t.Context(), "b", &federation.ForwardCommand{}); err == nil {
		t.Fatal("a request sent as a notice")
	}
}

// TestCancelAskCountedByOutcome: a CancelAsk reaches the handler, and
// its outcome is counted: the first for a queued ask is OK, a replay of
// it and one for an ask never queued are UNKNOWN_ASK.
func TestCancelAskCountedByOutcome(t *testing.T) {
	p := newPair(t, 0)
	p.hb.cancels = make(chan uint64, 3)
	p.hb.aborts = make(chan federation.HandoffAbort, 1)
	p.hb.queued = map[uint64]bool{41: true}
	for _, id := range []uint64{41, 41, 99} {
		if err := p.a.NotifyNow("b", &federation.CancelAsk{Id: id}); err != nil {
			t.Fatal(err)
		}
		if got := <-p.hb.cancels; got != id {
			t.Fatalf("cancel of %d, want %d", got, id)
		}
	}
	// The handler sees a notice before its outcome is counted: one more
	// notice on the same control lane, handled after it, marks the end.
	if err := p.a.NotifyNow("b", &federation.HandoffAbort{Group: "g", Shard: 1, Epoch: 1, Code: federation.CodeStaleMove}); err != nil {
		t.Fatal(err)
	}
	<-p.hb.aborts
	s := p.b.Stats()
	if s.Noticed[federation.CodeOk] != 1 || s.Noticed[federation.CodeUnknownAsk] != 2 {
		t.Fatalf("Noticed OK %d UNKNOWN_ASK %d, want 1 and 2", s.Noticed[federation.CodeOk], s.Noticed[federation.CodeUnknownAsk])
	}
	if err := p.a.NotifyNow("b", &federation.StatusRequest{}); err == nil {
		t.Fatal("a request sent as a notice")
	}
}

// TestBusyRetryAfterHonoured: a BUSY answer with a retry-after delay
// reaches the sender as an *Error carrying the delay, and CallRetrying
// sends the request again after it, within its deadline; a delay that
// would end past the deadline is not waited for.
func TestBusyRetryAfterHonoured(t *testing.T) {
	p := newPair(t, 0)
	var calls int
	var mu sync.Mutex
	p.hb.hydrate = func(context.Context, string, *federation.HydrateRequest) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			return &federation.BusyError{Delay: 20 * time.Millisecond, Reason: "hydration budget spent"}
		}
		return nil
	}
	req := &federation.HydrateRequest{Group: "g", Shard: 1, Epoch: 2}
	err := p.a.Call(t.Context(), "b", req)
	var fe *federation.Error
	if !errors.As(err, &fe) || fe.Code != federation.CodeBusy || fe.RetryAfter != 20*time.Millisecond || !errors.Is(err, federation.ErrBusy) {
		t.Fatalf("busy answer = %#v (%v)", fe, err)
	}
	retries, err := p.a.CallRetrying(t.Context(), "b", req)
	if err != nil || retries != 1 {
		t.Fatalf("CallRetrying = %d retries, %v; want 1, nil", retries, err)
	}
	mu.Lock()
	calls = 0
	mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if retries, err := p.a.CallRetrying(ctx, "b", req); !errors.Is(err, federation.ErrBusy) || retries != 0 {
		t.Fatalf("a retry past the deadline: %d retries, %v", retries, err)
	}
	if got := p.b.Stats().Answered[federation.CodeBusy]; got != 3 {
		t.Fatalf("BUSY answers counted %d, want 3", got)
	}
}

func TestCodesTableChecked(t *testing.T) {
	for _, c := range []federation.Codes{
		{federation.CodeOk: {errStale}},
		{federation.CodeOther: {errStale}},
		{federation.CodeStaleMove: nil},
		{federation.Code(200): {errStale}},
	} {
		if _, err := federation.New(federation.Config{Sender: &lateSender{}, Handler: &handler{}, Codes: c}); !errors.Is(err, federation.ErrBadConfig) {
			t.Errorf("Codes %v accepted: %v", c, err)
		}
	}
}

func sampleMessages() []federation.Message {
	a := federation.Actor{Kind: "counter", Key: "c-1", Incarnation: 2}
	return []federation.Message{
		&federation.Result{Id: 1, Code: federation.CodeNotOwner, Detail: "moved", OwnerHint: "n2"},
		&federation.ForwardCommand{Id: 2, Command: []byte{1, '{', '}'}, BudgetNs: 5e9},
		&federation.MoveRequest{Id: 3, Group: "default", Shard: 7, Epoch: 4, From: "n1", To: "n2", BudgetNs: 1e9},
		&federation.HandoffBegin{Id: 4, Group: "default", Shard: 7, Epoch: 5, BudgetNs: 1e9},
		&federation.HandoffDone{Id: 5, Group: "default", Shard: 7, Epoch: 5, Count: 3, BudgetNs: 1e9},
		&federation.HandoffAbort{Group: "default", Shard: 7, Epoch: 5, Code: federation.CodeDeadlineExceeded},
		&federation.StatusRequest{Id: 6, Actor: a, Epoch: 4},
		&federation.StatusReply{Result: federation.Result{Id: 6}, State: federation.ReferenceStateDormant, Incarnation: 2},
		&federation.PassivateRequest{Id: 7, Actor: a, Epoch: 4, BudgetNs: 1e9},
		&federation.ReminderListRequest{Id: 8, Actor: a, Epoch: 4},
		&federation.ReminderListReply{Result: federation.Result{Id: 8}, Reminders: []federation.ReminderInfo{
			{Name: "interest", DueUnixNs: 1e18, PeriodNs: 36e11, Catchup: federation.CatchupFireUpTo, MaxCatchup: 24,
				NextUnixNs: 1e18 + 36e11, LastSeq: 1, Outstanding: true, PayloadType: "12"}}},
		&federation.ReminderCancelRequest{Id: 9, Actor: a, Epoch: 4, Name: "interest", BudgetNs: 1e9},
		&federation.CancelAsk{Id: 10},
		&federation.HydrateRequest{Id: 11, Group: "default", Shard: 7, Epoch: 5, Actors: []federation.Actor{a, {Kind: "k", Key: "y"}}, BudgetNs: 1e9},
		&federation.Result{Id: 12, Code: federation.CodeBusy, RetryAfterNs: 5e7},
		&federation.LeaseWitnessRequest{Id: 13, Term: 9},
		&federation.LeaseWitnessReply{Result: federation.Result{Id: 13}, AgeNs: 1_500_000_000},
	}
}

// FuzzMessage: every control frame decodes strictly or not at all, and
// what decodes re-encodes to the same bytes; the endpoint never panics
// on it.
func FuzzMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		b, err := federation.AppendMessage(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	e, err := federation.New(federation.Config{Sender: discard{}, Handler: &handler{}, Codes: codes})
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = e.Handle("peer", b)
		m, err := federation.UnmarshalMessage(b)
		if err != nil {
			return
		}
		out, err := federation.AppendMessage(nil, m)
		if err != nil {
			t.Fatalf("re-encode %T: %v", m, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("not canonical: %x -> %x", b, out)
		}
	})
}

// FuzzStateRecord: the bulk stream's records decode strictly.
func FuzzStateRecord(f *testing.F) {
	r := federation.StateRecord{Group: "default", Shard: 1, Epoch: 2, Seq: 1,
		Actor: federation.Actor{Kind: "k", Key: "x", Incarnation: 1}, State: []byte("state")}
	b, _ := r.MarshalBARE()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r federation.StateRecord
		if err := r.UnmarshalBARE(b); err != nil {
			var de *bare.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a DecodeError", err)
			}
			return
		}
		out, err := r.MarshalBARE()
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("not canonical: %x -> %x (%v)", b, out, err)
		}
	})
}

type discard struct{}

func (discard) SendControlWait(context.Context, string, []byte) error { return nil }
func (discard) SendControl(string, []byte) error                      { return nil }

// An answer is taken only from the peer its request went to: a peer
// that names the id of a request sent elsewhere (ids are sequential, so
// easy to guess) must not complete it, least of all with OK. It is
// counted Late, as an answer to no pending request; answers are not
// counted Received, which counts requests and notices as Sent does.
func TestAnswerFromAnotherPeerIsNotTaken(t *testing.T) {
	p := newPair(t, 0)
	entered, release := make(chan struct{}), make(chan struct{})
	p.hb.forward = func(context.Context, string, *federation.ForwardCommand) error {
		close(entered)
		<-release
		return errStale
	}
	done := make(chan error, 1)
	go func() { done <- p.a.Call(t.Context(), "b", &federation.ForwardCommand{Command: []byte("cmd")}) }()
	<-entered
	for _, m := range []federation.Message{
		&federation.Result{Id: 1, Code: federation.CodeOk},
		&federation.StatusReply{Result: federation.Result{Id: 1, Code: federation.CodeOk}},
	} {
		frame, err := federation.AppendMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.a.Handle("c", frame); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; !errors.Is(err, errStale) {
		t.Fatalf("Call = %v, want b's own answer (errStale), not c's", err)
	}
	if s := p.a.Stats(); s.Late != 2 || s.Received != 0 || s.Sent != 1 {
		t.Fatalf("caller's stats = %+v, want Late 2, Received 0 (answers are not requests), Sent 1", s)
	}
	if s := p.b.Stats(); s.Received != 1 {
		t.Fatalf("callee's stats = %+v, want Received 1", s)
	}
}

// fullSender's control lane is full: SendControlWait waits until its
// context ends. Requests reach the endpoint by Handle.
type fullSender struct{ waited chan error }

func (s fullSender) SendControlWait(ctx context.Context, _ string, _ []byte) error {
	<-ctx.Done()
	s.waited <- ctx.Err()
	return ctx.Err()
}
func (fullSender) SendControl(string, []byte) error { return errors.New("queue full") }

// An answer waiting for room on a full control lane stops waiting when
// the endpoint closes: Close used to wait out DefaultBudget for each.
func TestCloseEndsAnAnswersWaitForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fullSender{waited: make(chan error, 1)}
		ep, err := federation.New(federation.Config{Sender: s, Handler: &handler{}, Codes: codes})
		if err != nil {
			t.Fatal(err)
		}
		frame, err := federation.AppendMessage(nil, &federation.ForwardCommand{Id: 1, Command: []byte("cmd")})
		if err != nil {
			t.Fatal(err)
		}
		if err := ep.Handle("a", frame); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the answer waits for room
		start := time.Now()
		ep.Close()
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("Close waited %v for an answer's room", waited)
		}
		if err := <-s.waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("the answer's wait ended with %v, want context.Canceled by Close", err)
		}
	})
}

// answerSender records the codes of the answers an endpoint sends, by
// peer and request id.
type answerSender struct {
	mu    sync.Mutex
	codes map[string]federation.Code // "peer/id"
}

func (s *answerSender) SendControlWait(_ context.Context, peer string, frame []byte) error {
	return s.SendControl(peer, frame)
}

func (s *answerSender) SendControl(peer string, frame []byte) error {
	m, err := federation.UnmarshalMessage(frame)
	if err != nil {
		return err
	}
	if r, ok := m.(*federation.Result); ok {
		s.mu.Lock()
		s.codes[fmt.Sprintf("%s/%d", peer, r.Id)] = r.Code
		s.mu.Unlock()
	}
	return nil
}

// One peer cannot hold every inbound slot: beyond half of MaxInFlight
// its requests are answered BUSY while another peer's still run (a
// peer sending requests that wait out their budgets would otherwise
// keep every other node's moves and commands BUSY meanwhile).
func TestOnePeerHoldsAtMostHalfTheInboundSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &answerSender{codes: map[string]federation.Code{}}
		release := make(chan struct{})
		h := &handler{forward: func(context.Context, string, *federation.ForwardCommand) error {
			<-release
			return nil
		}}
		ep, err := federation.New(federation.Config{Sender: s, Handler: h, Codes: codes, MaxInFlight: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		send := func(peer string, id uint64) {
			frame, err := federation.AppendMessage(nil, &federation.ForwardCommand{Id: id, Command: []byte("cmd")})
			if err != nil {
				t.Fatal(err)
			}
			if err := ep.Handle(peer, frame); err != nil {
				t.Fatal(err)
			}
		}
		for id := uint64(1); id <= 3; id++ {
			send("x", id)
		}
		send("y", 1)
		synctest.Wait()
		close(release)
		synctest.Wait()
		want := map[string]federation.Code{"x/1": federation.CodeOk, "x/2": federation.CodeOk, "x/3": federation.CodeBusy, "y/1": federation.CodeOk}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !maps.Equal(s.codes, want) {
			t.Fatalf("answers = %v, want %v", s.codes, want)
		}
	})
}
