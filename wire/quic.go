package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/tempest-actors/tempest/internal/ratelog"
)

// Causes of refused inbound connections, in the lines that summarize
// them.
const (
	causeTLSRejected   = "tls_rejected"
	causeHelloRejected = "hello_rejected"
	causeNotMember     = "not_member"
)

// Causes of inbound lane streams reset for a bad frame, in the lines
// that summarize them.
const (
	causeFrameTooLarge  = "frame_too_large"
	causeFrameMalformed = "frame_malformed"
	causeFrameRejected  = "frame_rejected_by_handler"
)

// Log attribute keys.
const (
	logPeer = "peer"
	logLane = "lane"
	logErr  = "err"
)

// QUIC is the production Transport: one quic.Transport on one UDP socket
// per node, one QUIC connection per peer, mutual TLS with the cluster CA.
// See the package documentation for the model.
type QUIC struct {
	cfg    Config
	log    *slog.Logger
	udp    net.PacketConn
	ownUDP bool
	tr     *quic.Transport
	ln     *quic.Listener
	qconf  *quic.Config

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	links  map[string]*link // written under mu; links are never removed
	// linkTab is a copy of links that Send reads without a lock: it is
	// replaced (never changed) whenever a link is added, and shut is set
	// by Close, so the per-frame lookup takes no lock shared by every
	// sender.
	linkTab  atomic.Pointer[map[string]*link]
	shut     atomic.Bool
	services map[string]*streamListener

	events  eventQueue
	st      counters
	rejects *ratelog.Limiter // lines about refused inbound connections
	// notMembers: lines about links refused to certified non-members,
	// at Info: a joining node meets a few (Config.Admit).
	notMembers *ratelog.Limiter
	// badFrames: lines about inbound lanes reset for a bad frame.
	badFrames *ratelog.Limiter
	// refusals: lines about datagrams the kernel refused to send, by
	// destination (see udp.go).
	refusals *ratelog.Limiter
	creds    atomic.Pointer[credentials]
}

var (
	_ Transport  = (*QUIC)(nil)
	_ WaitSender = (*QUIC)(nil)
)

type counters struct {
	framesSent, framesRecv, bytesSent, bytesRecv, writes    atomic.Uint64
	queueFull, dropped, oversized, malformed, helloRejected atomic.Uint64
	tlsRejected, notMember, sendsRefused                    atomic.Uint64
	linksUp, linksDown                                      atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		FramesSent: c.framesSent.Load(), FramesReceived: c.framesRecv.Load(),
		BytesSent: c.bytesSent.Load(), BytesReceived: c.bytesRecv.Load(),
		Writes: c.writes.Load(), QueueFull: c.queueFull.Load(), Dropped: c.dropped.Load(),
		Oversized: c.oversized.Load(), Malformed: c.malformed.Load(),
		HelloRejected: c.helloRejected.Load(), TLSRejected: c.tlsRejected.Load(), NotMember: c.notMember.Load(),
		LinksUp: c.linksUp.Load(), LinksDown: c.linksDown.Load(),
		SendsRefused: c.sendsRefused.Load(),
	}
}

// streamWindow is the largest receive window of one stream, and
// reservedWindows the stream windows a link's connection window holds
// beyond its mail lanes: the control lane's and service streams'.
const (
	streamWindow    = 2 << 20
	reservedWindows = 4
)

// NewQUIC binds the UDP socket, starts listening and returns the running
// transport. Close stops it.
func NewQUIC(cfg Config) (*QUIC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	key := cfg.StatelessResetKey
	if key == nil {
		k, err := StatelessResetKeyFrom(cfg.Certificate)
		if err != nil {
			return nil, err
		}
		key = &k
	}
	t := &QUIC{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.Name),
		links:    make(map[string]*link),
		services: make(map[string]*streamListener),
	}
	t.rejects = ratelog.New(t.log, slog.LevelWarn, "wire: inbound connections refused", cfg.RejectLogInterval, cfg.Clock.Now)
	t.notMembers = ratelog.New(t.log, slog.LevelInfo, "wire: links refused to peers that are not members", cfg.RejectLogInterval, cfg.Clock.Now)
	t.badFrames = ratelog.New(t.log, slog.LevelWarn, "wire: bad inbound frames, lane reset", cfg.RejectLogInterval, cfg.Clock.Now)
	t.refusals = ratelog.New(t.log, slog.LevelWarn, "wire: the kernel refused to send to a peer (EPERM: a firewall rule drops this node's traffic?); counted as lost", cfg.RejectLogInterval, cfg.Clock.Now)
	t.events.init(cfg.Events)
	if cfg.PacketConn != nil {
		t.udp = cfg.PacketConn
	} else {
		udp, err := net.ListenPacket("udp", cfg.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("wire: listen %s: %w", cfg.ListenAddr, err)
		}
		t.udp, t.ownUDP = udp, true
	}
	srk := quic.StatelessResetKey(*key)
	t.tr = &quic.Transport{Conn: dropRefusedSends(t.udp, t.sendRefused), StatelessResetKey: &srk}
	t.qconf = &quic.Config{
		HandshakeIdleTimeout: cfg.HandshakeTimeout,
		MaxIdleTimeout:       cfg.IdleTimeout,
		KeepAlivePeriod:      cfg.KeepAlivePeriod,
		// The Hello stream's slot is free again once the Hello is done,
		// before any service stream: MaxStreams is the peer's bound.
		MaxIncomingStreams:    int64(cfg.MaxStreams),
		MaxIncomingUniStreams: 2 * (1 + MaxMailLanes), // lanes, plus room to reopen reset ones
		Allow0RTT:             false,
		// QUIC's connection window is shared by every stream of the link,
		// and quic-go grows windows only as the application reads. With
		// its defaults (512 KiB per stream, 768 KiB per connection at
		// first) two mail lanes whose reader is behind took the whole
		// connection window and stopped the control lane too. Here the
		// windows start at their maximum, and mail lanes at their full
		// stream windows leave room for the control lane and a few
		// service streams (ControlPlaneImmunity; every node of a cluster
		// is expected to run the same MailLanes). Buffers are allocated
		// only as data arrives.
		InitialStreamReceiveWindow:     streamWindow,
		MaxStreamReceiveWindow:         streamWindow,
		InitialConnectionReceiveWindow: uint64(cfg.MailLanes+reservedWindows) * streamWindow,
		MaxConnectionReceiveWindow:     uint64(cfg.MailLanes+reservedWindows) * streamWindow,
	}
	cert := cfg.Certificate
	t.creds.Store(&credentials{cert: &cert, pool: cfg.CAs})
	ln, err := t.tr.Listen(serverTLS(t.creds.Load, cfg.Clock.Now, func(err error) {
		t.st.tlsRejected.Add(1)
		t.rejects.Note(causeTLSRejected, slog.Any(logErr, err))
	}), t.qconf)
	if err != nil {
		t.tr.Close()
		if t.ownUDP {
			t.udp.Close()
		}
		return nil, fmt.Errorf("wire: listen: %w", err)
	}
	t.ln = ln
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.wg.Add(2)
	go t.acceptLoop()
	go func() { defer t.wg.Done(); t.events.run(t.ctx) }()
	return t, nil
}

// Name implements Transport.
func (t *QUIC) Name() string { return t.cfg.Name }

// Addr is the bound UDP address.
func (t *QUIC) Addr() net.Addr { return t.udp.LocalAddr() }

// Stats returns the transport's counters.
func (t *QUIC) Stats() Stats { return t.st.snapshot() }

// Close implements Transport.
func (t *QUIC) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.shut.Store(true)
	links := make([]*link, 0, len(t.links))
	for _, l := range t.links {
		links = append(links, l)
	}
	svcs := t.services
	t.services = map[string]*streamListener{}
	t.mu.Unlock()

	t.cancel()
	for _, l := range links {
		l.mu.Lock()
		s := l.sess
		l.mu.Unlock()
		if s != nil {
			s.conn.CloseWithError(closeShutdown, "shutdown")
		}
	}
	for _, sl := range svcs {
		sl.shut()
	}
	t.ln.Close()
	t.tr.Close()
	if t.ownUDP {
		t.udp.Close()
	}
	t.wg.Wait()
	return nil
}

// SetCredentials rotates the node certificate and the CA pool. New
// connections (dialed or accepted) use them at once; established links
// keep the identity they were set up with until they reconnect. The
// certificate must still name this node.
func (t *QUIC) SetCredentials(cert tls.Certificate, cas *x509.CertPool) error {
	if len(cert.Certificate) == 0 || cert.PrivateKey == nil || cas == nil {
		return errors.New("wire: SetCredentials needs a certificate with its key and a CA pool")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("wire: SetCredentials: %w", err)
	}
	if !certHasName(leaf, t.cfg.Name) {
		return fmt.Errorf("wire: certificate names %q, node is %q", certName(leaf), t.cfg.Name)
	}
	t.creds.Store(&credentials{cert: &cert, pool: cas})
	return nil
}

// Connect returns once a link to peer is up, dialing the address Resolve
// gives for it if there is none: peer then proved its name with a
// certificate of the cluster CA over mutual TLS (whichever side dialed).
// It returns ErrUnavailable while a failed dial backs off and when ctx
// ends first, ErrClosed after Close. Safe for concurrent use.
func (t *QUIC) Connect(ctx context.Context, peer string) error {
	l, err := t.link(peer)
	if err != nil {
		return err
	}
	_, err = l.await(ctx)
	return err
}

// await returns the link's session, dialing if there is none, or the
// error that ended the dial (the back-off's, once it failed).
func (l *link) await(ctx context.Context) (*session, error) {
	for {
		up, attempt, err := l.ensure()
		if err != nil {
			return nil, err
		}
		select {
		case <-up:
			l.mu.Lock()
			s := l.sess
			l.mu.Unlock()
			if s != nil {
				return s, nil
			}
			// It went down again: the loop sees what came of it.
		case <-attempt: // nil (blocks) unless this node is dialing
			// The dial ended; the loop sees its outcome: a session,
			// the back-off's error, or a new attempt to wait for.
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, l.peer, ctx.Err())
		case <-l.t.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// sendRefused counts a datagram to to that the kernel refused to send.
func (t *QUIC) sendRefused(to net.Addr) {
	t.st.sendsRefused.Add(1)
	t.refusals.Note(to.String())
}

// Redial ends the dial back-off of the link to peer and dials it now,
// unless the link is up or a dial runs. Call it when something other than
// the link says the peer is reachable again, such as gossip declaring it
// alive after a partition: the back-off grew while it was cut off (up to
// Config.BackoffMax), and the link would otherwise come back only when it
// ran out.
func (t *QUIC) Redial(peer string) {
	t.mu.Lock()
	l := t.links[peer]
	t.mu.Unlock()
	if l == nil {
		return // no link yet: the first send dials at once
	}
	l.mu.Lock()
	l.failures = 0
	l.nextAttempt = time.Time{}
	l.mu.Unlock()
	_, _, _ = l.ensure()
}

// Disconnect implements Transport.
func (t *QUIC) Disconnect(peer string) {
	t.mu.Lock()
	l := t.links[peer]
	t.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	s := l.sess
	l.mu.Unlock()
	if s != nil {
		// The session's watcher reports the link down.
		s.conn.CloseWithError(closeDisconnect, "disconnected")
	}
}

// Send implements Transport.
func (t *QUIC) Send(peer string, key uint64, frame []byte) error {
	return t.send(peer, MailLane(key, t.cfg.MailLanes), frame)
}

// SendControl implements Transport.
func (t *QUIC) SendControl(peer string, frame []byte) error {
	return t.send(peer, ControlLane, frame)
}

func (t *QUIC) send(peer string, ln Lane, frame []byte) error {
	return t.sendWait(nil, peer, ln, frame)
}

// SendWait is Send that, instead of returning ErrQueueFull, waits until
// the lane has room or ctx ends (then it returns ErrQueueFull wrapped with
// the context's error). For bulk producers such as state transfer, which
// want backpressure rather than refusal.
func (t *QUIC) SendWait(ctx context.Context, peer string, key uint64, frame []byte) error {
	return t.sendWait(ctx, peer, MailLane(key, t.cfg.MailLanes), frame)
}

// SendControlWait is SendWait on the control lane.
func (t *QUIC) SendControlWait(ctx context.Context, peer string, frame []byte) error {
	return t.sendWait(ctx, peer, ControlLane, frame)
}

// sendWait queues frame; a nil ctx means do not wait for room.
func (t *QUIC) sendWait(ctx context.Context, peer string, ln Lane, frame []byte) error {
	if len(frame) > t.cfg.MaxFrameSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, len(frame), t.cfg.MaxFrameSize)
	}
	l, err := t.link(peer)
	if err != nil {
		return err
	}
	q := l.lanes[ln]
	for attempt := 0; ; {
		q.mu.Lock()
		if !q.open {
			q.mu.Unlock()
			if attempt > 0 {
				return fmt.Errorf("%w: %s: link closed", ErrUnavailable, peer)
			}
			attempt++
			if _, _, err := l.ensure(); err != nil {
				return err
			}
			continue
		}
		if len(q.buf) > 0 && len(q.buf)+len(frame) > t.cfg.LaneQueueBytes {
			if ctx == nil {
				q.mu.Unlock()
				t.st.queueFull.Add(1)
				return ErrQueueFull
			}
			if q.space == nil {
				q.space = make(chan struct{})
			}
			space := q.space
			q.mu.Unlock()
			select {
			case <-space:
				continue
			case <-ctx.Done():
				t.st.queueFull.Add(1)
				return fmt.Errorf("%w: %w", ErrQueueFull, ctx.Err())
			case <-t.ctx.Done():
				return ErrClosed
			}
		}
		q.buf = appendFrame(q.buf, frame)
		q.frames++
		wake := q.wake
		q.mu.Unlock()
		if wake != nil {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		return nil
	}
}

// link returns the link to peer, creating it.
func (t *QUIC) link(peer string) (*link, error) {
	if tab := t.linkTab.Load(); tab != nil {
		if l := (*tab)[peer]; l != nil {
			if t.shut.Load() {
				return nil, ErrClosed
			}
			return l, nil
		}
	}
	if peer == t.cfg.Name {
		return nil, ErrSelf
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	l := t.links[peer]
	if l == nil {
		if err := ValidateNodeName(peer); err != nil {
			return nil, err
		}
		l = newLink(t, peer)
		t.links[peer] = l
		tab := maps.Clone(t.links)
		t.linkTab.Store(&tab)
	}
	return l, nil
}

// startGo runs f in a goroutine owned by the transport unless it is
// closed.
func (t *QUIC) startGo(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

func (t *QUIC) acceptLoop() {
	defer t.wg.Done()
	for {
		conn, err := t.ln.Accept(t.ctx)
		if err != nil {
			return
		}
		if !t.startGo(func() { t.handshakeIn(conn) }) {
			conn.CloseWithError(closeShutdown, "shutdown")
			return
		}
	}
}

// readAllLimited reads r to EOF, failing beyond limit bytes.
func readAllLimited(r io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, errBadHello
	}
	return b, nil
}

// handshakeIn runs the acceptor side of the Hello exchange. Nothing from
// the connection is read or delivered before it installs a session.
func (t *QUIC) handshakeIn(conn *quic.Conn) {
	// The certificate verified during the handshake names the peer; the
	// name a Hello claims is only logged as a claim.
	var certified string
	if pc := conn.ConnectionState().TLS.PeerCertificates; len(pc) > 0 {
		certified = certName(pc[0])
	}
	note := func(reason string, attrs ...slog.Attr) {
		t.st.helloRejected.Add(1)
		t.rejects.Note(causeHelloRejected, append([]slog.Attr{slog.String("remote", conn.RemoteAddr().String()),
			slog.String("certificate", certified), slog.String("reason", reason)}, attrs...)...)
	}
	reject := func(reason string, err error) {
		note(reason, slog.Any(logErr, err))
		conn.CloseWithError(closeBadHello, reason)
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.HandshakeTimeout)
	defer cancel()
	hs, err := conn.AcceptStream(ctx)
	if err != nil {
		reject("no hello stream", err)
		return
	}
	hs.SetReadDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	raw, err := readAllLimited(hs, maxHelloSize)
	if err != nil {
		reject("hello unreadable", err)
		return
	}
	body, err := singleFrame(raw)
	if err != nil {
		reject("hello malformed", err)
		return
	}
	h, err := decodeHello(body)
	if err != nil {
		reject("hello malformed", err)
		return
	}
	if err := ValidateNodeName(h.Name); err != nil || h.Name == t.cfg.Name {
		reject("hello names an invalid node", err)
		return
	}
	// The name first: a peer whose certificate names another node learns
	// nothing, and no line names its claim as the peer.
	peerCerts := conn.ConnectionState().TLS.PeerCertificates
	if len(peerCerts) == 0 || !certHasName(peerCerts[0], h.Name) {
		reject("hello name does not match certificate", fmt.Errorf("%w: certificate names %q, hello claims %q", ErrBadCertificate, certified, h.Name))
		return
	}
	me := Hello{Version: ProtocolVersion, Name: t.cfg.Name, ManifestDigest: t.cfg.ManifestDigest}
	if h.Version != ProtocolVersion {
		note("unsupported protocol version", slog.String(logPeer, h.Name), slog.Uint64("version", h.Version))
		answer(ctx, conn, hs, HelloStatusRejected, me, closeBadHello, "unsupported protocol version")
		return
	}
	if t.cfg.Admit != nil {
		if err := t.cfg.Admit(h.Name); err != nil {
			// Not counted as a bad Hello: a node that joins may dial a
			// peer before gossip brought it there, and is refused once.
			t.st.notMember.Add(1)
			t.notMembers.Note(causeNotMember, slog.String("remote", conn.RemoteAddr().String()),
				slog.String(logPeer, h.Name), slog.Any(logErr, err))
			answer(ctx, conn, hs, HelloStatusNotMember, me, closeBadHello, "not a member")
			return
		}
	}
	l, err := t.link(h.Name)
	if err != nil {
		conn.CloseWithError(closeShutdown, "shutdown")
		return
	}
	advertised := t.advertises(ctx, h.Name, conn.RemoteAddr())

	l.mu.Lock()
	// A second process holding a valid certificate for a peer's name (a
	// copied data dir, a stolen key) would otherwise take over that
	// peer's link, and the mail and raft traffic on it, from the real
	// node. So a connection replaces a live session only when it comes
	// from the same address as that session, or from the address the
	// peer advertises; otherwise the live session stays, until it ends.
	if old := l.sess; old != nil && old.conn.Context().Err() == nil &&
		!sameUDPAddr(old.conn.RemoteAddr(), conn.RemoteAddr()) && !advertised {
		from := old.conn.RemoteAddr().String()
		l.mu.Unlock()
		reject("name already linked from another address", fmt.Errorf("%s is linked from %s", h.Name, from))
		return
	}
	// Tie-break for simultaneous dials: the node with the lower name keeps
	// the connection it dialed. A peer dials only when it has no link, so
	// any other existing session is stale and the new one replaces it.
	if t.cfg.Name < h.Name && (l.dialing || (l.sess != nil && l.sess.dialer == t.cfg.Name)) {
		l.mu.Unlock()
		answer(ctx, conn, hs, HelloStatusDuplicate, me, closeDuplicate, "duplicate link")
		return
	}
	if _, err := hs.Write(appendFrame(nil, encodeHelloReply(HelloStatusAccepted, me))); err != nil {
		l.mu.Unlock()
		conn.CloseWithError(closeBadHello, "hello reply failed")
		return
	}
	hs.Close()
	l.installLocked(conn, h.Name, h)
	l.mu.Unlock()
}

// answer sends a Hello reply that installs no session and lets the
// dialer close the connection when it reads it, so the answer is not
// lost; if the dialer does not within ctx, it closes with code.
func answer(ctx context.Context, conn *quic.Conn, hs *quic.Stream, status HelloStatus, me Hello, code quic.ApplicationErrorCode, reason string) {
	hs.Write(appendFrame(nil, encodeHelloReply(status, me)))
	hs.Close()
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		conn.CloseWithError(code, reason)
	}
}

// advertises reports whether addr is the address Resolve gives for peer.
func (t *QUIC) advertises(ctx context.Context, peer string, addr net.Addr) bool {
	want, err := t.cfg.Resolve(ctx, peer)
	if err != nil {
		return false
	}
	ua, err := net.ResolveUDPAddr("udp", want)
	return err == nil && sameUDPAddr(ua, addr)
}

// sameUDPAddr compares two UDP addresses by IP and port.
func sameUDPAddr(a, b net.Addr) bool {
	ua, ok1 := a.(*net.UDPAddr)
	ub, ok2 := b.(*net.UDPAddr)
	if !ok1 || !ok2 {
		return a.String() == b.String()
	}
	return ua.Port == ub.Port && ua.IP.Equal(ub.IP)
}

// link is the state kept for one peer. Its lanes (send queues) outlive
// connections; sessions come and go.
type link struct {
	t     *QUIC
	peer  string
	lanes []*lane

	mu          sync.Mutex
	sess        *session
	dialing     bool
	failures    int
	nextAttempt time.Time
	lastErr     error
	up          chan struct{} // closed while a session is installed
	attempt     chan struct{} // closed when the running dial attempt ends

	// cur mirrors sess for the readers, and recv serializes delivery per
	// inbound lane across sessions: a reader delivers only while its
	// session is current, so frames still buffered from a replaced
	// connection never overtake frames of its successor.
	cur  atomic.Pointer[session]
	recv [1 + MaxMailLanes]sync.Mutex
}

func newLink(t *QUIC, peer string) *link {
	l := &link{t: t, peer: peer, up: make(chan struct{})}
	l.lanes = make([]*lane, 1+t.cfg.MailLanes)
	for i := range l.lanes {
		l.lanes[i] = &lane{id: Lane(i)}
	}
	return l
}

// ensure makes sure the link has or is getting a session. It returns a
// channel closed once a session is up and, while this node dials, one
// closed when that dial ends (nil otherwise), both read under one lock
// so that a dial ending at once is not missed; or ErrUnavailable during
// back-off.
func (l *link) ensure() (up, attempt <-chan struct{}, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess != nil || l.dialing {
		return l.up, l.attempt, nil
	}
	if now := l.t.cfg.Clock.Now(); now.Before(l.nextAttempt) {
		err := fmt.Errorf("%w: %s: retry after %s", ErrUnavailable, l.peer, l.nextAttempt.Sub(now).Round(time.Millisecond))
		if l.lastErr != nil { // its identity too: ErrNotMember says why
			err = fmt.Errorf("%w: %w", err, l.lastErr)
		}
		return nil, nil, err
	}
	if !l.t.startGo(l.dial) {
		return nil, nil, ErrClosed
	}
	l.dialing = true
	l.attempt = make(chan struct{})
	l.setLanesLocked(nil, true)
	return l.up, l.attempt, nil
}

// setLanesLocked sets every lane's owner and open flag; when it closes a
// lane, its queued frames are dropped. l.mu must be held.
func (l *link) setLanesLocked(owner *session, open bool) {
	for _, q := range l.lanes {
		q.mu.Lock()
		q.open = open
		q.owner = owner
		q.wake = nil
		if owner != nil {
			q.wake = make(chan struct{}, 1)
			if len(q.buf) > 0 {
				q.wake <- struct{}{}
			}
		}
		if !open && q.space != nil {
			close(q.space)
			q.space = nil
		}
		if !open && q.frames > 0 {
			l.t.st.dropped.Add(uint64(q.frames))
			q.buf = q.buf[:0]
			q.frames = 0
		}
		q.mu.Unlock()
	}
}

func (l *link) backoff() time.Duration {
	d := l.t.cfg.BackoffMin
	for i := 1; i < l.failures && d < l.t.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, l.t.cfg.BackoffMax)
}

// dial runs one dialer-side attempt (handshake included) in a transport
// goroutine.
func (l *link) dial() {
	t := l.t
	err := l.dialOnce()
	l.mu.Lock()
	l.dialing = false
	if l.attempt != nil {
		close(l.attempt)
		l.attempt = nil
	}
	if err == nil || l.sess != nil {
		l.mu.Unlock()
		return
	}
	l.failures++
	l.lastErr = err
	l.nextAttempt = t.cfg.Clock.Now().Add(l.backoff())
	l.setLanesLocked(nil, false)
	l.mu.Unlock()
	t.log.LogAttrs(t.ctx, slog.LevelDebug, "wire: dial failed", slog.String(logPeer, l.peer), slog.Any(logErr, err))
	t.events.push(LinkEvent{Peer: l.peer, Up: false, Err: err})
}

func (l *link) dialOnce() error {
	t := l.t
	ctx, cancel := context.WithTimeout(t.ctx, 2*t.cfg.HandshakeTimeout)
	defer cancel()
	addr, err := t.cfg.Resolve(ctx, l.peer)
	if err != nil {
		return fmt.Errorf("%w: resolve %s: %v", ErrUnavailable, l.peer, err)
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fmt.Errorf("%w: resolve %s (%s): %v", ErrUnavailable, l.peer, addr, err)
	}
	conn, err := t.tr.Dial(ctx, ua, clientTLS(t.creds.Load, t.cfg.Clock.Now, l.peer), t.qconf)
	if err != nil {
		return fmt.Errorf("%w: dial %s: %v", ErrUnavailable, l.peer, err)
	}
	fail := func(code quic.ApplicationErrorCode, err error) error {
		conn.CloseWithError(code, "handshake failed")
		return fmt.Errorf("%w: hello with %s: %v", ErrUnavailable, l.peer, err)
	}
	hs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(closeBadHello, err)
	}
	me := Hello{Version: ProtocolVersion, Name: t.cfg.Name, ManifestDigest: t.cfg.ManifestDigest}
	if _, err := hs.Write(appendFrame(nil, encodeHello(me))); err != nil {
		return fail(closeBadHello, err)
	}
	hs.Close()
	if dl, ok := ctx.Deadline(); ok {
		hs.SetReadDeadline(dl)
	}
	raw, err := readAllLimited(hs, maxHelloSize+binaryMaxVarint)
	if err != nil {
		return fail(closeBadHello, err)
	}
	body, err := singleFrame(raw)
	if err != nil {
		return fail(closeBadHello, err)
	}
	status, h, err := decodeHelloReply(body)
	if err != nil {
		return fail(closeBadHello, err)
	}
	if h.Name != l.peer {
		return fail(closeBadHello, fmt.Errorf("peer answered as %q", h.Name))
	}
	switch status {
	case HelloStatusAccepted:
	case HelloStatusDuplicate:
		// The peer's own dial wins; wait for it to arrive.
		conn.CloseWithError(closeDuplicate, "duplicate link")
		l.mu.Lock()
		up := l.up
		l.mu.Unlock()
		select {
		case <-up:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: lost the dial tie-break and its link never came", ErrUnavailable, l.peer)
		}
	case HelloStatusNotMember:
		conn.CloseWithError(closeBadHello, "not a member")
		return fmt.Errorf("%w: %s", ErrNotMember, l.peer)
	default:
		return fail(closeBadHello, fmt.Errorf("peer refused the hello (%v; this node speaks version %d)", status, ProtocolVersion))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.ctx.Err() != nil {
		conn.CloseWithError(closeShutdown, "shutdown")
		return ErrClosed
	}
	l.installLocked(conn, t.cfg.Name, h)
	return nil
}

const binaryMaxVarint = 10

// session is one established, verified QUIC connection of a link.
type session struct {
	l      *link
	conn   *quic.Conn
	dialer string
	hello  Hello
}

// installLocked makes conn the link's session, replacing any older one,
// and starts its goroutines. l.mu must be held.
func (l *link) installLocked(conn *quic.Conn, dialer string, h Hello) {
	t := l.t
	s := &session{l: l, conn: conn, dialer: dialer, hello: h}
	old := l.sess
	if old != nil {
		l.sess = nil
		old.conn.CloseWithError(closeReplaced, "replaced by a newer link")
		t.st.linksDown.Add(1)
		t.events.push(LinkEvent{Peer: l.peer, Up: false, Err: errors.New("wire: link replaced")})
		l.up = make(chan struct{})
	}
	l.sess = s
	l.cur.Store(s)
	l.dialing = false
	l.failures = 0
	l.lastErr = nil
	l.nextAttempt = time.Time{}
	l.setLanesLocked(s, true)
	ok := true
	for _, q := range l.lanes {
		wq := q
		ok = ok && t.startGo(func() { s.writer(wq) })
	}
	ok = ok && t.startGo(s.acceptUni)
	ok = ok && t.startGo(s.acceptBidi)
	ok = ok && t.startGo(s.watch)
	if !ok {
		conn.CloseWithError(closeShutdown, "shutdown")
	}
	close(l.up)
	t.st.linksUp.Add(1)
	t.log.LogAttrs(t.ctx, slog.LevelDebug, "wire: link up", slog.String(logPeer, l.peer), slog.String("dialer", dialer))
	t.events.push(LinkEvent{Peer: l.peer, Up: true, Version: h.Version, ManifestDigest: h.ManifestDigest})
}

// watch tears the session down when its connection ends.
func (s *session) watch() {
	t := s.l.t
	select {
	case <-s.conn.Context().Done():
	case <-t.ctx.Done():
		s.conn.CloseWithError(closeShutdown, "shutdown")
	}
	err := context.Cause(s.conn.Context())
	l := s.l
	l.mu.Lock()
	if l.sess != s {
		l.mu.Unlock()
		return
	}
	l.sess = nil
	l.cur.Store(nil)
	l.up = make(chan struct{})
	l.setLanesLocked(nil, false)
	l.mu.Unlock()
	t.st.linksDown.Add(1)
	t.log.LogAttrs(t.ctx, slog.LevelDebug, "wire: link down", slog.String(logPeer, l.peer), slog.Any(logErr, err))
	t.events.push(LinkEvent{Peer: l.peer, Up: false, Err: fmt.Errorf("%w: %s: %s (%v)", ErrUnavailable, l.peer, closeReason(err), err)})
}

// closeReason says in words why a link's connection ended (err is
// quic-go's), for the errors of the asks the link's end fails.
func closeReason(err error) string {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) {
		here := !ae.Remote
		switch uint64(ae.ErrorCode) {
		case closeDisconnect:
			if here {
				return "this node dropped the link: it takes the peer for failed or down"
			}
			return "the peer dropped the link: it takes this node for failed or down"
		case closeShutdown:
			if here {
				return "this node is shutting down"
			}
			return "the peer is shutting down"
		case closeReplaced:
			return "a newer link to the same peer replaced it"
		case closeDuplicate:
			return "a link dialled at the same time from the other side won"
		case closeBadHello:
			return "the handshake was refused (the hello did not match the certificate)"
		}
	}
	var idle *quic.IdleTimeoutError
	if errors.As(err, &idle) {
		return "nothing heard from the peer within the idle timeout"
	}
	return "connection closed"
}

// writer drains one lane's queue into one QUIC stream of the session:
// every wake-up takes everything queued so far and hands it to QUIC in one
// write, so frames coalesce under load while an idle lane flushes a lone
// frame at once.
func (s *session) writer(q *lane) {
	t := s.l.t
	ctx := s.conn.Context()
	var st *quic.SendStream
	spare := make([]byte, 0, t.cfg.WriteBufferSize)
	for {
		q.mu.Lock()
		if q.owner != s {
			// Replaced or torn down: the next session has its own writer.
			q.mu.Unlock()
			return
		}
		wake := q.wake
		var batch []byte
		var frames int
		if len(q.buf) > 0 {
			batch, frames = q.buf, q.frames
			q.buf, q.frames = spare[:0], 0
			if q.space != nil {
				close(q.space)
				q.space = nil
			}
		}
		q.mu.Unlock()
		if batch == nil {
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if st == nil {
			var err error
			st, err = s.conn.OpenUniStreamSync(ctx)
			if err != nil {
				t.st.dropped.Add(uint64(frames))
				return
			}
			if _, err := st.Write([]byte{byte(q.id)}); err != nil {
				st = nil
				t.st.dropped.Add(uint64(frames))
				spare = batch
				continue
			}
		}
		if _, err := st.Write(batch); err != nil {
			t.st.dropped.Add(uint64(frames))
			if ctx.Err() != nil {
				return
			}
			// The peer reset this lane (bad frame on its side): reopen it.
			t.log.LogAttrs(t.ctx, slog.LevelWarn, "wire: lane stream reset by peer",
				slog.String(logPeer, s.l.peer), slog.Int(logLane, int(q.id)), slog.Any(logErr, err))
			st.CancelWrite(quic.StreamErrorCode(CodeClosing))
			st = nil
		} else {
			t.st.writes.Add(1)
			t.st.framesSent.Add(uint64(frames))
			t.st.bytesSent.Add(uint64(len(batch)))
		}
		if cap(batch) > 4*t.cfg.WriteBufferSize && len(batch) < t.cfg.WriteBufferSize {
			batch = make([]byte, 0, t.cfg.WriteBufferSize) // the burst is over: let its buffer go
		}
		spare = batch[:0]
	}
}

// acceptUni serves the peer's lane streams.
func (s *session) acceptUni() {
	t := s.l.t
	for {
		st, err := s.conn.AcceptUniStream(t.ctx)
		if err != nil {
			return
		}
		if !t.startGo(func() { s.readLane(st) }) {
			st.CancelRead(quic.StreamErrorCode(CodeClosing))
			return
		}
	}
}

// readLane delivers the frames of one inbound lane stream.
func (s *session) readLane(st *quic.ReceiveStream) {
	t := s.l.t
	var id [1]byte
	if _, err := io.ReadFull(st, id[:]); err != nil {
		st.CancelRead(quic.StreamErrorCode(CodeBadLane))
		return
	}
	if int(id[0]) > MaxMailLanes {
		t.st.malformed.Add(1)
		st.CancelRead(quic.StreamErrorCode(CodeBadLane))
		return
	}
	ln := Lane(id[0])
	fr := newFrameReader(st, t.cfg.WriteBufferSize, t.cfg.MaxFrameSize)
	batching := t.cfg.HandleBatch != nil
	run := make([][]byte, 0, 1)
	if batching {
		run = make([][]byte, 0, MaxBatchFrames)
	}
	for {
		frame, err := fr.next()
		// A run is the frame just read and every one after it that is
		// already whole in the reader's buffer: they stay valid together.
		run = append(run[:0], frame)
		for err == nil && batching && len(run) < MaxBatchFrames && fr.ready() {
			if frame, err = fr.next(); err == nil {
				run = append(run, frame)
			}
		}
		if err != nil {
			run = run[:len(run)-1] // the frame that failed is not one
		}
		if len(run) > 0 && !s.deliverRun(st, ln, run) {
			return
		}
		if err != nil {
			code, cause := uint64(0), ""
			switch {
			case errors.Is(err, errFrameTooLarge):
				code, cause = CodeFrameTooLarge, causeFrameTooLarge
				t.st.oversized.Add(1)
			case errors.Is(err, errBadLength), errors.Is(err, io.ErrUnexpectedEOF):
				code, cause = CodeMalformedFrame, causeFrameMalformed
				t.st.malformed.Add(1)
			}
			if cause != "" {
				t.badFrames.Note(cause, slog.String(logPeer, s.l.peer), slog.Int(logLane, int(ln)), slog.Any(logErr, err))
				st.CancelRead(quic.StreamErrorCode(code))
			}
			return
		}
	}
}

// deliverRun hands a run of frames of one lane to the handler, under the
// lane's receive lock. It reports whether the reader goes on; when not,
// it has reset the stream.
func (s *session) deliverRun(st *quic.ReceiveStream, ln Lane, run [][]byte) bool {
	t := s.l.t
	mu := &s.l.recv[ln]
	mu.Lock()
	if s.l.cur.Load() != s {
		mu.Unlock()
		st.CancelRead(quic.StreamErrorCode(CodeClosing))
		return false
	}
	var bytes int
	for _, f := range run {
		bytes += len(f)
	}
	t.st.framesRecv.Add(uint64(len(run)))
	t.st.bytesRecv.Add(uint64(bytes))
	var err error
	if t.cfg.HandleBatch != nil {
		err = t.cfg.HandleBatch(s.l.peer, ln, run)
	} else {
		err = t.cfg.Handler(s.l.peer, ln, run[0])
	}
	mu.Unlock()
	if err != nil {
		t.st.malformed.Add(1)
		t.badFrames.Note(causeFrameRejected, slog.String(logPeer, s.l.peer), slog.Int(logLane, int(ln)), slog.Any(logErr, err))
		st.CancelRead(quic.StreamErrorCode(CodeMalformedFrame))
		return false
	}
	return true
}

// lane is one send queue of a link.
type lane struct {
	id Lane

	mu     sync.Mutex
	open   bool     // accepting frames (session up or being dialed)
	owner  *session // the session whose writer drains it (nil while dialing)
	wake   chan struct{}
	space  chan struct{} // closed when the writer takes a batch (SendWait waiters)
	buf    []byte
	frames int
}

// eventQueue delivers link events in order from one goroutine, so the
// callback never runs under a transport lock and may call back into it.
type eventQueue struct {
	fn   func(LinkEvent)
	mu   sync.Mutex
	q    []LinkEvent
	wake chan struct{}
}

func (e *eventQueue) init(fn func(LinkEvent)) {
	e.fn = fn
	e.wake = make(chan struct{}, 1)
}

func (e *eventQueue) push(ev LinkEvent) {
	if e.fn == nil {
		return
	}
	e.mu.Lock()
	e.q = append(e.q, ev)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *eventQueue) run(ctx context.Context) {
	for {
		select {
		case <-e.wake:
		case <-ctx.Done():
			return
		}
		e.mu.Lock()
		evs := e.q
		e.q = nil
		e.mu.Unlock()
		for _, ev := range evs {
			e.fn(ev)
		}
	}
}
