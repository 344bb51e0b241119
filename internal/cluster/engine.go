package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tempest-actors/tempest/clock"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/prospero/federation/mailq"
	"github.com/tempest-actors/tempest/prospero/federation/route"
	"github.com/tempest-actors/tempest/wire"
)

// Config is the cluster side of a node: tempest.ClusterConfig (which
// documents the fields it shares with it) and what the engine needs of the
// node's own configuration.
type Config struct {
	Name    string
	DataDir string
	// Logger is the node's logger, untagged: wire, membership and
	// placement tag their records with the node's name themselves. Log is
	// the engine's own, tagged.
	Logger, Log     *slog.Logger
	Clock           clock.Clock
	HydrationBudget int

	GossipAddr, GossipAdvertise, QUICAddr, AdvertiseHost, HTTPAddr string
	Seeds                                                          []string
	BootstrapExpect                                                int
	GossipKeys                                                     [][]byte
	Certificate                                                    tls.Certificate
	CAs                                                            *x509.CertPool
	Version                                                        string
	GossipTiming                                                   membership.Timing
	Placement                                                      placement.Config
	Wire                                                           wire.Config
	CatchUpRate                                                    int // bytes a second (ReplicationConfig.CatchUpRate)
	LeaveTimeout                                                   time.Duration
}

// maxStreamMsg bounds one message on the bulk state stream.
const maxStreamMsg = 4 << 20

// Engine is a node's cluster side. Its fields are set in Start and only
// read afterwards.
type Engine struct {
	h     Host
	cfg   Config
	run   Deps
	pause *pauseGates // set before Start by MakePausable; nil: not pausable
	// storeHealth is what the fence loop reports of the state store
	// (storehealth.go); owned by that loop once started.
	storeHealth storeHealth
	storeSeeded bool         // storeHealth took the table's word (watchStore)
	storeHold   atomic.Int64 // its first hold (SetStoreHold)
	net         network      // set before Start by Simulate; nil: QUIC and memberlist
	name        string
	log         *slog.Logger
	reg         *wire.Registry
	rem         *route.Router
	tr          transport
	pconn       net.PacketConn // the QUIC socket, when this cluster opened it (pausable nodes)
	ml          gossip
	pl          *placement.Node
	peers       *peerView
	prove       *membership.Prover   // the QUIC identities of gossip members (peerView admits only proven ones)
	fed         *federation.Endpoint // the federation protocol on the control lanes
	fedTr       *fedSender
	// placed is set once pl is (see starting).
	placed atomic.Bool
	// gossiping is set once ml and prove are: the transport's Admit
	// reads ml from its own goroutines.
	gossiping atomic.Bool
	// askPolicies are the kinds' deadline policies in the applied table
	// (ForeignAskTimeouts), nil until first read; amu serialises their
	// reading.
	askPolicies atomic.Pointer[askPolicies]
	amu         sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lns    []net.Listener

	// leaseMu orders the reads of the lease given to the scheduler
	// (giveLease), so that an older reading never replaces a newer one.
	leaseMu sync.Mutex

	mu        sync.Mutex
	active    map[prospero.Identity]bool // activations on this node
	known     map[prospero.Identity]bool // identities indexed (or pending) in this process
	pending   []prospero.Identity        // activated, not yet in the shard index
	indexKick chan struct{}
	unshipped map[prospero.Identity]error // owned here, isolated from a handoff
	isolated  atomic.Uint64               // identities isolated from handoffs

	shipping  flights[placement.Move] // shipments of moves from this node (shipShard)
	xmu       sync.Mutex              // guards transfers
	transfers transfers               // handoffs this node receives
	aborts    atomic.Uint64           // of them, aborted by the old owner
	promoted  atomic.Uint64           // planned moves from this node that promoted an in-sync follower
	// streamsRefused counts raft, handoff and replication streams
	// refused because their peer is not a member (admitStream).
	streamsRefused atomic.Uint64

	// Warm handoffs (hydrate.go).
	warmHandoff    atomic.Bool // send HydrateRequest on planned moves (on by default)
	wmu            sync.Mutex  // guards warmed, warming and movingOut
	warmed         map[warmKey]bool
	movingOut      map[placement.ShardRef][]prospero.Identity // passivated because their shard moves away
	warming        int                                        // activations scheduled by warm-ups, not started
	hydrated       atomic.Uint64                              // activations started by warm-ups
	hydrateBusy    atomic.Uint64                              // HydrateRequests answered BUSY
	mailBusy       atomic.Uint64                              // mail from peers refused BUSY (hydrationBusy)
	hydrateRetries atomic.Uint64                              // BUSY answers this node waited out as the sender
}

// New returns the engine of the node h; it starts nothing until Start.
func New(cfg Config, h Host) *Engine {
	c := &Engine{h: h, cfg: cfg, name: cfg.Name, log: cfg.Log,
		active: map[prospero.Identity]bool{}, known: map[prospero.Identity]bool{},
		indexKick: make(chan struct{}, 1), warmed: map[warmKey]bool{},
		movingOut: map[placement.ShardRef][]prospero.Identity{}}
	c.warmHandoff.Store(true)
	c.storeHold.Store(int64(defaultStoreHold))
	return c
}

// Start brings the cluster side up: registry and mail, transport,
// membership, stream services, placement. The node's scheduler and
// supervisor run already (d). On error the caller calls StopNetwork.
func (c *Engine) Start(ctx context.Context, d Deps) error {
	c.run = d
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.reg = d.Registry
	if err := c.newFederation(); err != nil {
		return err
	}
	rem, err := route.New(route.Config{Scheduler: d.Sched, Registry: c.reg, Locate: c.locateAt,
		Mail:   wire.MailConfig{Logger: c.log, Clock: c.cfg.Clock, Control: c.fed.Handle},
		Tracer: d.Tracer, Busy: c.hydrationBusy, ShardName: c.shardName,
		CancelAsk: func(peer string, id uint64) {
			// Not waiting: a CancelAsk lost to a full control lane costs the
			// turn it would have saved, nothing else (counted: NoticesDropped).
			_ = c.fed.NotifyNow(peer, &federation.CancelAsk{Id: id})
		}})
	if err != nil {
		return err
	}
	c.rem = rem

	wc := c.cfg.Wire
	wc.Name = c.name
	wc.ListenAddr = c.cfg.QUICAddr
	if wc.ListenAddr == "" {
		wc.ListenAddr = ":7947"
	}
	wc.Certificate, wc.CAs = c.cfg.Certificate, c.cfg.CAs
	wc.Resolve = c.resolve
	wc.Admit = c.admitLink
	wc.Handler = rem.Mailer().Handle
	wc.HandleBatch = rem.Mailer().HandleBatch
	wc.Events = func(ev wire.LinkEvent) {
		rem.LinkEvent(ev)
		if !ev.Up {
			c.fed.LinkDown(ev.Peer)
		}
	}
	wc.ManifestDigest = []byte(d.Manifest.Digest())
	// wire, membership and placement tag their records with the node
	// name themselves: they get the untagged logger, or every line would
	// carry node= twice.
	wc.Logger = c.cfg.Logger
	if wc.Clock == nil {
		wc.Clock = c.cfg.Clock
	}
	nw := c.net
	if nw == nil {
		nw = &quicNet{}
	}
	tr, err := nw.transport(c, wc)
	if err != nil {
		return err
	}
	c.tr = tr
	c.fedTr.tr.Store(&tr)
	rem.Attach(tr, func(peer string) error { return tr.Connect(c.ctx, peer) })

	dataID, err := placement.LoadDataID(c.cfg.DataDir)
	if err != nil {
		return err
	}
	mc := membership.DefaultConfig()
	mc.Name = c.name
	mc.Bind = c.cfg.GossipAddr
	mc.Advertise = c.cfg.GossipAdvertise
	mc.Seeds = c.cfg.Seeds
	mc.GossipKeys = c.cfg.GossipKeys
	mc.Timing = c.cfg.GossipTiming
	mc.Logger = c.cfg.Logger
	mc.Clock = c.cfg.Clock
	mc.Meta = membership.Meta{
		Name:           c.name,
		HTTPAddr:       c.cfg.HTTPAddr,
		ManifestDigest: d.Manifest.Digest(),
		Kinds:          d.KindNames,
		Version:        c.cfg.Version,
		DataID:         dataID,
	}
	ml, err := nw.gossip(ctx, c, mc)
	if err != nil {
		return err
	}
	c.ml = ml
	c.peers = newPeerView(c, ml)
	c.prove = membership.NewProver(membership.ProverConfig{Self: c.name, Connector: proveConnector{tr, c.cfg.Clock}, Clock: c.cfg.Clock,
		Logger: c.log, Changed: c.peers.signal})
	c.gossiping.Store(true)

	raftLn, err := tr.ListenStream(placement.RaftService)
	if err != nil {
		return err
	}
	// Raft trusts the names in its messages: only members may speak it.
	raftLn = memberListener{Listener: raftLn, c: c}
	for _, svc := range []struct {
		name string
		fn   func(net.Conn) error
	}{{serviceState, c.serveState}, {serviceReplica, c.serveReplica}} {
		l, err := tr.ListenStream(svc.name)
		if err != nil {
			_ = raftLn.Close()
			return err
		}
		c.lns = append(c.lns, l)
		c.wg.Add(1)
		go c.acceptLoop(l, svc.fn)
	}
	pc := c.cfg.Placement
	// Raft streams name the data directory they are meant for, so that a
	// node that lost its own is not taken for the voter it was.
	guard := func(sl raft.StreamLayer) raft.StreamLayer {
		return placement.GuardStreamLayer(sl, dataID, c.dataIDOf, c.log)
	}
	// Appends and snapshots may wait seconds for a busy follower's disk;
	// heartbeats must fail fast, or a dead peer is noticed only after
	// the append timeout (see placement.SplitHeartbeats).
	mainLayer := guard(placement.NewStreamLayer(streamDialer{tr}, raftLn, placement.RaftService))
	hbLayer := guard(placement.HeartbeatStreamLayer(streamDialer{tr}, raftLn.Addr(), placement.RaftService))
	rt := placement.SplitHeartbeats(
		raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  mainLayer,
			MaxPool: 3,
			Timeout: 5 * time.Second,
			Logger:  hclog.NewNullLogger(),
		}),
		raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  hbLayer,
			MaxPool: 2,
			Timeout: pc.HeartbeatRPCTimeout(),
			Logger:  hclog.NewNullLogger(),
		}))
	rt.AbortOnStepDown(mainLayer, hbLayer)
	pc.Name = c.name
	pc.DataDir = c.cfg.DataDir
	pc.Transport = rt
	pc.Membership = c.peers
	pc.BootstrapExpect = c.cfg.BootstrapExpect
	pc.Kinds = d.Kinds
	pc.Handoff = handoffFunc(c.transfer)
	pc.Forwarder = forwardFunc(c.forward)
	pc.Witnesses = c.fed
	pc.Logger = c.cfg.Logger
	pc.Clock = c.cfg.Clock
	pl, err := placement.New(pc)
	if err != nil {
		_ = rt.Close()
		return err
	}
	c.pl = pl
	c.placed.Store(true) // after c.pl: the federation handlers read it once this is set
	d.Replicas.Attach(replView{c}, c.dialReplica)

	// Their loops live as long as the engine (c.ctx, ended by
	// StopNetwork), not as long as Start's ctx, which only bounds the
	// start: a caller's deferred cancel must not stop them.
	if err := ml.Start(c.ctx); err != nil {
		return err
	}
	c.wg.Add(1)
	go c.watchMembers()
	c.wg.Go(func() { c.prove.Run(c.ctx, c.ml) })
	if err := pl.Start(c.ctx); err != nil {
		return err
	}
	c.wg.Add(1)
	go c.fenceLoop()
	c.wg.Add(1)
	go c.indexLoop()
	c.wg.Add(1)
	go c.manifestLoop()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.rem.RetryLoop(c.ctx, c.pl.Changed)
	}()
	c.wg.Add(1)
	go c.reminderLoop()
	c.wg.Add(1)
	go c.replicaLoop(d.StoreExisted)
	return nil
}

// dataIDOf is the data ID raft streams to peer are meant for: the one
// the applied table records for it ("" before placement runs).
func (c *Engine) dataIDOf(peer string) string {
	if !c.placed.Load() {
		return ""
	}
	return c.pl.DataIDOf(peer)
}

// quicAdvertise is the host:port peers dial for QUIC, "" when no
// specific host was configured.
func (c *Engine) quicAdvertise(addr net.Addr) string {
	_, port, _ := net.SplitHostPort(addr.String())
	host := c.cfg.AdvertiseHost
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h // given as host:port; the QUIC port is the bound one
	}
	for _, a := range []string{c.cfg.GossipAdvertise, c.cfg.QUICAddr, c.cfg.GossipAddr} {
		if host != "" {
			break
		}
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
			host = h
		} else if ip := net.ParseIP(a); ip != nil && !ip.IsUnspecified() {
			host = a
		}
	}
	if host == "" {
		return "" // membership's advertised IP, once it has chosen one
	}
	return net.JoinHostPort(host, port)
}

// resolve maps a node name to its QUIC address from membership metadata.
func (c *Engine) resolve(_ context.Context, peer string) (string, error) {
	if c.ml == nil {
		return "", fmt.Errorf("%w: %s: membership not started", actor.ErrProcessUnavailable, peer)
	}
	for _, m := range c.ml.Members() {
		if m.Name == peer && !m.Status.Gone() && m.Meta.QUICAddr != "" {
			return m.Meta.QUICAddr, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not a live member", actor.ErrProcessUnavailable, peer)
}

// shardName names ref's shard in the applied table, as a moving shard's
// routing error does (the retry queues' bound is per shard).
func (c *Engine) shardName(ref actor.Ref) (string, bool) {
	if !c.placed.Load() {
		return "", false
	}
	loc, err := c.pl.Locate(ref.Kind(), ref.Key())
	if err != nil {
		return "", false
	}
	return loc.Shard.String(), true
}

// Route is the routing decision for ref: its owner from the applied
// table, and for a shard this node owns, the fence (lease, node status,
// handoff); it is locateAt without the epoch, from the same one read.
// Errors match actor sentinels.
func (c *Engine) Route(ref actor.Ref) (string, bool, error) {
	owner, _, local, err := c.locateAt(ref)
	if h, ok := err.(*route.Hint); ok {
		err = h.Err // the router's form; here the plain handoff error
	}
	return owner, local, err
}

// whyUnanswered adds ErrNoQuorum to a send's deadline or unavailable
// error when this node knows no placement leader: the message could not
// be routed, or its owner (gone, or not a live member) could not be
// replaced, because placement has no quorum, and the caller should learn
// that rather than only that time ran out or a peer is unreachable,
// whichever node owns the key. The node's own closing is left as it is.
func (c *Engine) whyUnanswered(err error) error {
	if errors.Is(err, wire.ErrClosed) && !errors.Is(err, ErrClosed) {
		// This node's transport closed under the call: the node is
		// closing, which callers know as ErrClosed (an unavailable
		// process), not as a transport's internal state.
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if err == nil || errors.Is(err, ErrNoQuorum) || errors.Is(err, ErrClosed) || c.pl == nil || c.pl.Leader() != "" {
		return err
	}
	switch {
	case errors.Is(err, actor.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		// (ctx's own error: a call to the owner that waited out its
		// deadline, Passivate's or Reminders' say)
		return fmt.Errorf("%w (%w)", err, ErrNoQuorum)
	case errors.Is(err, actor.ErrProcessUnavailable):
		return fmt.Errorf("%w: %w", ErrNoQuorum, err)
	}
	return err
}

// HostsKind reports whether a live member other than this node gossips
// that it registered kind. It reads the membership view, so it is for
// the rare path of a kind this node does not register.
func (c *Engine) HostsKind(kind string) bool {
	if c.ml == nil {
		return false
	}
	for _, m := range c.ml.Members() {
		if m.Name != c.name && !m.Status.Gone() && slices.Contains(m.Meta.Kinds, kind) {
			return true
		}
	}
	return false
}

// unavailable wraps a routing error that leaves the actor unreachable
// for now: ErrNoQuorum when no placement leader is known (which is why
// the table cannot settle), else actor.ErrProcessUnavailable.
func (c *Engine) unavailable(err error) error {
	if c.pl.Leader() == "" {
		return fmt.Errorf("%w: %w", ErrNoQuorum, err)
	}
	return fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, err)
}

// awaitChange waits until the applied table changes, d passes or ctx
// ends.
func (c *Engine) awaitChange(ctx context.Context, d time.Duration) error {
	t, stop := c.cfg.Clock.NewTimer(d)
	defer stop()
	select {
	case <-c.pl.Changed():
		return nil
	case <-t:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// Resend is given send, a tell made through this node's scheduler that
// was refused with err, and runs it again each time the applied table
// changes while its refusal says that placement may settle
// (route.Waitable: a shard moving, not placed yet, an owner that cannot
// be reached), until ctx ends (by default after actor.DefaultAskTimeout).
// The error is whyUnanswered's.
func (c *Engine) Resend(ctx context.Context, err error, send func() error) error {
	if err == nil || !route.Waitable(err) {
		return c.whyUnanswered(err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, actor.DefaultAskTimeout)
		defer cancel()
	}
	for attempt := 0; route.Waitable(err); attempt++ {
		if werr := c.awaitChange(ctx, route.Backoff(attempt)); werr != nil {
			return c.whyUnanswered(err)
		}
		err = send()
	}
	return c.whyUnanswered(err)
}

// Reask is given ask, an ask made through this node's scheduler that
// was refused with err, and runs it again each time the applied table
// changes while it was refused at once on this node without running
// (route.Resendable: the routing layer waits for everything it can
// itself, this node's activation fence's refusals included, see package
// route), within ctx.
func (c *Engine) Reask(ctx context.Context, err error, ask func() (any, error)) (any, error) {
	for attempt := 0; ; attempt++ {
		if !route.Resendable(err) {
			return nil, c.whyUnanswered(err)
		}
		if werr := c.awaitChange(ctx, route.Backoff(attempt)); werr != nil {
			return nil, c.whyUnanswered(gaveUp(ctx, err))
		}
		var reply any
		if reply, err = ask(); err == nil {
			return reply, nil
		}
	}
}

// gaveUp is the error of an ask that stopped waiting for placement to
// settle because ctx ended, last refused with err: its deadline (an
// actor.ErrDeadlineExceeded, as if the owner had never answered; the
// refusal is only named) or its cancellation, not the refusal, which
// would say the owner cannot serve when the caller merely stopped
// waiting. Any other end (the node closing) keeps err.
func gaveUp(ctx context.Context, err error) error {
	switch cerr := ctx.Err(); {
	case errors.Is(cerr, context.DeadlineExceeded):
		return fmt.Errorf("%w (last refused: %v)", actor.ErrDeadlineExceeded, err)
	case cerr != nil:
		return cerr
	}
	return err
}

// Passivate is tempest.Node.Passivate in a cluster: on the owner of ref,
// from any node, also one that does not register ref's kind; what this
// node holds in memory while ref's shard cannot be served.
func (c *Engine) Passivate(ctx context.Context, ref actor.Ref) error {
	if !c.h.Hosts(ref.Kind()) {
		// Another node hosts the kind and this one holds none of its
		// actors: only the owner can act.
		return c.whyUnanswered(c.remotePassivate(ctx, ref))
	}
	if owner, local, err := c.Route(ref); err == nil && !local && owner != c.name {
		return c.whyUnanswered(c.remotePassivate(ctx, ref))
	}
	return c.h.PassivateHere(ctx, ref)
}

// EpochOf is the current epoch of id's shard (0 if unknown).
func (c *Engine) EpochOf(id prospero.Identity) uint64 {
	if c.pl == nil {
		return 0
	}
	loc, _ := c.pl.Locate(id.Kind, id.Key)
	return loc.Epoch
}

// Track follows activations (from the supervisor's events).
func (c *Engine) Track(e prospero.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Type {
	case prospero.EventActivated, prospero.EventHydrated, prospero.EventRestarted, prospero.EventRehydrated:
		c.active[e.ID] = true
		if !c.known[e.ID] {
			c.known[e.ID] = true
			c.pending = append(c.pending, e.ID)
			select {
			case c.indexKick <- struct{}{}:
			default:
			}
		}
	case prospero.EventPassivated, prospero.EventRetired, prospero.EventRejected:
		delete(c.active, e.ID)
	}
}

// fenceLoop passivates activations of shards this node may no longer
// serve (lease lapsed, marked down, shard moved), so that an isolated
// node stops serving before anyone else may take over. It also drops
// the link to a peer the table newly marks down, so that asks pending
// there fail at once (ErrProcessUnavailable) instead of at their
// deadline: new mail for its shards waits for the failover (see Route).
// What to do on each tick is fenceStep's decision (fence.go); this is
// its shell.
func (c *Engine) fenceLoop() {
	defer c.wg.Done()
	lease := c.cfg.Placement.Lease
	if lease == 0 {
		lease = placement.DefaultConfig().Lease
	}
	tick, stop := c.cfg.Clock.NewTicker(max(lease/8, 10*time.Millisecond))
	defer stop()
	down := map[string]bool{}
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-tick:
		}
		now := c.cfg.Clock.Now()
		c.mu.Lock()
		active := make([]prospero.Identity, 0, len(c.active))
		for id := range c.active {
			active = append(active, id)
		}
		c.mu.Unlock()
		// The lease first, then the table, as locateAt. The scheduler
		// holds back the mail of this node's kinds once the lease runs
		// out, even between two ticks (Lapsed).
		fresh := c.giveLease()
		var f fencing // the loop starts once placement runs (c.placed)
		c.pl.FSM().Read(func(t *placement.Table) { f = fenceStep(t, c.name, fresh, active, down) })
		for _, name := range f.newlyDown {
			c.tr.Disconnect(name)
		}
		c.watchStore(now)
		if c.run.Replicas != nil && !fresh {
			// A replica that stopped answering must not hold this
			// node's writes, and the passivations below behind them,
			// for the replication timeout: a takeover may be near.
			c.run.Replicas.Interrupt()
		}
		c.noteMovingOut(f.movingOut)
		if _, err := c.h.Running(); err == nil {
			for _, id := range f.passivate {
				c.run.Sup.Passivate(id.Ref())
			}
		}
	}
}

// noteMovingOut records identities about to be passivated because their
// shard is moving away from this node: the handoff names them to the new
// owner as active (HydrateRequest), though they are at rest by the time
// the shard ships.
func (c *Engine) noteMovingOut(moving map[placement.ShardRef][]prospero.Identity) {
	if len(moving) == 0 {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for shard, ids := range moving {
		l := c.movingOut[shard]
		for _, id := range ids {
			if len(l) < maxHydrateActors && !slices.Contains(l, id) {
				l = append(l, id)
			}
		}
		c.movingOut[shard] = l
	}
}

// watchMembers feeds membership changes to placement and closes links
// to peers declared dead.
func (c *Engine) watchMembers() {
	defer c.wg.Done()
	sub := c.ml.Subscribe()
	defer sub.Close()
	for {
		ev, err := sub.Next(c.ctx)
		if err != nil {
			return
		}
		c.peers.signal()
		if ev.Type == membership.EventFail && ev.Member.Name != c.name {
			c.tr.Disconnect(ev.Member.Name)
		}
	}
}

// ready: joined, a leader known, the table initialised, and this node's
// lease fresh (it may serve what it owns).
func (c *Engine) Readiness() error {
	select {
	case <-c.ml.Joined():
	default:
		return &NotReadyError{Node: c.name, Reason: "not joined"}
	}
	if c.pl.Leader() == "" {
		return ErrNoQuorum
	}
	inited := false
	c.pl.FSM().Read(func(t *placement.Table) { inited = t.ShardCount > 0 })
	if !inited {
		return &NotReadyError{Node: c.name, Reason: "placement table not initialised"}
	}
	if !c.pl.LeaseFresh(c.cfg.Clock.Now()) {
		return &NotReadyError{Node: c.name, Reason: "placement lease not fresh"}
	}
	if !c.pl.KindsPublished() {
		return &NotReadyError{Node: c.name, Reason: "kinds not published in the placement table"}
	}
	return nil
}

// Leave hands this node's shards off (placement drains it). With no
// other live member, no leader to drain through, or no other node up in
// the table (the others are leaving too, as when a whole cluster stops:
// placement.ErrNoDrainTarget), there is nobody to hand off to and it
// returns nil at once: the shards stay in this node's store and on their
// replicas, and are served again when their owner or a replica returns.
func (c *Engine) Leave(ctx context.Context) error {
	others := 0
	for _, m := range c.ml.Members() {
		if m.Name != c.name && !m.Status.Gone() && !m.Meta.Leaving {
			others++
		}
	}
	if others == 0 || c.pl.Leader() == "" {
		return nil
	}
	d := c.cfg.LeaveTimeout
	if d == 0 {
		d = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := c.pl.Leave(ctx)
	if errors.Is(err, placement.ErrNoDrainTarget) {
		c.log.LogAttrs(ctx, slog.LevelInfo, "no other node is up to take this node's shards (the others are leaving too): they stay in its store and on their replicas",
			slog.Any("error", err))
		return nil
	}
	return err
}

// StopNetwork ends the node's presence in the cluster: graceful (leave
// gossip) or as a crash (halt).
func (c *Engine) StopNetwork(ctx context.Context, graceful bool) error {
	var errs []error
	if c.ml != nil {
		if graceful {
			errs = append(errs, c.ml.Close(ctx))
		} else {
			c.ml.Halt()
		}
	}
	if c.cancel != nil {
		c.cancel()
	}
	for _, l := range c.lns {
		_ = l.Close()
	}
	// The transport goes before raft: raft's shutdown waits for its
	// replication to peers, which would otherwise sit in dials to nodes
	// that are gone.
	if c.tr != nil {
		errs = append(errs, c.tr.Close())
	}
	if c.pconn != nil { // the transport does not close a socket it was given
		_ = c.pconn.Close()
	}
	if c.fed != nil {
		c.fed.Close() // fails what waits on a peer, ends the requests being handled
	}
	if c.pl != nil {
		errs = append(errs, c.pl.Close(ctx))
	}
	c.wg.Wait()
	if c.rem != nil {
		errs = append(errs, c.rem.Close())
	}
	return errors.Join(errs...)
}

// Isolate cuts the node off the network (gossip and QUIC) while its
// process keeps running: a partition as the node itself sees it. Tests
// use it; Close afterwards stops the rest.
func (c *Engine) Isolate() {
	c.ml.Halt()
	_ = c.tr.Close()
}

// ---- stream services ----

func (c *Engine) acceptLoop(l net.Listener, serve func(net.Conn) error) {
	defer c.wg.Done()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		if !c.admitStream(conn) {
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			stop := context.AfterFunc(c.ctx, func() { _ = conn.Close() })
			defer stop()
			if err := serve(conn); err != nil {
				c.log.LogAttrs(context.Background(), slog.LevelDebug, "stream service", slog.Any("error", err))
			}
			_ = conn.Close()
		}()
	}
}

// inTable reports whether the applied placement table lists name.
func (c *Engine) inTable(name string) bool {
	in := false
	if c.placed.Load() {
		c.pl.FSM().Read(func(t *placement.Table) { _, in = t.Nodes[name] })
	}
	return in
}

// errNotMember is admitLink's refusal.
var errNotMember = errors.New("not in the placement table and not a live gossip member")

// admitLink reports whether peer, a name a QUIC link proved with a
// certificate of the cluster CA, is a member: in this node's applied
// placement table, or live in its gossip view (which needs the gossip
// key). It is the transport's Admit, so a certificate alone carries no
// traffic; and each raft, handoff and replication stream is checked
// again when it opens (admitStream), since raft takes the sender and
// leader names its messages carry on trust and a node may have left
// since its link was made. Proof (the prover's dial of the address
// gossip gives) is not asked: the link is the certificate holder's. A
// node that links before gossip brought it here is refused with
// NOT_MEMBER, and comes in once it is known (proveConnector tries again).
func (c *Engine) admitLink(peer string) error {
	if c.inTable(peer) {
		return nil
	}
	if c.gossiping.Load() {
		for _, m := range c.ml.Members() {
			if m.Name == peer && !m.Status.Gone() {
				return nil
			}
		}
	}
	return errNotMember
}

// proveConnector is the transport as the prover connects with it. The
// prover tries a member when gossip shows it alive and unproven (new,
// back from dead after a partition, with new facts) or after its own
// back-off; the link's dial back-off, grown while the member could not
// be reached (up to wire.Config.BackoffMax), must not refuse that
// attempt, or a node cut off long enough to be declared dead came back
// only when that back-off ran out, seconds after the partition healed.
type proveConnector struct {
	tr    transport
	clock clock.Clock
}

// proveConnector's waits before it dials again a peer that did not know
// this node: from the first, doubling up to the largest. The peer may
// also dial this node meanwhile (it proves this node once it learns of
// it); the next try then finds that link up.
const (
	proveNotMemberRetry    = 50 * time.Millisecond
	proveNotMemberRetryMax = 200 * time.Millisecond
)

func (p proveConnector) Connect(ctx context.Context, peer string) error {
	for wait := proveNotMemberRetry; ; wait = min(2*wait, proveNotMemberRetryMax) {
		if r, ok := p.tr.(interface{ Redial(peer string) }); ok {
			r.Redial(peer)
		}
		err := p.tr.Connect(ctx, peer)
		if !errors.Is(err, wire.ErrNotMember) {
			return err
		}
		// The peer has not heard of this node yet: gossip brings it
		// within a round or two, sooner than the prover's back-off.
		select {
		case <-ctx.Done():
			return err
		case <-p.clock.After(wait):
		}
	}
}

// admitStream closes conn, a stream a peer opened to one of this node's
// stream services, unless the peer is still a member (admitLink), and
// reports whether it is. A refusal is logged and counted
// (FederationStats.StreamsRefused).
func (c *Engine) admitStream(conn net.Conn) bool {
	peer := conn.RemoteAddr().String()
	if c.admitLink(peer) == nil {
		return true
	}
	_ = conn.Close()
	if n := c.streamsRefused.Add(1); n&(n-1) == 0 { // logged at the 1st, 2nd, 4th, 8th... refusal
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "stream from a node that is not a member refused",
			slog.String("peer", peer), slog.Uint64("refused", n))
	}
	return false
}

// memberListener is a stream service's listener that hands out only the
// streams members opened (admitStream).
type memberListener struct {
	net.Listener
	c *Engine
}

func (l memberListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil || l.c.admitStream(conn) {
			return conn, err
		}
	}
}

func writeMsg(w io.Writer, b []byte) error {
	var hdr [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(hdr[:], uint64(len(b)))
	if _, err := w.Write(hdr[:k]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

func readMsg(r *bufio.Reader) ([]byte, error) {
	l, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if l > maxStreamMsg {
		return nil, fmt.Errorf("tempest: stream message of %d bytes", l)
	}
	b := make([]byte, l)
	_, err = io.ReadFull(r, b)
	return b, err
}

// streamDialer adapts the transport to placement's StreamDialer.
type streamDialer struct{ t transport }

func (d streamDialer) Dial(ctx context.Context, peer, service string) (net.Conn, error) {
	return d.t.DialStream(ctx, peer, service)
}

type forwardFunc func(ctx context.Context, leader string, cmd []byte) error

func (f forwardFunc) Forward(ctx context.Context, leader string, cmd []byte) error {
	return f(ctx, leader, cmd)
}

type handoffFunc func(ctx context.Context, m placement.Move) error

func (f handoffFunc) Transfer(ctx context.Context, m placement.Move) error { return f(ctx, m) }

// transfer runs on the leader: the old owner of m hands the shard off.
//
// A peer that is not reachable yet is tried again while three quarters
// of ctx's budget last: a node that rejoins is given shards by the raft
// leader as soon as it is a voter again, often before the other nodes'
// membership sees its new incarnation alive. Any error returned aborts
// the move (placement completes a move only once Transfer returned nil),
// so the old owner keeps the shard and the state it holds.
func (c *Engine) transfer(ctx context.Context, m placement.Move) error {
	// ctx's deadline is wall time, so the bound is too.
	dl, _ := ctx.Deadline()
	giveUp := retryUntil(time.Now(), dl)
	fail := func(err error) error {
		c.log.LogAttrs(ctx, slog.LevelWarn, "shard handoff failed", slog.String("shard", m.Shard.String()),
			slog.String("from", m.From), slog.String("to", m.To), slog.Any("error", err))
		var ans *federation.Error
		if errors.As(err, &ans) || errors.Is(err, errShipRefused) {
			// The old owner is alive and answered that it could not ship
			// (logged as a refusal by placement; any failure aborts).
			return fmt.Errorf("%w: %w", placement.ErrMoveRefused, err)
		}
		return err
	}
	for {
		err := c.transferOnce(ctx, m)
		if err == nil {
			return nil
		}
		if s, ok := c.pl.Owner(m.Shard); !moveStands(s, ok, m) {
			return fail(err)
		}
		if !giveUp.IsZero() && !time.Now().Before(giveUp) {
			return fail(err)
		}
		if werr := c.awaitChange(ctx, 100*time.Millisecond); werr != nil {
			return fail(err)
		}
	}
}

func (c *Engine) transferOnce(ctx context.Context, m placement.Move) error {
	if m.From == c.name {
		return c.shipShard(ctx, m)
	}
	return c.moveRequest(ctx, m)
}

// shipShard is the old owner's side of a handoff: once its applied table
// shows the move (so it admits no more mail for the shard), it
// passivates the shard's activations and ships their state at rest to
// the new owner, which stores it before the move completes.
//
// An identity whose record cannot be shipped (its index entry or its
// record at rest does not decode, or it could never cross the wire) is
// isolated: refused, logged, counted and kept in unshipped so that a
// graceful Close reports it; the rest of the shard moves.
//
// One move is shipped once at a time: a MoveRequest the leader sends
// again while the shipment of its first one runs (its answer was lost
// to a link that went down, and the leader retried) joins that shipment
// and answers as it does. Two shipments of one move would open the same
// transfer on the new owner (keyed by sender, shard and epoch) and each
// act on the other's: one's HandoffDone would close the other's
// transfer, whose own HandoffDone then aborts a move that was done.
func (c *Engine) shipShard(ctx context.Context, m placement.Move) error {
	return c.shipping.do(ctx, m, func() error { return c.shipShardOnce(ctx, m) })
}

func (c *Engine) shipShardOnce(ctx context.Context, m placement.Move) error {
	for {
		s, ok := c.pl.Owner(m.Shard)
		step := shipReadiness(s, ok, m, c.name)
		if step == shipGo {
			break
		}
		if step == shipRefuse {
			return fmt.Errorf("%w: %s to %s at epoch %d: this node's table shows owner %q at epoch %d moving to %q",
				errShipRefused, m.Shard, m.To, m.Epoch, s.Owner, s.Epoch, s.MovingTo)
		}
		// Behind the leader: wait for the move to be applied here.
		if err := c.awaitChange(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if err := c.FlushIndex(ctx); err != nil {
		return err
	}
	ids, bad, err := c.ReadIndex(ctx, m.Shard)
	if err != nil {
		return err
	}
	for _, id := range bad {
		c.isolateIdentity(ctx, m, id, errBadIndexEntry)
	}
	// Records this node holds as the shard's replica (it became owner by
	// failover, or was a follower before) are in no index of its own.
	held, err := c.heldInShard(ctx, m.Shard)
	if err != nil {
		return err
	}
	// Every identity the supervisor holds in memory, in any phase: one
	// whose activation is still loading is in no index and was never
	// announced (c.active). Read under the supervisor's lock now that
	// the move is applied here, it also orders this handoff after every
	// activation that passed the fence before the move: each is in
	// memory by now, and any later one is refused at its attach.
	if _, err := c.h.Running(); err != nil {
		return err
	}
	inMemory := c.run.Sup.InMemory()
	// The shard's active identities, and those passivated because it
	// moves: the new owner hydrates them (HydrateRequest).
	c.wmu.Lock()
	active := c.movingOut[m.Shard]
	delete(c.movingOut, m.Shard)
	c.wmu.Unlock()
	c.mu.Lock()
	for id := range c.active {
		active = append(active, id)
	}
	c.mu.Unlock()
	ids, active, invalid := shipSet([][]prospero.Identity{ids, held, inMemory, active}, active, func(id prospero.Identity) bool {
		if isReserved(id) {
			return false
		}
		loc, err := c.pl.Locate(id.Kind, id.Key)
		return err == nil && loc.Shard == m.Shard
	})
	for id, err := range invalid {
		c.isolateIdentity(ctx, m, id, err)
	}
	if err := c.quiesce(ctx, ids); err != nil {
		return err
	}
	// A promotion ships nothing of the actors: the new owner holds every
	// record this node committed (promotes says when).
	s, ok := c.pl.Owner(m.Shard)
	replicated := c.run.Replicas != nil
	promote := promotes(s, ok, m, c.name, replicated,
		replicated && c.run.Replicas.Uncommitted(replicaShard(m.Shard)),
		replicated && c.run.Replicas.Suspect(m.To))
	var recs []shipped
	for _, id := range ids {
		if promote {
			break
		}
		rec, err := c.run.Store.Get(ctx, id)
		switch {
		case errors.Is(err, prospero.ErrNotFound):
			continue
		case err != nil && (ctx.Err() != nil || errors.Is(err, prospero.ErrStoreClosed)):
			return err
		case err != nil:
			c.isolateIdentity(ctx, m, id, err)
			continue
		}
		recs = append(recs, shipped{id: id, inc: rec.Incarnation, state: rec.State, version: rec.Version})
	}
	// The shard's reminders stop firing here and travel with its state.
	remRecs, err := c.releaseReminders(ctx, m.Shard)
	if err != nil {
		return err
	}
	recs = append(recs, remRecs...)
	if err := c.sendStates(ctx, m.To, m.Shard, m.Epoch+1, recs); err != nil {
		return fmt.Errorf("tempest: handoff of %s to %s: %w", m.Shard, m.To, err)
	}
	// The move must have stood from the quiesce to here: aborted meanwhile
	// (a new epoch), this node served the shard again, and what it shipped
	// may lack writes it acknowledged since. The target stored nothing it
	// can serve (the move it was for never completes), and a move begun
	// again ships afresh.
	if s, ok := c.pl.Owner(m.Shard); !moveStands(s, ok, m) {
		return fmt.Errorf("%w: %s to %s at epoch %d: this node's table shows owner %q at epoch %d moving to %q once shipped",
			errShipRefused, m.Shard, m.To, m.Epoch, s.Owner, s.Epoch, s.MovingTo)
	}
	if promote {
		c.promoted.Add(1)
	}
	// The shipped reminder records stay here too, like actor state: the
	// move may still be aborted (the leader never heard that this ship
	// succeeded), and this node would then own the shard again with its
	// reminders gone. Copies left here cannot bring a cancelled reminder
	// back: this node stays in the shard's set as a follower, so the new
	// owner's writes and deletions of them reach it (newer by epoch), a
	// catch-up deletes the copies its owner no longer holds, and a
	// handoff back drops those not shipped (dropStaleReminders).
	// The state stays in this store (harmless: the new owner's is newer
	// from now on); the index forgets it so that a later handoff of the
	// shard by this node does not ship stale state.
	if err := c.updateIndex(ctx, m.Shard, nil, ids); err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "shard index after handoff", slog.Any("error", err))
	}
	c.mu.Lock()
	for _, id := range ids {
		delete(c.known, id)
	}
	c.mu.Unlock()
	level := slog.LevelInfo
	if len(recs) == 0 && len(active) == 0 {
		// Nothing moved with it (every shard of a new cluster balancing
		// out, hundreds at once): not worth a line each.
		level = slog.LevelDebug
	}
	c.log.LogAttrs(ctx, level, "shard handed off", slog.String("shard", m.Shard.String()),
		slog.String("to", m.To), slog.Int("actors", len(recs)), slog.Bool("promoted", promote))
	c.requestHydration(m, active)
	return nil
}

// Why an identity was isolated from a handoff.
var (
	errBadIndexEntry = errors.New("tempest: shard index entry does not decode")
)

// isolateIdentity records that id's state at rest was not shipped with m.
func (c *Engine) isolateIdentity(ctx context.Context, m placement.Move, id prospero.Identity, why error) {
	c.mu.Lock()
	if c.unshipped == nil {
		c.unshipped = map[prospero.Identity]error{}
	}
	_, again := c.unshipped[id]
	c.unshipped[id] = why
	c.mu.Unlock()
	if again { // counted and reported at its first handoff
		return
	}
	c.isolated.Add(1)
	c.log.LogAttrs(ctx, slog.LevelWarn, "handoff: identity isolated, its state stays on this node",
		slog.String("shard", m.Shard.String()), slog.String("to", m.To),
		slog.String("actor", fmt.Sprintf("%q", id.String())), slog.Any("error", why))
}

// UnshippedErr reports the identities whose state at rest this node
// owned and did not ship (nil if none).
func (c *Engine) UnshippedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unshipped) == 0 {
		return nil
	}
	ids := make([]string, 0, len(c.unshipped))
	for id := range c.unshipped {
		ids = append(ids, fmt.Sprintf("%q", id.String()))
	}
	slices.Sort(ids)
	return fmt.Errorf("%w: %d identities isolated: %s", ErrHandoffIncomplete, len(ids), strings.Join(ids, ", "))
}

// shipped is one record at rest on its way to a new owner.
type shipped struct {
	id      prospero.Identity
	inc     uint64
	state   []byte
	version uint64 // in this node's store
}

// quiesce passivates ids until none of them is in memory here. One
// round is not enough: mail admitted before the table showed the move
// may still wait in an activation's mailbox, and a passivation that
// finds mail waiting hydrates the identity again at once to run it. An
// Add acknowledged by such a second activation is written at rest only
// by its own passivation, so the store may be read for shipping only
// once every identity stays dormant.
func (c *Engine) quiesce(ctx context.Context, ids []prospero.Identity) error {
	_, err := c.h.Running()
	if err != nil {
		return err
	}
	for {
		for _, id := range ids {
			if err := c.h.PassivateHere(ctx, id.Ref()); err != nil {
				return err
			}
		}
		busy := false
		for _, id := range ids {
			st, err := c.run.Sup.Status(ctx, id.Ref())
			if err != nil {
				return err
			}
			if st.Active {
				busy = true
				break
			}
		}
		if !busy {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// admitTransfer returns nil while this node's applied table shows shard
// moving from from to this node, to epoch. While the table is behind
// (an older epoch, or the move not begun yet) it waits for it.
func (c *Engine) admitTransfer(ctx context.Context, shard placement.ShardRef, from string, epoch uint64) error {
	for {
		s, ok := c.pl.Owner(shard)
		switch {
		case ok && s.Epoch+1 == epoch && s.Owner == from && s.MovingTo == c.name:
			return nil
		case ok && (s.Epoch+1 > epoch || (s.Epoch+1 == epoch && (s.Owner != from || s.MovingTo != ""))):
			return fmt.Errorf("%w: %s to epoch %d from %s: this node's table shows owner %q at epoch %d moving to %q",
				errStaleTransfer, shard, epoch, from, s.Owner, s.Epoch, s.MovingTo)
		}
		if err := c.awaitChange(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// storeStates stores shipped records (actors' and the shard's reminder
// records), in one transaction, as a replica of the old owner would: each
// at (the old owner's epoch, its version there), replacing what this
// node holds for its identity only if that is older (see handedOff).
// admit is checked just before the write.
func (c *Engine) storeStates(ctx context.Context, recs []prospero.Replicated, admit func() error) error {
	if err := admit(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := c.run.Store.ApplyReplicated(recs); err != nil {
		return err
	}
	c.mu.Lock()
	for _, r := range recs {
		if !isReserved(r.ID) { // the shard's reminders are in no index
			c.known[r.ID] = true
		}
	}
	c.mu.Unlock()
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ---- what the node reports of its cluster ----

// Members is this node's view of the members (nil before Start).
func (c *Engine) Members() []membership.Member {
	if c.ml == nil {
		return nil
	}
	return c.ml.Members()
}

// Proven reports whether m proved its name to this node (tempest.Node.Proven).
func (c *Engine) Proven(m membership.Member) bool {
	if c.prove == nil {
		return m.Name == c.name // before Start
	}
	return m.MetaErr == nil && c.prove.Proven(m)
}

// Placement is the node's raft placement: nil before Start, and on a nil
// engine (a standalone node has none).
func (c *Engine) Placement() *placement.Node {
	if c == nil || !c.placed.Load() {
		return nil
	}
	return c.pl
}

// Locate is the owner of virtual ref by the applied table and its
// shard's epoch; errors match actor sentinels (tempest.Node.Locate).
func (c *Engine) Locate(ref actor.Ref) (string, uint64, error) {
	pl := c.Placement()
	if pl == nil {
		return "", 0, ErrNotStarted
	}
	loc, err := pl.Locate(ref.Kind(), ref.Key())
	if err != nil {
		switch {
		case errors.Is(err, placement.ErrNoEligibleNode):
			err = fmt.Errorf("%w: %w", actor.ErrNoEligibleNode, err)
		case errors.Is(err, placement.ErrUnknownKind):
			err = fmt.Errorf("%w: %w", actor.ErrUnknownKind, err)
		}
		return "", 0, err
	}
	return loc.Owner, loc.Epoch, nil
}

// ---- the membership view placement consumes ----

// peerView adapts membership to placement.Membership. Peers' full
// manifests do not travel in gossip (only their digests): each node
// publishes its own into the table (see manifestLoop), and a peer is
// reported with the manifest the table holds for it when that has the
// digest it gossips (see peerManifest); until then with an empty
// manifest, so it is eligible only for kinds without clause requirements.
type peerView struct {
	cl      *Engine
	ml      gossip
	self    string
	man     manifest.Manifest
	digest  string
	kinds   []placement.KindSpec
	changed chan struct{}
}

var _ placement.Membership = (*peerView)(nil)

func newPeerView(c *Engine, ml gossip) *peerView {
	v := &peerView{cl: c, ml: ml, self: c.name, man: c.run.Manifest, digest: c.run.Manifest.Digest(), changed: make(chan struct{}, 1)}
	v.kinds = c.run.Kinds
	if v.kinds == nil {
		v.kinds = []placement.KindSpec{} // known to host nothing, not unknown
	}
	return v
}

func (v *peerView) signal() {
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

// Changed implements placement.Membership.
func (v *peerView) Changed() <-chan struct{} { return v.changed }

// Members implements placement.Membership.
func (v *peerView) Members() []placement.Peer {
	ms := v.ml.Members()
	out := make([]placement.Peer, 0, len(ms))
	for _, m := range ms {
		p := placement.Peer{Name: m.Name, Addr: m.Meta.QUICAddr, HTTPAddr: m.Meta.HTTPAddr, Version: m.Meta.Version,
			DataID: m.Meta.DataID, InCluster: m.Meta.InCluster}
		switch {
		case m.Status == membership.StatusLeft:
			p.State = placement.PeerLeft
		case m.Status == membership.StatusDead:
			p.State = placement.PeerFailed
		case m.Meta.Leaving:
			p.State = placement.PeerLeaving
		default:
			p.State = placement.PeerAlive
		}
		if m.MetaErr != nil {
			p.State = placement.PeerFailed
		} else if !m.Status.Gone() && !v.cl.prove.Proven(m) {
			p.State = placement.PeerUnproven
		}
		if m.Name == v.self {
			p.Manifest, p.Kinds = v.man, v.kinds
		} else {
			// A peer's kinds and policy digests reach the table only
			// from the peer itself (placement.Config.Kinds); gossip
			// carries the names, not the digests.
			p.Manifest = v.peerManifest(m.Name, m.Meta.ManifestDigest)
		}
		out = append(out, p)
	}
	return out
}

// Stats are the engine's part of tempest.Stats (which documents them).
type Stats struct {
	Mail              wire.MailStats
	Transport         wire.Stats
	Members, Unproven int
	ProofsFailed      uint64
	Gossip            membership.TrafficStats
	Leader            bool
	HandoffIsolated   uint64
	Retry             mailq.Stats
	Waiting           int64
}

// Stats returns a snapshot of the engine's counters. Only while the
// engine runs.
func (c *Engine) Stats() *Stats {
	st := &Stats{Mail: c.rem.MailStats(), Transport: c.tr.Stats(), ProofsFailed: c.prove.Failed(),
		Gossip: c.ml.Dropped(), Leader: c.pl.IsLeader(), HandoffIsolated: c.isolated.Load()}
	st.Members, st.Unproven = c.countMembers(c.ml.Members())
	st.Retry, st.Waiting = c.rem.RetryStats()
	return st
}

// countMembers counts the live members of ms and those of them that are
// not Proven: as /v1/members lists them, so a member whose metadata does
// not decode (garbage sent by a holder of the gossip key) is unproven
// too, and cannot hide from the gauge of unproven members.
func (c *Engine) countMembers(ms []membership.Member) (live, unproven int) {
	for _, m := range ms {
		if m.Status.Gone() {
			continue
		}
		live++
		if !c.Proven(m) {
			unproven++
		}
	}
	return live, unproven
}
