package actor

import (
	"context"
	"strconv"
	"time"
)

// Actor is the behaviour of an actor. Receive runs one message per turn; at
// most one turn of an actor runs at any instant, so an implementation needs no
// locking for its own fields. Receive must not block: to wait for another
// actor use Context.Ask with a continuation.
//
// Besides user mail, Receive sees the lifecycle messages Started, Stopping,
// Passivating, ReceiveTimeout and Undelivered.
type Actor interface {
	Receive(ctx Context, msg any)
}

// Func adapts a function to the Actor interface.
type Func func(ctx Context, msg any)

// Receive calls f.
func (f Func) Receive(ctx Context, msg any) { f(ctx, msg) }

// Continuation receives the outcome of an in-turn ask. It runs as a later
// turn of the asking actor, with a Context of that turn. Exactly one of reply
// and err is meaningful: err is nil on success.
type Continuation func(ctx Context, reply any, err error)

// Cancel stops a timer. It reports whether the timer was stopped before it
// fired. Calling it more than once is harmless.
type Cancel func() bool

// Context is an actor's window on the world during one turn. It is valid
// only during the turn it was passed to: do not keep it, and do not use it
// from other goroutines.
type Context interface {
	// Self is the reference of the running actor.
	Self() Ref
	// Sender is the sender of the current message, the zero Ref when it
	// came from program code or from the runtime.
	Sender() Ref
	// Now is the scheduler's clock (virtual in simulated mode).
	Now() time.Time

	// Tell sends msg to to. The message is delivered when the current turn
	// returns (sends are batched per turn, per-recipient order is kept).
	// Admission is decided now: a full mailbox returns ErrRefused; an
	// unknown or stopped recipient returns its error. Every failed tell is
	// also reported back to this actor as an Undelivered message in a later
	// turn, and counted, so a handler may ignore the returned error.
	Tell(to Ref, msg any) error
	// Ask sends msg to to as a request and returns at once. The reply, or
	// the error (ErrDeadlineExceeded when no reply arrives before the
	// deadline, ErrRefused, ErrActorTerminated, ...), is passed to then,
	// which runs as a later turn of this actor. The actor handles other mail
	// meanwhile. The deadline is DefaultAskTimeout unless an AskOption sets it.
	Ask(to Ref, msg any, then Continuation, opts ...AskOption)
	// Reply answers the current message if it is an ask. It is a no-op for
	// a tell. Only the first Reply or ReplyError of a turn counts. An ask
	// whose turn ends without Reply, ReplyError or ReplyLater fails at
	// once with ErrNoReply (a panic: with the panic's error). In a
	// continuation the current message is the reply being continued, not
	// the ask that started it, so Reply there answers nothing (it is
	// counted as a stray reply): to answer an ask from a later turn, take
	// its Replier with ReplyLater in the turn that received it.
	Reply(msg any)
	// ReplyError answers the current ask with an error. ReplyError(nil)
	// answers as Reply(nil) does: the asker gets a nil reply and no error.
	ReplyError(err error)
	// ReplyLater takes over the answer to the current ask: the returned
	// Replier answers it exactly once, from this turn or from any later
	// turn or continuation (r.Reply(ctx, v) with that turn's Context),
	// whether the caller is program code, a local actor or an actor on
	// another node. The ask stays open
	// until it is answered, its deadline passes (the caller gets
	// ErrDeadlineExceeded), or the Replier becomes unreachable without an
	// answer (the caller gets ErrNoReply soon after a garbage collection
	// finds it, not at its deadline). After ReplyLater, Reply and
	// ReplyError in the same turn answer through the Replier. Calling it
	// again in the same turn returns the same Replier. For a tell, the
	// Replier's methods return ErrNotAsk.
	ReplyLater() Replier

	// Spawn starts a child actor on this node and returns its reference.
	// The child receives Started as its first message. It is stopped when
	// this actor stops.
	Spawn(a Actor, opts ...SpawnOption) (Ref, error)
	// Stop stops the actor ref (Self included): it receives Stopping as its
	// last message; mail still queued is answered ErrActorTerminated.
	Stop(ref Ref)

	// After delivers msg to this activation once, after d, from itself.
	// Timers belong to the activation that armed them: passivation,
	// restart and retirement cancel them, and a tick already queued when
	// the activation ends is discarded, so a timer never wakes a dormant
	// actor (use a durable reminder for that). A tick does not count as
	// activity for idle passivation unless the timer was armed with
	// KeepAlive. Cancel, called in a later turn, guarantees the tick is
	// not delivered.
	After(d time.Duration, msg any, opts ...TimerOption) Cancel
	// Every delivers msg to this activation every d (d > 0), the first
	// time after d, at a fixed rate. At most one tick of the timer is
	// queued at a time: a tick due while the previous one still waits in
	// the mailbox is skipped, so a slow actor never builds a backlog. It
	// belongs to the activation like After and runs until cancelled or
	// the activation ends. A non-positive d arms nothing and returns a
	// Cancel that reports false.
	Every(d time.Duration, msg any, opts ...TimerOption) Cancel
	// SetReceiveTimeout asks for a ReceiveTimeout message when no message
	// arrived for d. Zero or negative turns it off.
	SetReceiveTimeout(d time.Duration)
}

// Replier answers one ask once (see Context.ReplyLater). Unlike a
// Context it may be kept across turns, and even handed to another actor.
// The answer is an output of the turn whose Context is passed: it leaves
// with that turn's other sends, so with reply after commit (a kind that
// persists every turn) it is released only once that turn's state is
// committed.
type Replier interface {
	// Reply answers the ask with msg, as an output of the turn ctx belongs
	// to. It returns ErrAlreadyAnswered when the ask was answered already
	// or ended (its deadline passed or its caller gave up), ErrNotAsk when
	// the message was a tell, and an error when ctx is not the Context of
	// a running turn.
	Reply(ctx Context, msg any) error
	// ReplyError answers the ask with err (see Reply).
	ReplyError(ctx Context, err error) error
}

// Client sends to actors from program code (outside any actor).
type Client interface {
	// Tell sends msg to to with no sender. It returns ErrRefused when the
	// recipient's mailbox is full, and the routing error otherwise.
	Tell(to Ref, msg any) error
	// Ask sends msg to to and blocks the calling goroutine (only) until the
	// reply arrives, the deadline of ctx passes (default DefaultAskTimeout)
	// or ctx is cancelled. Called from inside an actor's turn, where it
	// would hold a worker until the reply, it sends nothing and returns
	// ErrAskInTurn: use Context.Ask with a continuation there.
	Ask(ctx context.Context, to Ref, msg any) (any, error)
}

// DefaultAskTimeout is the deadline of an ask that sets none.
const DefaultAskTimeout = 5 * time.Second

// Started is the first message of every activation (spawn, activation of a
// virtual actor, restart).
type Started struct{}

// Stopping is the last message an actor receives before it is stopped.
type Stopping struct{}

// Passivating is the last message an activation receives before a
// supervisor puts it to rest; its identity stays valid and later mail
// activates it again.
type Passivating struct{}

// ReceiveTimeout is delivered when no message arrived within the duration
// set with Context.SetReceiveTimeout.
type ReceiveTimeout struct{}

// Undelivered reports a message this actor sent that was not delivered.
type Undelivered struct {
	To      Ref
	Message any
	Err     error
}

// TimerOption configures one timer (After, Every).
type TimerOption func(*TimerOptions)

// TimerOptions is the resolved form of TimerOption values.
type TimerOptions struct {
	// KeepAlive makes the timer's ticks count as activity for idle
	// passivation, like mail from outside. By default they do not, so
	// an actor whose only traffic is its own periodic timer still idles
	// out (and its timers end with the activation).
	KeepAlive bool
}

// KeepAlive makes a timer's ticks count as activity: an actor with a
// keep-alive periodic timer never becomes idle while the timer runs.
func KeepAlive() TimerOption { return func(o *TimerOptions) { o.KeepAlive = true } }

// AskOption configures one ask.
type AskOption func(*AskOptions)

// AskOptions is the resolved form of AskOption values.
type AskOptions struct {
	Timeout  time.Duration
	Deadline time.Time
}

// WithTimeout sets the ask's deadline d from now.
func WithTimeout(d time.Duration) AskOption { return func(o *AskOptions) { o.Timeout = d } }

// WithDeadline sets the ask's absolute deadline.
func WithDeadline(t time.Time) AskOption { return func(o *AskOptions) { o.Deadline = t } }

// SpawnOption configures one spawn.
type SpawnOption func(*SpawnOptions)

// SpawnOptions is the resolved form of SpawnOption values.
type SpawnOptions struct {
	// Mailbox is the mailbox capacity; 0 means the scheduler's default.
	Mailbox int
	// Reentrancy is the child's policy while it waits for a reply.
	Reentrancy Reentrancy
}

// WithMailbox sets the child's mailbox capacity.
func WithMailbox(n int) SpawnOption { return func(o *SpawnOptions) { o.Mailbox = n } }

// WithReentrancy sets the child's Reentrancy (default Reentrant).
func WithReentrancy(r Reentrancy) SpawnOption { return func(o *SpawnOptions) { o.Reentrancy = r } }

// Reentrancy says which messages an actor of a kind may handle while it
// waits for the reply to an ask it made in a turn (a continuation is
// outstanding). It never changes that turns run one at a time: it decides
// only whether other mail may run between an ask and its continuation.
type Reentrancy uint8

const (
	// Reentrant actors take any mail while they wait (the default): each
	// turn runs to completion, so state is consistent at every point where
	// another message may run, and a chain of asks never deadlocks.
	Reentrant Reentrancy = iota
	// CallChainReentrant actors take, while they wait, only replies,
	// system mail, messages marked Interleaving, and requests that belong
	// to the call chain of the ask they wait on (A asks B, B asks A: B's
	// ask runs, so A → B → A completes). Other mail waits in the mailbox.
	CallChainReentrant
	// NonReentrant actors take, while they wait, only replies, system mail
	// and Interleaving messages. A request of their own call chain would
	// wait forever: it fails at once with ErrDeadlock naming the cycle.
	NonReentrant
)

func (r Reentrancy) String() string {
	switch r {
	case Reentrant:
		return "Reentrant"
	case CallChainReentrant:
		return "CallChainReentrant"
	case NonReentrant:
		return "NonReentrant"
	}
	return "Reentrancy(" + strconv.Itoa(int(r)) + ")"
}

// Interleaving is implemented by message types that may always run, also
// while a non-reentrant actor waits for a reply: read-only queries. A
// message admitted this way still keeps per-sender order: the messages its
// sender sent before it run first.
type Interleaving interface {
	AlwaysInterleave()
}

// MaxCallChain bounds the call chain an ask carries (the activations that
// wait on it, transitively). An ask that would make a longer chain fails
// at once with ErrCallChainTooLong instead of sending.
const MaxCallChain = 32
