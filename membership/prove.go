package membership

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempest-actors/tempest/clock"
)

// Identity is the certificate, not the gossip. Anyone holding the gossip
// key can join memberlist under any name and advertise any address; only
// a node with a certificate of the cluster CA for its name can complete
// a mutually authenticated link. A Prover keeps, for each gossip member,
// whether such a link was made under its name, and for which of its
// gossip facts (QUIC address, process): a new address or a new process
// proves itself again. Callers admit a member to anything that trusts
// its name (placement, raft, the bootstrap set) only while it is Proven.

// Connector is what a Prover proves members with.
type Connector interface {
	// Connect returns once a mutually authenticated link to peer is up.
	Connect(ctx context.Context, peer string) error
}

// Bounds of a Prover's retries for a member that has not proved itself.
const (
	ProveRetryMin = 500 * time.Millisecond
	ProveRetryMax = 30 * time.Second
	ProveTimeout  = 10 * time.Second
)

// ProverConfig configures a Prover.
type ProverConfig struct {
	Self      string    // this node, always proven
	Connector Connector // required
	Clock     Clock     // nil: the wall clock
	Logger    *slog.Logger
	// Changed, when set, is called when a proof is gained or lost.
	Changed func()
}

// Prover keeps the proofs of a node's gossip peers. The decisions (whom
// to try when, what a changed fact or a departure forgets) are made by
// its methods under one lock; Run is the loop that carries them out.
// Its methods are safe for concurrent use.
type Prover struct {
	cfg    ProverConfig
	failed atomic.Uint64 // attempts that failed

	mu      sync.Mutex
	proven  map[string]proof
	pending map[string]*attempt
}

// proof is what a link with a peer proved: the gossip facts it held for.
type proof struct {
	addr string
	boot uint64
}

func proofOf(m Member) proof { return proof{addr: m.Meta.QUICAddr, boot: m.Meta.BootID} }

// attempt is the state of an unproven member.
type attempt struct {
	facts    proof
	running  bool
	failures int
	next     time.Time
	warned   bool
}

// NewProver returns a Prover with no proofs.
func NewProver(cfg ProverConfig) *Prover {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Prover{cfg: cfg, proven: map[string]proof{}, pending: map[string]*attempt{}}
}

// Proven reports whether m proved its name for what gossip says about it
// now. This node is always proven.
func (p *Prover) Proven(m Member) bool {
	if m.Name == p.cfg.Self {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	got, ok := p.proven[m.Name]
	return ok && got == proofOf(m)
}

// Failed counts the attempts to prove a member that failed.
func (p *Prover) Failed() uint64 { return p.failed.Load() }

// Due forgets the proofs of departed members and of members whose gossip
// facts changed, and returns the members to try now, marking them
// running: the caller reports each outcome to Done.
func (p *Prover) Due(members []Member) []Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Clock.Now()
	lost := false
	live := map[string]bool{}
	var out []Member
	for _, m := range members {
		if m.Name == p.cfg.Self || m.Status.Gone() || m.MetaErr != nil {
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
	if lost && p.cfg.Changed != nil {
		p.cfg.Changed()
	}
	return out
}

// Done records the outcome of an attempt Due returned: a proof, or a
// failure that is tried again after a back-off doubling from
// ProveRetryMin to ProveRetryMax.
func (p *Prover) Done(m Member, err error) {
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
		p.cfg.Logger.LogAttrs(context.Background(), slog.LevelDebug, "peer proved its name", slog.String("peer", m.Name))
		if p.cfg.Changed != nil {
			p.cfg.Changed()
		}
		return
	}
	p.failed.Add(1)
	warn := false
	if a != nil && a.facts == facts {
		a.failures++
		d := ProveRetryMin
		for i := 1; i < a.failures && d < ProveRetryMax; i++ {
			d *= 2
		}
		a.next = p.cfg.Clock.Now().Add(min(d, ProveRetryMax))
		warn, a.warned = !a.warned, true
	}
	p.mu.Unlock()
	// One line per member and gossip identity, not one per attempt.
	level := slog.LevelDebug
	if warn {
		level = slog.LevelWarn
	}
	p.cfg.Logger.LogAttrs(context.Background(), level, "gossip member has not proved its name with a cluster certificate; placement ignores it",
		slog.String("peer", m.Name), slog.String("quic_addr", m.Meta.QUICAddr), slog.Any("error", err))
}

// Source is the membership a Prover's Run watches (*Membership, or any
// view of it).
type Source interface {
	Members() []Member
	Subscribe() *Subscription
}

// Run proves new members of src as they appear, and retries the unproven
// ones, each attempt within ProveTimeout, until ctx ends; it returns once
// its attempts have.
func (p *Prover) Run(ctx context.Context, src Source) {
	sub := src.Subscribe()
	defer sub.Close()
	tick, stop := p.cfg.Clock.NewTicker(ProveRetryMin)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for _, m := range p.Due(src.Members()) {
			wg.Go(func() {
				actx, cancel := context.WithTimeout(ctx, ProveTimeout)
				defer cancel()
				p.Done(m, p.cfg.Connector.Connect(actx, m.Name))
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-sub.Ready():
			sub.Drain()
		case <-tick:
		}
	}
}
