package route

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/internal/tracing"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero/federation/mailq"
	"github.com/tempest-actors/tempest/wire"
)

// Locator says where an actor lives: the node that owns ref, the
// placement epoch of its shard in the same table read (0 when placement
// has no epochs, e.g. in tests), and whether that node is this one.
// Errors are actor sentinels (for example actor.ErrNoEligibleNode when no
// node can host the kind); an error may wrap a *Hint naming the node
// that will own ref (a handoff's target). The cluster plugs placement in
// here; it runs once or twice per message sent to a virtual actor, so it
// must be fast and safe for concurrent use. Spawned references never
// reach it: they name their node.
type Locator func(ref actor.Ref) (node string, epoch uint64, local bool, err error)

// Hint is an error of the locator that knows which node to try
// instead (the target of a handoff in progress): the refusal a peer gets
// names it.
type Hint struct {
	Err   error
	Owner string
	Shard string // the shard's name, when known (bounds handoff buffers)
}

func (h *Hint) Error() string { return h.Err.Error() }
func (h *Hint) Unwrap() error { return h.Err }

// Router is a node's cross-node mail: the ariel.Router that sends mail
// for actors of other nodes through a wire.Mailer, and the local side of
// that Mailer, which hands mail from peers to the scheduler.
//
// A node wires it in this order (the transport needs the Mailer's handler,
// the Mailer needs the transport):
//
//	r, err := route.New(route.Config{Scheduler: sched, Registry: reg, Locate: locate,
//		Mail: wire.MailConfig{Logger: log, Clock: clk}})
//	tr, err := wire.NewQUIC(wire.Config{..., Handler: r.Mailer().Handle, Events: r.LinkEvent})
//	r.Attach(tr, connect) // installs the router: remote references now leave the node
//	go r.RetryLoop(ctx, table.Changed)
//	...
//	tr.Close()   // on shutdown: the transport first, then
//	r.Close()    // fail what is still pending and stop the deadline sweep
//
// Membership should call tr.Disconnect(peer) when it declares a peer dead,
// so asks pending on it fail at once with wire.ErrLinkLost (outcome
// unknown; it matches actor.ErrProcessUnavailable).
type Router struct {
	self   string
	sched  *ariel.Scheduler
	local  ariel.Router
	locate Locator
	mail   *wire.Mailer
	reg    *wire.Registry
	buf    *mailq.Queues
	trc    *tracing.Tracer // nil when not tracing
	cancel func(peer string, id uint64)
	busy   func(to actor.Ref) (wait time.Duration, why string, ok bool)
	// shardName: see Config.ShardName.
	shardName func(to actor.Ref) (string, bool)
	// sent holds every ask forwarded to another node until its outcome,
	// so that a refusal that never ran it sends it again (see the
	// package doc, Retry policy).
	sent [sentShards]sentShard
	// links follows which peers' links are down (see wire.LinkWatch).
	links wire.LinkWatch
}

// Config is what a Router is built from. Scheduler, Registry and Locate
// are required; the hooks are optional.
type Config struct {
	Scheduler *ariel.Scheduler
	Registry  *wire.Registry
	Locate    Locator
	// Mail configures the Mailer: its Registry, Local, Complete, Expired,
	// Ended and Undelivered are filled in by New; its other fields (limits,
	// Clock, Logger, Control) are the caller's. Give it the scheduler's
	// clock: ask deadlines are absolute times on that clock.
	Mail wire.MailConfig
	// Tracer, when set, traces asks across nodes.
	Tracer *tracing.Tracer
	// CancelAsk tells peer that the ask id it got from this node was
	// given up (the federation's CancelAsk); nil: nothing is sent.
	CancelAsk func(peer string, id uint64)
	// Busy, when set, refuses mail from peers that would need an
	// activation while this node is over its hydration backlog: it
	// returns the wait to ask for and why.
	Busy func(to actor.Ref) (wait time.Duration, why string, ok bool)
	// ShardName, when set, names the recipient's shard by this node's
	// table, the bucket of the retry queues' bound (shardOf).
	ShardName func(to actor.Ref) (string, bool)
}

const sentShards = 32

type sentShard struct {
	mu sync.Mutex
	m  map[uint64]sentAsk
}

// sentAsk is a forwarded ask, the epoch of the table that routed it and
// its place in a retry queue it was sent from (zero: none).
type sentAsk struct {
	m     ariel.Outbound
	epoch uint64
	place mailq.Place
}

func (r *Router) keep(m ariel.Outbound, epoch uint64, p mailq.Place) {
	sh := &r.sent[m.AskID%sentShards]
	sh.mu.Lock()
	sh.m[m.AskID] = sentAsk{m: m, epoch: epoch, place: p}
	sh.mu.Unlock()
}

func (r *Router) drop(id uint64) (sentAsk, bool) {
	sh := &r.sent[id%sentShards]
	sh.mu.Lock()
	a, ok := sh.m[id]
	delete(sh.m, id)
	sh.mu.Unlock()
	return a, ok
}

// complete is the Mailer's outcome of a forwarded ask: a refusal that
// never ran it waits to be sent again (see the package doc); anything else answers
// its caller.
func (r *Router) complete(id uint64, reply any, err error) {
	a, ok := r.drop(id)
	if ok && err != nil && r.retry(a.m, a.epoch, a.place, err) {
		return
	}
	r.sched.CompleteAsk(id, reply, err)
}

var (
	_ ariel.Router       = (*Router)(nil)
	_ wire.LocalDelivery = delivery{}
	_ wire.InboxResolver = delivery{}
	_ wire.BatchInbox    = inbox{}
	_ wire.EpochFence    = delivery{}
	_ wire.ChainDelivery = delivery{}
	_ wire.TraceDelivery = delivery{}
	_ wire.AskDelivery   = delivery{}
	_ ariel.AskCanceller = (*Router)(nil)
	_ ariel.Resender     = (*Router)(nil)
)

// New builds the Mailer and the router that uses it. The router is
// installed in the scheduler by Attach, not here.
func New(cfg Config) (*Router, error) {
	s := cfg.Scheduler
	if s == nil || cfg.Registry == nil || cfg.Locate == nil {
		return nil, errors.New("tempest: remote mail needs a scheduler, a registry and a locator")
	}
	r := &Router{self: s.Config().Node, sched: s, local: s.LocalRouter(), locate: cfg.Locate, reg: cfg.Registry,
		buf: mailq.New(handoffBufferPerShard, handoffBufferWait), trc: cfg.Tracer,
		cancel: cfg.CancelAsk, busy: cfg.Busy, shardName: cfg.ShardName}
	for i := range r.sent {
		r.sent[i].m = map[uint64]sentAsk{}
	}
	r.links.OnUp = r.kick
	mc := cfg.Mail
	mc.Registry = cfg.Registry
	mc.Local = delivery{r}
	mc.Complete = r.complete
	mc.Expired = r.expired
	mc.Ended = cfg.Scheduler.AskEnded
	mc.Undelivered = r.undelivered
	m, err := wire.NewMailer(mc)
	if err != nil {
		return nil, err
	}
	r.mail = m
	return r, nil
}

// Mailer is the mail layer under the router: its Handle and HandleBatch
// are the transport's handlers.
func (r *Router) Mailer() *wire.Mailer { return r.mail }

// LinkEvent is the transport's link event: a link marked down before the
// asks pending on it fail, so that mail sent from then on waits
// (wire.LinkWatch) rather than go to a new dial.
func (r *Router) LinkEvent(ev wire.LinkEvent) {
	r.links.Event(ev)
	r.mail.LinkEvent(ev)
}

// Attach sets the transport and installs r as the scheduler's router.
// connect dials a peer whose link is down, for mail that waits for it
// (wire.LinkWatch.Connect); nil: none is dialled.
func (r *Router) Attach(t wire.Transport, connect func(peer string) error) {
	r.links.Connect = connect
	r.mail.Attach(t)
	r.sched.SetRouter(r)
}

// Close puts the local router back and closes the Mailer (pending asks
// fail with wire.ErrClosed).
func (r *Router) Close() error {
	r.sched.SetRouter(nil)
	return r.mail.Close()
}

// MailStats returns the mail layer's counters.
func (r *Router) MailStats() wire.MailStats { return r.mail.Stats() }

// RetryStats returns the retry queues' counters and the messages waiting
// in them now.
func (r *Router) RetryStats() (mailq.Stats, int64) { return r.buf.Stats(), r.buf.Waiting() }

// Resolve implements ariel.Router: local references resolve to their cell,
// others to (nil, nil) so the scheduler calls Forward; so do recipients
// whose route is in flux (resendable), or that have mail waiting in a
// handoff buffer (Forward decides whether the message waits too).
func (r *Router) Resolve(to actor.Ref) (*ariel.Cell, error) {
	c, _, err := r.ResolveRoute(to)
	return c, err
}

// ResolveRoute implements ariel.RouteResolver: Resolve with the lookup
// that found a virtual actor's owner elsewhere, or its route in flux,
// which the scheduler hands to Forward (Outbound.Route) so that Forward
// does not look it up again.
func (r *Router) ResolveRoute(to actor.Ref) (*ariel.Cell, ariel.Route, error) {
	if !to.IsVirtual() {
		if to.IsZero() || to.Node() == r.self {
			c, err := r.local.Resolve(to)
			return c, ariel.Route{}, err
		}
		return nil, ariel.Route{}, nil
	}
	if r.buf.Queued(to) {
		return nil, ariel.Route{}, nil
	}
	node, epoch, local, err := r.locate(to)
	if err != nil {
		if Resendable(err) {
			return nil, ariel.Route{Epoch: epoch, Err: err, Set: true}, nil
		}
		return nil, ariel.Route{}, err
	}
	if local {
		c, err := r.local.Resolve(to)
		return c, ariel.Route{}, err
	}
	return nil, ariel.Route{Node: node, Epoch: epoch, Set: true}, nil
}

// Forward implements ariel.Router: it encodes the message and queues it on
// the owner's link. It never blocks on the network; a full link queue
// refuses with an error matching actor.ErrRefused, an unreachable node
// with one matching actor.ErrProcessUnavailable (for a virtual actor a
// *NoLinkError, which an ask or an actor's tell waits out in a handoff
// buffer and Node.Tell in its caller's goroutine), and a message type
// without a tag with wire.ErrUnregistered.
//
// Mail for a virtual actor is stamped with the placement epoch it was
// routed by, so an owner whose table is newer refuses it NOT_OWNER instead
// of running it. It is routed by the lookup Resolve made for it when the
// scheduler hands that on (m.Route), else by a lookup here. An ask, or a
// tell from an actor, whose recipient's route is in flux waits in a
// retry queue (see the package doc); a tell from program code gets the
// placement error and the node's Tell waits itself.
func (r *Router) Forward(m ariel.Outbound) error {
	node := m.To.Node()
	var epoch uint64
	// The lookup of Resolve, a moment ago, is for this send only: every
	// copy kept or queued to be sent again is routed anew.
	rt := m.Route
	m.Route = ariel.Route{}
	if m.To.IsVirtual() {
		if ok, err := r.buffer(m, nil); ok { // behind buffered mail
			return err
		}
		var local bool
		var err error
		if rt.Set {
			node, epoch, err = rt.Node, rt.Epoch, rt.Err
		} else {
			node, epoch, local, err = r.locate(m.To)
		}
		if err != nil {
			if ok, berr := r.buffer(m, err); ok {
				return berr
			}
			return err
		}
		if local { // placement moved here since Resolve
			return r.route(m, mailq.Place{})
		}
	}
	if m.To.IsVirtual() && m.AskID == 0 && r.buf != nil {
		r.buf.SentDirect(m.To, m.From)
	}
	err := r.sendTo(node, epoch, m, mailq.Place{})
	if err != nil {
		// No link to the owner (NoLinkError): the mail never left, and
		// waits like mail whose route is in flux.
		if ok, berr := r.buffer(m, err); ok {
			return berr
		}
	}
	return err
}

// sendTo queues m on the link to node, stamped with epoch; a traced ask
// or tell is sent under its tempest.send span with the span's context. An
// ask to a virtual actor is kept until its outcome (see complete). Mail
// for a virtual actor fails with a *NoLinkError, which the retry policy
// resends, when node's link is down (wire.LinkWatch: it is not handed to the
// transport, which would queue it behind a dial that may never succeed)
// or the transport refused it for want of a link (wire.ErrUnavailable,
// returned at once: nothing was queued). p is m's place in the retry
// queue it was sent from (zero: none), kept with an ask.
func (r *Router) sendTo(node string, epoch uint64, m ariel.Outbound, p mailq.Place) error {
	if m.To.IsVirtual() && r.links.Down(node) {
		return &NoLinkError{node: node, err: fmt.Errorf("%w: %s: link down, not sent", wire.ErrUnavailable, node)}
	}
	kept := m.AskID != 0 && m.To.IsVirtual()
	if kept {
		r.keep(m, epoch, p)
	}
	err := r.send(node, epoch, m)
	if err != nil && kept {
		r.drop(m.AskID)
	}
	if err != nil && m.To.IsVirtual() && errors.Is(err, wire.ErrUnavailable) && !errors.Is(err, wire.ErrLinkLost) {
		return &NoLinkError{node: node, err: err}
	}
	return err
}

func (r *Router) send(node string, epoch uint64, m ariel.Outbound) error {
	if tracing.Built && m.Trace != nil && r.trc != nil {
		if sc, ok := tracing.ParentOf(m.Trace); ok {
			return r.trc.Send(sc, m.AskID == 0, m.To, node, func(tc *wire.TraceContext) error {
				if m.AskID == 0 {
					return r.mail.TellTraced(node, epoch, m.To, m.From, m.Msg, tc)
				}
				return r.mail.AskTraced(node, m.AskID, epoch, m.To, m.From, m.Msg, m.Deadline, m.Chain, tc)
			})
		}
	}
	if m.AskID != 0 {
		return r.mail.AskChain(node, m.AskID, epoch, m.To, m.From, m.Msg, m.Deadline, m.Chain)
	}
	return r.mail.TellAt(node, epoch, m.To, m.From, m.Msg)
}

// expired is the Mailer's report of an ask to peer that reached its
// deadline before the scheduler's own timer failed it: the owner is told
// as for CancelAsk.
func (r *Router) expired(peer string, id uint64) {
	r.drop(id)
	if r.cancel != nil {
		r.cancel(peer, id)
	}
}

// CancelAsk implements ariel.AskCanceller: the caller of the ask id,
// forwarded to another node, gave up on it, before its deadline or at it.
// The Mailer forgets it, and the owner is told, so that it drops the ask
// if its turn has not started.
func (r *Router) CancelAsk(id uint64) {
	r.drop(id)
	peer, ok := r.mail.Forget(id)
	if ok && r.cancel != nil {
		r.cancel(peer, id)
	}
}

// undelivered is told about a tell a peer refused (from is zero for
// program code). A refusal that never ran it (NOT_OWNER, NOT_SERVING)
// sends it again under the retry policy (package doc); any other refusal
// goes to an actor sender as an actor.Undelivered notice. The notice goes
// through the sender's system lane, which a full mailbox cannot refuse;
// the Mailer has counted the refusal either way.
func (r *Router) undelivered(from, to actor.Ref, msg any, err error) {
	if r.retry(ariel.Outbound{To: to, From: from, Msg: msg}, 0, mailq.Place{}, err) {
		return
	}
	if !from.IsZero() {
		r.notify(from, to, msg, err)
	}
}

// notify posts the Undelivered notice on the sender's system lane, which
// a full mailbox cannot refuse; an error only means the sender is no
// longer active on this node, and then nobody is left to tell.
func (r *Router) notify(from, to actor.Ref, msg any, err error) {
	_ = r.sched.NotifyUndelivered(from, actor.Undelivered{To: to, Message: msg, Err: err})
}

// delivery is the Mailer's local side: mail from a peer is admitted
// by the scheduler only for actors this node owns.
type delivery struct{ r *Router }

// Deliver implements wire.LocalDelivery over Scheduler.Deliver.
func (d delivery) Deliver(to, from actor.Ref, msg any, deadline time.Time, reply func(any, error)) error {
	return d.DeliverChain(to, from, msg, deadline, nil, reply)
}

// DeliverChain implements wire.ChainDelivery: an ask with its call chain.
func (d delivery) DeliverChain(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, reply func(any, error)) error {
	if err := d.r.owns(to); err != nil {
		return err
	}
	return d.r.sched.DeliverChain(to, from, msg, deadline, chain, reply)
}

// DeliverTraced implements wire.TraceDelivery: an ask (reply nil: a tell)
// that carries its caller's trace context. Its spans on this node (see
// internal/tracing) are children of the caller's send span; mail not admitted
// ends them with the refusal.
func (d delivery) DeliverTraced(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, tc *wire.TraceContext, reply func(any, error)) error {
	t := d.r.trc
	if !tracing.Built || t == nil {
		return d.DeliverChain(to, from, msg, deadline, chain, reply)
	}
	parent := t.RemoteParent(tc)
	if !parent.IsValid() || !parent.IsSampled() {
		return d.DeliverChain(to, from, msg, deadline, chain, reply)
	}
	ot := tracing.NewOwner(parent, reply == nil)
	err := d.r.owns(to)
	if err == nil {
		err = d.r.sched.DeliverTraced(to, from, msg, deadline, chain, ot, reply)
	}
	if err != nil {
		t.Refused(ot, to, err)
	}
	return err
}

// DeliverAsk implements wire.AskDelivery: every inbound ask comes here,
// so that its caller can withdraw it (CancelAsk) until its turn starts.
// Its stamp is fenced with its admission, from one lookup (admit).
func (d delivery) DeliverAsk(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, tc *wire.TraceContext, epoch uint64, reply func(any, error)) (wire.Withdrawer, error) {
	var trace any
	var ot *tracing.Owner
	if t := d.r.trc; t != nil && tc != nil {
		if parent := t.RemoteParent(tc); parent.IsValid() && parent.IsSampled() {
			ot = tracing.NewOwner(parent, false)
			trace = ot
		}
	}
	err := d.r.admit(to, epoch)
	var q ariel.QueuedAsk
	if err == nil {
		q, err = d.r.sched.DeliverAsk(to, from, msg, deadline, chain, trace, reply)
	}
	if err != nil {
		if ot != nil {
			d.r.trc.Refused(ot, to, err)
		}
		return nil, err
	}
	return q, nil
}

// Fence implements wire.EpochFence: mail stamped with epoch may run here
// only if this node owns to and epoch is the current epoch of its shard.
// An older stamp was routed by a table that has changed since (the shard
// may have moved away and back): it is refused NOT_OWNER with the current
// owner, so the sender catches up and retries once. A newer stamp means
// this node's table is behind (it applies the same entries a moment
// later): refused NOT_SERVING (placement.ErrBehind), so the sender backs
// off and sends again rather than wait for its own table, which is ahead
// already and may not change again.
func (d delivery) Fence(to actor.Ref, epoch uint64) error {
	if !to.IsVirtual() {
		return d.r.owns(to)
	}
	owner, cur, local, err := d.r.locate(to)
	if err != nil {
		return d.r.refusal(err)
	}
	return fenceEpoch(owner, cur, local, epoch)
}

// fenceEpoch is Fence's decision for mail stamped with epoch from one
// lookup of its recipient: owner, the current epoch cur, and whether the
// owner is this node.
func fenceEpoch(owner string, cur uint64, local bool, epoch uint64) error {
	switch {
	case cur == 0: // placement without epochs: ownership alone decides
	case epoch < cur:
		return &wire.RefusedError{Reason: wire.RefusedReasonNotOwner, OwnerHint: owner,
			Detail: fmt.Sprintf("stale placement epoch %d, current %d", epoch, cur)}
	case epoch > cur:
		return wire.NotServing(fmt.Errorf("%w: placement epoch %d is ahead of this node's %d", placement.ErrBehind, epoch, cur))
	}
	if !local {
		return wire.NotOwner(owner)
	}
	return nil
}

// owns returns nil when this node owns to and may take its mail now, the
// NOT_OWNER refusal when it does not own it, and BUSY when the mail would
// need an activation while this node is over its hydration backlog.
func (r *Router) owns(to actor.Ref) error { return r.admit(to, 0) }

// admit is owns for mail stamped with epoch (0: unstamped), whose stamp
// it fences as delivery.Fence does, from the same one lookup.
func (r *Router) admit(to actor.Ref, epoch uint64) error {
	if to.IsVirtual() {
		owner, cur, local, err := r.locate(to)
		if err != nil {
			return r.refusal(err)
		}
		if epoch != 0 {
			if err := fenceEpoch(owner, cur, local, epoch); err != nil {
				return err
			}
		} else if !local {
			return wire.NotOwner(owner)
		}
		if r.busy != nil {
			if wait, why, busy := r.busy(to); busy {
				return wire.Busy(wait, why)
			}
		}
	} else if to.Node() != r.self {
		return wire.NotOwner(to.Node())
	}
	return nil
}

// fence is the activation fence of a node's doorbell: mail admitted for
// ref may activate it here only while this node owns it and may serve
// it. Mail can pass the ownership check of its route just before a move
// is applied and reach the actor's mailbox after the handoff quiesced
// the shard and read its state at rest; activating it then would
// acknowledge updates the new owner never receives. Refused here, none
// of that mail ran: the error is the refusal admission would give it
// now (see refusal), marked wire.NotRun. What this node's own senders
// sent is sent again under the one retry policy through ResendAll; an
// ask from another node goes back to its caller's node as that refusal;
// a tell from another node is lost (the package doc says why).
func (r *Router) FenceActivation(ref actor.Ref) error {
	owner, _, local, err := r.locate(ref)
	switch {
	case err != nil:
		err = r.refusal(err)
	case !local:
		err = wire.NotOwner(owner)
	default:
		return nil
	}
	if re, ok := err.(*wire.RefusedError); ok {
		re.Node = r.self // made here for this refusal: named as a peer's is
	}
	return wire.NotRun(err)
}

// ResendAll implements ariel.Resender: mail that waited here for an
// activation the fence refused never ran, so it waits in the retry queue
// (mailq.Queues.AddUnrun) as a peer's refusal would make it wait,
// but ahead of the mail queued for its recipient meanwhile, which was
// sent after it; the retry loop routes it where the table puts the
// recipient once it may go. The scheduler's batch holds this node's own
// senders' mail only: an ask from another node goes back to its caller's
// node as the refusal, and a tell from another node is not resent here
// (the package doc says why).
func (r *Router) ResendAll(batch []ariel.Outbound, err error) bool {
	if r.buf == nil || len(batch) == 0 || !batch[0].To.IsVirtual() || !Resendable(err) {
		return false
	}
	now := r.sched.Clock().Now()
	wait, busy := busyFor(err)
	items := make([]mailq.Item, 0, len(batch))
	for _, m := range batch {
		if m.AskID != 0 && !r.sched.AskPending(m.AskID) {
			continue // answered meanwhile (its deadline): nothing to send
		}
		it := mailq.Item{M: m}
		if busy {
			it.Due = now.Add(wait)
		}
		items = append(items, it)
	}
	return r.buf.AddUnrun(items, r.shardOf(batch[0].To, err), now)
}

// refusal is the admission error for a locator error: one that names the
// node to try instead (a handoff's target) becomes NOT_OWNER with that
// hint; one transient on this side (a lease lapsed here and being
// renewed, a table catching up, a move, this node marked down) becomes
// NOT_SERVING; the others keep their sentinel.
//
// This node marked down is transient for a sender: either it is marked
// up again (it was cut off or paused for less than the fence delay) and
// serves, or its shards move and the sender's table routes the mail
// there. Refused NOT_OWNER without a hint, as it was, the sender waited
// for its table to route the shard elsewhere (the refuser said it was not
// the owner) and, once this node was up again with its shards, the ask
// waited out its deadline.
func (r *Router) refusal(err error) error {
	var h *Hint
	if errors.As(err, &h) && h.Owner != "" && h.Owner != r.self {
		return &wire.RefusedError{Reason: wire.RefusedReasonNotOwner, OwnerHint: h.Owner, Detail: err.Error()}
	}
	if Waitable(err) {
		// The sender waits and retries, as it would locally.
		return wire.NotServing(err)
	}
	return err
}

// Inbox implements wire.InboxResolver: the Mailer resolves a recipient of
// tells once and keeps the inbox; ownership is still checked per message.
func (d delivery) Inbox(to actor.Ref) (wire.Inbox, error) {
	if err := d.r.owns(to); err != nil {
		return nil, err // not resolved here: that would create a local cell
	}
	in, err := d.r.sched.Inbox(to)
	if err != nil {
		return nil, err
	}
	return inbox{d.r, in}, nil
}

// inbox admits tells for a resolved recipient while this node owns it.
type inbox struct {
	r  *Router
	in *ariel.Inbox
}

func (i inbox) Tell(from actor.Ref, msg any) error {
	if err := i.r.owns(i.in.Ref()); err != nil {
		return err
	}
	return i.in.Tell(from, msg)
}

func (i inbox) Live() bool { return i.in.Live() }

// TellBatch implements wire.BatchInbox: the tells of one inbound run to
// the recipient are admitted together, ownership checked once for them.
func (i inbox) TellBatch(from actor.Ref, msgs []any) (int, error) {
	if err := i.r.owns(i.in.Ref()); err != nil {
		return 0, err
	}
	return i.in.TellBatch(from, msgs)
}
