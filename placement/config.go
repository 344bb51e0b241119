package placement

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
)

// Handoff ships a shard's actors from its old owner to its new one
// during a planned move. The leader calls Transfer after the move began
// (the table marks the shard MovingTo); Transfer returns nil only once
// the old owner has stopped admitting mail for the shard, passivated its
// actors and delivered their state at rest to the new owner. The leader
// then completes the move (new owner, epoch+1) at once. Any error (an
// error wrapping ErrMoveRefused: the old owner is alive and could not
// ship; or the transfer failed or ran out of time) aborts the move: the
// old owner keeps the shard and the state it holds, and the shard is not
// moved again for a fence delay. A move whose old owner is seen down is
// aborted too, and its shards fail over to an in-sync replica. Without a
// Handoff the leader completes a move after the fence delay: safe for
// single activation, but state at rest stays behind. Called from
// goroutines owned by the Node, concurrently for different shards; it
// must return when ctx ends.
type Handoff interface {
	Transfer(ctx context.Context, m Move) error
}

// Forwarder sends an encoded command from a follower to the leader,
// which applies it with Node.ApplyForwarded. The wire package implements
// it over the control lane. Without one, only the leader can change the
// table (followers' Leave then relies on membership's leave event).
type Forwarder interface {
	Forward(ctx context.Context, leader string, cmd []byte) error
}

// Witnesses asks a peer for its lease witness of a term: how long ago,
// on the peer's clock, it last accepted or sent a heartbeat of an older
// term (the peer's Node.Witness). A new leader asks every other voter
// when the leader before it stopped answering, so that the crashed
// leader's shards fail over from when it went silent rather than from
// the election (see the package documentation, "A crashed leader's
// fence"). The federation implements it over the control lane.
type Witnesses interface {
	LeaseWitness(ctx context.Context, peer string, term uint64) (time.Duration, error)
}

// Config configures a Node. Zero fields take the defaults of
// DefaultConfig, except Name, DataDir, Transport and Membership, which
// are required.
type Config struct {
	// Name is this node's stable name. It is also its raft server ID and
	// raft server address: the transport resolves names to current
	// network addresses, so a full restart on new IPs recovers.
	Name string
	// DataDir holds raft state: DataDir/raft/wal (log and stable store)
	// and DataDir/raft/snapshots.
	DataDir string
	// Transport carries raft RPCs. Production passes a NetworkTransport
	// over NewStreamLayer; tests pass raft.NewInmemTransport. The Node
	// shuts it down with raft on Close.
	Transport raft.Transport
	// Membership reports the live cluster.
	Membership Membership
	// BootstrapExpect: once this many nodes are alive, the lowest-named one
	// bootstraps the cluster with the lowest BootstrapExpect names as
	// voters. 0 never bootstraps (the node waits to be added).
	BootstrapExpect int
	// MaxVoters is the number of raft voters kept (3 or 5); other nodes
	// are non-voters.
	MaxVoters int
	// Shards is the shard count per group, used only when this node
	// initialises the table; afterwards the table's count is used.
	Shards int
	// Replicas is the size of each shard's replica set, owner included
	// (DefaultReplicas; a cluster with fewer eligible nodes keeps one on
	// each). Like Shards it is used only when this node initialises the
	// table, so it is a cluster-wide setting fixed at bootstrap.
	Replicas int

	// Lease is how long after its last contact with a leader (or, as
	// leader, its last quorum confirmation) a node keeps serving.
	Lease time.Duration
	// LeaseMargin covers a message still in flight when a node was cut
	// off: network delay plus any stall of the receiving process that is
	// not long enough to count as a lapse of contact (three quarters of
	// the margin, see LapseGap). At least HeartbeatTimeout/2, so that the
	// ordinary spacing of heartbeats is never read as a lapse.
	LeaseMargin time.Duration
	// ClockDrift bounds the relative clock-rate difference between any
	// two nodes (0.05 = 5%).
	ClockDrift float64
	// DownAfter: the leader marks a peer down when raft heartbeats to it
	// have failed for this long since its last answer (membership failure
	// also marks it down). Heartbeats time out after DownAfter/2 (see
	// HeartbeatRPCTimeout), so a crash is noticed within about DownAfter.
	DownAfter time.Duration
	// DeadVoterGrace: a voter down this long is replaced by a live node.
	DeadVoterGrace time.Duration
	// MaxMoving caps planned handoffs in flight cluster-wide.
	MaxMoving int
	// ReconcileInterval is the period of the leader's reconcile pass
	// (changes also trigger it at once).
	ReconcileInterval time.Duration
	// ApplyTimeout bounds one raft proposal.
	ApplyTimeout time.Duration

	// Raft timing. The defaults are raft's own heartbeat and election
	// timeouts (a follower campaigns 1-2 s after its last contact) and
	// half its leader lease; pre-vote keeps a node that was cut off from
	// disrupting the cluster when it comes back.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration

	// Snapshots: raft snapshots after SnapshotThreshold new entries,
	// checked every SnapshotInterval, keeping TrailingLogs entries.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// WALSegmentSize is the raft-wal segment size (preallocated on disk).
	WALSegmentSize int

	// Kinds are the kinds this node hosts, with their requirements and
	// policy digests. The node publishes them into the table itself
	// (OpHosts) whenever its entry there holds something else; only nodes
	// that host a kind, with the policy digest the cluster agrees on,
	// receive its shards. Empty: the node hosts nothing and owns no shard.
	Kinds []KindSpec

	// Handoff ships state during planned moves (optional).
	Handoff Handoff
	// Forwarder lets followers propose (optional).
	Forwarder Forwarder
	// Witnesses lets a new leader fence a crashed predecessor from when
	// it went silent (optional; needs a Transport that is a
	// LeaseWitness, as SplitHeartbeats returns). Without it the fence
	// counts from the election.
	Witnesses Witnesses
	// Clock is the time source (nil: SystemClock). Raft itself reads the
	// wall clock; its contact times are converted into this clock's frame.
	Clock Clock
	// Logger receives the node's and raft's logs (nil: discard).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxVoters:          3,
		Shards:             DefaultShards,
		Replicas:           DefaultReplicas,
		Lease:              1500 * time.Millisecond,
		LeaseMargin:        600 * time.Millisecond,
		ClockDrift:         0.05,
		DownAfter:          time.Second,
		DeadVoterGrace:     30 * time.Second,
		MaxMoving:          32,
		ReconcileInterval:  time.Second,
		ApplyTimeout:       5 * time.Second,
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		SnapshotThreshold:  1024,
		SnapshotInterval:   30 * time.Second,
		TrailingLogs:       1024,
		WALSegmentSize:     8 << 20,
	}
}

func (c *Config) fillDefaults() {
	d := DefaultConfig()
	setD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if c.MaxVoters == 0 {
		c.MaxVoters = d.MaxVoters
	}
	if c.Shards == 0 {
		c.Shards = d.Shards
	}
	if c.Replicas == 0 {
		c.Replicas = d.Replicas
	}
	setD(&c.Lease, d.Lease)
	setD(&c.LeaseMargin, d.LeaseMargin)
	if c.ClockDrift == 0 {
		c.ClockDrift = d.ClockDrift
	}
	setD(&c.DownAfter, d.DownAfter)
	setD(&c.DeadVoterGrace, d.DeadVoterGrace)
	if c.MaxMoving == 0 {
		c.MaxMoving = d.MaxMoving
	}
	setD(&c.ReconcileInterval, d.ReconcileInterval)
	setD(&c.ApplyTimeout, d.ApplyTimeout)
	setD(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setD(&c.ElectionTimeout, d.ElectionTimeout)
	setD(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setD(&c.CommitTimeout, d.CommitTimeout)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	setD(&c.SnapshotInterval, d.SnapshotInterval)
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.WALSegmentSize == 0 {
		c.WALSegmentSize = d.WALSegmentSize
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first problem with c after defaults are applied.
func (c Config) Validate() error {
	c.fillDefaults()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
	}
	switch {
	case c.Name == "":
		return bad("Name is required")
	case c.DataDir == "":
		return bad("DataDir is required")
	case c.Transport == nil:
		return bad("Transport is required")
	case c.Membership == nil:
		return bad("Membership is required")
	case c.BootstrapExpect < 0:
		return bad("BootstrapExpect %d < 0", c.BootstrapExpect)
	case c.MaxVoters < 1 || c.MaxVoters > 7:
		return bad("MaxVoters %d not in [1,7]", c.MaxVoters)
	case c.Shards < 1 || c.Shards > maxSnapshotShards:
		return bad("Shards %d not in [1,%d]", c.Shards, maxSnapshotShards)
	case c.Replicas < 1 || c.Replicas > maxReplicas:
		return bad("Replicas %d not in [1,%d]", c.Replicas, maxReplicas)
	case c.ClockDrift < 0 || c.ClockDrift >= 1:
		return bad("ClockDrift %g not in [0,1)", c.ClockDrift)
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return bad("LeaderLeaseTimeout %s > HeartbeatTimeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.Lease < c.HeartbeatTimeout:
		// Followers renew on heartbeats every HeartbeatTimeout/10; a lease
		// shorter than the timeout would lapse on ordinary jitter.
		return bad("Lease %s < HeartbeatTimeout %s", c.Lease, c.HeartbeatTimeout)
	case c.LeaseMargin < c.HeartbeatTimeout/2:
		// Heartbeats come every HeartbeatTimeout/10 to /5; a lapse gap
		// (3/4 of the margin) below a few of those would read ordinary
		// jitter as lost contact.
		return bad("LeaseMargin %s < HeartbeatTimeout/2 (%s)", c.LeaseMargin, c.HeartbeatTimeout/2)
	case c.LeaderLeaseTimeout*2 > c.DownAfter:
		// A leader cut off from its quorum keeps renewing the followers
		// on its side for up to one leader lease after its last quorum
		// contact; a new leader must not mark them down sooner (see the
		// package documentation).
		return bad("LeaderLeaseTimeout %s > DownAfter/2 (%s)", c.LeaderLeaseTimeout, c.DownAfter/2)
	case c.DownAfter <= 0 || c.MaxMoving < 1:
		return bad("DownAfter and MaxMoving must be positive")
	}
	if _, err := normalizeKinds(c.Kinds); err != nil {
		return bad("Kinds: %v", err)
	}
	return nil
}

// LapseGap is the longest gap between two consecutive lease renewals
// that a node does not count as a lapse of contact: three quarters of
// LeaseMargin (of the default when zero). A longer gap means the node
// was cut off, paused or starved; it then stops serving until it has
// caught up with the table (see the package documentation).
func (c Config) LapseGap() time.Duration {
	c.fillDefaults()
	return c.LeaseMargin * 3 / 4
}

// HeartbeatRPCTimeout is the I/O timeout of one raft heartbeat: half of
// DownAfter (of the default when zero), so that a dead peer produces
// failed heartbeats well within DownAfter. Log appends and snapshots
// keep a longer timeout (see SplitHeartbeats).
func (c Config) HeartbeatRPCTimeout() time.Duration {
	c.fillDefaults()
	return c.DownAfter / 2
}
