package membership

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tempest-actors/tempest/internal/ratelog"
)

// Membership errors.
var (
	// ErrEncryptionDisabled is returned by keyring operations on a node
	// started without gossip keys (encryption cannot be switched on live).
	ErrEncryptionDisabled = errors.New("membership: gossip encryption is not enabled")
	// ErrNotStarted is returned by WaitJoined before Start.
	ErrNotStarted = errors.New("membership: not started")
)

// Membership is this node's view of the cluster, kept by memberlist gossip.
// All methods are safe for concurrent use.
type Membership struct {
	cfg      Config
	log      *slog.Logger
	ml       *memberlist.Memberlist
	hub      *hub
	keyring  *memberlist.Keyring // nil without encryption
	localIPs map[netip.Addr]bool
	joined   chan struct{} // closed after the first successful join
	done     chan struct{} // closed by Close and Halt
	drops    *ratelog.Limiter
	// rejoins: the lines of the periodic re-join (a seed that answers
	// at an address no member advertises, or whose name does not
	// resolve, is joined again every RejoinInterval: one line a minute).
	rejoins *ratelog.Limiter
	// selfConflict holds a token when a peer's view of this node's name
	// is stale: another address, or not alive (see joinLoop).
	selfConflict chan struct{}

	metaMu sync.Mutex
	meta   Meta   // normalized current metadata
	enc    []byte // its gossip encoding

	mu      sync.Mutex
	state   lifecycle
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Mutex // serializes Close and Halt
}

type lifecycle int

const (
	stateNew lifecycle = iota
	stateStarted
	stateClosed
)

var (
	_ Cluster = (*Membership)(nil)
	_ Cluster = (*Fake)(nil)
)

// New validates cfg, binds the gossip listeners and starts memberlist (its
// own goroutines run from here on). The node knows only itself until Start
// joins the seeds. Call Close to leave and release everything.
func New(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	logger = logger.With(logKeyNode, cfg.Name)

	meta := cfg.Meta.normalize()
	if meta.BootID == 0 {
		var b [8]byte
		if _, err := crand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("membership: boot id: %w", err)
		}
		meta.BootID = binary.LittleEndian.Uint64(b[:]) | 1
	}
	enc, err := meta.encode()
	if err != nil {
		return nil, err
	}

	m := &Membership{
		cfg:          cfg,
		log:          logger,
		hub:          newHub(cfg.Clock.Now, cfg.DeadRetention),
		localIPs:     localIPs(),
		joined:       make(chan struct{}),
		done:         make(chan struct{}),
		selfConflict: make(chan struct{}, 1),
		meta:         meta,
		enc:          enc,
		drops:        newDropLimiter(logger, cfg.DropLogInterval, cfg.Clock.Now),
		rejoins:      ratelog.New(logger, slog.LevelInfo, "re-joining seeds", time.Minute, cfg.Clock.Now),
	}

	mc, err := m.memberlistConfig()
	if err != nil {
		return nil, err
	}
	m.keyring = mc.Keyring
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("membership: starting gossip on %s: %w", cfg.Bind, err)
	}
	m.ml = ml
	m.log.Info("gossip listening", slog.String(logKeyAddr, m.Local().Addr.String()),
		slog.Bool("encrypted", m.keyring != nil))
	return m, nil
}

func (m *Membership) memberlistConfig() (*memberlist.Config, error) {
	cfg := m.cfg
	t := cfg.Timing
	bindHost, bindPort, err := splitBind(cfg.Bind)
	if err != nil {
		return nil, err
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = bindHost
	mc.BindPort = bindPort
	mc.AdvertisePort = bindPort
	if cfg.Advertise != "" {
		host, port, err := splitAdvertise(cfg.Advertise)
		if err != nil {
			return nil, err
		}
		mc.AdvertiseAddr = host
		if port != 0 {
			mc.AdvertisePort = port
		}
	}
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.SuspicionMult = t.SuspicionMult
	mc.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	mc.AwarenessMaxMultiplier = t.AwarenessMaxMultiplier
	mc.GossipInterval = t.GossipInterval
	mc.GossipNodes = t.GossipNodes
	mc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.TCPTimeout
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	mc.RequireNodeNames = false
	mc.Logger = newStdLogger(m.log, m.drops)

	if len(cfg.GossipKeys) > 0 {
		kr, err := memberlist.NewKeyring(cfg.GossipKeys, cfg.GossipKeys[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidKey, err)
		}
		mc.Keyring = kr
		// Both must stay true: with incoming verification off, packets
		// that fail to decrypt would be read as plaintext.
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}

	d := &delegate{m: m}
	mc.Delegate = d
	mc.Events = d
	mc.Conflict = d
	mc.Merge = d
	if cfg.Gate != nil {
		gt, err := newGatedTransport(bindHost, bindPort, cfg.Gate, mc.Logger)
		if err != nil {
			return nil, fmt.Errorf("membership: could not set up network transport: %w", err)
		}
		if bindPort == 0 {
			port := gt.bindPort()
			mc.BindPort = port
			if mc.AdvertisePort == 0 {
				mc.AdvertisePort = port
			}
		}
		mc.Transport = gt
	}
	return mc, nil
}

// LocalName returns this node's name.
func (m *Membership) LocalName() string { return m.cfg.Name }

// Local returns this node as a member, with the address actually bound.
func (m *Membership) Local() Member {
	// memberlist reports the local node to the event delegate while it is
	// created, so the table always holds it.
	mem, _ := m.hub.get(m.cfg.Name)
	return mem
}

// Members returns a snapshot of every known member, sorted by name (see
// Cluster). memberlist does not expose its suspicion state, so this
// implementation reports a member alive until it is declared dead.
func (m *Membership) Members() []Member { return m.hub.snapshot() }

// Subscribe starts a subscription to membership events (see Cluster).
func (m *Membership) Subscribe() *Subscription { return m.hub.subscribe() }

// HealthScore is memberlist's self-awareness score: 0 is healthy; higher
// values mean this node noticed it is slow and stretched its probe timing.
func (m *Membership) HealthScore() int { return m.ml.GetHealthScore() }

// Start begins joining the seeds in the background: retrying with back-off
// until one answers, then re-joining seeds that are not alive members every
// RejoinInterval. It returns at once; WaitJoined waits for the first
// join. The loop stops when ctx ends or Close is called. Start may be
// called once; later calls return nil and do nothing.
func (m *Membership) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.state {
	case stateClosed:
		return ErrClosed
	case stateStarted:
		return nil
	}
	m.state = stateStarted
	ctx, m.cancel = context.WithCancel(ctx)
	m.wg.Go(func() { m.joinLoop(ctx) })
	return nil
}

// WaitJoined blocks until the first successful join (at once when there
// are no seeds other than this node), ctx ends (its error), or Close or
// Halt is called (ErrClosed). Before Start it returns ErrNotStarted.
func (m *Membership) WaitJoined(ctx context.Context) error {
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	if st == stateNew {
		return ErrNotStarted
	}
	select {
	case <-m.joined:
		return nil
	case <-m.done:
		select {
		case <-m.joined:
			return nil
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Joined returns a channel closed after the first successful join.
func (m *Membership) Joined() <-chan struct{} { return m.joined }

// joinLoop is the background shell around joinOnce.
//
// Besides the initial join and the periodic re-join, it reacts to stale
// views of this node: a node restarted under its old name at a new address
// is refused by peers until its old incarnation has been dead for
// DeadNodeReclaimTime. While a join shows a peer with the old address (or
// a name conflict is reported), it exchanges full state with every seed
// again, with doubling waits, so the new address is accepted soon after the
// reclaim time instead of at the next push/pull.
func (m *Membership) joinLoop(ctx context.Context) {
	t := m.cfg.Timing
	var backoff, conflictWait time.Duration
	joined, force := false, false
	for {
		n, attempted := m.joinOnce(ctx, !joined, force)
		var wait time.Duration
		switch {
		// Joined: a seed answered, or there was no one else to join, or
		// another node already joined this one (its seeds then only
		// name alive members, which joinOnce skips).
		case !joined && (n > 0 || !attempted || m.hasPeers()):
			joined = true
			close(m.joined)
			m.log.Info("joined cluster", slog.Int("contacted", n))
			wait = t.RejoinInterval
		case !joined:
			backoff = nextBackoff(backoff, t.JoinBackoffMin, t.JoinBackoffMax)
			wait = backoff
		default:
			wait = t.RejoinInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(wait):
			force, conflictWait = false, 0
		case <-m.selfConflict:
			conflictWait = nextBackoff(conflictWait, t.JoinBackoffMin, max(t.RejoinInterval, t.JoinBackoffMax))
			select {
			case <-ctx.Done():
				return
			case <-m.cfg.Clock.After(conflictWait):
			}
			force = true
		}
	}
}

// hasPeers reports whether another member is alive.
func (m *Membership) hasPeers() bool {
	for _, mem := range m.hub.snapshot() {
		if mem.Name != m.cfg.Name && !mem.Status.Gone() {
			return true
		}
	}
	return false
}

// joinOnce resolves the seeds and joins those that are not this node and,
// unless all is set, not already alive members. first only changes
// logging. It returns how many answered and whether any join was
// attempted.
func (m *Membership) joinOnce(ctx context.Context, first, all bool) (int, bool) {
	if len(m.cfg.Seeds) == 0 {
		return 0, false
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.Timing.TCPTimeout)
	addrs, errs := resolveSeeds(rctx, m.cfg.Resolver, m.cfg.Seeds)
	cancel()
	for _, err := range errs {
		if first {
			m.log.Warn("seed lookup failed", slog.String(logKeyErr, err.Error()))
		} else {
			m.rejoins.Note("seed lookup failed", slog.String(logKeyErr, err.Error()))
		}
	}
	self := m.Local().Addr
	alive := make(map[netip.AddrPort]bool)
	for _, mem := range m.hub.snapshot() {
		if !mem.Status.Gone() && !all {
			alive[mem.Addr] = true
		}
	}
	var targets []string
	for _, a := range addrs {
		if a == self || (a.Port() == self.Port() && m.localIPs[a.Addr()]) {
			continue
		}
		if alive[a] {
			continue
		}
		targets = append(targets, a.String())
	}
	if len(targets) == 0 {
		// Every seed is this node or already alive: nothing to do. When
		// every seed resolved and all are this node, it starts the cluster
		// (it keeps re-joining, so it merges with nodes that appear later);
		// when some did not resolve, the first join is retried.
		resolvedAll := len(addrs) > 0 && len(errs) == 0
		return 0, !resolvedAll
	}
	if ctx.Err() != nil {
		return 0, true
	}
	n, err := m.ml.Join(targets)
	if err != nil && n == 0 {
		lvl := slog.LevelDebug
		if first {
			lvl = slog.LevelInfo
		}
		m.log.LogAttrs(ctx, lvl, "join attempt failed", slog.Any("seeds", targets), slog.String(logKeyErr, err.Error()))
	} else if !first {
		m.rejoins.Note("re-joined seeds", slog.Any("seeds", targets), slog.Int("contacted", n))
	}
	return n, true
}

// UpdateMeta replaces this node's metadata (Name is kept) and gossips it,
// waiting until the update has been sent or ctx ends (bounded by
// LeaveTimeout). It returns *MetaTooLargeError, leaving the metadata
// unchanged, if the new metadata does not fit.
func (m *Membership) UpdateMeta(ctx context.Context, meta Meta) error {
	if m.isClosed() {
		return ErrClosed
	}
	meta = meta.normalize()
	meta.Name = m.cfg.Name
	m.metaMu.Lock()
	if meta.BootID == 0 {
		meta.BootID = m.meta.BootID
	}
	meta.Leaving = m.meta.Leaving
	enc, err := meta.encode()
	if err != nil {
		m.metaMu.Unlock()
		return err
	}
	m.meta, m.enc = meta, enc
	m.metaMu.Unlock()
	timeout := m.timeout(ctx)
	if err := m.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("membership: gossiping metadata: %w", err)
	}
	return nil
}

// Meta returns this node's current metadata as given (Kinds not
// truncated).
func (m *Membership) Meta() Meta {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	return m.meta.clone()
}

func (m *Membership) timeout(ctx context.Context) time.Duration {
	d := m.cfg.LeaveTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < d {
			d = max(left, time.Millisecond)
		}
	}
	return d
}

// InstallKey adds key to the keyring: it is accepted for decryption but
// not yet used to encrypt. Step 1 of a key rotation, on every node.
func (m *Membership) InstallKey(key []byte) error {
	if m.keyring == nil {
		return ErrEncryptionDisabled
	}
	if err := validateKey(key); err != nil {
		return err
	}
	return m.keyring.AddKey(key)
}

// UseKey makes an installed key the primary key, used to encrypt. Step 2
// of a rotation, on every node once step 1 is done everywhere.
func (m *Membership) UseKey(key []byte) error {
	if m.keyring == nil {
		return ErrEncryptionDisabled
	}
	return m.keyring.UseKey(key)
}

// RemoveKey removes a key that is not the primary key. Step 3 of a
// rotation, on every node once step 2 is done everywhere.
func (m *Membership) RemoveKey(key []byte) error {
	if m.keyring == nil {
		return ErrEncryptionDisabled
	}
	return m.keyring.RemoveKey(key)
}

// Keys returns the keyring, primary key first; nil without encryption.
// The caller owns the slices.
func (m *Membership) Keys() [][]byte {
	if m.keyring == nil {
		return nil
	}
	primary := m.keyring.GetPrimaryKey()
	out := [][]byte{append([]byte(nil), primary...)}
	for _, k := range m.keyring.GetKeys() {
		if string(k) != string(primary) {
			out = append(out, append([]byte(nil), k...))
		}
	}
	return out
}

func (m *Membership) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state == stateClosed
}

// Close leaves the cluster gracefully: it broadcasts the departure (waiting
// until it is sent, ctx ends or LeaveTimeout passes), stops gossip and the
// join loop, and closes all subscriptions. Idempotent; later calls return
// nil.
func (m *Membership) Close(ctx context.Context) error {
	return m.stop(ctx, true)
}

// Halt stops gossip at once without announcing the departure, as a crash
// would: peers declare this node dead after their failure-detection
// timeout. For tests and crash drills. Idempotent, and a no-op after Close.
func (m *Membership) Halt() {
	_ = m.stop(context.Background(), false)
}

func (m *Membership) stop(ctx context.Context, leave bool) error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	m.mu.Lock()
	if m.state == stateClosed {
		m.mu.Unlock()
		return nil
	}
	m.state = stateClosed
	cancel := m.cancel
	close(m.done)
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	var err error
	if leave {
		// memberlist reports a graceful leave and a failure alike to the
		// event delegate (Node.State is not updated for departed nodes), so
		// first gossip the intent to leave; peers classify by it.
		// (No one stays to classify it when the whole cluster stops:
		// the announcement would only wait for its broadcast timeout.)
		if m.othersStaying() {
			if uerr := m.announceLeaving(ctx); uerr != nil {
				m.log.Warn("leave announcement incomplete", slog.String(logKeyErr, uerr.Error()))
			}
		}
		switch lerr := m.ml.Leave(m.timeout(ctx)); {
		case lerr == nil:
			m.log.Info("left cluster")
		case !m.othersStaying():
			// Nobody stays to hear it (the whole cluster is stopping):
			// memberlist had no one left to send the leave to.
			m.log.Info("left cluster; no other member stays to hear it", slog.String(logKeyErr, lerr.Error()))
		default:
			err = fmt.Errorf("membership: leave: %w", lerr)
			m.log.Warn("graceful leave incomplete", slog.String(logKeyErr, lerr.Error()))
		}
	}
	if serr := m.ml.Shutdown(); serr != nil && err == nil {
		err = fmt.Errorf("membership: shutdown: %w", serr)
	}
	m.wg.Wait()
	m.hub.close()
	return err
}

// othersStaying reports whether a member other than this node is alive
// in its view and has not announced that it is leaving.
func (m *Membership) othersStaying() bool {
	for _, o := range m.Members() {
		if o.Name != m.cfg.Name && !o.Status.Gone() && !o.Meta.Leaving {
			return true
		}
	}
	return false
}

// announceLeaving sets Meta.Leaving and gossips it.
func (m *Membership) announceLeaving(ctx context.Context) error {
	m.metaMu.Lock()
	meta := m.meta.clone()
	meta.Leaving = true
	enc, err := meta.encode()
	if err == nil {
		m.meta, m.enc = meta, enc
	}
	m.metaMu.Unlock()
	if err != nil {
		return err
	}
	return m.ml.UpdateNode(m.timeout(ctx))
}

// kickRejoin asks the join loop for another full state exchange with the
// seeds; it never blocks.
func (m *Membership) kickRejoin() {
	select {
	case m.selfConflict <- struct{}{}:
	default:
	}
}

// member converts a memberlist node into a Member.
func (m *Membership) member(n *memberlist.Node, st Status) Member {
	mem := Member{Name: n.Name, Status: st}
	if ip, ok := netip.AddrFromSlice(n.Addr); ok {
		mem.Addr = netip.AddrPortFrom(ip.Unmap(), n.Port)
	}
	meta, err := decodeMeta(n.Meta)
	switch {
	case err != nil:
		mem.MetaErr = err
		mem.Meta = Meta{Name: n.Name}
	case meta.Name != n.Name:
		mem.MetaErr = fmt.Errorf("%w: metadata names %q", ErrBadMeta, meta.Name)
		mem.Meta = Meta{Name: n.Name}
	default:
		mem.Meta = meta
	}
	return mem
}

// delegate adapts memberlist's callbacks. memberlist calls the event
// methods one at a time, in order, while holding its node lock: they must
// not block or call back into memberlist.
type delegate struct{ m *Membership }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
	_ memberlist.MergeDelegate    = (*delegate)(nil)
)

func (d *delegate) NodeMeta(limit int) []byte {
	d.m.metaMu.Lock()
	defer d.m.metaMu.Unlock()
	if len(d.m.enc) > limit { // unreachable: encode enforces MetaLimit
		return nil
	}
	return append([]byte(nil), d.m.enc...)
}

func (d *delegate) NotifyMsg([]byte)                       {}
func (d *delegate) GetBroadcasts(int, int) [][]byte        { return nil }
func (d *delegate) LocalState(bool) []byte                 { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

func (d *delegate) NotifyJoin(n *memberlist.Node) {
	mem := d.m.member(n, StatusAlive)
	if mem.MetaErr != nil {
		d.m.log.Warn("member metadata undecodable", slog.String(logKeyPeer, n.Name), slog.String(logKeyErr, mem.MetaErr.Error()))
	}
	d.m.log.Info("member joined", slog.String(logKeyPeer, n.Name), slog.String(logKeyAddr, mem.Addr.String()))
	d.m.hub.apply(Event{Type: EventJoin, Member: mem})
}

func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	mem := d.m.member(n, StatusAlive)
	d.m.log.Debug("member updated", slog.String(logKeyPeer, n.Name), slog.String(logKeyAddr, mem.Addr.String()))
	d.m.hub.apply(Event{Type: EventUpdate, Member: mem})
}

func (d *delegate) NotifyLeave(n *memberlist.Node) {
	// n.State is not maintained by memberlist for departed nodes; a node
	// that announced Leaving (its last metadata says so) left gracefully.
	ev := Event{Type: EventFail, Member: d.m.member(n, StatusDead)}
	if ev.Member.Meta.Leaving {
		ev = Event{Type: EventLeave, Member: d.m.member(n, StatusLeft)}
	}
	d.m.log.Info("member "+ev.Type.String(), slog.String(logKeyPeer, n.Name), slog.String(logKeyAddr, ev.Member.Addr.String()))
	d.m.hub.apply(ev)
}

// NotifyMerge sees a peer's whole view during a join. If the peer still
// has this node's name at another address or not alive (this node was
// restarted), the join loop exchanges state again soon, until the peer's
// view is right.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	self := d.m.Local().Addr
	for _, n := range peers {
		if n.Name != d.m.cfg.Name {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.Addr)
		if n.State != memberlist.StateAlive || netip.AddrPortFrom(ip.Unmap(), n.Port) != self {
			d.m.kickRejoin()
		}
	}
	return nil
}

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name == d.m.cfg.Name {
		d.m.kickRejoin()
	}
	d.m.log.Warn("name conflict: another address claims a live member's name; it is ignored until the member is dead for DeadNodeReclaimTime",
		slog.String(logKeyPeer, existing.Name),
		slog.String("known", net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port)))),
		slog.String("claimed", net.JoinHostPort(other.Addr.String(), strconv.Itoa(int(other.Port)))))
}
