package tempest

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

// remoteLocator says where an actor lives: the node that owns ref, the
// placement epoch of its shard in the same table read (0 when placement
// has no epochs, e.g. in tests), and whether that node is this one.
// Errors are actor sentinels (for example actor.ErrNoEligibleNode when no
// node can host the kind); an error may wrap a *remoteHint naming the node
// that will own ref (a handoff's target). The cluster plugs placement in
// here; it runs once or twice per message sent to a virtual actor, so it
// must be fast and safe for concurrent use. Spawned references never
// reach it: they name their node.
type remoteLocator func(ref actor.Ref) (node string, epoch uint64, local bool, err error)

// remoteHint is an error of the locator that knows which node to try
// instead (the target of a handoff in progress): the refusal a peer gets
// names it.
type remoteHint struct {
	err   error
	owner string
	shard string // the shard's name, when known (bounds handoff buffers)
}

func (h *remoteHint) Error() string { return h.err.Error() }
func (h *remoteHint) Unwrap() error { return h.err }

// remote is a node's cross-node mail: the ariel.Router that sends mail for
// actors of other nodes through a wire.Mailer, and the local side of that
// Mailer, which hands mail from peers to the scheduler.
//
// A node wires it in this order (the transport needs the Mailer's handler,
// the Mailer needs the transport):
//
//	r, err := newRemote(sched, reg, locate, wire.MailConfig{Logger: log, Clock: clk})
//	tr, err := wire.NewQUIC(wire.Config{..., Handler: r.mail.Handle, Events: r.mail.LinkEvent})
//	r.attach(tr) // installs the router: remote references now leave the node
//	...
//	tr.Close()   // on shutdown: the transport first, then
//	r.close()    // fail what is still pending and stop the deadline sweep
//
// Membership should call tr.Disconnect(peer) when it declares a peer dead,
// so asks pending on it fail at once with wire.ErrLinkLost (outcome
// unknown; it matches actor.ErrProcessUnavailable).
type remote struct {
	self   string
	sched  *ariel.Scheduler
	local  ariel.Router
	locate remoteLocator
	mail   *wire.Mailer
	reg    *wire.Registry
	buf    *mailq.Queues
	trc    *tracing.Tracer // nil when not tracing
	// cancel tells peer that the ask id it got from this node was given
	// up (the federation's CancelAsk); nil: nothing is sent.
	cancel func(peer string, id uint64)
	// busy, when set, refuses mail from peers that would need an
	// activation while this node is over its hydration backlog: it
	// returns the wait to ask for and why (see cluster.hydrationBusy).
	busy func(to actor.Ref) (wait time.Duration, why string, ok bool)
	// shardName, when set, names the recipient's shard by this node's
	// table, the bucket of the retry queues' bound (shardOf).
	shardName func(to actor.Ref) (string, bool)
	// sent holds every ask forwarded to another node until its outcome,
	// so that a refusal that never ran it (retry.go) sends it again.
	sent [sentShards]sentShard
	// links follows which peers' links are down (see wire.LinkWatch).
	links wire.LinkWatch
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

func (r *remote) keep(m ariel.Outbound, epoch uint64, p mailq.Place) {
	sh := &r.sent[m.AskID%sentShards]
	sh.mu.Lock()
	sh.m[m.AskID] = sentAsk{m: m, epoch: epoch, place: p}
	sh.mu.Unlock()
}

func (r *remote) drop(id uint64) (sentAsk, bool) {
	sh := &r.sent[id%sentShards]
	sh.mu.Lock()
	a, ok := sh.m[id]
	delete(sh.m, id)
	sh.mu.Unlock()
	return a, ok
}

// complete is the Mailer's outcome of a forwarded ask: a refusal that
// never ran it waits to be sent again (retry.go); anything else answers
// its caller.
func (r *remote) complete(id uint64, reply any, err error) {
	a, ok := r.drop(id)
	if ok && err != nil && r.retry(a.m, a.epoch, a.place, err) {
		return
	}
	r.sched.CompleteAsk(id, reply, err)
}

var (
	_ ariel.Router       = (*remote)(nil)
	_ wire.LocalDelivery = remoteDelivery{}
	_ wire.InboxResolver = remoteDelivery{}
	_ wire.BatchInbox    = remoteInbox{}
	_ wire.EpochFence    = remoteDelivery{}
	_ wire.ChainDelivery = remoteDelivery{}
	_ wire.TraceDelivery = remoteDelivery{}
	_ wire.AskDelivery   = remoteDelivery{}
	_ ariel.AskCanceller = (*remote)(nil)
	_ ariel.Resender     = (*remote)(nil)
)

// newRemote builds the Mailer over reg for the scheduler s and the router
// that uses it. mc's Registry, Local, Complete and Undelivered are filled
// in here; its other fields (limits, Clock, Logger) are the caller's. Give
// it the scheduler's clock: ask deadlines are absolute times on that
// clock. The router is installed by attach, not here.
func newRemote(s *ariel.Scheduler, reg *wire.Registry, locate remoteLocator, mc wire.MailConfig) (*remote, error) {
	if s == nil || reg == nil || locate == nil {
		return nil, errors.New("tempest: remote mail needs a scheduler, a registry and a locator")
	}
	r := &remote{self: s.Config().Node, sched: s, local: s.LocalRouter(), locate: locate, reg: reg,
		buf: mailq.New(handoffBufferPerShard, handoffBufferWait)}
	for i := range r.sent {
		r.sent[i].m = map[uint64]sentAsk{}
	}
	r.links.OnUp = r.kick
	mc.Registry = reg
	mc.Local = remoteDelivery{r}
	mc.Complete = r.complete
	mc.Expired = r.expired
	mc.Undelivered = r.undelivered
	m, err := wire.NewMailer(mc)
	if err != nil {
		return nil, err
	}
	r.mail = m
	return r, nil
}

// attach sets the transport and installs r as the scheduler's router.
func (r *remote) attach(t wire.Transport) {
	r.mail.Attach(t)
	r.sched.SetRouter(r)
}

// close puts the local router back and closes the Mailer (pending asks
// fail with wire.ErrClosed).
func (r *remote) close() error {
	r.sched.SetRouter(nil)
	return r.mail.Close()
}

// stats returns the mail counters.
func (r *remote) stats() wire.MailStats { return r.mail.Stats() }

// Resolve implements ariel.Router: local references resolve to their cell,
// others to (nil, nil) so the scheduler calls Forward; so do recipients
// whose route is in flux (resendable), or that have mail waiting in a
// handoff buffer (Forward decides whether the message waits too).
func (r *remote) Resolve(to actor.Ref) (*ariel.Cell, error) {
	c, _, err := r.ResolveRoute(to)
	return c, err
}

// ResolveRoute implements ariel.RouteResolver: Resolve with the lookup
// that found a virtual actor's owner elsewhere, or its route in flux,
// which the scheduler hands to Forward (Outbound.Route) so that Forward
// does not look it up again.
func (r *remote) ResolveRoute(to actor.Ref) (*ariel.Cell, ariel.Route, error) {
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
		if resendable(err) {
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
// *noLinkError, which an ask or an actor's tell waits out in a handoff
// buffer and Node.Tell in its caller's goroutine), and a message type
// without a tag with wire.ErrUnregistered.
//
// Mail for a virtual actor is stamped with the placement epoch it was
// routed by, so an owner whose table is newer refuses it NOT_OWNER instead
// of running it. It is routed by the lookup Resolve made for it when the
// scheduler hands that on (m.Route), else by a lookup here. An ask, or a
// tell from an actor, whose recipient's route is in flux waits in a
// handoff buffer (see handoff_buffer.go and the retry policy in
// retry.go); a tell from program code gets the placement error and
// Node.Tell waits itself.
func (r *remote) Forward(m ariel.Outbound) error {
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
		// No link to the owner (noLinkError): the mail never left, and
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
// for a virtual actor fails with a *noLinkError, which the retry policy
// resends, when node's link is down (wire.LinkWatch: it is not handed to the
// transport, which would queue it behind a dial that may never succeed)
// or the transport refused it for want of a link (wire.ErrUnavailable,
// returned at once: nothing was queued). p is m's place in the retry
// queue it was sent from (zero: none), kept with an ask.
func (r *remote) sendTo(node string, epoch uint64, m ariel.Outbound, p mailq.Place) error {
	if m.To.IsVirtual() && r.links.Down(node) {
		return &noLinkError{node: node, err: fmt.Errorf("%w: %s: link down, not sent", wire.ErrUnavailable, node)}
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
		return &noLinkError{node: node, err: err}
	}
	return err
}

func (r *remote) send(node string, epoch uint64, m ariel.Outbound) error {
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
func (r *remote) expired(peer string, id uint64) {
	r.drop(id)
	if r.cancel != nil {
		r.cancel(peer, id)
	}
}

// CancelAsk implements ariel.AskCanceller: the caller of the ask id,
// forwarded to another node, gave up on it, before its deadline or at it.
// The Mailer forgets it, and the owner is told, so that it drops the ask
// if its turn has not started.
func (r *remote) CancelAsk(id uint64) {
	r.drop(id)
	peer, ok := r.mail.Forget(id)
	if ok && r.cancel != nil {
		r.cancel(peer, id)
	}
}

// undelivered is told about a tell a peer refused (from is zero for
// program code). A refusal that never ran it (NOT_OWNER, NOT_SERVING)
// sends it again under the retry policy of retry.go; any other refusal
// goes to an actor sender as an actor.Undelivered notice. The notice goes
// through the sender's system lane, which a full mailbox cannot refuse;
// the Mailer has counted the refusal either way.
func (r *remote) undelivered(from, to actor.Ref, msg any, err error) {
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
func (r *remote) notify(from, to actor.Ref, msg any, err error) {
	_ = r.sched.NotifyUndelivered(from, actor.Undelivered{To: to, Message: msg, Err: err})
}

// remoteDelivery is the Mailer's local side: mail from a peer is admitted
// by the scheduler only for actors this node owns.
type remoteDelivery struct{ r *remote }

// Deliver implements wire.LocalDelivery over Scheduler.Deliver.
func (d remoteDelivery) Deliver(to, from actor.Ref, msg any, deadline time.Time, reply func(any, error)) error {
	return d.DeliverChain(to, from, msg, deadline, nil, reply)
}

// DeliverChain implements wire.ChainDelivery: an ask with its call chain.
func (d remoteDelivery) DeliverChain(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, reply func(any, error)) error {
	if err := d.r.owns(to); err != nil {
		return err
	}
	return d.r.sched.DeliverChain(to, from, msg, deadline, chain, reply)
}

// DeliverTraced implements wire.TraceDelivery: an ask (reply nil: a tell)
// that carries its caller's trace context. Its spans on this node (see
// internal/tracing) are children of the caller's send span; mail not admitted
// ends them with the refusal.
func (d remoteDelivery) DeliverTraced(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, tc *wire.TraceContext, reply func(any, error)) error {
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
func (d remoteDelivery) DeliverAsk(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, tc *wire.TraceContext, epoch uint64, reply func(any, error)) (wire.Withdrawer, error) {
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
func (d remoteDelivery) Fence(to actor.Ref, epoch uint64) error {
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
func (r *remote) owns(to actor.Ref) error { return r.admit(to, 0) }

// admit is owns for mail stamped with epoch (0: unstamped), whose stamp
// it fences as remoteDelivery.Fence does, from the same one lookup.
func (r *remote) admit(to actor.Ref, epoch uint64) error {
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
// sent is sent again under the one retry policy (retry.go) through
// ResendAll; an ask from another node goes back to its caller's node as
// that refusal; a tell from another node is lost (retry.go says why).
func (r *remote) fence(ref actor.Ref) error {
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
// (retry.go says why).
func (r *remote) ResendAll(batch []ariel.Outbound, err error) bool {
	if r.buf == nil || len(batch) == 0 || !batch[0].To.IsVirtual() || !resendable(err) {
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
// hint; the others keep their sentinel (a lease that lapsed here is
// refused NOT_OWNER through actor.ErrProcessUnavailable, without a hint:
// this node does not know who will serve next).
func (r *remote) refusal(err error) error {
	var h *remoteHint
	if errors.As(err, &h) && h.owner != "" && h.owner != r.self {
		return &wire.RefusedError{Reason: wire.RefusedReasonNotOwner, OwnerHint: h.owner, Detail: err.Error()}
	}
	if waitable(err) {
		// Transient on this side (a lease being renewed, a table catching
		// up, a move): the sender waits and retries, as it would locally.
		return wire.NotServing(err)
	}
	return err
}

// Inbox implements wire.InboxResolver: the Mailer resolves a recipient of
// tells once and keeps the inbox; ownership is still checked per message.
func (d remoteDelivery) Inbox(to actor.Ref) (wire.Inbox, error) {
	if err := d.r.owns(to); err != nil {
		return nil, err // not resolved here: that would create a local cell
	}
	in, err := d.r.sched.Inbox(to)
	if err != nil {
		return nil, err
	}
	return remoteInbox{d.r, in}, nil
}

// remoteInbox admits tells for a resolved recipient while this node owns it.
type remoteInbox struct {
	r  *remote
	in *ariel.Inbox
}

func (i remoteInbox) Tell(from actor.Ref, msg any) error {
	if err := i.r.owns(i.in.Ref()); err != nil {
		return err
	}
	return i.in.Tell(from, msg)
}

func (i remoteInbox) Live() bool { return i.in.Live() }

// TellBatch implements wire.BatchInbox: the tells of one inbound run to
// the recipient are admitted together, ownership checked once for them.
func (i remoteInbox) TellBatch(from actor.Ref, msgs []any) (int, error) {
	if err := i.r.owns(i.in.Ref()); err != nil {
		return 0, err
	}
	return i.in.TellBatch(from, msgs)
}
