package membership

import (
	"errors"
	"fmt"
	"github.com/tempest-actors/tempest/clock"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is the gossip port, used for TCP and UDP alike, and the port
// assumed for a seed given without one.
const DefaultPort = 7946

// Errors returned by Validate and New.
var (
	// ErrInvalidConfig wraps every configuration problem Validate reports.
	ErrInvalidConfig = errors.New("membership: invalid config")
)

// Config configures a Membership. The zero value of each field means "use the
// default" unless the field says otherwise; New calls Validate.
type Config struct {
	// Name is this node's unique, stable name (required). Restarting a node
	// under the same name lets it reclaim its place in the cluster.
	Name string

	// Bind is the host:port the gossip listeners bind, TCP and UDP.
	// Empty means "0.0.0.0:7946". Port 0 picks a free port (tests); read it
	// back with Membership.Local().Addr.
	Bind string

	// Advertise is the ip[:port] other nodes use to reach this one. The host
	// must be an IP literal. Empty means the bind address when it is
	// specific, otherwise the first private IP of the host. A missing or zero
	// port means the bound port.
	Advertise string

	// Seeds are the nodes to join: "host:port", "host" (port 7946), IP
	// literals or DNS names. A DNS name is resolved on every attempt to ALL of
	// its A and AAAA records, so a Kubernetes headless service (with
	// publishNotReadyAddresses) names every pod. Seeds that resolve to this
	// node are skipped. No seeds means "start a new cluster".
	Seeds []string

	// Resolver looks up seed host names. Nil means net.DefaultResolver.
	Resolver Resolver

	// GossipKeys is the keyring. The first key is the primary key: it
	// encrypts everything this node sends. All keys are tried when
	// decrypting. Each key is 16, 24 or 32 bytes (AES-128/192/256). Empty
	// means no encryption. With keys, incoming gossip must verify: a node with
	// a wrong key or no key is ignored.
	GossipKeys [][]byte

	// Meta is this node's initial metadata. Meta.Name is filled from Name
	// when empty and must equal it otherwise.
	Meta Meta

	// Timing is the failure-detection and join timing. Zero fields take the
	// value from LANTiming; tests use FastTiming.
	Timing Timing

	// LeaveTimeout bounds the graceful leave broadcast in Close (when the
	// context passed to Close has no earlier deadline) and the wait for a
	// metadata update to be gossiped. Zero means 5s.
	LeaveTimeout time.Duration

	// DeadRetention is how long a dead or departed member stays visible in
	// Members after its last change. Zero means 15 minutes.
	DeadRetention time.Duration

	// Clock drives join back-off, periodic re-join and member retention.
	// Nil means the wall clock. (memberlist's own timers use the wall clock.)
	Clock Clock

	// Gate, if set, holds this node's gossip traffic while it is closed
	// (see Gate): fault injection for tests. Nil: no gate.
	Gate *Gate

	// Logger receives this package's logs and memberlist's, bridged into
	// slog levels. Nil discards them.
	Logger *slog.Logger

	// DropLogInterval bounds the lines about gossip traffic this node
	// drops (undecryptable or malformed packets and streams, see
	// Membership.Dropped): at most one warning per cause and interval,
	// with the count since the previous one. Zero means
	// DefaultDropLogInterval.
	DropLogInterval time.Duration
}

// Timing holds failure-detection and join timing. See docs/membership.md
// for how the values combine into detection times.
type Timing struct {
	// ProbeInterval is how often each node probes one random peer.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for an ack before asking
	// other nodes to probe indirectly. Must be below ProbeInterval.
	ProbeTimeout time.Duration
	// SuspicionMult scales the time a suspect node has to refute before it
	// is declared dead: SuspicionMult × max(1, log10(N)) × ProbeInterval.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds how far the suspicion timeout may be
	// stretched while waiting for independent confirmations.
	SuspicionMaxTimeoutMult int
	// AwarenessMaxMultiplier lets a node that notices it is slow (missed
	// acks, refutations) stretch its own probe interval and timeout up to
	// this factor instead of accusing healthy peers.
	AwarenessMaxMultiplier int
	// GossipInterval is how often gossip messages are sent.
	GossipInterval time.Duration
	// GossipNodes is how many random nodes receive each gossip round.
	GossipNodes int
	// GossipToTheDeadTime is how long dead nodes still receive gossip (and
	// stay in memberlist's tables before being forgotten).
	GossipToTheDeadTime time.Duration
	// PushPullInterval is how often a full state exchange with a random
	// node happens (scaled up for large clusters by memberlist).
	PushPullInterval time.Duration
	// TCPTimeout bounds stream connections: joins, push/pull, TCP pings.
	TCPTimeout time.Duration
	// DeadNodeReclaimTime is how long after a node is declared dead another
	// process may claim its name from a different address (a restarted pod
	// with a new IP).
	DeadNodeReclaimTime time.Duration
	// RejoinInterval is how often seeds that are not alive members are
	// joined again, so that a node forgotten after a partition comes back.
	RejoinInterval time.Duration
	// JoinBackoffMin and JoinBackoffMax bound the doubling wait between
	// failed initial join attempts.
	JoinBackoffMin time.Duration
	JoinBackoffMax time.Duration
}

// LANTiming is the default timing, tuned for a LAN whose nodes may be
// CPU-starved (a 2-core machine running a busy node): probe timeouts and
// suspicion periods are generous so that a scheduling stall is not read as a
// failure. A crashed node is declared dead after about 6-7s in a small
// cluster (probe interval plus the 5s suspicion timeout).
func LANTiming() Timing {
	return Timing{
		ProbeInterval:           time.Second,
		ProbeTimeout:            700 * time.Millisecond,
		SuspicionMult:           5,
		SuspicionMaxTimeoutMult: 6,
		AwarenessMaxMultiplier:  8,
		GossipInterval:          200 * time.Millisecond,
		GossipNodes:             3,
		GossipToTheDeadTime:     30 * time.Second,
		PushPullInterval:        30 * time.Second,
		TCPTimeout:              5 * time.Second,
		DeadNodeReclaimTime:     5 * time.Second,
		RejoinInterval:          time.Second,
		JoinBackoffMin:          500 * time.Millisecond,
		JoinBackoffMax:          15 * time.Second,
	}
}

// FastTiming is a timing for tests on loopback: failures are detected in
// about a second and joins retry quickly. Do not use it across a network.
func FastTiming() Timing {
	return Timing{
		ProbeInterval:           250 * time.Millisecond,
		ProbeTimeout:            200 * time.Millisecond,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 3,
		AwarenessMaxMultiplier:  4,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		GossipToTheDeadTime:     5 * time.Second,
		PushPullInterval:        time.Second,
		TCPTimeout:              time.Second,
		DeadNodeReclaimTime:     250 * time.Millisecond,
		RejoinInterval:          500 * time.Millisecond,
		JoinBackoffMin:          50 * time.Millisecond,
		JoinBackoffMax:          500 * time.Millisecond,
	}
}

// withDefaults fills zero fields from LANTiming.
func (t Timing) withDefaults() Timing {
	d := LANTiming()
	fill := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	filli := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&t.ProbeInterval, d.ProbeInterval)
	fill(&t.ProbeTimeout, d.ProbeTimeout)
	filli(&t.SuspicionMult, d.SuspicionMult)
	filli(&t.SuspicionMaxTimeoutMult, d.SuspicionMaxTimeoutMult)
	filli(&t.AwarenessMaxMultiplier, d.AwarenessMaxMultiplier)
	fill(&t.GossipInterval, d.GossipInterval)
	filli(&t.GossipNodes, d.GossipNodes)
	fill(&t.GossipToTheDeadTime, d.GossipToTheDeadTime)
	fill(&t.PushPullInterval, d.PushPullInterval)
	fill(&t.TCPTimeout, d.TCPTimeout)
	fill(&t.DeadNodeReclaimTime, d.DeadNodeReclaimTime)
	fill(&t.RejoinInterval, d.RejoinInterval)
	fill(&t.JoinBackoffMin, d.JoinBackoffMin)
	fill(&t.JoinBackoffMax, d.JoinBackoffMax)
	return t
}

func (t Timing) validate() error {
	for name, v := range map[string]time.Duration{
		"ProbeInterval": t.ProbeInterval, "ProbeTimeout": t.ProbeTimeout,
		"GossipInterval": t.GossipInterval, "GossipToTheDeadTime": t.GossipToTheDeadTime,
		"PushPullInterval": t.PushPullInterval, "TCPTimeout": t.TCPTimeout,
		"DeadNodeReclaimTime": t.DeadNodeReclaimTime, "RejoinInterval": t.RejoinInterval,
		"JoinBackoffMin": t.JoinBackoffMin, "JoinBackoffMax": t.JoinBackoffMax,
	} {
		if v < 0 {
			return fmt.Errorf("%w: Timing.%s is negative", ErrInvalidConfig, name)
		}
	}
	for name, v := range map[string]int{
		"SuspicionMult": t.SuspicionMult, "SuspicionMaxTimeoutMult": t.SuspicionMaxTimeoutMult,
		"AwarenessMaxMultiplier": t.AwarenessMaxMultiplier, "GossipNodes": t.GossipNodes,
	} {
		if v < 0 {
			return fmt.Errorf("%w: Timing.%s is negative", ErrInvalidConfig, name)
		}
	}
	if t.ProbeTimeout >= t.ProbeInterval {
		return fmt.Errorf("%w: Timing.ProbeTimeout %v must be below ProbeInterval %v", ErrInvalidConfig, t.ProbeTimeout, t.ProbeInterval)
	}
	if t.JoinBackoffMin > t.JoinBackoffMax {
		return fmt.Errorf("%w: Timing.JoinBackoffMin %v exceeds JoinBackoffMax %v", ErrInvalidConfig, t.JoinBackoffMin, t.JoinBackoffMax)
	}
	return nil
}

// DefaultConfig returns a Config with every default filled in except Name,
// which the caller must set.
func DefaultConfig() Config {
	return Config{
		Bind:          net.JoinHostPort("0.0.0.0", strconv.Itoa(DefaultPort)),
		Timing:        LANTiming(),
		LeaveTimeout:  5 * time.Second,
		DeadRetention: 15 * time.Minute,
	}
}

// withDefaults returns c with zero fields replaced by defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Bind == "" {
		c.Bind = d.Bind
	}
	c.Timing = c.Timing.withDefaults()
	if c.LeaveTimeout == 0 {
		c.LeaveTimeout = d.LeaveTimeout
	}
	if c.DeadRetention == 0 {
		c.DeadRetention = d.DeadRetention
	}
	if c.DropLogInterval == 0 {
		c.DropLogInterval = DefaultDropLogInterval
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Meta.Name == "" {
		c.Meta.Name = c.Name
	}
	return c
}

// Validate reports the first problem with c (after defaults are applied) as
// an error wrapping ErrInvalidConfig, or a *MetaTooLargeError when the
// metadata cannot fit the gossip limit.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Name == "" {
		return fmt.Errorf("%w: Name is required", ErrInvalidConfig)
	}
	if c.Meta.Name != c.Name {
		return fmt.Errorf("%w: Meta.Name %q differs from Name %q", ErrInvalidConfig, c.Meta.Name, c.Name)
	}
	if _, _, err := splitBind(c.Bind); err != nil {
		return err
	}
	if c.Advertise != "" {
		if _, _, err := splitAdvertise(c.Advertise); err != nil {
			return err
		}
	}
	for _, s := range c.Seeds {
		if _, err := parseSeed(s); err != nil {
			return err
		}
	}
	for i, k := range c.GossipKeys {
		if err := validateKey(k); err != nil {
			return fmt.Errorf("%w: GossipKeys[%d]: %w", ErrInvalidConfig, i, err)
		}
	}
	if err := c.Timing.validate(); err != nil {
		return err
	}
	if c.LeaveTimeout < 0 || c.DeadRetention < 0 || c.DropLogInterval < 0 {
		return fmt.Errorf("%w: LeaveTimeout, DeadRetention and DropLogInterval must not be negative", ErrInvalidConfig)
	}
	if _, err := c.Meta.encode(); err != nil {
		return err
	}
	return nil
}

func splitBind(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%w: Bind %q: %w", ErrInvalidConfig, s, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return "", 0, fmt.Errorf("%w: Bind host %q must be an IP address", ErrInvalidConfig, host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%w: Bind port %q: %w", ErrInvalidConfig, port, err)
	}
	return host, int(p), nil
}

// splitAdvertise parses "ip" or "ip:port"; port 0 means "the bound port".
func splitAdvertise(s string) (string, int, error) {
	host, port := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), "0"
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return "", 0, fmt.Errorf("%w: Advertise host %q must be an IP address", ErrInvalidConfig, host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%w: Advertise port %q: %w", ErrInvalidConfig, port, err)
	}
	return host, int(p), nil
}

// Clock is the time source for this package's own timers, the project's
// one (package clock).
type Clock = clock.Clock
