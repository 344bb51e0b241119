package wire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// MemNetwork is an in-memory network of Mem transports for tests of the
// layers above wire: same Transport contract as QUIC, plus fault
// injection (partitions, random drops, delay). Randomness is seeded so a
// failing run replays.
type MemNetwork struct {
	mu          sync.Mutex
	nodes       map[string]*Mem
	up          map[[2]string]bool // unordered pair -> link established
	partitioned map[[2]string]bool
	dropRate    float64
	delay       time.Duration
	rng         *rand.Rand
	clock       Clock
}

// NewMemNetwork returns an empty network whose random drops follow seed.
func NewMemNetwork(seed uint64, clock Clock) *MemNetwork {
	if clock == nil {
		clock = RealClock()
	}
	return &MemNetwork{
		nodes:       map[string]*Mem{},
		up:          map[[2]string]bool{},
		partitioned: map[[2]string]bool{},
		rng:         rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		clock:       clock,
	}
}

func pairOf(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// MemConfig configures one node of a MemNetwork; the fields mean what
// they mean in Config.
type MemConfig struct {
	Name           string
	Handler        Handler
	Events         func(LinkEvent)
	ManifestDigest []byte
	MailLanes      int
	MaxFrameSize   int
	LaneQueueBytes int
	Logger         *slog.Logger
}

// Join adds a node to the network.
func (n *MemNetwork) Join(cfg MemConfig) (*Mem, error) {
	if err := ValidateNodeName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Handler == nil {
		return nil, errors.New("wire: MemConfig.Handler is required")
	}
	d := DefaultConfig()
	if cfg.MailLanes == 0 {
		cfg.MailLanes = d.MailLanes
	}
	if cfg.MailLanes < 1 || cfg.MailLanes > MaxMailLanes {
		return nil, fmt.Errorf("wire: MailLanes %d out of 1..%d", cfg.MailLanes, MaxMailLanes)
	}
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = d.MaxFrameSize
	}
	if cfg.LaneQueueBytes == 0 {
		cfg.LaneQueueBytes = d.LaneQueueBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Mem{net: n, cfg: cfg, links: map[string]*memLink{}, services: map[string]*streamListener{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.events.init(cfg.Events)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes[cfg.Name] != nil {
		m.cancel()
		return nil, fmt.Errorf("wire: node %q already joined", cfg.Name)
	}
	n.nodes[cfg.Name] = m
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.events.run(m.ctx) }()
	return m, nil
}

// Partition cuts the link between a and b in both directions: an
// established link goes down (both sides get a down event, queued frames
// are dropped) and sends fail with ErrUnavailable until Heal.
func (n *MemNetwork) Partition(a, b string) {
	n.mu.Lock()
	n.partitioned[pairOf(a, b)] = true
	n.downLocked(a, b, errors.New("wire: partitioned"))
	n.mu.Unlock()
}

// Heal undoes Partition(a, b).
func (n *MemNetwork) Heal(a, b string) {
	n.mu.Lock()
	delete(n.partitioned, pairOf(a, b))
	n.mu.Unlock()
}

// SetDropRate makes each frame sent from now on vanish with probability
// p (0 <= p <= 1), silently, as a lossy network would after the sender's
// queue.
func (n *MemNetwork) SetDropRate(p float64) {
	n.mu.Lock()
	n.dropRate = p
	n.mu.Unlock()
}

// SetDelay delays every frame sent from now on by d once it reaches the
// head of its lane (so FIFO holds, and delays add up behind each other).
func (n *MemNetwork) SetDelay(d time.Duration) {
	n.mu.Lock()
	n.delay = d
	n.mu.Unlock()
}

// downLocked takes the a-b link down. n.mu must be held.
func (n *MemNetwork) downLocked(a, b string, err error) {
	p := pairOf(a, b)
	if !n.up[p] {
		return
	}
	delete(n.up, p)
	for _, x := range [][2]string{{a, b}, {b, a}} {
		if m := n.nodes[x[0]]; m != nil {
			m.dropLink(x[1])
			m.events.push(LinkEvent{Peer: x[1], Up: false, Err: fmt.Errorf("%w: %s: %v", ErrUnavailable, x[1], err)})
		}
	}
}

// connect makes sure from-to is up, reporting the peer.
func (n *MemNetwork) connect(from, to string) (*Mem, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	peer := n.nodes[to]
	if peer == nil || n.nodes[from] == nil {
		return nil, fmt.Errorf("%w: %s: no such node", ErrUnavailable, to)
	}
	p := pairOf(from, to)
	if n.partitioned[p] {
		return nil, fmt.Errorf("%w: %s: partitioned", ErrUnavailable, to)
	}
	if !n.up[p] {
		n.up[p] = true
		src := n.nodes[from]
		src.events.push(LinkEvent{Peer: to, Up: true, Version: ProtocolVersion, ManifestDigest: peer.cfg.ManifestDigest})
		peer.events.push(LinkEvent{Peer: from, Up: true, Version: ProtocolVersion, ManifestDigest: src.cfg.ManifestDigest})
	}
	return peer, nil
}

// fate decides a frame's delivery: dropped or delayed by how much.
func (n *MemNetwork) fate() (drop bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dropRate > 0 && n.rng.Float64() < n.dropRate {
		return true, 0
	}
	return false, n.delay
}

// Mem is a node of a MemNetwork.
type Mem struct {
	net    *MemNetwork
	cfg    MemConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events eventQueue

	mu       sync.Mutex
	closed   bool
	links    map[string]*memLink
	services map[string]*streamListener
}

var (
	_ Transport  = (*Mem)(nil)
	_ WaitSender = (*Mem)(nil)
)

// memLink is one direction of a link: per-lane FIFO queues, each drained
// by a goroutine of the sending node.
type memLink struct {
	peer   *Mem
	ctx    context.Context
	cancel context.CancelFunc
	lanes  []*memLane
	// conns are the link's streams not closed yet (both ends): a link
	// that goes down closes them; a stream closed before forgets itself.
	conns map[*pipeConn]struct{}
}

// memFrame is a queued frame and its fate, decided when it was sent.
type memFrame struct {
	data  []byte
	drop  bool
	delay time.Duration
}

type memLane struct {
	id    Lane
	mu    sync.Mutex
	q     []memFrame
	bytes int
	wake  chan struct{}
	space chan struct{} // closed when frames leave the queue
}

// Name implements Transport.
func (m *Mem) Name() string { return m.cfg.Name }

// Send implements Transport.
func (m *Mem) Send(peer string, key uint64, frame []byte) error {
	return m.send(peer, MailLane(key, m.cfg.MailLanes), frame)
}

// SendControl implements Transport.
func (m *Mem) SendControl(peer string, frame []byte) error {
	return m.send(peer, ControlLane, frame)
}

// memLinkConnected and memStreamOffered, when set (by tests), run in
// link between the network's connect and the link being stored, and in
// DialStream between the listener taking the stream and the link
// recording it.
var memLinkConnected, memStreamOffered atomic.Pointer[func(from, to string)]

func (m *Mem) link(peer string) (*memLink, error) {
	if peer == m.cfg.Name {
		return nil, ErrSelf
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	dst, err := m.net.connect(m.cfg.Name, peer)
	if err != nil {
		return nil, err
	}
	if f := memLinkConnected.Load(); f != nil {
		(*f)(m.cfg.Name, peer)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if l := m.links[peer]; l != nil {
		if l.peer == dst {
			return l, nil
		}
		// A link to an earlier incarnation of peer, which closed after
		// connect had found it and before this node stored the link (its
		// down event found no link to drop then).
		go m.unlinkLocked(peer)()
	}
	l := &memLink{peer: dst, lanes: make([]*memLane, 1+m.cfg.MailLanes)}
	l.ctx, l.cancel = context.WithCancel(m.ctx)
	for i := range l.lanes {
		q := &memLane{id: Lane(i), wake: make(chan struct{}, 1)}
		l.lanes[i] = q
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.deliver(l, q) }()
	}
	m.links[peer] = l
	return l, nil
}

func (m *Mem) send(peer string, ln Lane, frame []byte) error {
	return m.sendWait(nil, peer, ln, frame)
}

// SendWait implements WaitSender.
func (m *Mem) SendWait(ctx context.Context, peer string, key uint64, frame []byte) error {
	return m.sendWait(ctx, peer, MailLane(key, m.cfg.MailLanes), frame)
}

// SendControlWait implements WaitSender.
func (m *Mem) SendControlWait(ctx context.Context, peer string, frame []byte) error {
	return m.sendWait(ctx, peer, ControlLane, frame)
}

func (m *Mem) sendWait(ctx context.Context, peer string, ln Lane, frame []byte) error {
	if len(frame) > m.cfg.MaxFrameSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, len(frame), m.cfg.MaxFrameSize)
	}
	l, err := m.link(peer)
	if err != nil {
		return err
	}
	q := l.lanes[ln]
	for {
		q.mu.Lock()
		if q.bytes > 0 && q.bytes+len(frame) > m.cfg.LaneQueueBytes {
			if ctx == nil {
				q.mu.Unlock()
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
			case <-l.ctx.Done():
				return fmt.Errorf("%w: %s: link down", ErrUnavailable, peer)
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ErrQueueFull, ctx.Err())
			}
		}
		drop, delay := m.net.fate()
		q.q = append(q.q, memFrame{data: append([]byte(nil), frame...), drop: drop, delay: delay})
		q.bytes += len(frame)
		q.mu.Unlock()
		select {
		case q.wake <- struct{}{}:
		default:
		}
		return nil
	}
}

// deliver drains one lane of one direction in order.
func (m *Mem) deliver(l *memLink, q *memLane) {
	for {
		select {
		case <-q.wake:
		case <-l.ctx.Done():
			return
		}
		for {
			q.mu.Lock()
			if len(q.q) == 0 {
				q.mu.Unlock()
				break
			}
			f := q.q[0]
			q.q[0] = memFrame{}
			q.q = q.q[1:]
			q.bytes -= len(f.data)
			if q.space != nil {
				close(q.space)
				q.space = nil
			}
			q.mu.Unlock()
			if f.delay > 0 {
				select {
				case <-m.net.clock.After(f.delay):
				case <-l.ctx.Done():
					return
				}
			}
			if f.drop || l.ctx.Err() != nil {
				continue
			}
			if err := l.peer.cfg.Handler(m.cfg.Name, q.id, f.data); err != nil {
				l.peer.cfg.Logger.Warn("wire: frame rejected by handler", logPeer, m.cfg.Name, logErr, err)
			}
		}
	}
}

// dropLink stops the direction towards peer, dropping what it queued and
// closing its streams.
func (m *Mem) dropLink(peer string) {
	m.mu.Lock()
	stop := m.unlinkLocked(peer)
	m.mu.Unlock()
	stop()
}

// unlinkLocked removes the link towards peer, whose lanes stop at once,
// and returns what closes its streams (to run without m.mu). A stream
// dialed on the link after this is refused (DialStream), so none
// outlives it: a link that goes down takes its streams with it, as a
// QUIC connection does.
func (m *Mem) unlinkLocked(peer string) (closeStreams func()) {
	l := m.links[peer]
	if l == nil {
		return func() {}
	}
	delete(m.links, peer)
	l.cancel()
	conns := l.conns
	l.conns = nil
	return func() {
		for c := range conns {
			c.Close()
		}
	}
}

// Disconnect implements Transport.
func (m *Mem) Disconnect(peer string) {
	m.net.mu.Lock()
	m.net.downLocked(m.cfg.Name, peer, errors.New("wire: disconnected"))
	m.net.mu.Unlock()
}

// Close implements Transport: peers see the link go down.
func (m *Mem) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	svcs := m.services
	m.services = map[string]*streamListener{}
	m.mu.Unlock()

	n := m.net
	n.mu.Lock()
	for p := range n.up {
		if p[0] == m.cfg.Name || p[1] == m.cfg.Name {
			other := p[0]
			if other == m.cfg.Name {
				other = p[1]
			}
			n.downLocked(m.cfg.Name, other, errors.New("wire: peer closed"))
		}
	}
	delete(n.nodes, m.cfg.Name)
	n.mu.Unlock()
	for _, sl := range svcs {
		sl.shut()
	}
	m.cancel()
	m.wg.Wait()
	return nil
}

// DialStream implements Transport with an in-memory pipe.
func (m *Mem) DialStream(ctx context.Context, peer, service string) (net.Conn, error) {
	if err := validService(service); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, peer, err)
	}
	l, err := m.link(peer)
	if err != nil {
		return nil, err
	}
	dst := l.peer
	dst.mu.Lock()
	sl := dst.services[service]
	dst.mu.Unlock()
	if sl == nil {
		return nil, fmt.Errorf("%w: %s: no listener for service %q", ErrUnavailable, peer, service)
	}
	a, b := net.Pipe()
	ca := &pipeConn{Conn: a, local: nodeAddr(m.cfg.Name), remote: nodeAddr(peer)}
	cb := &pipeConn{Conn: b, local: nodeAddr(peer), remote: nodeAddr(m.cfg.Name)}
	for _, c := range []*pipeConn{ca, cb} {
		c.closed = func() {
			m.mu.Lock()
			delete(l.conns, c)
			m.mu.Unlock()
		}
	}
	if !sl.offer(cb) {
		a.Close()
		b.Close()
		return nil, fmt.Errorf("%w: %s: service %q not accepting", ErrUnavailable, peer, service)
	}
	if f := memStreamOffered.Load(); f != nil {
		(*f)(m.cfg.Name, peer)
	}
	m.mu.Lock()
	if m.links[peer] != l {
		// The link went down since: the stream goes with it.
		m.mu.Unlock()
		a.Close()
		b.Close()
		return nil, fmt.Errorf("%w: %s: link down", ErrUnavailable, peer)
	}
	if l.conns == nil {
		l.conns = map[*pipeConn]struct{}{}
	}
	l.conns[ca], l.conns[cb] = struct{}{}, struct{}{}
	m.mu.Unlock()
	return ca, nil
}

// ListenStream implements Transport.
func (m *Mem) ListenStream(service string) (net.Listener, error) {
	if err := validService(service); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.services[service] != nil {
		return nil, fmt.Errorf("wire: service %q already has a listener", service)
	}
	sl := newStreamListener(nodeAddr(m.cfg.Name), func(sl *streamListener) {
		m.mu.Lock()
		if m.services[service] == sl {
			delete(m.services, service)
		}
		m.mu.Unlock()
	})
	m.services[service] = sl
	return sl, nil
}

type pipeConn struct {
	net.Conn
	local, remote net.Addr
	closed        func() // called once, on the first Close (nil: nothing)
	once          sync.Once
}

func (c *pipeConn) Close() error {
	err := c.Conn.Close()
	if c.closed != nil {
		c.once.Do(c.closed)
	}
	return err
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }

// Connect returns once the link to peer is up (there is no handshake:
// every node of a MemNetwork is who it says it is).
func (m *Mem) Connect(ctx context.Context, peer string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, peer, err)
	}
	_, err := m.link(peer)
	return err
}
