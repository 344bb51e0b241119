package wire

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/ratelog"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Mail layer errors.
var (
	// ErrDuplicateAsk: an ask id is already pending.
	ErrDuplicateAsk = errors.New("wire: ask id already pending")
	// ErrNotAttached: the Mailer has no transport yet (see Attach).
	ErrNotAttached error = &kindError{"wire: mailer has no transport", actor.ErrProcessUnavailable}
	// ErrBadActorID: an ActorID on the wire names no actor.
	ErrBadActorID = errors.New("wire: malformed actor id")
	// ErrAskGivenUp: an ask was not sent because its caller gave up on
	// it while it was being sent (MailConfig.Ended).
	ErrAskGivenUp = errors.New("wire: the ask's caller gave up on it before it was sent")
)

// RefusedError is how a remote refusal of an ask reaches the asker. It
// matches the actor sentinel of its reason (errors.Is): MAILBOX_FULL and
// NODE_OVERLOADED match actor.ErrRefused, UNKNOWN_KIND
// actor.ErrUnknownKind, EXPIRED actor.ErrDeadlineExceeded,
// TERMINATED_INCARNATION actor.ErrActorTerminated, and NOT_OWNER
// ErrNotOwner (the sender routed by a stale placement; OwnerHint names the
// node to try, when the refuser knows it).
type RefusedError struct {
	Node      string // the refusing node
	Reason    RefusedReason
	OwnerHint string
	Detail    string
	// RetryAfter (BUSY) is how long the refuser asks the sender to wait
	// before it sends again (0: no advice).
	RetryAfter time.Duration
}

// ErrNotOwner is the sentinel of a NOT_OWNER refusal. It matches
// actor.ErrProcessUnavailable: the message was not handled and the
// caller's routing is out of date.
var ErrNotOwner error = &kindError{"wire: node does not own the actor", actor.ErrProcessUnavailable}

// ErrNotServing is the sentinel of a NOT_SERVING refusal: the node that
// owns the actor cannot serve it for a moment (its placement lease is not
// fresh, its table is behind, the shard is moving). It matches
// actor.ErrProcessUnavailable; the message was not handled, and a sender
// may try again within its deadline.
var ErrNotServing error = &kindError{"wire: owner not serving now", actor.ErrProcessUnavailable}

// NotServing returns the admission error a LocalDelivery gives while it
// owns to but cannot serve it (see ErrNotServing); cause says why.
func NotServing(cause error) error {
	return &RefusedError{Reason: RefusedReasonNotServing, Detail: cause.Error()}
}

// ErrBusy is the sentinel of a BUSY refusal: the message needs an
// activation and the owner is over its hydration backlog. It matches
// actor.ErrRefused; the message was not handled, and a sender may try
// again after RefusedError.RetryAfter, within its deadline.
var ErrBusy error = &kindError{"wire: owner busy hydrating", actor.ErrRefused}

// Busy returns the admission error a LocalDelivery gives for mail that
// would need an activation while it is over its hydration backlog:
// retryAfter is the wait it asks for; why says what it is over.
func Busy(retryAfter time.Duration, why string) error {
	return &RefusedError{Reason: RefusedReasonBusy, RetryAfter: max(retryAfter, 0), Detail: why}
}

func (e *RefusedError) Error() string {
	s := "wire: refused: " + e.Reason.String()
	if e.Node != "" {
		s = "wire: refused by " + e.Node + ": " + e.Reason.String()
	}
	if e.OwnerHint != "" {
		s += " (owner " + e.OwnerHint + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.RetryAfter > 0 {
		s += " (retry after " + e.RetryAfter.String() + ")"
	}
	return s
}

// Unwrap returns the sentinel of the reason.
func (e *RefusedError) Unwrap() error { return reasonSentinel(e.Reason) }

func reasonSentinel(r RefusedReason) error {
	switch r {
	case RefusedReasonMailboxFull, RefusedReasonNodeOverloaded:
		return actor.ErrRefused
	case RefusedReasonUnknownKind:
		return actor.ErrUnknownKind
	case RefusedReasonExpired:
		return actor.ErrDeadlineExceeded
	case RefusedReasonTerminatedIncarnation:
		return actor.ErrActorTerminated
	case RefusedReasonNotOwner:
		return ErrNotOwner
	case RefusedReasonCallChainTooLong:
		return actor.ErrCallChainTooLong
	case RefusedReasonNotServing:
		return ErrNotServing
	case RefusedReasonBusy:
		return ErrBusy
	}
	return actor.ErrRefused
}

// Resendable reports whether a message refused for reason was certainly
// not run and may be sent again by a table that routes it better or once
// the owner serves again: NOT_OWNER, NOT_SERVING and BUSY. A refused tell
// from program code echoes its body for these only.
func (r RefusedReason) Resendable() bool {
	return r == RefusedReasonNotOwner || r == RefusedReasonNotServing || r == RefusedReasonBusy
}

// NotOwner returns the admission error a LocalDelivery gives for an actor
// this node does not own: the sender gets a NOT_OWNER refusal naming owner
// (empty when unknown) as the node to try.
func NotOwner(owner string) error {
	return &RefusedError{Reason: RefusedReasonNotOwner, OwnerHint: owner}
}

// NotRun marks err as the refusal of an ask that a LocalDelivery admitted
// and then did not run (its activation fence, checked once the ask
// waited for an activation, refused it): given to the ask's reply
// function, it reaches the asker as a Refused built from err, exactly as
// if admission had returned err, and never as a Reply. The asker's node
// so sends it again under its retry policy when err's reason is
// resendable (RefusedReason.Resendable), as for any refusal. errors.Is
// and errors.As see err through it. An actor's reply error never takes
// this form: only the delivery makes it, and a scheduler hands it only to
// the reply function of an ask from another node (ariel strips it, see
// Unmarked, for every asker of its own node, so that an actor that
// replies an error it was given cannot pass the mark on).
func NotRun(err error) error { return &notRunError{err} }

// IsNotRun reports whether err is NotRun's mark (not wrapped): the
// refusal of mail admitted and then not run.
func IsNotRun(err error) bool {
	_, ok := err.(*notRunError)
	return ok
}

type notRunError struct{ err error }

func (e *notRunError) Error() string { return e.err.Error() }
func (e *notRunError) Unwrap() error { return e.err }

// Unmarked is err without the mark: what an asker on the refusing node
// itself is given (the scheduler strips the mark for every asker but the
// reply function of an ask from another node), so that no actor can reply
// the mark as its own error.
func (e *notRunError) Unmarked() error { return e.err }

// refusalOf builds the refusal of an admission error.
func refusalOf(err error, to ActorID, tag uint32) Refused {
	r := Refused{To: to, Tag: tag, Reason: reasonOf(err), Detail: err.Error()}
	var re *RefusedError
	if errors.As(err, &re) {
		r.Reason, r.OwnerHint, r.Detail = re.Reason, re.OwnerHint, re.Detail
		r.RetryAfterNs = uint64(max(re.RetryAfter, 0))
	}
	return r
}

// reasonOf maps a local admission error to the refusal a peer sees.
func reasonOf(err error) RefusedReason {
	switch {
	case errors.Is(err, ErrUnknownTag), errors.Is(err, actor.ErrUnknownKind), errors.Is(err, ErrUnregistered):
		return RefusedReasonUnknownKind // a message the owner cannot take: final, never sent again
	case errors.Is(err, actor.ErrCallChainTooLong):
		return RefusedReasonCallChainTooLong
	case errors.Is(err, actor.ErrDeadlineExceeded):
		return RefusedReasonExpired
	case errors.Is(err, actor.ErrActorTerminated):
		return RefusedReasonTerminatedIncarnation
	case errors.Is(err, actor.ErrProcessUnavailable):
		return RefusedReasonNotOwner
	case errors.Is(err, actor.ErrRefused):
		return RefusedReasonMailboxFull
	}
	return RefusedReasonNodeOverloaded
}

// LocalDelivery hands mail that arrived from a peer to a local actor.
// *ariel.Scheduler implements it (Scheduler.Deliver); the node may wrap it.
type LocalDelivery interface {
	// Deliver admits msg for to, from the remote sender from (zero if
	// none). For a tell reply is nil. For an ask, reply is called once with
	// the answer or an error, at the latest at deadline, from any
	// goroutine; it must not be called after Deliver returned an error
	// (the Mailer tolerates it: the first answer wins). The error is the
	// admission outcome (actor sentinels: ErrRefused for a full mailbox,
	// ErrUnknownKind, ErrActorTerminated, ErrProcessUnavailable when the
	// actor is not on this node). An ask admitted and then refused
	// without running is answered with NotRun(refusal): its sender gets
	// a Refused, as for an admission error.
	Deliver(to, from actor.Ref, msg any, deadline time.Time, reply func(any, error)) error
}

// AskDelivery is an optional extension of LocalDelivery for asks whose
// caller may withdraw them: a Mailer whose LocalDelivery implements it
// hands every inbound ask to DeliverAsk (chain and trace nil when the ask
// carries none) instead of Deliver, ChainDelivery or TraceDelivery, and
// keeps the returned Withdrawer until the ask is answered, so that
// Mailer.Withdraw (the caller's CancelAsk) and the caller's link going
// down drop it if its turn has not started. epoch is the ask's placement
// stamp (0: unstamped): the Mailer does not call Fence for an ask it hands
// to an AskDelivery, which fences the stamp itself, by EpochFence's rules,
// in the same lookup as its admission.
type AskDelivery interface {
	DeliverAsk(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, trace *TraceContext, epoch uint64, reply func(any, error)) (Withdrawer, error)
}

// Withdrawer withdraws one admitted ask (*ariel.QueuedAsk's form).
type Withdrawer interface {
	// Withdraw drops the ask if its turn has not started, and reports
	// whether it did; its reply function is then never called. Safe
	// from any goroutine; a second call returns false.
	Withdraw() bool
}

// EpochFence is an optional extension of LocalDelivery: a Mailer whose
// LocalDelivery implements it calls Fence for every inbound tell and ask
// stamped with a placement epoch (non-zero), before admitting it (but for
// an ask it hands to an AskDelivery, which fences the stamp itself). Fence
// returns nil when this node may run mail for to routed at epoch, and
// otherwise the admission error the sender gets back: NotOwner(owner)
// for a stale epoch, so the sender catches up and retries at the right
// node. Unstamped mail is admitted by Deliver (or the Inbox) alone.
type EpochFence interface {
	Fence(to actor.Ref, epoch uint64) error
}

// fence checks a stamped epoch with the LocalDelivery's EpochFence.
func (m *Mailer) fence(to actor.Ref, epoch uint64) error {
	if epoch == 0 || m.fences == nil {
		return nil
	}
	return m.fences.Fence(to, epoch)
}

// Defaults for MailConfig.
const (
	DefaultMaxInboundBytes = 64 << 20
	DefaultSweepInterval   = 100 * time.Millisecond
)

// MailConfig configures a Mailer. Zero fields take defaults.
type MailConfig struct {
	// Registry maps message types to tags. Required.
	Registry *Registry
	// Local receives inbound mail. Required.
	Local LocalDelivery
	// Complete receives the outcome of every ask sent with Mailer.Ask:
	// the reply, or an error (a *RefusedError, a *RemoteError, or
	// ErrDeadlineExceeded, ErrProcessUnavailable-matching errors when the
	// deadline passes or the link goes down). It is called at most once
	// per id, from transport or Mailer goroutines, and must not block.
	// Required.
	Complete func(id uint64, reply any, err error)
	// Undelivered, if set, is told about a tell from a local actor (from)
	// that a peer refused, and about a tell from program code (from zero)
	// that a peer refused without running it (NOT_OWNER, NOT_SERVING: see
	// RefusedReason.Resendable), so that it can be sent again; msg is the
	// message when it could be decoded again. It must not block.
	Undelivered func(from, to actor.Ref, msg any, err error)
	// Expired, if set, is told about each ask failed by the sweep at its
	// deadline, and the peer it was sent to, so that the caller's node can
	// withdraw it there. It must not block.
	Expired func(peer string, id uint64)
	// Ended, if set, reports whether nobody waits for the ask id any more
	// (its caller gave up on it, or it was answered). An ask is checked
	// once it is registered, just before it is sent: one that ended
	// meanwhile is not sent (ErrAskGivenUp). A caller that gives up calls
	// Forget, which finds nothing to withdraw before the registration, so
	// without the check an ask given up on while it was on its way would
	// run on its owner. It must be fast and must not block.
	Ended func(id uint64) bool
	// Control, if set, receives the frames of the control lane
	// (supervisor traffic, in the federation protocol's own schema); the
	// frame is valid only until it returns, and it must not block. An
	// error resets the lane like a malformed frame. Without it control
	// frames are counted and ignored.
	Control func(from string, frame []byte) error
	// MaxInboundBytes bounds the bytes of inbound asks admitted and not
	// yet answered; beyond it asks are refused NODE_OVERLOADED (default
	// 64 MiB). Inbound tells are bounded by the recipients' mailboxes.
	MaxInboundBytes int
	// SweepInterval is how often pending asks are checked against their
	// deadlines (default 100ms). The local scheduler fails an ask at its
	// deadline on its own; the sweep frees the table entry and serves
	// callers without such a timer.
	SweepInterval time.Duration
	// Clock defaults to the wall clock.
	Clock Clock
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// DefaultMailConfig returns the defaults; callers still set Registry,
// Local and Complete.
func DefaultMailConfig() MailConfig {
	return MailConfig{
		MaxInboundBytes: DefaultMaxInboundBytes,
		SweepInterval:   DefaultSweepInterval,
		Clock:           RealClock(),
	}
}

// Validate reports missing or out-of-range fields.
func (c MailConfig) Validate() error {
	switch {
	case c.Registry == nil:
		return errors.New("wire: MailConfig.Registry is required")
	case c.Local == nil:
		return errors.New("wire: MailConfig.Local is required")
	case c.Complete == nil:
		return errors.New("wire: MailConfig.Complete is required")
	case c.MaxInboundBytes < 0 || c.SweepInterval < 0:
		return errors.New("wire: MailConfig limits must not be negative")
	}
	return nil
}

func (c MailConfig) withDefaults() MailConfig {
	d := DefaultMailConfig()
	if c.MaxInboundBytes == 0 {
		c.MaxInboundBytes = d.MaxInboundBytes
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = d.SweepInterval
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// numRefusedReasons is the number of RefusedReason values.
const numRefusedReasons = RefusedReasonBusy + 1

// maxRetryAfter bounds the wait a BUSY refusal can ask of a sender.
const maxRetryAfter = time.Minute

// RefusalCounts counts refusals by reason. Read it with the named methods
// or index it by RefusedReason.
type RefusalCounts [numRefusedReasons]uint64

// Of returns the count of reason r (0 for a reason this node does not know).
func (c RefusalCounts) Of(r RefusedReason) uint64 {
	if r < numRefusedReasons {
		return c[r]
	}
	return 0
}

// MailboxFull counts refusals because the recipient's mailbox was full.
func (c RefusalCounts) MailboxFull() uint64 { return c[RefusedReasonMailboxFull] }

// NodeOverloaded counts refusals because the node held too many inbound bytes.
func (c RefusalCounts) NodeOverloaded() uint64 { return c[RefusedReasonNodeOverloaded] }

// UnknownKind counts refusals of a kind or message tag the node does not know.
func (c RefusalCounts) UnknownKind() uint64 { return c[RefusedReasonUnknownKind] }

// Expired counts asks refused because their deadline had passed.
func (c RefusalCounts) Expired() uint64 { return c[RefusedReasonExpired] }

// TerminatedIncarnation counts mail refused for a re-minted incarnation.
func (c RefusalCounts) TerminatedIncarnation() uint64 {
	return c[RefusedReasonTerminatedIncarnation]
}

// NotOwner counts mail refused because the node does not own the shard.
func (c RefusalCounts) NotOwner() uint64 { return c[RefusedReasonNotOwner] }

// CallChainTooLong counts asks refused because their call chain was too long.
func (c RefusalCounts) CallChainTooLong() uint64 { return c[RefusedReasonCallChainTooLong] }

// NotServing counts refusals by an owner that could not serve for a
// moment (lease not fresh, table behind, shard moving).
func (c RefusalCounts) NotServing() uint64 { return c[RefusedReasonNotServing] }

// Busy counts mail refused because it needed an activation while the
// owner was over its hydration backlog.
func (c RefusalCounts) Busy() uint64 { return c[RefusedReasonBusy] }

// MailStats are cumulative mail counters.
type MailStats struct {
	TellsSent, AsksSent, RepliesSent  uint64
	TellsReceived, AsksReceived       uint64
	RepliesReceived, RefusalsReceived uint64
	RefusalsSent                      uint64
	// RefusedOut and RefusedIn count refusals sent and received, by
	// reason (RefusedIn.MailboxFull(), or indexed by RefusedReason).
	RefusedOut, RefusedIn RefusalCounts
	// DecodeErrors counts frames whose envelope failed to decode (the
	// lane was reset); BodyErrors counts message bodies that failed to
	// decode (refused UNKNOWN_KIND, the lane kept).
	DecodeErrors, BodyErrors uint64
	// UnknownTags counts inbound messages with a tag not registered here.
	UnknownTags uint64
	// Undeclared counts inbound messages of a registered type that their
	// recipient's kind did not declare (Registry.DeclareKind): an ask is
	// answered with the error, a tell refused UNKNOWN_KIND.
	Undeclared uint64
	// ExpiredOnArrival counts asks refused EXPIRED on arrival.
	ExpiredOnArrival uint64
	// AsksExpired counts pending asks failed by the sweep at their
	// deadline; AsksLinkDown those failed at once by a link-down event.
	AsksExpired, AsksLinkDown uint64
	// LateReplies counts replies and refusals for asks no longer pending.
	LateReplies uint64
	// RepliesDropped counts replies that could not be queued.
	RepliesDropped uint64
	// AsksWithdrawn counts inbound asks dropped before their turn because
	// their caller withdrew them (Withdraw) or its link went down;
	// AsksCancelled counts this node's pending asks forgotten because
	// their caller gave up (Forget).
	AsksWithdrawn, AsksCancelled uint64
	// CancelsKept counts withdrawals that found no ask and were kept for
	// one that may still arrive (a CancelAsk that overtook its ask);
	// CancelsMatched the asks dropped on arrival because of one (also in
	// AsksWithdrawn); CancelsEvicted those dropped unused before their
	// time because MaxEarlyCancels were kept.
	CancelsKept, CancelsMatched, CancelsEvicted uint64
	// ControlReceived counts control-lane envelopes.
	ControlReceived uint64
	// InboundBytes is the current size of admitted, unanswered asks.
	InboundBytes int64
}

type mailCounters struct {
	tellsSent, asksSent, repliesSent          atomic.Uint64
	tellsRecv, asksRecv, repliesRecv, refRecv atomic.Uint64
	refSent                                   atomic.Uint64
	refOut, refIn                             [numRefusedReasons]atomic.Uint64
	decodeErr, bodyErr, unknownTag, expired   atomic.Uint64
	undeclared                                atomic.Uint64
	asksExpired, asksDown, late, dropped      atomic.Uint64
	control, withdrawn, cancelled             atomic.Uint64
	earlyKept, earlyMatched, earlyEvicted     atomic.Uint64
}

// Bounds of the withdrawals kept for asks not arrived yet (see
// Mailer.Withdraw): each is kept EarlyCancelTTL, at most
// MaxEarlyCancels at once (the oldest goes first).
const (
	EarlyCancelTTL  = time.Minute
	MaxEarlyCancels = 4096
)

// earlyCancels is the withdrawals that found no ask, by sender and id, in
// the order they came.
type earlyCancels struct {
	n  atomic.Int64 // entries (the arrival of an ask reads only this)
	mu sync.Mutex
	at map[inboundKey]earlyEntry // the entries kept
	// order is the entries in the order they came, with those matched or
	// dropped since (no longer in at, or in at again from a later
	// withdrawal) left in place until trim passes them or compacts order.
	order []earlyEntry
	seq   uint64
}

type earlyEntry struct {
	k   inboundKey
	at  int64 // unix ns it came
	seq uint64
}

// live reports whether en is still the entry kept for its key.
func (e *earlyCancels) live(en earlyEntry) bool {
	cur, ok := e.at[en.k]
	return ok && cur.seq == en.seq
}

// keep remembers a withdrawal of (peer, id), evicting what expired and,
// beyond the bound, the oldest.
func (e *earlyCancels) keep(k inboundKey, now int64, evicted *atomic.Uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at == nil {
		e.at = map[inboundKey]earlyEntry{}
	}
	e.trim(now, evicted)
	if _, ok := e.at[k]; ok {
		return
	}
	e.seq++
	en := earlyEntry{k, now, e.seq}
	e.at[k] = en
	e.order = append(e.order, en)
	e.n.Store(int64(len(e.at)))
}

// trim drops the entries older than EarlyCancelTTL and, oldest first,
// those beyond MaxEarlyCancels-1 kept, so that one more fits; e.mu held.
// The bound is on the entries kept: those matched meanwhile are no longer
// counted, and order is compacted once they are more than half of it.
func (e *earlyCancels) trim(now int64, evicted *atomic.Uint64) {
	i := 0
	for ; i < len(e.order); i++ {
		en := e.order[i]
		if !e.live(en) {
			continue
		}
		fresh := now-en.at < int64(EarlyCancelTTL)
		if fresh && len(e.at) < MaxEarlyCancels {
			break
		}
		delete(e.at, en.k)
		if fresh {
			evicted.Add(1)
		}
	}
	e.order = append(e.order[:0], e.order[i:]...)
	if dead := len(e.order) - len(e.at); dead > len(e.order)/2 {
		kept := e.order[:0]
		for _, en := range e.order {
			if e.live(en) {
				kept = append(kept, en)
			}
		}
		clear(e.order[len(kept):])
		e.order = kept
	}
	e.n.Store(int64(len(e.at)))
}

// take reports whether (peer, id) was withdrawn before it arrived, and
// forgets it.
func (e *earlyCancels) take(k inboundKey, now int64) bool {
	if e.n.Load() == 0 {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	en, ok := e.at[k]
	if !ok {
		return false
	}
	delete(e.at, k) // its order entry goes at a later trim
	e.n.Store(int64(len(e.at)))
	return now-en.at < int64(EarlyCancelTTL)
}

// dropPeer forgets the withdrawals of peer (its link went down: ids
// restart with a new process).
func (e *earlyCancels) dropPeer(peer string) {
	if e.n.Load() == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.at {
		if k.peer == peer {
			delete(e.at, k)
		}
	}
	e.n.Store(int64(len(e.at)))
}

// Mailer carries actor mail (tells, asks, replies, refusals) over a
// Transport: it encodes messages with the Registry into envelopes, keeps
// the table of asks awaiting a reply, and hands inbound mail to
// LocalDelivery. Local sends never reach it.
//
// Wire it in three steps, since the transport needs the Mailer's handler
// and the Mailer needs the transport:
//
//	m, _ := wire.NewMailer(wire.MailConfig{Registry: reg, Local: sched, Complete: ...})
//	t, _ := wire.NewQUIC(wire.Config{..., Handler: m.Handle, Events: m.LinkEvent})
//	m.Attach(t)
//
// All methods are safe for concurrent use. Close stops the Mailer's one
// goroutine (the deadline sweep); the transport is the caller's to close.
type Mailer struct {
	cfg   MailConfig
	reg   *Registry
	tr    atomic.Pointer[transportBox]
	bufs  sync.Pool
	asks  [askShards]askShard
	in    [askShards]inboundShard
	early earlyCancels
	inb   atomic.Int64
	c     mailCounters
	names names
	mailCaches
	log   *slog.Logger
	bad   *ratelog.Limiter // lines about inbound mail frames that do not decode
	close sync.Once

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// malformedLogInterval is how often, at most, a malformed mail frame is
// logged (with the count since the previous line); Stats counts each.
const malformedLogInterval = time.Minute

// causeMailMalformed is the cause of the lines about malformed mail frames.
const causeMailMalformed = "mail_malformed"

type transportBox struct{ t Transport }

const askShards = 32

type askShard struct {
	mu sync.Mutex
	m  map[uint64]pendingAsk
	_  [40]byte // keep shards on separate cache lines
}

// inboundShard holds the inbound asks not answered yet, by sender and
// id, so that their caller can withdraw them.
type inboundShard struct {
	mu sync.Mutex
	m  map[inboundKey]*inboundAsk
	_  [40]byte
}

type inboundKey struct {
	peer string
	id   uint64
}

type pendingAsk struct {
	peer     string
	id       uint64
	deadline int64 // unix ns
}

// NewMailer returns a Mailer; call Attach before sending.
func NewMailer(cfg MailConfig) (*Mailer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Mailer{cfg: cfg, reg: cfg.Registry, log: cfg.Logger}
	m.bad = ratelog.New(cfg.Logger, slog.LevelWarn, "malformed mail frame", malformedLogInterval, cfg.Clock.Now)
	m.seed = maphash.MakeSeed()
	m.inboxes, _ = cfg.Local.(InboxResolver)
	m.fences, _ = cfg.Local.(EpochFence)
	m.bufs.New = func() any { b := make([]byte, 0, 512); return &b }
	for i := range m.asks {
		m.asks[i].m = map[uint64]pendingAsk{}
		m.in[i].m = map[inboundKey]*inboundAsk{}
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.wg.Add(1)
	go m.sweepLoop()
	return m, nil
}

// Attach sets the transport mail goes out on. Call it once, before the
// first Tell or Ask; inbound mail that needs an answer before then is
// dropped (counted in RepliesDropped).
func (m *Mailer) Attach(t Transport) {
	m.tr.Store(&transportBox{t})
}

func (m *Mailer) transport() Transport {
	if b := m.tr.Load(); b != nil {
		return b.t
	}
	return nil
}

// Close stops the deadline sweep and fails every pending ask with
// ErrClosed. It is idempotent.
func (m *Mailer) Close() error {
	m.close.Do(func() {
		m.closed.Store(true)
		m.cancel()
		m.wg.Wait()
		m.failWhere(func(pendingAsk) bool { return true }, ErrClosed, nil)
	})
	return nil
}

// RefHash is the lane key of a recipient: every message for one actor
// takes the same mail lane, which keeps per-sender, per-recipient FIFO. It
// is FNV-1a over the identity (not the incarnation), the same on every
// node.
func (m *Mailer) RefHash(to actor.Ref) uint64 { return RefHash(to) }

// RefHash is Mailer.RefHash.
func RefHash(to actor.Ref) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	str := func(s string) {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		h = (h ^ 0xff) * prime // separator: no two (kind, key) pairs collide by concatenation
	}
	if to.IsVirtual() {
		str(to.Kind())
		str(to.Key())
		return h
	}
	str(to.Node())
	id := to.ID()
	for range 8 {
		h = (h ^ (id & 0xff)) * prime
		id >>= 8
	}
	return h
}

// spawnedPrefix marks a spawned actor's ActorID: kind "@node", key the
// decimal id. Virtual kinds never start with '@' (ParseRef reads such a
// reference as spawned), so the two forms cannot collide.
const spawnedPrefix = "@"

// ActorIDOf returns the wire form of ref: kind/key for a virtual actor,
// kind "@node" and the decimal id as key for a spawned one.
func ActorIDOf(ref actor.Ref) ActorID {
	if ref.IsVirtual() {
		return ActorID{Kind: ref.Kind(), Key: ref.Key(), Incarnation: ref.Incarnation()}
	}
	return ActorID{Kind: spawnedPrefix + ref.Node(), Key: strconv.FormatUint(ref.ID(), 10), Incarnation: ref.Incarnation()}
}

// RefOf is the inverse of ActorIDOf; it returns ErrBadActorID for an id
// that names no actor.
func RefOf(id *ActorID) (actor.Ref, error) {
	if node, ok := strings.CutPrefix(id.Kind, spawnedPrefix); ok {
		n, err := strconv.ParseUint(id.Key, 10, 64)
		if err != nil || n == 0 || node == "" {
			return actor.Ref{}, fmt.Errorf("%w: %q/%q", ErrBadActorID, id.Kind, id.Key)
		}
		return actor.Spawned(node, n, id.Incarnation), nil
	}
	if err := actor.CheckVirtual(id.Kind, id.Key); err != nil {
		return actor.Ref{}, fmt.Errorf("%w: %w", ErrBadActorID, err)
	}
	return actor.Virtual(id.Kind, id.Key).WithIncarnation(id.Incarnation), nil
}

func (m *Mailer) getBuf() *[]byte { return m.bufs.Get().(*[]byte) }

func (m *Mailer) putBuf(b *[]byte) {
	if cap(*b) > 64<<10 {
		return // do not pin large buffers
	}
	*b = (*b)[:0]
	m.bufs.Put(b)
}

// Tell sends msg to the actor to on node peer, from the local actor from
// (zero for program code), unstamped (placement epoch 0: the receiver
// checks only that it owns to now). It is TellAt with epoch 0. It returns
// ErrUnregistered for a message type without a tag, ErrQueueFull (matches
// actor.ErrRefused) when the link's queue is full, ErrUnavailable
// (matches actor.ErrProcessUnavailable) when the peer is unreachable. A
// nil error means queued: a refusal by the peer comes back later through
// MailConfig.Undelivered.
func (m *Mailer) Tell(peer string, to, from actor.Ref, msg any) error {
	return m.tell(nil, peer, 0, to, from, msg, nil)
}

// TellAt is Tell stamped with the placement epoch the sender routed by:
// a receiver whose LocalDelivery implements EpochFence refuses it
// NOT_OWNER (naming the owner it knows) when epoch is not the current
// epoch of to's shard there, so mail routed by a stale table never runs.
func (m *Mailer) TellAt(peer string, epoch uint64, to, from actor.Ref, msg any) error {
	return m.tell(nil, peer, epoch, to, from, msg, nil)
}

// TellTraced is TellAt for a tell that carries its sender's trace context
// (nil for none: then it is TellAt). It travels as a TracedTell; the
// receiver hands it to a LocalDelivery that implements TraceDelivery (with
// a nil reply), or delivers it as a plain tell. A trace context over
// MaxTraceParent or MaxTraceState fails with an error matching
// bare.ErrLimit.
func (m *Mailer) TellTraced(peer string, epoch uint64, to, from actor.Ref, msg any, trace *TraceContext) error {
	if trace != nil && (len(trace.Parent) > MaxTraceParent || len(trace.State) > MaxTraceState) {
		return fmt.Errorf("%w: trace context", bare.ErrLimit)
	}
	return m.tell(nil, peer, epoch, to, from, msg, trace)
}

// TellWait is Tell for bulk producers: while the link's queue is full it
// waits for room (until ctx ends) instead of refusing, when the transport
// implements WaitSender. Actor mail uses Tell.
func (m *Mailer) TellWait(ctx context.Context, peer string, to, from actor.Ref, msg any) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return m.tell(ctx, peer, 0, to, from, msg, nil)
}

// tell sends a tell, as a TracedTell when trace is set (checked by the
// caller).
func (m *Mailer) tell(ctx context.Context, peer string, epoch uint64, to, from actor.Ref, msg any, trace *TraceContext) error {
	t := m.transport()
	if t == nil {
		return ErrNotAttached
	}
	h, err := m.header(to, from)
	if err != nil {
		return err
	}
	bp := m.getBuf()
	defer m.putBuf(bp)
	var buf []byte
	if trace == nil {
		buf = bare.AppendUint((*bp)[:0], EnvelopeTagTell)
	} else {
		buf = bare.AppendUint((*bp)[:0], EnvelopeTagTracedTell)
		if buf, err = trace.AppendBARE(buf); err != nil {
			*bp = buf[:0]
			return bare.WrapEncodeError("Trace", err)
		}
	}
	buf = append(buf, h.ids...)
	buf = bare.AppendUint(buf, epoch) // placement epoch
	frame, buf, err := m.appendMail(buf, msg)
	*bp = buf[:0]
	if err != nil {
		return err
	}
	if ws, ok := t.(WaitSender); ok && ctx != nil {
		err = ws.SendWait(ctx, peer, h.lane, frame)
	} else {
		err = t.Send(peer, h.lane, frame)
	}
	if err != nil {
		return err
	}
	m.c.tellsSent.Add(1)
	return nil
}

// Ask sends msg as an ask with correlation id (unique among this node's
// pending asks; the scheduler's ask id) to the actor to on node peer. Its
// outcome goes to MailConfig.Complete(id, ...) unless Ask returns an
// error, in which case nothing is pending: ErrDeadlineExceeded-matching
// when the deadline has passed already, ErrDuplicateAsk, and the errors
// of Tell. It is AskAt with epoch 0 (unstamped).
func (m *Mailer) Ask(peer string, id uint64, to, from actor.Ref, msg any, deadline time.Time) error {
	return m.AskAt(peer, id, 0, to, from, msg, deadline)
}

// AskAt is Ask stamped with the placement epoch the sender routed by (see
// TellAt): a stale stamp completes the ask with a NOT_OWNER
// *RefusedError, and the message is never handled.
func (m *Mailer) AskAt(peer string, id, epoch uint64, to, from actor.Ref, msg any, deadline time.Time) error {
	return m.AskChain(peer, id, epoch, to, from, msg, deadline, nil)
}

// AskChain is AskAt for an ask that carries a call chain: the activations
// waiting on it, outermost first (see ariel.Outbound.Chain). The receiver
// hands it to a LocalDelivery that implements ChainDelivery.
func (m *Mailer) AskChain(peer string, id, epoch uint64, to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref) error {
	return m.AskTraced(peer, id, epoch, to, from, msg, deadline, chain, nil)
}

// Bounds of a TraceContext on the wire: a W3C traceparent of version 00
// is 55 bytes, and tracestate is at most 32 members (512 bytes is what
// the W3C spec asks a vendor to propagate at least).
const (
	MaxTraceParent = 55
	MaxTraceState  = 512
)

// AskTraced is AskChain for an ask that carries the caller's trace
// context (nil for none); the receiver hands it to a LocalDelivery that
// implements TraceDelivery. A trace context over MaxTraceParent or
// MaxTraceState fails with an error matching bare.ErrLimit.
func (m *Mailer) AskTraced(peer string, id, epoch uint64, to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, trace *TraceContext) error {
	if trace != nil && (len(trace.Parent) > MaxTraceParent || len(trace.State) > MaxTraceState) {
		return fmt.Errorf("%w: trace context", bare.ErrLimit)
	}
	if len(chain) > actor.MaxCallChain {
		return fmt.Errorf("%w: %d", actor.ErrCallChainTooLong, len(chain))
	}
	t := m.transport()
	if t == nil {
		return ErrNotAttached
	}
	now := m.cfg.Clock.Now()
	if deadline.IsZero() {
		deadline = now.Add(actor.DefaultAskTimeout)
	}
	remaining := deadline.Sub(now)
	if remaining <= 0 {
		return actor.ErrDeadlineExceeded
	}
	h, err := m.header(to, from)
	if err != nil {
		return err
	}
	bp := m.getBuf()
	defer m.putBuf(bp)
	buf := bare.AppendUint((*bp)[:0], EnvelopeTagAsk)
	buf = bare.AppendUint(buf, id)
	buf = append(buf, h.ids...)
	buf = bare.AppendUint(buf, epoch) // placement epoch
	buf = bare.AppendUint(buf, uint64(remaining))
	frame, buf, err := m.appendMail(buf, msg)
	if err == nil {
		frame = bare.AppendUint(frame, uint64(len(chain)))
		for _, r := range chain {
			id := ActorIDOf(r)
			if frame, err = id.AppendBARE(frame); err != nil {
				err = bare.WrapEncodeError("Chain", err)
				break
			}
		}
	}
	if err == nil {
		if trace == nil {
			frame = append(frame, 0)
		} else if frame, err = trace.AppendBARE(append(frame, 1)); err != nil {
			err = bare.WrapEncodeError("Trace", err)
		}
	}
	*bp = buf[:0]
	if err != nil {
		return err
	}
	sh := &m.asks[id%askShards]
	sh.mu.Lock()
	if _, dup := sh.m[id]; dup {
		sh.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrDuplicateAsk, id)
	}
	// Registered before sending: the reply may beat Send's return.
	sh.m[id] = pendingAsk{peer: peer, id: id, deadline: deadline.UnixNano()}
	sh.mu.Unlock()
	// Close sets closed before it fails what is pending, so an ask
	// registered after that scan sees closed here.
	if m.closed.Load() {
		return m.unregister(id, ErrClosed)
	}
	// A caller that gives up from here on finds the ask (Forget).
	if m.cfg.Ended != nil && m.cfg.Ended(id) {
		return m.unregister(id, ErrAskGivenUp)
	}
	if err := t.Send(peer, h.lane, frame); err != nil {
		return m.unregister(id, err)
	}
	m.c.asksSent.Add(1)
	return nil
}

// unregister removes a pending ask that could not be sent and returns err,
// unless something else (a link-down event, the sweep, Close) completed it
// meanwhile: then the caller hears through Complete, not twice, and
// unregister returns nil.
func (m *Mailer) unregister(id uint64, err error) error {
	sh := &m.asks[id%askShards]
	sh.mu.Lock()
	_, still := sh.m[id]
	delete(sh.m, id)
	sh.mu.Unlock()
	if !still {
		return nil
	}
	return err
}

// take removes the pending ask id if it was sent to peer.
func (m *Mailer) take(peer string, id uint64) bool {
	sh := &m.asks[id%askShards]
	sh.mu.Lock()
	p, ok := sh.m[id]
	if ok && p.peer == peer {
		delete(sh.m, id)
		sh.mu.Unlock()
		return true
	}
	sh.mu.Unlock()
	return false
}

// LinkEvent is the transport's Config.Events hook: a link going down
// fails every ask pending on that peer at once with ErrLinkLost (matches
// ErrUnavailable and actor.ErrProcessUnavailable): the ask was handed to
// the link, so whether the peer ran it is unknown, and its sender must not
// send it again. (An ask the transport refused to take, Send's
// ErrUnavailable, is returned by Ask instead and never left.) Chain it
// when the node has other listeners.
func (m *Mailer) LinkEvent(ev LinkEvent) {
	if ev.Up {
		return
	}
	err := fmt.Errorf("%w: link to %s down", ErrLinkLost, ev.Peer)
	if ev.Err != nil {
		err = fmt.Errorf("%w: link to %s down: %v", ErrLinkLost, ev.Peer, ev.Err)
	}
	m.failWhere(func(p pendingAsk) bool { return p.peer == ev.Peer }, err, &m.c.asksDown)
	// Its asks here: whoever waits for them failed them just now, so
	// those whose turn has not started are dropped (the caller is gone).
	m.withdrawWhere(func(k inboundKey) bool { return k.peer == ev.Peer })
	m.early.dropPeer(ev.Peer)
}

// Forget removes the pending ask id, whose caller gave up on it before
// its deadline, and returns the peer it was sent to, so that the caller
// can withdraw it there (CancelAsk). Its outcome is not reported to
// Complete. ok is false when it was not pending (answered already).
func (m *Mailer) Forget(id uint64) (peer string, ok bool) {
	sh := &m.asks[id%askShards]
	sh.mu.Lock()
	p, ok := sh.m[id]
	delete(sh.m, id)
	sh.mu.Unlock()
	if ok {
		m.c.cancelled.Add(1)
	}
	return p.peer, ok
}

// Withdraw drops the ask id that peer sent, if it waits for its turn
// here: peer's caller gave up on it (CancelAsk). It reports whether it
// dropped it; false when it was answered or its turn started already, or
// no such ask arrived. A withdrawal travels on the control lane and can
// overtake its ask on a mail lane, so one that finds no ask is kept
// (EarlyCancelTTL, at most MaxEarlyCancels) and the ask, should it
// arrive, is dropped unrun and unanswered (MailStats.CancelsMatched). It
// needs a LocalDelivery that implements AskDelivery.
func (m *Mailer) Withdraw(peer string, id uint64) bool {
	sh := &m.in[id%askShards]
	k := inboundKey{peer, id}
	sh.mu.Lock()
	ia := sh.m[k]
	if ia == nil {
		// Kept under the shard's lock, so an ask listed meanwhile is
		// either found here or finds this (onAsk checks under it too).
		m.early.keep(k, m.cfg.Clock.Now().UnixNano(), &m.c.earlyEvicted)
		m.c.earlyKept.Add(1)
		sh.mu.Unlock()
		return false
	}
	sh.mu.Unlock()
	return ia.withdraw()
}

// withdrawWhere withdraws every inbound ask whose key match selects.
func (m *Mailer) withdrawWhere(match func(inboundKey) bool) {
	var found []*inboundAsk
	for i := range m.in {
		sh := &m.in[i]
		sh.mu.Lock()
		for k, ia := range sh.m {
			if match(k) {
				found = append(found, ia)
			}
		}
		sh.mu.Unlock()
	}
	for _, ia := range found {
		ia.withdraw()
	}
}

// failWhere completes with err every pending ask that match selects,
// counting them in counter before their callers hear of it.
func (m *Mailer) failWhere(match func(pendingAsk) bool, err error, counter *atomic.Uint64) int {
	var ids []uint64
	n := 0
	for i := range m.asks {
		sh := &m.asks[i]
		ids = ids[:0]
		sh.mu.Lock()
		for id, p := range sh.m {
			if match(p) {
				ids = append(ids, id)
				delete(sh.m, id)
			}
		}
		sh.mu.Unlock()
		if counter != nil {
			counter.Add(uint64(len(ids)))
		}
		for _, id := range ids {
			m.cfg.Complete(id, nil, err)
		}
		n += len(ids)
	}
	return n
}

func (m *Mailer) sweepLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.cfg.Clock.After(m.cfg.SweepInterval):
		}
		now := m.cfg.Clock.Now().UnixNano()
		var gone []pendingAsk
		m.failWhere(func(p pendingAsk) bool {
			if p.deadline > now {
				return false
			}
			if m.cfg.Expired != nil {
				gone = append(gone, p)
			}
			return true
		}, actor.ErrDeadlineExceeded, &m.c.asksExpired)
		for _, p := range gone {
			m.cfg.Expired(p.peer, p.id)
		}
	}
}

// Pending returns the number of asks awaiting an answer.
func (m *Mailer) Pending() int {
	n := 0
	for i := range m.asks {
		sh := &m.asks[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Handle is the transport's Handler. It decodes one envelope strictly: a
// frame that does not decode returns an error, so the transport resets
// the lane and counts it. Mail goes to LocalDelivery; replies and
// refusals complete pending asks; control-lane frames go to
// MailConfig.Control undecoded.
func (m *Mailer) Handle(from string, lane Lane, frame []byte) error {
	if lane == ControlLane {
		m.c.control.Add(1)
		if m.cfg.Control != nil {
			return m.cfg.Control(from, frame)
		}
		return nil
	}
	var d bare.Decoder
	// Bodies alias the frame: every body is decoded into a new message or
	// copied by Send before Handle returns.
	d.Reset(frame, bare.Config{ZeroCopy: true, MaxMessageBytes: len(frame) + 1})
	var err error
	switch tag := d.Uint(); tag {
	case EnvelopeTagTell:
		err = m.handleTell(from, &d, frame, nil)
	case EnvelopeTagTracedTell:
		var tc TraceContext
		if d.Enter() {
			tc.DecodeBARE(&d)
			if d.Err() == nil && (len(tc.Parent) > MaxTraceParent || len(tc.State) > MaxTraceState) {
				d.Fail(d.Offset(), bare.ErrLimit, "trace context")
			}
			if err = d.Err(); err == nil {
				err = m.handleTell(from, &d, frame, &tc)
			}
		} else {
			err = d.Err()
		}
	case EnvelopeTagAsk:
		var a Ask
		m.decodeAsk(&d, &a)
		if err = d.Finish(); err == nil {
			err = m.onAsk(from, &a, len(frame))
		}
	case EnvelopeTagReply:
		var r Reply
		r.DecodeBARE(&d)
		if err = d.Finish(); err == nil {
			m.onReply(from, &r)
		}
	case EnvelopeTagRefused:
		var r Refused
		r.DecodeBARE(&d)
		if err = d.Finish(); err == nil {
			m.onRefused(from, &r)
		}
	default:
		err = d.Err()
		if err == nil {
			err = fmt.Errorf("wire: envelope %d is not mail", tag)
		}
	}
	if err != nil {
		m.c.decodeErr.Add(1)
		m.bad.Note(causeMailMalformed, slog.String(logPeer, from), slog.Int(logLane, int(lane)), slog.Any(logErr, err))
	}
	return err
}

// decodeBody decodes a message body, counting failures.
func (m *Mailer) decodeBody(tag uint32, body []byte) (any, error) {
	v, err := m.reg.Decode(tag, body)
	if err != nil {
		if errors.Is(err, ErrUnknownTag) {
			m.c.unknownTag.Add(1)
		} else {
			m.c.bodyErr.Add(1)
			err = fmt.Errorf("%w: body of tag %d: %v", ErrUnknownTag, tag, err)
		}
	}
	return v, err
}

// inboundAsk answers one ask from a peer, once.
type inboundAsk struct {
	m    *Mailer
	peer string
	id   uint64
	size int64
	to   ActorID // the recipient, and the ask's tag: a refusal names them
	tag  uint32
	done atomic.Bool
	// w withdraws the ask from its recipient (nil until it was admitted,
	// or when the delivery cannot withdraw asks); wanted records a
	// withdrawal that came before w was set.
	mu     sync.Mutex
	w      Withdrawer
	wanted bool
	listed bool // in Mailer.in
}

func (ia *inboundAsk) reply(v any, err error) {
	if !ia.done.CompareAndSwap(false, true) {
		return
	}
	ia.release()
	if nr, ok := err.(*notRunError); ok {
		// Admitted, then refused unrun: the asker gets the refusal that
		// admission would have given (see NotRun).
		r := refusalOf(nr.err, ia.to, ia.tag)
		r.Id = ia.id
		ia.m.refuse(ia.peer, ia.id, &r)
		return
	}
	ia.m.sendReply(ia.peer, ia.id, v, err)
}

// release frees what the ask held: its bytes and its table entry.
func (ia *inboundAsk) release() {
	ia.m.inb.Add(-ia.size)
	if ia.listed {
		sh := &ia.m.in[ia.id%askShards]
		k := inboundKey{ia.peer, ia.id}
		sh.mu.Lock()
		if sh.m[k] == ia {
			delete(sh.m, k)
		}
		sh.mu.Unlock()
	}
}

// admitted records the recipient's Withdrawer and applies a withdrawal
// that came meanwhile.
func (ia *inboundAsk) admitted(w Withdrawer) {
	ia.mu.Lock()
	ia.w = w
	wanted := ia.wanted
	ia.mu.Unlock()
	if wanted {
		ia.withdraw()
	}
}

// withdraw drops the ask if its turn has not started; no answer is sent
// (its caller stopped waiting).
func (ia *inboundAsk) withdraw() bool {
	ia.mu.Lock()
	w := ia.w
	if w == nil {
		ia.wanted = true
	}
	ia.mu.Unlock()
	if w == nil || !w.Withdraw() {
		return false
	}
	if !ia.done.CompareAndSwap(false, true) {
		return false
	}
	ia.release()
	ia.m.c.withdrawn.Add(1)
	return true
}

func (m *Mailer) onAsk(peer string, a *Ask, size int) error {
	m.c.asksRecv.Add(1)
	to, err := RefOf(&a.To)
	if err != nil {
		return err
	}
	var from actor.Ref
	if a.From != nil {
		if from, err = RefOf(a.From); err != nil {
			return err
		}
	}
	key := m.RefHash(to)
	if a.DeadlineNs == 0 {
		m.c.expired.Add(1)
		m.refuse(peer, key, &Refused{Id: a.Id, To: a.To, Tag: a.Tag, Reason: RefusedReasonExpired})
		return nil
	}
	if m.inb.Load()+int64(size) > int64(m.cfg.MaxInboundBytes) {
		m.refuse(peer, key, &Refused{Id: a.Id, To: a.To, Tag: a.Tag, Reason: RefusedReasonNodeOverloaded,
			Detail: "inbound ask bytes over the limit"})
		return nil
	}
	msg, err := m.decodeBody(a.Tag, a.Body)
	if err != nil {
		// Name the kind: a tag number means nothing to the asker.
		m.refuse(peer, key, &Refused{Id: a.Id, To: a.To, Tag: a.Tag, Reason: RefusedReasonUnknownKind,
			Detail: fmt.Sprintf("kind %q: %v", to.Kind(), err)})
		return nil
	}
	if err := m.reg.KindOf(to.Kind()).Check(to.Kind(), a.Tag, msg); err != nil {
		// Answered as the asker's own node answers it when it hosts the
		// kind (Registry.ValueFor): the same error, not a refusal.
		m.c.undeclared.Add(1)
		m.sendReply(peer, a.Id, nil, err)
		return nil
	}
	ia := &inboundAsk{m: m, peer: peer, id: a.Id, size: int64(size), to: a.To, tag: a.Tag}
	m.inb.Add(ia.size)
	deadline := m.cfg.Clock.Now().Add(time.Duration(min(a.DeadlineNs, uint64(1<<62))))
	ad, withdrawable := m.cfg.Local.(AskDelivery)
	if withdrawable && !m.listInbound(ia) {
		// Its CancelAsk overtook it: the caller gave up on it already.
		ia.done.Store(true)
		ia.release()
		m.c.withdrawn.Add(1)
		m.c.earlyMatched.Add(1)
		return nil
	}
	if withdrawable {
		var w Withdrawer
		if w, err = m.askDelivery(ad, to, from, msg, deadline, a.Chain, a.Trace, a.Epoch, ia.reply); err == nil {
			ia.admitted(w)
		}
	} else if err = m.fence(to, a.Epoch); err == nil {
		err = m.deliverAsk(to, from, msg, deadline, a.Chain, a.Trace, ia.reply)
	}
	if err != nil {
		if ia.done.CompareAndSwap(false, true) {
			ia.release()
			r := refusalOf(err, a.To, a.Tag)
			r.Id = a.Id
			m.refuse(peer, key, &r)
		}
	}
	return nil
}

// listInbound enters ia in the table of inbound asks, unless an ask with
// its id from the same peer is there already (a replay: that one stays
// the one a withdrawal finds).
//
// It reports false, listing nothing, when the ask's withdrawal arrived
// before it (see Withdraw): the ask is then dropped unrun.
func (m *Mailer) listInbound(ia *inboundAsk) bool {
	sh := &m.in[ia.id%askShards]
	k := inboundKey{ia.peer, ia.id}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if m.early.take(k, m.cfg.Clock.Now().UnixNano()) {
		return false
	}
	if _, dup := sh.m[k]; !dup {
		sh.m[k] = ia
		ia.listed = true
	}
	return true
}

// askDelivery hands an ask stamped with epoch to an AskDelivery, which
// fences the stamp.
func (m *Mailer) askDelivery(ad AskDelivery, to, from actor.Ref, msg any, deadline time.Time, ids []ActorID, trace *TraceContext, epoch uint64, reply func(any, error)) (Withdrawer, error) {
	if len(ids) > actor.MaxCallChain {
		if err := m.fence(to, epoch); err != nil {
			return nil, err // a stale stamp is refused first, as for any ask
		}
		return nil, fmt.Errorf("%w: %d", actor.ErrCallChainTooLong, len(ids))
	}
	var chain []actor.Ref
	if len(ids) > 0 {
		chain = make([]actor.Ref, len(ids))
		for i := range ids {
			r, err := RefOf(&ids[i])
			if err != nil {
				return nil, err
			}
			chain[i] = r
		}
	}
	return ad.DeliverAsk(to, from, msg, deadline, chain, trace, epoch, reply)
}

// deliverAsk hands an ask to LocalDelivery, with its call chain when the
// delivery takes one.
func (m *Mailer) deliverAsk(to, from actor.Ref, msg any, deadline time.Time, ids []ActorID, trace *TraceContext, reply func(any, error)) error {
	td, traced := m.cfg.Local.(TraceDelivery)
	traced = traced && trace != nil
	cd, ok := m.cfg.Local.(ChainDelivery)
	if len(ids) == 0 && traced {
		return td.DeliverTraced(to, from, msg, deadline, nil, trace, reply)
	}
	if len(ids) == 0 || !ok {
		return m.cfg.Local.Deliver(to, from, msg, deadline, reply)
	}
	if len(ids) > actor.MaxCallChain {
		return fmt.Errorf("%w: %d", actor.ErrCallChainTooLong, len(ids))
	}
	chain := make([]actor.Ref, len(ids))
	for i := range ids {
		r, err := RefOf(&ids[i])
		if err != nil {
			return err
		}
		chain[i] = r
	}
	if traced {
		return td.DeliverTraced(to, from, msg, deadline, chain, trace, reply)
	}
	return cd.DeliverChain(to, from, msg, deadline, chain, reply)
}

// TraceDelivery is implemented by a LocalDelivery that takes the trace
// context an ask or a tell carries, so the owner's spans join the
// caller's trace. It is called only for mail that carries one, with a nil
// reply for a tell (as Deliver); trace is the decoded value, valid for the
// call only.
type TraceDelivery interface {
	DeliverTraced(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, trace *TraceContext, reply func(any, error)) error
}

// ChainDelivery is implemented by a LocalDelivery that takes the call
// chain an ask carries (*ariel.Scheduler does): reentrancy and ask cycles
// are then judged on the receiving node as for local mail.
type ChainDelivery interface {
	DeliverChain(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, reply func(any, error)) error
}

func (m *Mailer) sendReply(peer string, id uint64, v any, err error) {
	t := m.transport()
	if t == nil {
		m.c.dropped.Add(1)
		return
	}
	bp := m.getBuf()
	defer m.putBuf(bp)
	var tag uint32
	var body []byte
	if err != nil {
		tag, body = TagError, m.reg.AppendError((*bp)[:0], err)
	} else {
		var eerr error
		tag, body, eerr = m.reg.Append((*bp)[:0], v)
		if eerr != nil {
			tag, body = TagError, m.reg.AppendError((*bp)[:0], eerr)
		}
	}
	env := Reply{Id: id, Tag: tag, Body: body}
	start := len(body)
	buf := bare.AppendUint(body, EnvelopeTagReply)
	buf, _ = env.AppendBARE(buf) // a Reply has nothing that can fail to encode
	*bp = buf[:0]
	frame := buf[start:]
	serr := t.Send(peer, id, frame)
	if errors.Is(serr, ErrFrameTooLarge) {
		// The asker would wait out its deadline for a reply that cannot
		// cross: it is told why instead, at once.
		body = m.reg.AppendError(buf[:0], fmt.Errorf("%w: the reply (%d bytes encoded) cannot cross to %s", ErrFrameTooLarge, len(frame), peer))
		env = Reply{Id: id, Tag: TagError, Body: body}
		start = len(body)
		buf = bare.AppendUint(body, EnvelopeTagReply)
		buf, _ = env.AppendBARE(buf)
		*bp = buf[:0]
		serr = t.Send(peer, id, buf[start:])
	}
	if serr != nil {
		m.c.dropped.Add(1)
		m.log.LogAttrs(context.Background(), slog.LevelDebug, "reply not sent",
			slog.String(logPeer, peer), slog.Uint64("id", id), slog.Any("err", serr))
		return
	}
	m.c.repliesSent.Add(1)
}

func (m *Mailer) refuse(peer string, key uint64, r *Refused) {
	m.c.refSent.Add(1)
	if r.Reason < numRefusedReasons {
		m.c.refOut[r.Reason].Add(1)
	}
	t := m.transport()
	if t == nil {
		m.c.dropped.Add(1)
		return
	}
	r.Detail = strings.ToValidUTF8(r.Detail, "\uFFFD")
	bp := m.getBuf()
	defer m.putBuf(bp)
	frame := bare.AppendUint((*bp)[:0], EnvelopeTagRefused)
	frame, err := r.AppendBARE(frame)
	*bp = frame[:0]
	if err == nil {
		err = t.Send(peer, key, frame)
	}
	if err != nil {
		m.c.dropped.Add(1)
	}
}

func (m *Mailer) onReply(peer string, r *Reply) {
	m.c.repliesRecv.Add(1)
	if !m.take(peer, r.Id) {
		m.c.late.Add(1)
		return
	}
	v, err := m.decodeBody(r.Tag, r.Body)
	if err == nil && r.Tag == TagError {
		v, err = nil, v.(error)
	}
	m.cfg.Complete(r.Id, v, err)
}

func (m *Mailer) onRefused(peer string, r *Refused) {
	m.c.refRecv.Add(1)
	if r.Reason < numRefusedReasons {
		m.c.refIn[r.Reason].Add(1)
	}
	err := &RefusedError{Node: peer, Reason: r.Reason, OwnerHint: r.OwnerHint, Detail: r.Detail,
		RetryAfter: time.Duration(min(r.RetryAfterNs, uint64(maxRetryAfter)))}
	if r.Id != 0 {
		if !m.take(peer, r.Id) {
			m.c.late.Add(1)
			return
		}
		m.cfg.Complete(r.Id, nil, err)
		return
	}
	if m.cfg.Undelivered == nil || (r.From == nil && len(r.Body) == 0) {
		return
	}
	var from actor.Ref
	var ferr error
	if r.From != nil {
		from, ferr = RefOf(r.From)
	}
	to, terr := RefOf(&r.To)
	if ferr != nil || terr != nil {
		return
	}
	msg, _ := m.reg.Decode(r.Tag, r.Body) // nil when this node cannot decode it either
	m.cfg.Undelivered(from, to, msg, err)
}

// Stats returns the counters.
func (m *Mailer) Stats() MailStats {
	c := &m.c
	s := MailStats{
		TellsSent: c.tellsSent.Load(), AsksSent: c.asksSent.Load(), RepliesSent: c.repliesSent.Load(),
		TellsReceived: c.tellsRecv.Load(), AsksReceived: c.asksRecv.Load(),
		RepliesReceived: c.repliesRecv.Load(), RefusalsReceived: c.refRecv.Load(),
		RefusalsSent: c.refSent.Load(),
		DecodeErrors: c.decodeErr.Load(), BodyErrors: c.bodyErr.Load(), UnknownTags: c.unknownTag.Load(), Undeclared: c.undeclared.Load(),
		ExpiredOnArrival: c.expired.Load(), AsksExpired: c.asksExpired.Load(), AsksLinkDown: c.asksDown.Load(),
		LateReplies: c.late.Load(), RepliesDropped: c.dropped.Load(), ControlReceived: c.control.Load(),
		AsksWithdrawn: c.withdrawn.Load(), AsksCancelled: c.cancelled.Load(),
		CancelsKept: c.earlyKept.Load(), CancelsMatched: c.earlyMatched.Load(), CancelsEvicted: c.earlyEvicted.Load(),
		InboundBytes: m.inb.Load(),
	}
	for i := range c.refOut {
		s.RefusedOut[i] = c.refOut[i].Load()
		s.RefusedIn[i] = c.refIn[i].Load()
	}
	return s
}

// decodeAsk is Ask.DecodeBARE with actor names interned.
func (m *Mailer) decodeAsk(d *bare.Decoder, v *Ask) {
	if !d.Enter() {
		return
	}
	v.Id = d.Uint()
	m.decodeID(d, &v.To)
	if d.Optional() {
		v.From = new(ActorID)
		m.decodeID(d, v.From)
	}
	v.Epoch = d.Uint()
	v.DeadlineNs = d.Uint()
	v.Tag = d.U32()
	v.Body = d.Data(nil)
	// The chain is bounded: a longer one is refused after decoding, and a
	// count beyond the bound is malformed (no allocation bomb).
	if n := d.Count(3); n > actor.MaxCallChain+1 {
		d.Fail(d.Offset(), bare.ErrLimit, "call chain")
	} else if n > 0 {
		v.Chain = make([]ActorID, n)
		for i := range v.Chain {
			m.decodeID(d, &v.Chain[i])
		}
	}
	if d.Optional() {
		v.Trace = new(TraceContext)
		v.Trace.DecodeBARE(d)
		if len(v.Trace.Parent) > MaxTraceParent || len(v.Trace.State) > MaxTraceState {
			d.Fail(d.Offset(), bare.ErrLimit, "trace context")
		}
	}
	d.Leave()
}

func (m *Mailer) decodeID(d *bare.Decoder, v *ActorID) {
	if !d.Enter() {
		return
	}
	v.Kind = m.names.str(d)
	v.Key = m.names.str(d)
	v.Incarnation = d.Uint()
	d.Leave()
}

// names interns the actor kinds and keys read from envelopes, so the hot
// ones do not cost two allocations per message. The table is an immutable
// map replaced on insert and stops growing at maxNames entries.
type names struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]string]
}

const (
	maxNames   = 512
	maxNameLen = 64
)

// str reads a BARE str from d like Decoder.Str.
func (t *names) str(d *bare.Decoder) string {
	off := d.Offset()
	b := d.Bytes(d.Count(1))
	if d.Err() != nil {
		return ""
	}
	if !utf8.Valid(b) {
		d.Fail(off, bare.ErrInvalidUTF8, "")
		return ""
	}
	tab := t.m.Load()
	if tab != nil {
		if s, ok := (*tab)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	if len(s) > maxNameLen || (tab != nil && len(*tab) >= maxNames) {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.m.Load()
	next := make(map[string]string, maxNames)
	if old != nil {
		if len(*old) >= maxNames {
			return s
		}
		for k, v := range *old {
			next[k] = v
		}
	}
	next[s] = s
	t.m.Store(&next)
	return s
}
