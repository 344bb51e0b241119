package ariel

import (
	"sync/atomic"
	"time"
)

// Stats is a snapshot of the scheduler's counters since New. Counters only
// grow. Turns and Messages are published by each worker every few drain
// cycles and when it idles, so they may lag slightly behind a running pool.
type Stats struct {
	Turns        uint64 // handler invocations (user and lifecycle messages)
	Messages     uint64 // messages taken out of mailboxes
	Refused      uint64 // sends refused by admission (full mailbox)
	Undelivered  uint64 // messages not delivered for any reason (refusals included)
	BudgetYields uint64 // drain cycles ended by the fairness budget
	Steals       uint64 // run-queue steals between workers
	// Seized counts recipients whose run-token a flush took to run their
	// mail in place, without a mailbox push or a wake (see the package
	// doc).
	Seized uint64
	// Shares counts the times a worker opened the groups of mail it held
	// to idle siblings, and Recruited the groups a sibling claimed and
	// ran (see Config.RecruitWork).
	Shares, Recruited uint64
	Parks             uint64 // times a worker parked
	Panics            uint64 // handler panics recovered
	Exhausted         uint64 // turns that ran past their budget and were abandoned
	// Fenced counts what abandoned turns did after they were abandoned
	// and the scheduler dropped: sends, replies, timers, notices and
	// replies to their asks.
	Fenced uint64
	// Unreplaced counts abandoned workers that got no replacement
	// because MaxReplacements was reached.
	Unreplaced uint64
	Expired    uint64 // asks dropped at dequeue because their deadline passed
	// Cancelled counts asks dropped at dequeue, their turn never run,
	// because their caller gave up on them before their deadline: its
	// context was cancelled, it withdrew the ask from another node
	// (CancelAsk), or its node went away.
	Cancelled uint64
	// Lapsed counts the times user mail of a leased actor was found due
	// after the scheduler's lease ran out and was held back, not run
	// (see SetLeased).
	Lapsed uint64
	// TimerSkipped counts periodic timer ticks (Context.Every) not
	// delivered because the previous tick was still queued or the
	// period had already passed when the timer ran.
	TimerSkipped uint64
	// StrayReplies counts Reply and ReplyError calls in continuations,
	// which have no ask to answer (see Context.ReplyLater).
	StrayReplies uint64
	// NoReply counts asks failed with ErrNoReply: their turn ended
	// without answering them or taking their Replier, or their Replier
	// was dropped unanswered.
	NoReply uint64
	// AsksInTurn counts blocking asks refused with ErrAskInTurn because
	// they were made on a goroutine that runs turns.
	AsksInTurn uint64
	// Deadlocks counts asks failed with ErrDeadlock: a NonReentrant actor
	// was asked by its own call chain.
	Deadlocks uint64
	Workers   int // live pool workers (replacements included, abandoned ones not)
	// Stuck is a gauge: goroutines of abandoned turns that have not
	// returned yet. They cost a goroutine (and a core, if they spin)
	// each; Go cannot stop them.
	Stuck int
	// Degraded is set while the pool runs below its configured size
	// because the replacement cap was reached.
	Degraded bool
	// Cells is a gauge, not a counter: cells of virtual actors held now
	// (active, holding mail, or made with EnsureCell). A passivated
	// identity whose mailbox is empty holds none.
	Cells int
}

// StatsSource is what the node maps to its metrics exporter.
type StatsSource interface {
	Stats() Stats
}

// LatencyObserver receives per-message timings. Implementations must be safe
// for concurrent use and fast: they run on the workers.
type LatencyObserver interface {
	// ObserveQueued is the time a message waited in its mailbox.
	ObserveQueued(d time.Duration)
	// ObserveHandler is the time the handler took.
	ObserveHandler(d time.Duration)
}

// counters is one executor's (worker's) counters. Each executor adds its
// own, once per drain cycle, so workers do not share a cache line.
type counters struct {
	turns, messages, refused, undelivered, yields, steals, parks, cycles atomic.Uint64
	seized, shares, recruited                                            atomic.Uint64
	_                                                                    [64]byte
}

// globalCounters are rare events counted where they happen.
type globalCounters struct {
	refused, undelivered, panics, exhausted, expired, timerSkipped   atomic.Uint64
	cancelled, lapsed                                                atomic.Uint64
	strayReplies, noReply, asksInTurn, deadlocks, fenced, unreplaced atomic.Uint64
}
