package tempest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/membership"
)

// Identity is the certificate, not the gossip. Anyone holding the gossip
// key can join memberlist under any name and advertise any address; only
// a node with a certificate of the cluster CA for its name can complete
// a QUIC link (mutual TLS; the dialer checks that the certificate names
// the peer it dialed, the acceptor that it names the peer the Hello
// claims). So a gossip member enters placement (raft, the table, the
// bootstrap set) only once this node has a link with it under its name,
// and only while what gossip says about it (QUIC address, process) is
// still what was proven: a new address or a new process proves itself
// again. Until then peerView reports it placement.PeerUnproven.

// connector is the part of the transport the prover uses.
type connector interface {
	// Connect returns once a mutually authenticated link to peer is up.
	Connect(ctx context.Context, peer string) error
}

// proof is what a link with a peer proved: the gossip facts it held for.
type proof struct {
	addr string
	boot uint64
}

func proofOf(m membership.Member) proof { return proof{addr: m.Meta.QUICAddr, boot: m.Meta.BootID} }

// Bounds of the retry back-off for a member that has not proved itself.
const (
	proveRetryMin = 500 * time.Millisecond
	proveRetryMax = 30 * time.Second
	proveTimeout  = 10 * time.Second
)

// prover keeps the proofs of this node's gossip peers. Its methods are
// safe for concurrent use.
type prover struct {
	self    string
	conn    connector
	log     *slog.Logger
	now     func() time.Time
	changed func() // a proof was gained or lost: placement should look again

	failed atomic.Uint64 // attempts that failed

	mu      sync.Mutex
	proven  map[string]proof
	pending map[string]*attempt
}

// attempt is the state of an unproven member.
type attempt struct {
	facts    proof
	running  bool
	failures int
	next     time.Time
	warned   bool
}

func newProver(self string, conn connector, log *slog.Logger, now func() time.Time, changed func()) *prover {
	return &prover{self: self, conn: conn, log: log, now: now, changed: changed,
		proven: map[string]proof{}, pending: map[string]*attempt{}}
}

// Proven reports whether m proved its name for what gossip says about it
// now. This node is always proven.
func (p *prover) Proven(m membership.Member) bool {
	if m.Name == p.self {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	got, ok := p.proven[m.Name]
	return ok && got == proofOf(m)
}

// due forgets the proofs of departed members and of members whose gossip
// facts changed, and returns the members to try now (marking them
// running). It is the decision core of the prove loop.
func (p *prover) due(members []membership.Member) []membership.Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	lost := false
	live := map[string]bool{}
	var out []membership.Member
	for _, m := range members {
		if m.Name == p.self || m.Status.Gone() || m.MetaErr != nil {
			continue
		}
		live[m.Name] = true
		facts := proofOf(m)
		if got, ok := p.proven[m.Name]; ok {
			if got == facts {
				continue
			}
			delete(p.proven, m.Name)
			lost = true
		}
		a := p.pending[m.Name]
		if a == nil || a.facts != facts {
			a = &attempt{facts: facts}
			p.pending[m.Name] = a
		}
		if a.running || now.Before(a.next) {
			continue
		}
		a.running = true
		out = append(out, m)
	}
	for name := range p.proven {
		if !live[name] {
			delete(p.proven, name)
			lost = true
		}
	}
	for name, a := range p.pending {
		if !live[name] && !a.running {
			delete(p.pending, name)
		}
	}
	if lost && p.changed != nil {
		p.changed()
	}
	return out
}

// done records the outcome of a proving attempt for m.
func (p *prover) done(m membership.Member, err error) {
	facts := proofOf(m)
	p.mu.Lock()
	a := p.pending[m.Name]
	if a != nil && a.facts == facts {
		a.running = false
	}
	if err == nil {
		delete(p.pending, m.Name)
		p.proven[m.Name] = facts
		p.mu.Unlock()
		p.log.LogAttrs(context.Background(), slog.LevelDebug, "peer proved its name", slog.String("peer", m.Name))
		if p.changed != nil {
			p.changed()
		}
		return
	}
	p.failed.Add(1)
	warn := false
	if a != nil && a.facts == facts {
		a.failures++
		d := proveRetryMin
		for i := 1; i < a.failures && d < proveRetryMax; i++ {
			d *= 2
		}
		a.next = p.now().Add(min(d, proveRetryMax))
		warn, a.warned = !a.warned, true
	}
	p.mu.Unlock()
	// One line per member and gossip identity, not one per attempt.
	level := slog.LevelDebug
	if warn {
		level = slog.LevelWarn
	}
	p.log.LogAttrs(context.Background(), level, "gossip member has not proved its name with a cluster certificate; placement ignores it",
		slog.String("peer", m.Name), slog.String("quic_addr", m.Meta.QUICAddr), slog.Any("error", err))
}

// proveLoop proves new gossip members as they appear (and retries the
// unproven ones) until c.ctx ends.
func (c *cluster) proveLoop() {
	defer c.wg.Done()
	sub := c.ml.Subscribe()
	defer sub.Close()
	tick, stop := c.n.cfg.Clock.NewTicker(proveRetryMin)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for _, m := range c.prove.due(c.ml.Members()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(c.ctx, proveTimeout)
				defer cancel()
				c.prove.done(m, c.prove.conn.Connect(ctx, m.Name))
			}()
		}
		select {
		case <-c.ctx.Done():
			return
		case <-sub.Ready():
			sub.Drain()
		case <-tick:
		}
	}
}
