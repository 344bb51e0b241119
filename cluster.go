package tempest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
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
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire"
)

// ClusterConfig makes a node a member of a cluster: gossip membership,
// raft placement with leased, epoch-fenced shard ownership, and actor mail
// between nodes over QUIC with mutual TLS. Zero fields take defaults.
type ClusterConfig struct {
	// GossipAddr is the host:port memberlist binds, TCP and UDP (default
	// ":7946"; port 0 picks a free port).
	GossipAddr string
	// GossipAdvertise is the ip[:port] other nodes gossip with (default:
	// the bind address when specific, otherwise the first private IP).
	GossipAdvertise string
	// QUICAddr is the UDP host:port of the QUIC transport (default
	// ":7947"; port 0 picks a free port).
	QUICAddr string
	// AdvertiseHost is the host other nodes dial for QUIC (default: the
	// host of GossipAdvertise, else of QUICAddr, else of GossipAddr). A
	// port in it is ignored: peers dial the port QUICAddr bound.
	AdvertiseHost string
	// HTTPAddr is this node's HTTP address, published in its metadata.
	HTTPAddr string
	// Seeds are addresses or DNS names of nodes to join (see
	// membership.Config.Seeds). None: start a new cluster.
	Seeds []string
	// BootstrapExpect: once this many nodes see each other, the one with
	// the lowest name bootstraps the raft cluster. 0 never bootstraps
	// (the node joins an existing cluster).
	BootstrapExpect int
	// GossipKeys encrypt gossip (the first is the primary key); see
	// membership.Config.GossipKeys. Empty: no encryption.
	GossipKeys [][]byte
	// Certificate is this node's certificate (its name as the first DNS
	// SAN) and CAs the cluster CA pool. Both required.
	Certificate tls.Certificate
	CAs         *x509.CertPool
	// Version is the build version published in the node's metadata.
	Version string

	// GossipTiming tunes failure detection (zero fields: LAN defaults;
	// tests use membership.FastTiming).
	GossipTiming membership.Timing
	// Placement tunes raft and leases. Name, DataDir, Transport,
	// Membership, BootstrapExpect, Handoff, Forwarder, Clock and Logger
	// are set by the node.
	Placement placement.Config
	// Wire tunes the QUIC transport. Name, ListenAddr, Certificate, CAs,
	// Resolve, Handler, Events, ManifestDigest and Logger are set by the
	// node.
	Wire wire.Config
	// LeaveTimeout bounds the graceful hand-off of this node's shards in
	// Close (default 30 s, or the Close context's deadline).
	LeaveTimeout time.Duration
}

func (c *ClusterConfig) validate() error {
	switch {
	case len(c.Certificate.Certificate) == 0:
		return fmt.Errorf("%w: Cluster.Certificate is required", ErrInvalidConfig)
	case c.CAs == nil:
		return fmt.Errorf("%w: Cluster.CAs is required", ErrInvalidConfig)
	case c.BootstrapExpect < 0:
		return fmt.Errorf("%w: negative Cluster.BootstrapExpect", ErrInvalidConfig)
	case c.LeaveTimeout < 0:
		return fmt.Errorf("%w: negative Cluster.LeaveTimeout", ErrInvalidConfig)
	}
	return nil
}

// Stream services a node listens for, besides raft.
const (
	serviceForward = "tempest-forward" // placement commands from followers to the leader
	serviceMove    = "tempest-move"    // the leader asks an old owner to hand a shard off
	serviceState   = "tempest-state"   // an old owner ships state at rest to the new owner
)

const maxStreamMsg = 4 << 20

// cluster is a node's cluster side. Its fields are set in start and only
// read afterwards.
type cluster struct {
	n     *Node
	cfg   ClusterConfig
	name  string
	log   *slog.Logger
	reg   *wire.Registry
	rem   *remote
	tr    *wire.QUIC
	ml    *membership.Membership
	pl    *placement.Node
	peers *peerView
	prove *prover

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lns    []net.Listener

	mu        sync.Mutex
	active    map[prospero.Identity]bool // activations on this node
	known     map[prospero.Identity]bool // identities indexed (or pending) in this process
	pending   []prospero.Identity        // activated, not yet in the shard index
	indexKick chan struct{}
	unshipped map[prospero.Identity]error // owned here, isolated from a handoff
	isolated  atomic.Uint64               // identities isolated from handoffs
}

// ErrHandoffIncomplete: a graceful Close did not hand all the state at
// rest this node owned to the new owners (a shard did not move before
// the leave timeout, or identities were isolated from a handoff because
// their records cannot be shipped). That state stays in this node's
// store.
var ErrHandoffIncomplete = errors.New("tempest: state at rest not handed off")

func newCluster(n *Node, cfg ClusterConfig) *cluster {
	return &cluster{n: n, cfg: cfg, name: n.cfg.Name, log: n.log,
		active: map[prospero.Identity]bool{}, known: map[prospero.Identity]bool{},
		indexKick: make(chan struct{}, 1)}
}

// start brings the cluster side up: registry and mail, transport,
// membership, stream services, placement. The node's scheduler and
// supervisor run already. On error the caller calls stop.
func (c *cluster) start(ctx context.Context) error {
	n := c.n
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.reg = n.wreg
	if err := n.errs.register(c.reg); err != nil {
		return fmt.Errorf("tempest: error codes: %w", err)
	}
	rem, err := newRemote(n.sched, c.reg, c.locateAt, wire.MailConfig{Logger: c.log, Clock: n.cfg.Clock})
	if err != nil {
		return err
	}
	rem.trc = n.trc
	c.rem = rem

	wc := c.cfg.Wire
	wc.Name = c.name
	wc.ListenAddr = c.cfg.QUICAddr
	if wc.ListenAddr == "" {
		wc.ListenAddr = ":7947"
	}
	wc.Certificate, wc.CAs = c.cfg.Certificate, c.cfg.CAs
	wc.Resolve = c.resolve
	wc.Handler = rem.mail.Handle
	wc.Events = rem.mail.LinkEvent
	wc.ManifestDigest = []byte(n.man.Digest())
	// wire, membership and placement tag their records with the node
	// name themselves: they get the untagged logger, or every line would
	// carry node= twice.
	wc.Logger = n.cfg.Logger
	if wc.Clock == nil {
		wc.Clock = n.cfg.Clock
	}
	tr, err := wire.NewQUIC(wc)
	if err != nil {
		return err
	}
	c.tr = tr
	rem.attach(tr)

	mc := membership.DefaultConfig()
	mc.Name = c.name
	mc.Bind = c.cfg.GossipAddr
	mc.Advertise = c.cfg.GossipAdvertise
	mc.Seeds = c.cfg.Seeds
	mc.GossipKeys = c.cfg.GossipKeys
	mc.Timing = c.cfg.GossipTiming
	mc.Logger = n.cfg.Logger
	mc.Clock = n.cfg.Clock
	mc.Meta = membership.Meta{
		Name:           c.name,
		QUICAddr:       c.quicAdvertise(),
		HTTPAddr:       c.cfg.HTTPAddr,
		ManifestDigest: n.man.Digest(),
		Kinds:          n.reg.Names(),
		Version:        c.cfg.Version,
	}
	ml, err := membership.New(mc)
	if err != nil {
		return err
	}
	c.ml = ml
	if mc.Meta.QUICAddr == "" {
		// Nothing specific configured: peers dial the IP gossip advertises.
		_, port, _ := net.SplitHostPort(tr.Addr().String())
		meta := ml.Meta()
		meta.QUICAddr = net.JoinHostPort(ml.Local().Addr.Addr().String(), port)
		if err := ml.UpdateMeta(ctx, meta); err != nil {
			return err
		}
	}
	c.peers = newPeerView(c, ml)
	c.prove = newProver(c.name, tr, c.log, n.cfg.Clock.Now, c.peers.signal)

	raftLn, err := tr.ListenStream(placement.RaftService)
	if err != nil {
		return err
	}
	for _, svc := range []struct {
		name string
		fn   func(net.Conn) error
	}{{serviceForward, c.serveForward}, {serviceMove, c.serveMove}, {serviceState, c.serveState}} {
		l, err := tr.ListenStream(svc.name)
		if err != nil {
			_ = raftLn.Close()
			return err
		}
		c.lns = append(c.lns, l)
		c.wg.Add(1)
		go c.acceptLoop(l, svc.fn)
	}
	rt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  placement.NewStreamLayer(streamDialer{tr}, raftLn, placement.RaftService),
		MaxPool: 3,
		Timeout: 5 * time.Second,
		Logger:  hclog.NewNullLogger(),
	})
	pc := c.cfg.Placement
	pc.Name = c.name
	pc.DataDir = n.cfg.DataDir
	pc.Transport = rt
	pc.Membership = c.peers
	pc.BootstrapExpect = c.cfg.BootstrapExpect
	pc.Handoff = handoffFunc(c.transfer)
	pc.Forwarder = forwardFunc(c.forward)
	pc.Logger = n.cfg.Logger
	pc.Clock = n.cfg.Clock
	pl, err := placement.New(pc)
	if err != nil {
		_ = rt.Close()
		return err
	}
	c.pl = pl

	if err := ml.Start(ctx); err != nil {
		return err
	}
	c.wg.Add(1)
	go c.watchMembers()
	c.wg.Add(1)
	go c.proveLoop()
	if err := pl.Start(ctx); err != nil {
		return err
	}
	c.wg.Add(1)
	go c.fenceLoop()
	c.wg.Add(1)
	go c.indexLoop()
	c.wg.Add(1)
	go c.manifestLoop()
	c.wg.Add(1)
	go c.bufferLoop()
	c.wg.Add(1)
	go c.reminderLoop()
	return nil
}

// quicAdvertise is the host:port peers dial for QUIC, "" when no
// specific host was configured.
func (c *cluster) quicAdvertise() string {
	_, port, _ := net.SplitHostPort(c.tr.Addr().String())
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
func (c *cluster) resolve(_ context.Context, peer string) (string, error) {
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

// locate is the routing decision for ref: its owner from the applied
// table, and for a shard this node owns, the fence (lease, node status,
// handoff). Errors match actor sentinels.
func (c *cluster) locate(ref actor.Ref) (string, bool, error) {
	loc, err := c.pl.Locate(ref.Kind(), ref.Key())
	if err != nil {
		if errors.Is(err, placement.ErrNoEligibleNode) {
			return "", false, fmt.Errorf("%w: %w", actor.ErrNoEligibleNode, err)
		}
		return "", false, c.unavailable(err)
	}
	if loc.Moving {
		return "", false, fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff)
	}
	if loc.Owner != c.name {
		return loc.Owner, false, nil
	}
	if err := c.pl.Check(loc.Shard, 0, c.n.cfg.Clock.Now()); err != nil {
		var no *placement.NotOwnerError
		if errors.As(err, &no) && no.OwnerHint != "" && no.OwnerHint != c.name {
			return no.OwnerHint, false, nil
		}
		return "", false, c.unavailable(err)
	}
	return c.name, true, nil
}

// whyUnanswered adds ErrNoQuorum to an ask's deadline error when this
// node knows no placement leader: the ask could not be routed, or its
// owner could not be replaced, because placement has no quorum, and the
// caller should learn that rather than only that time ran out.
func (c *cluster) whyUnanswered(err error) error {
	if errors.Is(err, actor.ErrDeadlineExceeded) && !errors.Is(err, ErrNoQuorum) && c.pl != nil && c.pl.Leader() == "" {
		return fmt.Errorf("%w (%w)", err, ErrNoQuorum)
	}
	return err
}

// hostsKind reports whether a live member other than this node gossips
// that it registered kind. It reads the membership view, so it is for
// the rare path of a kind this node does not register.
func (c *cluster) hostsKind(kind string) bool {
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
func (c *cluster) unavailable(err error) error {
	if c.pl.Leader() == "" {
		return fmt.Errorf("%w: %w", ErrNoQuorum, err)
	}
	return fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, err)
}

// awaitChange waits until the applied table changes, d passes or ctx
// ends.
func (c *cluster) awaitChange(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.pl.Changed():
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// epochOf is the current epoch of id's shard (0 if unknown).
func (c *cluster) epochOf(id prospero.Identity) uint64 {
	if c.pl == nil {
		return 0
	}
	loc, _ := c.pl.Locate(id.Kind, id.Key)
	return loc.Epoch
}

// track follows activations (from the supervisor's events).
func (c *cluster) track(e prospero.Event) {
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
	case prospero.EventPassivated, prospero.EventRetired:
		delete(c.active, e.ID)
	}
}

// fenceLoop passivates activations of shards this node may no longer
// serve (lease lapsed, marked down, shard moved), so that an isolated
// node stops serving before anyone else may take over.
func (c *cluster) fenceLoop() {
	defer c.wg.Done()
	lease := c.cfg.Placement.Lease
	if lease == 0 {
		lease = placement.DefaultConfig().Lease
	}
	tick := time.NewTicker(max(lease/8, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.Lock()
		ids := make([]prospero.Identity, 0, len(c.active))
		for id := range c.active {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		for _, id := range ids {
			if _, local, _ := c.locate(id.Ref()); !local {
				if r := c.n.run.Load(); r != nil {
					r.sup.Passivate(id.Ref())
				}
			}
		}
	}
}

// watchMembers feeds membership changes to placement and closes links
// to peers declared dead.
func (c *cluster) watchMembers() {
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
func (c *cluster) readiness() error {
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
	if !c.pl.LeaseFresh(c.n.cfg.Clock.Now()) {
		return &NotReadyError{Node: c.name, Reason: "placement lease not fresh"}
	}
	return nil
}

// leave hands this node's shards off (placement drains it). With no
// other live member, or no leader to drain through, there is nobody to
// hand off to and it returns at once.
func (c *cluster) leave(ctx context.Context) error {
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
	return c.pl.Leave(ctx)
}

// stopNetwork ends the node's presence in the cluster: graceful (leave
// gossip) or as a crash (halt).
func (c *cluster) stopNetwork(ctx context.Context, graceful bool) error {
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
	if c.pl != nil {
		errs = append(errs, c.pl.Close(ctx))
	}
	c.wg.Wait()
	if c.rem != nil {
		errs = append(errs, c.rem.close())
	}
	return errors.Join(errs...)
}

// isolate cuts the node off the network (gossip and QUIC) while its
// process keeps running: a partition as the node itself sees it. Tests
// use it; Close afterwards stops the rest.
func (c *cluster) isolate() {
	c.ml.Halt()
	_ = c.tr.Close()
}

// ---- stream services ----

func (c *cluster) acceptLoop(l net.Listener, serve func(net.Conn) error) {
	defer c.wg.Done()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
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

// writeResult answers a request: empty for success, the error text
// otherwise.
func writeResult(w io.Writer, err error) error {
	if err == nil {
		return writeMsg(w, nil)
	}
	return writeMsg(w, []byte(err.Error()))
}

func readResult(r *bufio.Reader) error {
	b, err := readMsg(r)
	if err != nil {
		return err
	}
	if len(b) > 0 {
		return &peerAnswerError{text: string(b)}
	}
	return nil
}

// peerAnswerError is a failure a peer answered (it is alive and said
// no), as opposed to one of reaching it.
type peerAnswerError struct{ text string }

func (e *peerAnswerError) Error() string { return e.text }

// call opens a stream to peer's service, sends req and waits for the
// result.
func (c *cluster) call(ctx context.Context, peer, service string, req []byte) error {
	conn, err := c.tr.DialStream(ctx, peer, service)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if err := writeMsg(conn, req); err != nil {
		return err
	}
	return readResult(bufio.NewReader(conn))
}

// streamDialer adapts the transport to placement's StreamDialer.
type streamDialer struct{ t *wire.QUIC }

func (d streamDialer) Dial(ctx context.Context, peer, service string) (net.Conn, error) {
	return d.t.DialStream(ctx, peer, service)
}

type forwardFunc func(ctx context.Context, leader string, cmd []byte) error

func (f forwardFunc) Forward(ctx context.Context, leader string, cmd []byte) error {
	return f(ctx, leader, cmd)
}

type handoffFunc func(ctx context.Context, m placement.Move) error

func (f handoffFunc) Transfer(ctx context.Context, m placement.Move) error { return f(ctx, m) }

// forward sends a placement command to the leader.
func (c *cluster) forward(ctx context.Context, leader string, cmd []byte) error {
	if leader == c.name {
		return c.pl.ApplyForwarded(ctx, cmd)
	}
	return c.call(ctx, leader, serviceForward, cmd)
}

func (c *cluster) serveForward(conn net.Conn) error {
	cmd, err := readMsg(bufio.NewReader(conn))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	return writeResult(conn, c.pl.ApplyForwarded(ctx, cmd))
}

// transfer runs on the leader: the old owner of m hands the shard off.
//
// A peer that is not reachable yet is tried again until ctx ends (the
// placement's fence delay): a node that rejoins is given shards by the
// raft leader as soon as it is a voter again, often before the other
// nodes' membership sees its new incarnation alive. Giving up at once
// let the leader complete the move after the fence delay with no state
// shipped, and the new owner then hydrated the identity from its own
// record of an earlier ownership: acknowledged updates made on the old
// owner meanwhile were lost and replies went backwards.
func (c *cluster) transfer(ctx context.Context, m placement.Move) error {
	// Retry until a quarter of the budget is left, so that a refusal
	// reaches the planner before it would complete the move by the
	// fence delay.
	giveUp := time.Time{}
	if dl, ok := ctx.Deadline(); ok {
		giveUp = dl.Add(-time.Until(dl) / 4)
	}
	fail := func(err error) error {
		c.log.LogAttrs(ctx, slog.LevelWarn, "shard handoff failed", slog.String("shard", m.Shard.String()),
			slog.String("from", m.From), slog.String("to", m.To), slog.Any("error", err))
		var ans *peerAnswerError
		if errors.As(err, &ans) || errors.Is(err, errShipRefused) {
			// The old owner is alive and could not ship: the move must not
			// complete without the state, so it is aborted.
			return fmt.Errorf("%w: %w", placement.ErrMoveRefused, err)
		}
		return err
	}
	for {
		err := c.transferOnce(ctx, m)
		if err == nil {
			return nil
		}
		// Trying again is safe (the new owner accepts a transfer only
		// while its table shows this move) and useful as long as the
		// table still shows this move.
		if s, ok := c.pl.Owner(m.Shard); !ok || s.Owner != m.From || s.MovingTo != m.To || s.Epoch != m.Epoch {
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

// moveRequest is what the leader sends an old owner: the move and the
// time left of the leader's budget for it, in ns. The old owner works
// under that budget, never its own: a transfer still running after the
// leader gave up could reach the new owner late.
type moveRequest struct {
	Move       placement.Move `json:"m"`
	DeadlineNs int64          `json:"d"`
}

// maxMoveBudget bounds the budget a move request may ask for.
const maxMoveBudget = 5 * time.Minute

func (c *cluster) transferOnce(ctx context.Context, m placement.Move) error {
	if m.From == c.name {
		return c.shipShard(ctx, m)
	}
	d := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	if d <= 0 {
		return context.DeadlineExceeded
	}
	b, err := json.Marshal(moveRequest{Move: m, DeadlineNs: int64(d)})
	if err != nil {
		return err
	}
	return c.call(ctx, m.From, serviceMove, b)
}

func (c *cluster) serveMove(conn net.Conn) error {
	b, err := readMsg(bufio.NewReader(conn))
	if err != nil {
		return err
	}
	var req moveRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return writeResult(conn, err)
	}
	d := time.Duration(req.DeadlineNs)
	if d <= 0 || d > maxMoveBudget {
		return writeResult(conn, fmt.Errorf("tempest: move request with a budget of %s", d))
	}
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	// The leader closing the stream (it gave up) ends the work at once.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		var one [1]byte
		_, _ = conn.Read(one[:])
		cancel()
	}()
	return writeResult(conn, c.shipShard(ctx, req.Move))
}

// errShipRefused marks a handoff the old owner refuses: its table shows
// another owner, epoch or target than the move asked for.
var errShipRefused = errors.New("tempest: handoff refused")

// shipShard is the old owner's side of a handoff: once its applied table
// shows the move (so it admits no more mail for the shard), it
// passivates the shard's activations and ships their state at rest to
// the new owner, which stores it before the move completes.
//
// An identity whose record cannot be shipped (its index entry or its
// record at rest does not decode, or it could never cross the wire) is
// isolated: refused, logged, counted and kept in unshipped so that a
// graceful Close reports it; the rest of the shard moves.
func (c *cluster) shipShard(ctx context.Context, m placement.Move) error {
	for {
		s, ok := c.pl.Owner(m.Shard)
		if ok && s.Epoch == m.Epoch && s.Owner == c.name && s.MovingTo == m.To {
			break
		}
		if ok && (s.Epoch > m.Epoch || (s.Epoch == m.Epoch && (s.Owner != c.name || (s.MovingTo != "" && s.MovingTo != m.To)))) {
			return fmt.Errorf("%w: %s to %s at epoch %d: this node's table shows owner %q at epoch %d moving to %q",
				errShipRefused, m.Shard, m.To, m.Epoch, s.Owner, s.Epoch, s.MovingTo)
		}
		// Behind the leader: wait for the move to be applied here.
		if err := c.awaitChange(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if err := c.flushIndex(ctx); err != nil {
		return err
	}
	ids, bad, err := c.readIndex(ctx, m.Shard)
	if err != nil {
		return err
	}
	for _, id := range bad {
		c.isolateIdentity(ctx, m, id, errBadIndexEntry)
	}
	c.mu.Lock()
	for id := range c.active {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	c.mu.Unlock()
	ids = slices.DeleteFunc(ids, func(id prospero.Identity) bool {
		if isReserved(id) {
			return true
		}
		loc, err := c.pl.Locate(id.Kind, id.Key)
		return err != nil || loc.Shard != m.Shard
	})
	slices.SortFunc(ids, func(a, b prospero.Identity) int {
		return cmpString(a.String(), b.String())
	})
	if err := c.quiesce(ctx, ids); err != nil {
		return err
	}
	var recs []shipped
	for _, id := range ids {
		if !utf8.ValidString(id.Kind) || !utf8.ValidString(id.Key) {
			c.isolateIdentity(ctx, m, id, errBadIdentity)
			continue
		}
		rec, err := c.n.store.Get(ctx, id)
		switch {
		case errors.Is(err, prospero.ErrNotFound):
			continue
		case err != nil && (ctx.Err() != nil || errors.Is(err, prospero.ErrStoreClosed)):
			return err
		case err != nil:
			c.isolateIdentity(ctx, m, id, err)
			continue
		}
		recs = append(recs, shipped{id: id, inc: rec.Incarnation, state: rec.State})
	}
	// The shard's reminders stop firing here and travel with its state.
	remID, remRec, err := c.releaseReminders(ctx, m.Shard)
	if err != nil {
		return err
	}
	if remRec != nil {
		recs = append(recs, *remRec)
	}
	if err := c.sendStates(ctx, m.To, m.Shard, m.Epoch+1, recs); err != nil {
		return fmt.Errorf("tempest: handoff of %s to %s: %w", m.Shard, m.To, err)
	}
	// Unlike actor state (versioned by the new owner's writes), a stale
	// reminder record left here would bring cancelled reminders back if
	// the shard ever returned without a handoff.
	if remRec != nil {
		if err := c.n.store.Delete(ctx, remID, prospero.AnyVersion); err != nil {
			c.log.LogAttrs(ctx, slog.LevelWarn, "reminders after handoff", slog.Any("error", err))
		}
	}
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
	c.log.LogAttrs(ctx, slog.LevelInfo, "shard handed off", slog.String("shard", m.Shard.String()),
		slog.String("to", m.To), slog.Int("actors", len(recs)))
	return nil
}

// Why an identity was isolated from a handoff.
var (
	errBadIndexEntry = errors.New("tempest: shard index entry does not decode")
	errBadIdentity   = errors.New("tempest: identity is not valid UTF-8")
)

// isolateIdentity records that id's state at rest was not shipped with m.
func (c *cluster) isolateIdentity(ctx context.Context, m placement.Move, id prospero.Identity, why error) {
	c.mu.Lock()
	if c.unshipped == nil {
		c.unshipped = map[prospero.Identity]error{}
	}
	c.unshipped[id] = why
	c.mu.Unlock()
	c.isolated.Add(1)
	c.log.LogAttrs(ctx, slog.LevelWarn, "handoff: identity isolated, its state stays on this node",
		slog.String("shard", m.Shard.String()), slog.String("to", m.To),
		slog.String("actor", fmt.Sprintf("%q", id.String())), slog.Any("error", why))
}

// unshippedErr reports the identities whose state at rest this node
// owned and did not ship (nil if none).
func (c *cluster) unshippedErr() error {
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
	id    prospero.Identity
	inc   uint64
	state []byte
}

// sendStates ships recs of shard to peer as the handoff to epoch and
// returns the new owner's answer.
func (c *cluster) sendStates(ctx context.Context, peer string, shard placement.ShardRef, epoch uint64, recs []shipped) error {
	conn, err := c.tr.DialStream(ctx, peer, serviceState)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	w := bufio.NewWriter(conn)
	send := func(env wire.Envelope) error {
		b, err := wire.MarshalEnvelope(env)
		if err != nil {
			return err
		}
		return writeMsg(w, b)
	}
	idx := uint32(shard.Index)
	if err := send(&wire.HandoffBegin{Shard: idx, Epoch: epoch, From: c.name, To: peer}); err != nil {
		return err
	}
	for i, r := range recs {
		if err := send(&wire.StateTransfer{Shard: idx, Epoch: epoch, Seq: uint64(i + 1),
			Actor: wire.ActorID{Kind: r.id.Kind, Key: r.id.Key, Incarnation: r.inc}, State: r.state}); err != nil {
			return err
		}
	}
	if err := send(&wire.HandoffDone{Shard: idx, Epoch: epoch, Count: uint64(len(recs))}); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return readResult(bufio.NewReader(conn))
}

// quiesce passivates ids until none of them is in memory here. One
// round is not enough: mail admitted before the table showed the move
// may still wait in an activation's mailbox, and a passivation that
// finds mail waiting hydrates the identity again at once to run it. An
// Add acknowledged by such a second activation is written at rest only
// by its own passivation, so the store may be read for shipping only
// once every identity stays dormant.
func (c *cluster) quiesce(ctx context.Context, ids []prospero.Identity) error {
	r, err := c.n.running()
	if err != nil {
		return err
	}
	for {
		for _, id := range ids {
			if err := c.n.Passivate(ctx, id.Ref()); err != nil {
				return err
			}
		}
		busy := false
		for _, id := range ids {
			st, err := r.sup.Status(ctx, id.Ref())
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

// serveState is the new owner's side of a handoff: it stores the state
// at rest it receives, then acknowledges. It accepts the records only
// while its applied table shows that very move (the sender owning the
// shard at the epoch before the announced one, moving to this node),
// checked again before every write: a transfer that arrives after the
// move completed, aborted or was superseded is refused, so it can never
// overwrite state this node acknowledged as the owner since.
func (c *cluster) serveState(conn net.Conn) error {
	from := conn.RemoteAddr().String()
	r := bufio.NewReader(conn)
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	var begin *wire.HandoffBegin
	var got uint64
	var stored []prospero.Identity
	var shard placement.ShardRef
	refuse := func(err error) error {
		c.log.LogAttrs(ctx, slog.LevelWarn, "handoff refused", slog.String("from", from), slog.Any("error", err))
		return writeResult(conn, err)
	}
	for {
		b, err := readMsg(r)
		if err != nil {
			return err
		}
		env, err := wire.UnmarshalEnvelope(b)
		if err != nil {
			return refuse(err)
		}
		switch e := env.(type) {
		case *wire.HandoffBegin:
			if begin != nil || e.From != from || e.To != c.name {
				return refuse(fmt.Errorf("%w: begin from %q to %q on a stream from %s", errStaleTransfer, e.From, e.To, from))
			}
			begin = e
		case *wire.StateTransfer:
			if begin == nil || e.Shard != begin.Shard || e.Epoch != begin.Epoch || e.Seq != got+1 {
				return refuse(fmt.Errorf("%w: state of shard %d epoch %d seq %d out of its handoff", errStaleTransfer, e.Shard, e.Epoch, e.Seq))
			}
			id := prospero.Identity{Kind: e.Actor.Kind, Key: e.Actor.Key}
			loc, err := c.pl.Locate(id.Kind, id.Key)
			if ref, ok := reminderRecordShard(id); ok {
				loc, err = placement.Location{Shard: ref}, nil
			}
			if (err != nil && loc.Shard == (placement.ShardRef{})) || loc.Shard.Index != int(e.Shard) ||
				(got > 0 && loc.Shard != shard) {
				return refuse(fmt.Errorf("%w: %s is not in shard %d", errStaleTransfer, id, e.Shard))
			}
			shard = loc.Shard
			admit := func() error { return c.admitTransfer(ctx, shard, from, e.Epoch) }
			if err := c.storeState(ctx, id, e.Actor.Incarnation, e.State, admit); err != nil {
				return refuse(err)
			}
			got++
			if isReserved(id) {
				continue // the shard's reminders: loaded when the shard is taken over
			}
			stored = append(stored, id)
		case *wire.HandoffDone:
			if begin == nil || e.Epoch != begin.Epoch || e.Shard != begin.Shard {
				return refuse(fmt.Errorf("%w: done without its begin", errStaleTransfer))
			}
			if e.Count != got {
				return refuse(fmt.Errorf("tempest: handoff: %d states announced, %d received", e.Count, got))
			}
			if len(stored) == 0 {
				return writeResult(conn, nil)
			}
			if err := c.admitTransfer(ctx, shard, from, e.Epoch); err != nil {
				return refuse(err)
			}
			return writeResult(conn, c.updateIndex(ctx, shard, stored, nil))
		default:
			return refuse(fmt.Errorf("tempest: unexpected %T in a handoff", env))
		}
	}
}

// errStaleTransfer: a handoff's state arrived for a move this node's
// applied table does not show (completed, aborted, superseded, or never
// begun).
var errStaleTransfer = errors.New("tempest: stale handoff refused")

// admitTransfer returns nil while this node's applied table shows shard
// moving from from to this node, to epoch. While the table is behind
// (an older epoch, or the move not begun yet) it waits for it.
func (c *cluster) admitTransfer(ctx context.Context, shard placement.ShardRef, from string, epoch uint64) error {
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

// storeState writes a shipped record over whatever this node's store
// held for id, provided admit still allows it just before the write.
func (c *cluster) storeState(ctx context.Context, id prospero.Identity, inc uint64, state []byte, admit func() error) error {
	for range 3 {
		if err := admit(); err != nil {
			return err
		}
		var expected uint64
		cur, err := c.n.store.Get(ctx, id)
		switch {
		case err == nil:
			expected = cur.Version
		case !errors.Is(err, prospero.ErrNotFound):
			return err
		}
		_, err = c.n.store.Put(ctx, id, expected, prospero.Record{Incarnation: inc, State: state})
		if errors.Is(err, prospero.ErrVersionConflict) {
			continue
		}
		if err == nil {
			c.mu.Lock()
			c.known[id] = true
			c.mu.Unlock()
		}
		return err
	}
	return fmt.Errorf("tempest: handoff: %s: %w", id, prospero.ErrVersionConflict)
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

// ---- the node's cluster accessors ----

// Members returns this node's view of the cluster's members (nil for a
// standalone node). The caller owns the slice.
func (n *Node) Members() []membership.Member {
	if n.cl == nil || n.cl.ml == nil {
		return nil
	}
	return n.cl.ml.Members()
}

// Leader returns the raft leader's name ("" if unknown or standalone).
func (n *Node) Leader() string {
	if n.cl == nil || n.cl.pl == nil {
		return ""
	}
	return n.cl.pl.Leader()
}

// PlacementStatus reports this node's raft role, term, applied index,
// table version, shards owned and lease; ok is false for a standalone
// node.
func (n *Node) PlacementStatus() (st placement.Status, ok bool) {
	if n.cl == nil || n.cl.pl == nil {
		return placement.Status{}, false
	}
	return n.cl.pl.Status(), true
}

// Table returns a copy of this node's applied placement table (nil for a
// standalone node).
func (n *Node) Table() *placement.Table {
	if n.cl == nil || n.cl.pl == nil {
		return nil
	}
	return n.cl.pl.Table()
}

// Locate returns the node that owns ref by this node's applied table and
// the shard's epoch. A standalone node owns everything. A closed node
// returns ErrClosed: its table stopped following the cluster when it
// closed (after a graceful leave it still lists the owners of that
// moment), so an answer from it would be stale.
func (n *Node) Locate(ref actor.Ref) (node string, epoch uint64, err error) {
	if err := ref.Check(); err != nil {
		return "", 0, err
	}
	if lifecycle(n.phase.Load()) == stateClosed {
		return "", 0, ErrClosed
	}
	if !ref.IsVirtual() {
		return ref.Node(), 0, nil
	}
	if n.cl == nil {
		return n.cfg.Name, 0, nil
	}
	if n.cl.pl == nil {
		return "", 0, ErrNotStarted
	}
	loc, err := n.cl.pl.Locate(ref.Kind(), ref.Key())
	if err != nil {
		if errors.Is(err, placement.ErrNoEligibleNode) {
			err = fmt.Errorf("%w: %w", actor.ErrNoEligibleNode, err)
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
// manifest, so it hosts only kinds without clause requirements.
type peerView struct {
	cl      *cluster
	ml      *membership.Membership
	self    string
	man     manifest.Manifest
	digest  string
	kinds   []placement.KindSpec
	changed chan struct{}
}

var _ placement.Membership = (*peerView)(nil)

func newPeerView(c *cluster, ml *membership.Membership) *peerView {
	v := &peerView{cl: c, ml: ml, self: c.name, man: c.n.man, digest: c.n.man.Digest(), changed: make(chan struct{}, 1)}
	for _, name := range c.n.reg.Names() {
		v.kinds = append(v.kinds, placement.KindSpec{Name: name,
			Requires: slices.Clone(c.n.kinds[name].opts.RequiredClauses)})
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
		p := placement.Peer{Name: m.Name, Addr: m.Meta.QUICAddr, HTTPAddr: m.Meta.HTTPAddr, Version: m.Meta.Version}
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
			p.Manifest = v.peerManifest(m.Name, m.Meta.ManifestDigest)
			for _, k := range m.Meta.Kinds {
				p.Kinds = append(p.Kinds, placement.KindSpec{Name: k})
			}
		}
		out = append(out, p)
	}
	return out
}
