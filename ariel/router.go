package ariel

import (
	"time"

	"github.com/tempest-actors/tempest/actor"
)

// Router is the one seam every send goes through: program Tell and Ask,
// in-turn Tell and Ask, timers, replies. It decides whether a reference lives
// on this node (and which cell holds its mail) or elsewhere. The cluster
// installs its own Router with SetRouter, wrapping LocalRouter, to send mail
// for remote actors over the network; actor code never changes.
//
// Implementations must be safe for concurrent use and fast: Resolve runs
// once per message, except that a turn's run of consecutive sends to a
// spawned actor of this node resolves it at most twice, however long the
// run.
type Router interface {
	// Resolve returns the local cell for to, or (nil, nil) when to lives on
	// another node, in which case the scheduler calls Forward. Errors are
	// the actor sentinels (ErrUnknownKind, ErrActorTerminated, ...).
	Resolve(to actor.Ref) (*Cell, error)
	// Forward hands a message for another node to the transport. It must
	// not block on the network. An error is reported to the sender like a
	// local refusal. For an ask (AskID != 0) the transport later calls
	// Scheduler.CompleteAsk with the reply or error; if nothing ever
	// answers, the ask still fails at Deadline.
	Forward(m Outbound) error
}

// RouteResolver is implemented by a Router whose Resolve makes, for mail
// that leaves this node, a routing decision that Forward would otherwise
// make again (a placement lookup): ResolveRoute is Resolve that also
// returns that decision, and the scheduler hands it to Forward in
// Outbound.Route when it forwards the message at once, so that a message
// is routed by one lookup. Mail forwarded later (the outputs of a held
// turn, see Hold) carries no Route: Forward decides it when it goes.
type RouteResolver interface {
	ResolveRoute(to actor.Ref) (*Cell, Route, error)
}

// Route is a RouteResolver's decision for a message to another node,
// opaque to the scheduler, which only carries it from ResolveRoute to
// Forward.
type Route struct {
	Node  string // the node to send the message to
	Epoch uint64 // the Router's version of the decision (placement epoch)
	Err   error  // a routing error Forward handles (mail that waits)
	Set   bool   // a decision was made; false: Forward makes its own
}

// Resender is implemented by a Router that sends again mail this node
// admitted and then refused without running it. Reject hands it the
// messages that waited for the refused activation, all in one call and
// in mailbox order, before it fails them with err; ResendAll reports
// whether it took the batch. Taken, every message of it is the Router's:
// it sends them again in that order, ahead of any mail for the recipient
// sent after them, or reports a failure as Forward's callers do (an ask
// through CompleteAsk, a tell to an actor sender as an actor.Undelivered
// notice). Declined, Reject fails them all with err.
//
// A message is as a Router would be given it to forward: its recipient
// (unpinned), its sender (zero for program code, else an actor of this
// node), an ask's AskID (registered for CompleteAsk and AskPending),
// deadline, call chain and trace. Mail that arrived from another node is
// not in the batch: an ask's reply function answers it with err, and its
// caller's node decides; a tell is failed with err as before, since its
// sender's node, not this one, orders it against that sender's later
// mail (see Deliver).
//
// ResendAll runs on Reject's caller's goroutine with the recipient's
// mailbox locked, so that no mail for the recipient is admitted until it
// returns: it must not block, send, report failures or call the
// scheduler (but for AskPending), and may take only locks that are never
// held across a call into the scheduler.
type Resender interface {
	ResendAll(batch []Outbound, err error) bool
}

// Outbound is a message leaving this node.
type Outbound struct {
	To   actor.Ref
	From actor.Ref // zero when sent from program code
	Msg  any
	// AskID correlates the reply of an ask; 0 for a tell.
	AskID uint64
	// Deadline is the ask's absolute deadline; zero for a tell.
	Deadline time.Time
	// Chain is the message's call chain: the activations waiting on it,
	// outermost first (nil for none). The receiving node hands it to
	// Scheduler.DeliverChain, so reentrancy and ask cycles are judged the
	// same as for local mail.
	Chain []actor.Ref
	// Trace is the message's opaque trace (see WithTrace, TellTraced), nil
	// when untraced; a Router that carries it to another node hands it to
	// Scheduler.DeliverTraced there, in whatever form it travels.
	Trace any
	// Route is the decision the Router's ResolveRoute made for this
	// message (see RouteResolver); its Set is false when there is none.
	Route Route
}

// LocalRouter returns the router that resolves references on this node only:
// virtual actors of registered kinds and actors spawned here. Forward fails
// with actor.ErrProcessUnavailable.
func (s *Scheduler) LocalRouter() Router { return s.local }

// SetRouter installs r as the routing seam. Typically r wraps LocalRouter.
func (s *Scheduler) SetRouter(r Router) {
	if r == nil {
		r = s.local
	}
	_, local := r.(localRouter)
	rr, _ := r.(RouteResolver)
	s.router.Store(&routerBox{r: r, rr: rr, local: local})
}

func (s *Scheduler) route() Router { return s.router.Load().r }

// resolve is the per-message entry to the routing seam, with the
// Router's decision for mail it does not resolve here (RouteResolver),
// to be handed to Forward. The default local router is called directly
// (no dynamic dispatch) — same decision, cheaper.
func (s *Scheduler) resolve(to actor.Ref) (*Cell, Route, error) {
	b := s.router.Load()
	if !b.local {
		// A router that sends mail elsewhere must not see a name no
		// node could accept: it is refused here alike, wherever its
		// owner would be.
		if err := to.Check(); err != nil {
			return nil, Route{}, err
		}
		if b.rr != nil {
			return b.rr.ResolveRoute(to)
		}
		c, err := b.r.Resolve(to)
		return c, Route{}, err
	}
	// Fast path: a live actor spawned here. Only the fields it needs are
	// read, so the reference is not copied.
	if node, key, id, inc := to.Parts(); id != 0 && key == "" && node == s.node {
		if c := s.ids.get(id); c != nil {
			if inc == 0 || inc == c.inc.Load() {
				return c, Route{}, nil
			}
		}
	}
	c, err := s.resolveLocal(to)
	return c, Route{}, err
}

type routerBox struct {
	r     Router
	rr    RouteResolver // r's, when it is one
	local bool
}

type localRouter struct{ s *Scheduler }

var _ Router = localRouter{}

func (l localRouter) Resolve(to actor.Ref) (*Cell, error) { return l.s.resolveLocal(to) }

func (s *Scheduler) resolveLocal(to actor.Ref) (*Cell, error) {
	var c *Cell
	switch {
	case !to.IsVirtual() && to.ID() != 0 && to.Node() == s.node:
		// The common case first: an actor spawned on this node.
		c = s.ids.get(to.ID())
		if c == nil {
			return nil, actor.ErrActorTerminated
		}
	case to.IsVirtual():
		k := vkey{to.Kind(), to.Key()}
		if v, ok := s.virtual.Load(k); ok {
			c = v.(*Cell)
			break
		}
		// Only a name that gets a cell is checked: the cells held are
		// all valid, so the hit above needs no check.
		if err := actor.CheckVirtual(to.Kind(), to.Key()); err != nil {
			return nil, err
		}
		info, ok := s.kind(to.Kind())
		if !ok {
			return nil, actor.ErrUnknownKind
		}
		c = s.storeCell(k, s.newCell(to, info.mailbox, info))
	case to.ID() == 0:
		if err := to.Check(); err != nil {
			return nil, err // a virtual reference with an empty key
		}
		return nil, actor.ErrActorTerminated // the zero Ref
	default:
		return nil, nil
	}
	if !c.pinMatches(to.Incarnation()) {
		return nil, s.pinned
	}
	return c, nil
}

func (l localRouter) Forward(Outbound) error { return actor.ErrProcessUnavailable }

// Resident reports whether the virtual actor to has a cell on this node
// (active, activating, or passivating): mail for it needs no new
// activation. Safe for concurrent use.
func (s *Scheduler) Resident(to actor.Ref) bool {
	if !to.IsVirtual() {
		return false
	}
	c, ok := s.virtual.Load(vkey{to.Kind(), to.Key()})
	return ok && !c.(*Cell).gone()
}
