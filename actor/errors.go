package actor

import "errors"

// Error sentinels shared by every layer of Tempest. Compare with errors.Is;
// layers wrap them with %w to add detail.
var (
	// ErrRefused means admission said no (a full mailbox, a node over its
	// inbound limit): the message was definitely not handled.
	ErrRefused = errors.New("tempest: refused")
	// ErrDeadlineExceeded means an ask's deadline passed before a reply
	// arrived, or the ask expired in the recipient's mailbox and was
	// dropped before its turn.
	ErrDeadlineExceeded = errors.New("tempest: deadline exceeded")
	// ErrActorTerminated means the recipient (or the incarnation the
	// reference is pinned to) no longer exists.
	ErrActorTerminated = errors.New("tempest: actor terminated")
	// ErrProcessUnavailable means the recipient's node is gone, unreachable
	// or shutting down; the outcome of the message is unknown.
	ErrProcessUnavailable = errors.New("tempest: process unavailable")
	// ErrUnknownKind means no factory is registered for the kind of a
	// virtual reference.
	ErrUnknownKind = errors.New("tempest: unknown kind")
	// ErrNoEligibleNode means placement found no node able to host the kind.
	ErrNoEligibleNode = errors.New("tempest: no eligible node")
	// ErrInvalidKey means a virtual reference cannot name an actor: its
	// kind or key is empty, not valid UTF-8 or too long (see
	// CheckVirtual). Nothing was sent.
	ErrInvalidKey = errors.New("tempest: invalid key")
	// ErrNotCommitted means the recipient's turn changed state that could
	// not be made durable (its store failed), so its reply was not
	// released: the caller must not count the update as done. The error
	// names the actor.
	ErrNotCommitted = errors.New("tempest: state not committed")
	// ErrNoReply means the actor that received an ask will not answer it:
	// the turn that received it ended without Reply, ReplyError or
	// ReplyLater, or it dropped its Replier (Context.ReplyLater) without
	// answering. The turn ran.
	ErrNoReply = errors.New("tempest: ask dropped without a reply")
	// ErrPanicked means the turn that received an ask panicked before
	// answering it. The error also matches the value the turn panicked
	// with when that was an error (on another node: when it matches an
	// error registered on both nodes), and its text names the value.
	ErrPanicked = errors.New("tempest: actor panicked")
	// ErrAlreadyAnswered is returned by a Replier whose ask was answered
	// already or ended (deadline passed, caller gone).
	ErrAlreadyAnswered = errors.New("tempest: ask already answered")
	// ErrNotAsk is returned by the Replier of a message that was a tell.
	ErrNotAsk = errors.New("tempest: message is not an ask")
	// ErrAskInTurn means a blocking ask (Client.Ask, Node.Ask) was called
	// from inside an actor's turn, where it would hold a worker until the
	// reply; nothing was sent. Use Context.Ask with a continuation.
	ErrAskInTurn = errors.New("tempest: blocking ask inside a turn")
)

// ErrDeadlock means an ask would wait on an activation that is itself
// waiting, through its call chain, for this ask: a cycle its Reentrancy
// cannot admit. The error is a *DeadlockError naming the cycle.
var ErrDeadlock = errors.New("tempest: ask cycle")

// ErrCallChainTooLong means an ask would carry a call chain longer than
// MaxCallChain; nothing was sent.
var ErrCallChainTooLong = errors.New("tempest: call chain too long")

// DeadlockError is how ErrDeadlock is reported: Cycle lists the waiting
// activations from the outermost asker to the actor that refused the ask
// (the first and last entries name the same identity).
type DeadlockError struct {
	Cycle []Ref
}

func (e *DeadlockError) Error() string {
	s := "tempest: ask cycle: "
	for i, r := range e.Cycle {
		if i > 0 {
			s += " -> "
		}
		s += r.String()
	}
	return s
}

// Is matches ErrDeadlock.
func (e *DeadlockError) Is(target error) bool { return target == ErrDeadlock }
