package tempest

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
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
// so asks pending on it fail at once with actor.ErrProcessUnavailable.
type remote struct {
	self   string
	sched  *ariel.Scheduler
	local  ariel.Router
	locate remoteLocator
	mail   *wire.Mailer
	buf    *handoffBuffer
	trc    *tracing // nil when not tracing
}

var (
	_ ariel.Router       = (*remote)(nil)
	_ wire.LocalDelivery = remoteDelivery{}
	_ wire.InboxResolver = remoteDelivery{}
	_ wire.EpochFence    = remoteDelivery{}
	_ wire.ChainDelivery = remoteDelivery{}
	_ wire.TraceDelivery = remoteDelivery{}
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
	r := &remote{self: s.Config().Node, sched: s, local: s.LocalRouter(), locate: locate,
		buf: newHandoffBuffer(handoffBufferPerShard, handoffBufferWait)}
	mc.Registry = reg
	mc.Local = remoteDelivery{r}
	mc.Complete = func(id uint64, reply any, err error) { s.CompleteAsk(id, reply, err) }
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
// whose shard is being handed off, or that have mail waiting in a handoff
// buffer (Forward decides whether the message waits too).
func (r *remote) Resolve(to actor.Ref) (*ariel.Cell, error) {
	if !to.IsVirtual() {
		if to.IsZero() || to.Node() == r.self {
			return r.local.Resolve(to)
		}
		return nil, nil
	}
	if r.buf.queued(to) {
		return nil, nil
	}
	_, _, local, err := r.locate(to)
	if err != nil {
		if _, moving := inHandoff(err); moving {
			return nil, nil
		}
		return nil, err
	}
	if local {
		return r.local.Resolve(to)
	}
	return nil, nil
}

// Forward implements ariel.Router: it encodes the message and queues it on
// the owner's link. It never blocks on the network; a full link queue
// refuses with an error matching actor.ErrRefused, an unreachable node
// with one matching actor.ErrProcessUnavailable, and a message type
// without a tag with wire.ErrUnregistered.
//
// Mail for a virtual actor is stamped with the placement epoch it was
// routed by, so an owner whose table is newer refuses it NOT_OWNER instead
// of running it. Mail from an actor to a shard being handed off waits in
// a handoff buffer (see handoff_buffer.go); program code gets the
// placement error and waits itself.
func (r *remote) Forward(m ariel.Outbound) error {
	node := m.To.Node()
	var epoch uint64
	if m.To.IsVirtual() {
		if ok, err := r.buffer(m, nil); ok { // behind buffered mail
			return err
		}
		var local bool
		var err error
		if node, epoch, local, err = r.locate(m.To); err != nil {
			if ok, berr := r.buffer(m, err); ok {
				return berr
			}
			return err
		}
		if local { // placement moved here since Resolve
			return r.route(m)
		}
	}
	if m.AskID != 0 {
		if sc, ok := m.Trace.(trace.SpanContext); ok && r.trc != nil {
			return r.trc.send(sc, m.To, node, func(tc *wire.TraceContext) error {
				return r.mail.AskTraced(node, m.AskID, epoch, m.To, m.From, m.Msg, m.Deadline, m.Chain, tc)
			})
		}
		return r.mail.AskChain(node, m.AskID, epoch, m.To, m.From, m.Msg, m.Deadline, m.Chain)
	}
	return r.mail.TellAt(node, epoch, m.To, m.From, m.Msg)
}

// undelivered tells a local actor that a peer refused its tell. The
// notice goes through the actor's mailbox (the scheduler's system lane is
// not reachable from outside ariel), so it can itself be refused when
// that mailbox is full; the Mailer has counted the refusal either way.
//
// A tell to a virtual actor refused NOT_OWNER is first sent again, once,
// if this node's table has meanwhile changed its owner away from the
// refusing node (to this node or another), or waits in the handoff
// buffer if the shard is moving now. A table that still names the
// refusing node gets the notice at once, so the retry never loops: every
// further retry needs another change of owner.
func (r *remote) undelivered(from, to actor.Ref, msg any, err error) {
	if r.retryTell(from, to, msg, err) {
		return
	}
	r.notify(from, to, msg, err)
}

// notify posts the Undelivered notice on the sender's system lane, which
// a full mailbox cannot refuse; an error only means the sender is no
// longer active on this node, and then nobody is left to tell.
func (r *remote) notify(from, to actor.Ref, msg any, err error) {
	_ = r.sched.NotifyUndelivered(from, actor.Undelivered{To: to, Message: msg, Err: err})
}

// retryTell sends a refused tell again when the refusal is NOT_OWNER and
// the owner changed since; it reports whether it took the tell.
func (r *remote) retryTell(from, to actor.Ref, msg any, err error) bool {
	var re *wire.RefusedError
	if msg == nil || !to.IsVirtual() || from.IsZero() || !errors.As(err, &re) || re.Reason != wire.RefusedReasonNotOwner {
		return false
	}
	m := ariel.Outbound{To: to, From: from, Msg: msg}
	node, _, local, lerr := r.locate(to)
	if lerr != nil {
		ok, berr := r.buffer(m, lerr)
		if ok && berr != nil {
			r.notify(from, to, msg, berr)
		}
		return ok
	}
	if !local && node == re.Node {
		return false // this node's table has not caught up: no retry
	}
	if rerr := r.route(m); rerr != nil {
		r.notify(from, to, msg, rerr)
	}
	return true
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

// DeliverTraced implements wire.TraceDelivery: an ask that carries its
// caller's trace context. Its spans on this node (see trace.go) are
// children of the caller's send span; an ask not admitted ends them with
// the refusal.
func (d remoteDelivery) DeliverTraced(to, from actor.Ref, msg any, deadline time.Time, chain []actor.Ref, tc *wire.TraceContext, reply func(any, error)) error {
	t := d.r.trc
	if t == nil {
		return d.DeliverChain(to, from, msg, deadline, chain, reply)
	}
	parent := t.remoteParent(tc)
	if !parent.IsValid() || !parent.IsSampled() {
		return d.DeliverChain(to, from, msg, deadline, chain, reply)
	}
	ot := &ownerTrace{parent: parent, arrived: time.Now()}
	err := d.r.owns(to)
	if err == nil {
		err = d.r.sched.DeliverTraced(to, from, msg, deadline, chain, ot, reply)
	}
	if err != nil {
		t.refused(ot, to, err)
	}
	return err
}

// Fence implements wire.EpochFence: mail stamped with epoch may run here
// only if this node owns to and epoch is the current epoch of its shard.
// An older stamp was routed by a table that has changed since (the shard
// may have moved away and back): it is refused NOT_OWNER with the current
// owner, so the sender catches up and retries once. A newer stamp means
// this node's table is behind: refused NOT_OWNER without a hint.
func (d remoteDelivery) Fence(to actor.Ref, epoch uint64) error {
	if !to.IsVirtual() {
		return d.r.owns(to)
	}
	owner, cur, local, err := d.r.locate(to)
	if err != nil {
		return d.r.refusal(err)
	}
	switch {
	case cur == 0: // placement without epochs: ownership alone decides
	case epoch < cur:
		return &wire.RefusedError{Reason: wire.RefusedReasonNotOwner, OwnerHint: owner,
			Detail: fmt.Sprintf("stale placement epoch %d, current %d", epoch, cur)}
	case epoch > cur:
		return &wire.RefusedError{Reason: wire.RefusedReasonNotOwner,
			Detail: fmt.Sprintf("placement epoch %d is ahead of this node's %d", epoch, cur)}
	}
	if !local {
		return wire.NotOwner(owner)
	}
	return nil
}

// owns returns nil when this node owns to, and the NOT_OWNER refusal
// otherwise.
func (r *remote) owns(to actor.Ref) error {
	if to.IsVirtual() {
		owner, _, local, err := r.locate(to)
		if err != nil {
			return r.refusal(err)
		}
		if !local {
			return wire.NotOwner(owner)
		}
	} else if to.Node() != r.self {
		return wire.NotOwner(to.Node())
	}
	return nil
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
