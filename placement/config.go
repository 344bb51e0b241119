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
// then completes the move (new owner, epoch+1) at once. An error wrapping
// ErrMoveRefused (the old owner is alive and could not ship) aborts the
// move: the old owner keeps the shard, and it is not moved again for a
// fence delay. Without a Handoff, or on any other error (the old owner
// may be gone), the leader completes the move only after the fence
// delay: safe for single activation, but state the old owner did not
// ship stays behind. Called from
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

	// Lease is how long after its last contact with a leader (or, as
	// leader, its last quorum confirmation) a node keeps serving.
	Lease time.Duration
	// LeaseMargin covers a message still in flight when a node was cut
	// off (and scheduling delay in applying it).
	LeaseMargin time.Duration
	// ClockDrift bounds the relative clock-rate difference between any
	// two nodes (0.05 = 5%).
	ClockDrift float64
	// DownAfter: the leader marks a peer down when raft heartbeats to it
	// have failed for this long (membership failure also marks it down).
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

	// Raft timing. Defaults are slower than raft's own so that a busy
	// 2-core machine does not flap leadership.
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

	// Handoff ships state during planned moves (optional).
	Handoff Handoff
	// Forwarder lets followers propose (optional).
	Forwarder Forwarder
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
		Lease:              5 * time.Second,
		LeaseMargin:        time.Second,
		ClockDrift:         0.05,
		DownAfter:          4 * time.Second,
		DeadVoterGrace:     30 * time.Second,
		MaxMoving:          32,
		ReconcileInterval:  time.Second,
		ApplyTimeout:       5 * time.Second,
		HeartbeatTimeout:   2 * time.Second,
		ElectionTimeout:    2 * time.Second,
		LeaderLeaseTimeout: time.Second,
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
	case c.ClockDrift < 0 || c.ClockDrift >= 1:
		return bad("ClockDrift %g not in [0,1)", c.ClockDrift)
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return bad("LeaderLeaseTimeout %s > HeartbeatTimeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.Lease < c.HeartbeatTimeout:
		// Followers renew on heartbeats every HeartbeatTimeout/10; a lease
		// shorter than the timeout would lapse on ordinary jitter.
		return bad("Lease %s < HeartbeatTimeout %s", c.Lease, c.HeartbeatTimeout)
	case c.LeaseMargin < 0 || c.DownAfter <= 0 || c.MaxMoving < 1:
		return bad("LeaseMargin, DownAfter and MaxMoving must be positive")
	}
	return nil
}
