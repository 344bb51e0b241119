// Package ariel is Tempest's local scheduler: it decides which ready actor
// runs next on this node, and nothing else. Actors never address it; its
// clients are the supervisor (Prospero), the node wiring and program code
// sending mail.
//
// # Model
//
// Every actor identity has a cell: a bounded multi-producer single-consumer
// mailbox for user mail, a system lane (lifecycle, replies to asks,
// supervision) that is drained first and never refused, a run-token, and —
// once attached — the actor value. The cell can exist before the actor
// value: mail admitted to a cell without an actor is not scheduled; the
// Activator is rung once, and the supervisor attaches an actor later.
//
// The run-token is one atomic word. A sender that finds the cell Idle moves
// it to Ready with a CAS and only the winner queues it; a worker claims it
// Ready→Running with a CAS; after draining the mailbox to empty the worker
// marks it Idle while holding the mailbox lock, so a send racing the idle
// transition always sees Idle and wakes the cell again. At most one turn of
// an actor runs at any instant.
//
// Turns run on a fixed pool of workers (default GOMAXPROCS), not a goroutine
// per actor. Each worker has a LIFO slot holding the freshest wake, so a
// request/reply hop runs next on the same warm worker, and a bounded run
// queue that idle siblings steal from. Mail to an idle actor with an empty
// mailbox skips the mailbox altogether: the sending worker takes the
// recipient's run-token at the flush (seizes it, with the same CAS a wake
// uses) and holds the turn's whole group of mail for it, which runs right
// after the current cycle, before anything that reached the mailbox
// meanwhile; a request/reply hop or a fan-out to idle actors then costs no
// mailbox lock, no run queue and no wake-up (Stats.Seized). Seizing is
// bounded: a cycle whose turns seized ends after its batch when its actor
// has more mail, a worker holds at most 1,024 groups (besides those it
// shared, below), a chain of seizes (a relay) stops seizing after 64
// links and falls back to the queues, and a worker busy with held mail
// (or shared, below) looks at the shared queue every 61 runs.
// A worker whose held groups still carry enough measured work (at least
// Config.RecruitWork, 20µs by default, at 2µs or more a group) while
// another worker runs nothing shares them: its siblings are woken and
// each worker, the holder too, claims whole groups from one cursor and
// runs them as the holder would have (Stats.Shares, Stats.Recruited); a
// group's cell keeps its run-token throughout, so order and one turn at a
// time hold whoever runs it (recruit.go).
// Work from outside the pool, and
// actors that used up their fairness budget, go to a shared FIFO injector.
// Idle workers spin briefly, then park; a producer wakes a parked worker only
// when nobody is spinning, and the parking protocol rules out lost wake-ups.
//
// Timers (Context.After, Context.Every) belong to the activation that
// armed them: passivation, restart and termination end them, and a tick
// queued for an activation that ended is discarded rather than ringing the
// doorbell of the identity at rest. A tick travels in the system lane as
// a notice from the actor to itself; a periodic timer keeps at most one
// tick queued (Stats.TimerSkipped counts the periods skipped). The
// after-turn hook is told that a tick's turn is not activity, unless the
// timer was armed with actor.KeepAlive.
//
// Sends made during a turn are buffered and delivered when the turn returns,
// grouped by recipient: every send to a recipient in the turn joins its
// group, whether or not sends to others came between, and each group costs
// one mailbox lock and at most one wake; a run of sends to one spawned
// actor of this node resolves its reference at most twice, not once per
// send. Admission is still synchronous: Tell reserves the recipient's
// capacity at once and returns actor.ErrRefused when the mailbox is full
// (a group reserves one slot for its first send, then chunks of 8, 16, 32
// and 64, and returns the unused ones when the turn ends). Per-sender, per-recipient FIFO holds. Envelopes are stored by value in pooled mailbox
// rings: a local tell allocates nothing beyond boxing its message.
//
// A drain cycle ends after FairnessMessages messages or FairnessTime; a busy
// actor then goes to the back of the injector, so two always-busy actors
// share a worker. The clock is read only in cycles that meet a backlog, and
// then every few messages, so a request/reply hop never reads it. A
// panic in a handler is recovered and reported through the FaultHook.
//
// A watchdog goroutine outside the pool abandons a turn running past its
// budget (the kind's, SetTurnBudget, or TurnBudget) within one watchdog
// period (WatchdogPeriod) after the budget: Go cannot stop the goroutine,
// so the scheduler stops waiting for it. Each worker has a turn gate, an
// atomic word it sets around every call into code the scheduler does not
// control (between two plain tells of one batch whose first turn sent
// nothing, a single swap ends one call-out and starts the next); the
// watchdog takes the turn with a compare-and-swap on it, so the turn
// either returned or is abandoned, never both. The ask of the
// abandoned turn fails at once with actor.ErrActorTerminated, the mail
// the turn had taken goes back to the head of its mailbox, the actor
// value is detached (a spawned actor is stopped), the FaultHook gets a
// BudgetExhausted fault with Abandoned set, and a replacement worker
// takes the stuck one's place, up to MaxReplacements beside stuck
// goroutines (past it the pool shrinks and Stats reports Degraded). The
// abandoned goroutine is fenced: whatever it does through its Context
// afterwards is discarded and counted (Stats.Fenced), and replies and
// notices addressed to the abandoned value are dropped on arrival.
//
// Every send goes through the Router: LocalRouter resolves actors on this
// node; the cluster installs a Router that forwards other references over
// the network and completes their asks with CompleteAsk. A Router that
// implements RouteResolver gets the decision its Resolve made for a
// message that leaves the node back in Forward (Outbound.Route), so that a
// message is routed by one lookup. Asks carry an
// absolute deadline; an ask that is past it when dequeued is answered
// actor.ErrDeadlineExceeded without running the handler, and every pending
// ask fails at its deadline even if nothing answers.
//
// With Config.Simulated the same API runs on one goroutine that picks the
// next ready actor with a seeded generator and a virtual clock (SimClock)
// that jumps to the next timer when nothing is ready: the same seed replays
// the same sequence of turns, given the same input from inside actors (or
// from outside before the runner has anything to do). A timer pending on
// the SimClock is something to do: the runner may move time to it at once,
// from the moment New returns, even before any mail. Arm a simulation's
// timers in a turn (send the first mail, and let its turn arm them), not
// from the goroutine that set the scheduler up: there, when a timer is set
// and how far time has moved already depend on goroutine scheduling.
//
// # Usage
//
//	s, err := ariel.New(ariel.Config{})
//	if err != nil { ... }
//	defer s.Close(context.Background())
//
//	ref, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
//		if name, ok := msg.(string); ok {
//			ctx.Reply("hello " + name)
//		}
//	}))
//	reply, err := s.Ask(ctx, ref, "ariel")
//
//	s.Register("counter", func(key string) actor.Actor { return &counter{} }, 0)
//	_ = s.Tell(actor.Virtual("counter", "a"), 1) // activates counter/a
//
// # For the supervisor
//
// EnsureCell, Attach, AttachAt, Passivate, Restart, RestartAt, Replace,
// Retire, RetireThen, Reject, Exec, State, SetAfterTurn, SetHoldOutputs,
// SetLeased, Mark, SetLease and NotifyUndelivered, together
// with the Activator and FaultHook interfaces, are the supervisor's (and
// the transport's) handles on cells; actor code never uses them. The
// supervisor may call Attach, Passivate, Restart, Replace and Retire
// under a lock its Activator takes: they never ring the Activator. What
// they queue for an actor value the watchdog then abandons settles with
// it (a passivation is dropped, its final not run; a restart's value
// takes the cell), and Passivate of a cell with no actor fails with
// ErrNotAttached.
//
// Incarnations: a virtual cell made by mail has no known incarnation
// (pinned references are admitted) until an actor is attached; AttachAt
// and RestartAt set the number the supervisor restored from the state at
// rest, so incarnations stay monotonic across passivation, retirement and
// process restarts. Replace swaps the actor value between turns without
// re-minting. A consequence: mail pinned to a stale incarnation that
// reaches an identity at rest is delivered to the next activation.
//
// Leased kinds (SetLeased) run user mail only while the lease the
// supervisor gave the scheduler (SetLease) is current, read before each
// batch a worker takes from a mailbox; mail found due after it ran out
// is put back, and Config.Lapsed is
// asked to renew the lease or passivate the actor (lease.go says why: a
// process that thaws must not run mail admitted before it froze).
//
// Dormant cells cost nothing: a passivated virtual actor whose mailbox is
// empty leaves the map (Stats.Cells counts the cells held). Its cell is marked
// gone under its lock first, and a sender that finds it gone looks the
// identity up again and gets a fresh cell, so no mail is pushed into a
// cell that left the map.
//
// SetAfterTurn installs a per-kind hook run on the turn thread after each
// turn that ended normally (turn-driven persistence); kinds without one pay
// nothing. The hook runs before the turn's outputs leave and may hold them
// (Hold.Wait) until a write of the state the turn changed is durable; the
// worker goes on meanwhile, and held outputs are released in turn order
// per actor, later turns' outputs queueing behind them (reply after
// commit). Hold.Wait may be called several times for one turn (the hook,
// and effects the turn staged, each for a write of its own): the outputs
// leave once every release was called, and Hold.Released reports that
// outcome. Code running in a turn stages an Effect with Stage (the node's
// reminder registrations do): it settles on the turn thread when the turn
// ended normally, with the turn's Hold, and is dropped if the turn
// panicked or was abandoned. SetHoldOutputs gives a kind without a hook
// held outputs for that. In such a kind a turn's reply leaves at the end of the turn,
// not at the Reply call, and a send to a remote actor is forwarded then
// too, so its refusal comes back as Undelivered rather than as Tell's
// error. Retire of a cell with no actor, and Reject (an activation the
// supervisor refuses), answer the waiting mail at once: asks fail, tells
// from actors come back as Undelivered. None of the mail Reject answers
// ran, so a Router that implements Resender is handed it first, in one
// batch in mailbox order before the mailbox admits mail again (all but
// mail from other nodes: their asks' reply functions answer them, their
// tells fail), and may send it again instead (DeliverRouted brings it
// back to a local actor). An error marked for other nodes' reply
// functions only (wire.NotRun's) reaches this node's askers, and an
// actor's own replies, without the mark. NotifyUndelivered posts a notice to
// an actor's system lane, never refused by a full mailbox. After Close,
// Passivate runs the final turn on a goroutine of its own (and Close runs
// passivations that were queued but never ran), so a supervisor shut down
// after the scheduler is still answered. RetireThen reports when the
// retired cell is released (stopped and out of the map, so later mail
// gets a fresh cell); a supervisor declares a retirement done only then,
// since until the stop turn runs mail still lands in the retiring cell and
// is answered ErrActorTerminated. After Close it runs the stop like
// Passivate runs the final turn.
package ariel
