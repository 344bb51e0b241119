package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/clock"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Sender is what an Endpoint needs of the transport: the control lane of
// the link to a peer. *wire.QUIC and *wire.Mem implement it.
type Sender interface {
	// SendControlWait queues frame on the control lane to peer, waiting
	// while the lane's queue is full, until ctx ends; while there is room
	// it queues at once, even with ctx ended.
	SendControlWait(ctx context.Context, peer string, frame []byte) error
	// SendControl queues frame without waiting (ErrQueueFull-like errors
	// when the queue is full).
	SendControl(peer string, frame []byte) error
}

// Handler answers the requests peers send. Every method but HandoffAbort
// runs in a goroutine of its own, under a context that ends
// when the request's budget runs out or the Endpoint closes; the error
// it returns is the answer (nil: OK), classified by the Codes table.
// Methods are called concurrently.
type Handler interface {
	Forward(ctx context.Context, from string, m *ForwardCommand) error
	Move(ctx context.Context, from string, m *MoveRequest) error
	HandoffBegin(ctx context.Context, from string, m *HandoffBegin) error
	HandoffDone(ctx context.Context, from string, m *HandoffDone) error
	Status(ctx context.Context, from string, m *StatusRequest) (StatusReply, error)
	Passivate(ctx context.Context, from string, m *PassivateRequest) error
	ReminderList(ctx context.Context, from string, m *ReminderListRequest) (ReminderListReply, error)
	ReminderCancel(ctx context.Context, from string, m *ReminderCancelRequest) error
	// Hydrate schedules the activation of the identities a planned move's
	// old owner names; an error wrapping a RetryAfter value (see Busy)
	// answers BUSY with its delay.
	Hydrate(ctx context.Context, from string, m *HydrateRequest) error
	// LeaseWitness answers a new raft leader's question about the terms
	// before its own (placement's Node.Witness).
	LeaseWitness(ctx context.Context, from string, m *LeaseWitnessRequest) (LeaseWitnessReply, error)
	// HandoffAbort is a notice with no answer; it runs on the control
	// lane's reader and must not block.
	HandoffAbort(from string, m *HandoffAbort)
	// CancelAsk is a notice: from's caller gave up on the ask m.Id it
	// sent here. It drops the ask if its turn has not started and returns
	// OK, else UNKNOWN_ASK (answered or started already, withdrawn
	// before: a replay, or never received); the Endpoint counts the
	// outcome in Stats.Noticed. It runs on the control lane's reader and
	// must not block.
	CancelAsk(from string, m *CancelAsk) Code
}

// Defaults for Config.
const (
	DefaultMaxInFlight = 256
	DefaultBudget      = 10 * time.Second
	// MaxBudget bounds the budget a request may ask for.
	MaxBudget = 5 * time.Minute
)

// Config configures an Endpoint.
type Config struct {
	// Sender sends control frames. Required.
	Sender Sender
	// Handler answers inbound requests. Required.
	Handler Handler
	// Codes maps answer codes to sentinels. Required (may be empty).
	Codes Codes
	// Unavailable is the sentinel that a request whose link went down
	// also matches (the transport's "peer unavailable"); nil: none.
	Unavailable error
	// MaxInFlight bounds inbound requests being handled at once, and half
	// of it those of one peer; beyond it requests are answered BUSY
	// (default 256).
	MaxInFlight int
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Clock times the waits a BUSY answer asks for (default the wall
	// clock); budgets and deadlines are contexts'.
	Clock clock.Clock
}

// Stats are an Endpoint's cumulative counters.
type Stats struct {
	// Sent counts requests and notices sent; Received those received.
	Sent, Received uint64
	// Answered counts answers sent, by code (index by Code); Refused is
	// the sum of every code but OK.
	Answered [numCodes]uint64
	Refused  uint64
	// Malformed counts control frames that did not decode (the lane was
	// reset); Late counts answers to no request pending for their
	// sender (ended already, or never sent to it).
	Malformed, Late uint64
	// Unanswered counts requests failed because their link went down.
	Unanswered uint64
	// Noticed counts the notices received that the Handler judged, by
	// outcome (CancelAsk: OK when the ask was dropped, UNKNOWN_ASK when no
	// such ask waited; index by Code).
	Noticed [numCodes]uint64
	// NoticesDropped counts notices not sent because the control lane's
	// queue was full (NotifyNow).
	NoticesDropped uint64
}

// numCodes is the number of declared codes.
const numCodes = int(CodeSyncHeld) + 1

// Endpoint is one node's end of the federation protocol: it sends
// requests to peers' endpoints and waits for their answers, and hands
// the requests peers send to the Handler, answering each with a code.
//
// Wire Handle as the mail layer's control-lane handler and LinkDown to
// the transport's link-down events. Close stops the goroutines it
// started.
type Endpoint struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	nextID  atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]*call
	active  map[inboundKey]struct{} // inbound requests being handled
	byPeer  map[string]int          // of them, by peer
	closed  bool

	sent, received, refused, malformed, late, unanswered atomic.Uint64
	answered, noticed                                    [numCodes]atomic.Uint64
	noticesDropped                                       atomic.Uint64
}

type call struct {
	peer string
	ch   chan Message // an answer: Result, StatusReply or ReminderListReply; buffered 1
	err  error        // set before ch is closed when unanswered
}

type inboundKey struct {
	from string
	id   uint64
}

// New returns an Endpoint for cfg.
func New(cfg Config) (*Endpoint, error) {
	switch {
	case cfg.Sender == nil:
		return nil, fmt.Errorf("%w: Sender is required", ErrBadConfig)
	case cfg.Handler == nil:
		return nil, fmt.Errorf("%w: Handler is required", ErrBadConfig)
	case cfg.MaxInFlight < 0:
		return nil, fmt.Errorf("%w: negative MaxInFlight", ErrBadConfig)
	}
	if err := cfg.Codes.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Endpoint{cfg: cfg, log: log, pending: map[uint64]*call{}, active: map[inboundKey]struct{}{}, byPeer: map[string]int{}}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	return e, nil
}

// Stats returns the endpoint's counters.
func (e *Endpoint) Stats() Stats {
	s := Stats{Sent: e.sent.Load(), Received: e.received.Load(), Refused: e.refused.Load(),
		Malformed: e.malformed.Load(), Late: e.late.Load(), Unanswered: e.unanswered.Load()}
	for i := range s.Answered {
		s.Answered[i] = e.answered[i].Load()
		s.Noticed[i] = e.noticed[i].Load()
	}
	s.NoticesDropped = e.noticesDropped.Load()
	return s
}

// Close fails every pending request with ErrUnanswered, cancels the
// handlers running and waits for them. It is idempotent.
func (e *Endpoint) Close() {
	e.mu.Lock()
	e.closed = true
	for id, c := range e.pending {
		delete(e.pending, id)
		c.err = ErrUnanswered
		close(c.ch)
	}
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
}

// LinkDown fails every request pending at peer: its answer, if any, was
// lost with the link.
func (e *Endpoint) LinkDown(peer string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, c := range e.pending {
		if c.peer == peer {
			delete(e.pending, id)
			c.err = e.unansweredErr(peer)
			// Counted before the caller is woken, so that a caller that
			// sees its request unanswered sees it counted too.
			e.unanswered.Add(1)
			close(c.ch)
		}
	}
}

func (e *Endpoint) unansweredErr(peer string) error {
	if e.cfg.Unavailable != nil {
		return fmt.Errorf("%w (%s: %w)", ErrUnanswered, peer, e.cfg.Unavailable)
	}
	return fmt.Errorf("%w (%s)", ErrUnanswered, peer)
}

// Request is a message that is answered: *ForwardCommand, *MoveRequest,
// *HandoffBegin, *HandoffDone, *StatusRequest, *PassivateRequest,
// *ReminderListRequest, *ReminderCancelRequest, *HydrateRequest or
// *LeaseWitnessRequest. Call sets its id.
type Request interface {
	Message
	setID(uint64)
}

func (m *ForwardCommand) setID(id uint64)        { m.Id = id }
func (m *MoveRequest) setID(id uint64)           { m.Id = id }
func (m *HandoffBegin) setID(id uint64)          { m.Id = id }
func (m *HandoffDone) setID(id uint64)           { m.Id = id }
func (m *StatusRequest) setID(id uint64)         { m.Id = id }
func (m *PassivateRequest) setID(id uint64)      { m.Id = id }
func (m *ReminderListRequest) setID(id uint64)   { m.Id = id }
func (m *ReminderCancelRequest) setID(id uint64) { m.Id = id }
func (m *HydrateRequest) setID(id uint64)        { m.Id = id }
func (m *LeaseWitnessRequest) setID(id uint64)   { m.Id = id }

// resultOf returns the Result an answer carries (nil: m is no answer).
func resultOf(m Message) *Result {
	switch x := m.(type) {
	case *Result:
		return x
	case *StatusReply:
		return &x.Result
	case *ReminderListReply:
		return &x.Result
	case *LeaseWitnessReply:
		return &x.Result
	}
	return nil
}

// Call sends req to peer and waits for its answer until ctx ends. It
// returns nil when the peer answered OK, an *Error when it answered
// another code, and otherwise the transport's error, ctx's, or
// ErrUnanswered.
func (e *Endpoint) Call(ctx context.Context, peer string, req Request) error {
	_, err := e.call(ctx, peer, req)
	return err
}

// CallRetrying is Call that honours a BUSY answer with a retry-after
// delay: it waits that long and sends req again (with a new id), as long
// as the delay ends before ctx's deadline; otherwise it returns the BUSY
// *Error. A BUSY answer without a delay is returned at once. It returns
// the number of BUSY answers it waited out too.
func (e *Endpoint) CallRetrying(ctx context.Context, peer string, req Request) (retries int, err error) {
	for {
		err = e.Call(ctx, peer, req)
		var fe *Error
		if !errors.As(err, &fe) || fe.Code != CodeBusy || fe.RetryAfter <= 0 {
			return retries, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= fe.RetryAfter {
			return retries, err
		}
		t, stop := e.cfg.Clock.NewTimer(fe.RetryAfter)
		select {
		case <-t:
		case <-ctx.Done():
			stop()
			return retries, err
		case <-e.ctx.Done():
			stop()
			return retries, ErrUnanswered
		}
		retries++
	}
}

// Status sends a StatusRequest to peer and returns its reply (see Call
// for the errors).
func (e *Endpoint) Status(ctx context.Context, peer string, req *StatusRequest) (*StatusReply, error) {
	m, err := e.call(ctx, peer, req)
	if err != nil {
		return nil, err
	}
	sr, ok := m.(*StatusReply)
	if !ok {
		return nil, &Error{Code: CodeBadRequest, Detail: "a status request answered without a status"}
	}
	return sr, nil
}

// ReminderList sends a ReminderListRequest to peer and returns its reply
// (see Call for the errors).
func (e *Endpoint) ReminderList(ctx context.Context, peer string, req *ReminderListRequest) (*ReminderListReply, error) {
	m, err := e.call(ctx, peer, req)
	if err != nil {
		return nil, err
	}
	r, ok := m.(*ReminderListReply)
	if !ok {
		return nil, &Error{Code: CodeBadRequest, Detail: "a reminder list request answered without a list"}
	}
	return r, nil
}

// LeaseWitness sends a LeaseWitnessRequest to peer and returns how long
// before its answer, on its clock, the peer last accepted or sent a
// heartbeat of a term below term (see Call for the errors).
func (e *Endpoint) LeaseWitness(ctx context.Context, peer string, term uint64) (time.Duration, error) {
	m, err := e.call(ctx, peer, &LeaseWitnessRequest{Term: term})
	if err != nil {
		return 0, err
	}
	r, ok := m.(*LeaseWitnessReply)
	if !ok || r.AgeNs > math.MaxInt64 {
		return 0, &Error{Code: CodeBadRequest, Detail: "a lease witness request answered without an age"}
	}
	return time.Duration(r.AgeNs), nil
}

func (e *Endpoint) call(ctx context.Context, peer string, req Request) (Message, error) {
	id := e.nextID.Add(1)
	req.setID(id)
	frame, err := AppendMessage(nil, req)
	if err != nil {
		return nil, err
	}
	c := &call{peer: peer, ch: make(chan Message, 1)}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrUnanswered
	}
	e.pending[id] = c
	e.mu.Unlock()
	forget := func() {
		e.mu.Lock()
		delete(e.pending, id)
		e.mu.Unlock()
	}
	if err := e.cfg.Sender.SendControlWait(ctx, peer, frame); err != nil {
		forget()
		return nil, err
	}
	e.sent.Add(1)
	select {
	case m, ok := <-c.ch:
		if !ok {
			return nil, c.err
		}
		if err := e.cfg.Codes.Err(resultOf(m)); err != nil {
			return nil, err
		}
		return m, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}

// Notify sends a notice (*HandoffAbort, *CancelAsk) to peer, waiting for
// room on the control lane until ctx ends; no answer comes. A nil error
// means queued.
func (e *Endpoint) Notify(ctx context.Context, peer string, m Message) error {
	frame, err := noticeFrame(m)
	if err != nil {
		return err
	}
	if err := e.cfg.Sender.SendControlWait(ctx, peer, frame); err != nil {
		return err
	}
	e.sent.Add(1)
	return nil
}

// NotifyNow is Notify without waiting: a notice that finds the control
// lane's queue full is dropped and counted (Stats.NoticesDropped). For
// notices whose loss costs only what they would have saved (CancelAsk).
func (e *Endpoint) NotifyNow(peer string, m Message) error {
	frame, err := noticeFrame(m)
	if err != nil {
		return err
	}
	if err := e.cfg.Sender.SendControl(peer, frame); err != nil {
		e.noticesDropped.Add(1)
		return err
	}
	e.sent.Add(1)
	return nil
}

func noticeFrame(m Message) ([]byte, error) {
	switch m.(type) {
	case *HandoffAbort, *CancelAsk:
	default:
		return nil, fmt.Errorf("%w: %T is not a notice", ErrBadConfig, m)
	}
	return AppendMessage(nil, m)
}

// Handle takes one control-lane frame from peer from. A frame that does
// not decode (unknown tag, malformed, trailing bytes) returns an error,
// so that the transport resets the lane and counts it; everything else
// is answered or acted on. Handle never blocks on a request: requests run
// in goroutines of their own, bounded by MaxInFlight.
func (e *Endpoint) Handle(from string, frame []byte) error {
	var d bare.Decoder
	d.Reset(frame, bare.Config{MaxMessageBytes: len(frame) + 1})
	m := DecodeMessage(&d)
	if err := d.Finish(); err != nil {
		e.malformed.Add(1)
		return fmt.Errorf("federation: control frame from %s: %w", from, err)
	}
	switch x := m.(type) {
	case *Result, *StatusReply, *ReminderListReply, *LeaseWitnessReply:
		e.complete(from, resultOf(x).Id, x)
		return nil
	}
	e.received.Add(1)
	switch x := m.(type) {
	case *HandoffAbort:
		e.cfg.Handler.HandoffAbort(from, x)
	case *CancelAsk:
		if c := e.cfg.Handler.CancelAsk(from, x); int(c) < numCodes {
			e.noticed[c].Add(1)
		}
	case *ForwardCommand:
		e.serve(from, x.Id, x.BudgetNs, func(ctx context.Context) (Message, error) {
			return nil, e.cfg.Handler.Forward(ctx, from, x)
		})
	case *MoveRequest:
		e.serve(from, x.Id, x.BudgetNs, func(ctx context.Context) (Message, error) {
			return nil, e.cfg.Handler.Move(ctx, from, x)
		})
	case *HandoffBegin:
		e.serve(from, x.Id, x.BudgetNs, func(ctx context.Context) (Message, error) {
			return nil, e.cfg.Handler.HandoffBegin(ctx, from, x)
		})
	case *HandoffDone:
		e.serve(from, x.Id, x.BudgetNs, func(ctx context.Context) (Message, error) {
			return nil, e.cfg.Handler.HandoffDone(ctx, from, x)
		})
	case *StatusRequest:
		e.serve(from, x.Id, 0, func(ctx context.Context) (Message, error) {
			r, err := e.cfg.Handler.Status(ctx, from, x)
			if err != nil {
				return nil, err
			}
			return &r, nil
		})
	case *PassivateRequest:
		e.serve(from, x.Id, x.BudgetNs, func(ctx context.Context) (Message, error) {
			return nil, e.cfg.Handler.Passivate(ctx, from, x)
		})
	case *ReminderListRequest:
		e.serve(from, x.Id, 0, func(ctx context.Context) (Message, error) {
			r, err := e.cfg.Handler.ReminderList(ctx, from, x)
			if err != nil {
				return nil, err
			}
			return &r, nil
		})
	case *ReminderCancelRequest:
		e.serve(from, x.Id, x.BudgetNs, func(ctx context.Context) (Message, error) {
			return nil, e.cfg.Handler.ReminderCancel(ctx, from, x)
		})
	case *HydrateRequest:
		e.serve(from, x.Id, x.BudgetNs, func(ctx context.Context) (Message, error) {
			return nil, e.cfg.Handler.Hydrate(ctx, from, x)
		})
	case *LeaseWitnessRequest:
		e.serve(from, x.Id, 0, func(ctx context.Context) (Message, error) {
			r, err := e.cfg.Handler.LeaseWitness(ctx, from, x)
			if err != nil {
				return nil, err
			}
			return &r, nil
		})
	}
	return nil
}

// complete hands an answer from peer from to its pending call: one sent
// to that peer. Request ids are sequential, so a peer could name the id
// of a request sent to another; that answer is not taken.
func (e *Endpoint) complete(from string, id uint64, m Message) {
	e.mu.Lock()
	c, ok := e.pending[id]
	if ok && c.peer != from {
		ok = false
	} else {
		delete(e.pending, id)
	}
	e.mu.Unlock()
	if !ok {
		e.late.Add(1)
		return
	}
	c.ch <- m
}

// serve runs one inbound request in a goroutine of its own and sends its
// answer. A request beyond MaxInFlight, or beyond half of it from one
// peer (so that no peer can keep the others' requests BUSY), is
// answered BUSY, one whose id is already being handled for the same
// peer DUPLICATE, without running.
func (e *Endpoint) serve(from string, id, budgetNs uint64, run func(context.Context) (Message, error)) {
	key := inboundKey{from, id}
	e.mu.Lock()
	var refuse Code
	switch {
	case e.closed:
		refuse = CodeClosed
	case len(e.active) >= e.cfg.MaxInFlight, e.byPeer[from] >= max(e.cfg.MaxInFlight/2, 1):
		refuse = CodeBusy
	default:
		if _, dup := e.active[key]; dup {
			refuse = CodeDuplicate
		}
	}
	if refuse != CodeOk {
		e.mu.Unlock()
		// On the lane's reader: queue the refusal without waiting.
		e.answer(from, nil, Result{Id: id, Code: refuse, Detail: refuse.String()}, false)
		return
	}
	e.active[key] = struct{}{}
	e.byPeer[from]++
	e.wg.Add(1)
	e.mu.Unlock()
	budget := DefaultBudget
	if budgetNs > 0 {
		budget = min(time.Duration(min(budgetNs, uint64(MaxBudget))), MaxBudget)
	}
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(e.ctx, budget)
		defer cancel()
		m, err := run(ctx)
		e.mu.Lock()
		delete(e.active, key)
		if e.byPeer[from]--; e.byPeer[from] == 0 {
			delete(e.byPeer, from)
		}
		e.mu.Unlock()
		e.answer(from, m, e.cfg.Codes.Result(id, err), true)
	}()
}

// answer sends res (or m, a reply carrying it) to peer. With wait it
// waits for room on the control lane at most DefaultBudget, and not past
// Close: an answer that cannot be queued by then is lost, and the
// caller's own deadline or link-down event ends its wait.
func (e *Endpoint) answer(peer string, m Message, res Result, wait bool) {
	if int(res.Code) < len(e.answered) {
		e.answered[res.Code].Add(1)
	}
	if res.Code != CodeOk {
		e.refused.Add(1)
	}
	if r := resultOf(m); r != nil && res.Code == CodeOk {
		*r = res
	} else {
		m = &res // a refusal carries no reply's body
	}
	frame, err := AppendMessage(nil, m)
	if err != nil {
		e.log.LogAttrs(context.Background(), slog.LevelWarn, "federation: answer does not encode",
			slog.String("peer", peer), slog.Any("error", err))
		return
	}
	if !wait {
		err = e.cfg.Sender.SendControl(peer, frame)
	} else {
		// Close ends the wait for room (an answer is queued at once
		// while there is room): its callers learn the rest from their
		// link going down, and Close does not wait a budget per answer.
		ctx, cancel := context.WithTimeout(e.ctx, DefaultBudget)
		err = e.cfg.Sender.SendControlWait(ctx, peer, frame)
		cancel()
	}
	if err != nil {
		e.log.LogAttrs(context.Background(), slog.LevelDebug, "federation: answer not sent",
			slog.String("peer", peer), slog.String("code", res.Code.String()), slog.Any("error", err))
	}
}
