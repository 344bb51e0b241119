package tempest

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/internal/cluster"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/prospero/replica"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// A node in a cluster runs a cluster engine (internal/cluster): gossip,
// raft placement, QUIC links, routing of mail between nodes, handoffs and
// replication of state at rest. This file is the node's side of it: the
// configuration, what the node reports of its cluster, and the host the
// engine acts through.

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
	// Replication tunes the replication of state at rest.
	Replication ReplicationConfig
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
	case c.Replication.Timeout < 0 || c.Replication.CatchUpRate < 0:
		return fmt.Errorf("%w: negative Cluster.Replication.Timeout or CatchUpRate", ErrInvalidConfig)
	case c.Replication.MinInSync < 0 || c.Replication.MinInSync > cmp.Or(c.Placement.Replicas, placement.DefaultReplicas):
		return fmt.Errorf("%w: Cluster.Replication.MinInSync %d not in [0, Placement.Replicas (%d)]", ErrInvalidConfig,
			c.Replication.MinInSync, cmp.Or(c.Placement.Replicas, placement.DefaultReplicas))
	case c.LeaveTimeout < 0:
		return fmt.Errorf("%w: negative Cluster.LeaveTimeout", ErrInvalidConfig)
	}
	return nil
}

// engine is the engine's configuration: c and what it needs of the
// node's own.
func (c *ClusterConfig) engine(cfg Config, log *slog.Logger) cluster.Config {
	return cluster.Config{Name: cfg.Name, DataDir: cfg.DataDir, Logger: cfg.Logger, Log: log, Clock: cfg.Clock,
		HydrationBudget: cfg.Supervisor.HydrationBudget,
		GossipAddr:      c.GossipAddr, GossipAdvertise: c.GossipAdvertise, QUICAddr: c.QUICAddr,
		AdvertiseHost: c.AdvertiseHost, HTTPAddr: c.HTTPAddr, Seeds: c.Seeds, BootstrapExpect: c.BootstrapExpect,
		GossipKeys: c.GossipKeys, Certificate: c.Certificate, CAs: c.CAs, Version: c.Version,
		GossipTiming: c.GossipTiming, Placement: c.Placement, Wire: c.Wire,
		CatchUpRate: c.Replication.CatchUpRate, LeaveTimeout: c.LeaveTimeout}
}

// ReplicationConfig tunes the replication of state at rest to each
// shard's in-sync replicas (its size is Placement.Replicas, fixed when
// the cluster bootstraps). See docs/cluster.md, "Replicated state at rest".
type ReplicationConfig struct {
	// SyncReplicas: a turn's outputs are released only once every
	// in-sync replica fsync'd its state (survives losing power to the
	// whole replica set at once). Default false: once every replica
	// received it, each fsyncing in the background (survives any single
	// crash, pause or partition, the default of replicated logs).
	SyncReplicas bool
	// MinInSync is the fewest in-sync replicas, the owner included, that
	// must hold a turn's state before its outputs are released (default 1,
	// at most Placement.Replicas). With 1, a write made while its shard's
	// set is the owner alone (its followers failed, or new ones have not
	// joined yet) is acknowledged from one disk, and is lost if that node
	// is lost before a follower joins. With 2, such a write fails with
	// actor.ErrNotCommitted (its text naming the shortfall) instead: the
	// shard refuses durable writes rather than acknowledge one it could
	// lose to a single crash.
	MinInSync int
	// Timeout bounds one batch's round trip to a replica (default 2 s).
	// A replica that does not acknowledge in time leaves the shard's
	// in-sync set (through raft) before anything commits without it.
	Timeout time.Duration
	// CatchUpRate bounds, in bytes a second, the bulk copy an owner sends
	// to a follower joining a shard's set (default 16 MiB/s), so that
	// re-replication does not starve actor mail.
	CatchUpRate int
}

// ErrHandoffIncomplete: a graceful Close did not hand all the state at
// rest this node owned to the new owners (a shard did not move before
// the leave timeout, or identities were isolated from a handoff because
// their records cannot be shipped). That state stays in this node's
// store.
var ErrHandoffIncomplete = cluster.ErrHandoffIncomplete

// Members returns this node's view of the cluster's members (nil for a
// standalone node). The caller owns the slice.
func (n *Node) Members() []membership.Member {
	return n.rt().Members()
}

// Proven reports whether m proved its name to this node: a QUIC link
// under mutual TLS with a certificate of the cluster CA whose first DNS
// name is m.Name, for the QUIC address and process gossip reports for m
// now (see docs/operations.md, "Identity is the certificate"). A member
// that has not is a gossip hint only: placement ignores it, and nothing
// it advertises (its HTTP address included) has been verified. This node
// is always proven; a standalone node proves nobody else. Safe for
// concurrent use.
func (n *Node) Proven(m membership.Member) bool {
	return n.rt().Proven(m)
}

// Leader returns the raft leader's name ("" if unknown or standalone).
func (n *Node) Leader() string {
	pl := n.rt().Placement()
	if pl == nil {
		return ""
	}
	return pl.Leader()
}

// PlacementStatus reports this node's raft role, term, applied index,
// table version, shards owned and lease; ok is false for a standalone
// node.
func (n *Node) PlacementStatus() (st placement.Status, ok bool) {
	pl := n.rt().Placement()
	if pl == nil {
		return placement.Status{}, false
	}
	return pl.Status(), true
}

// Table returns a copy of this node's applied placement table (nil for a
// standalone node).
func (n *Node) Table() *placement.Table {
	pl := n.rt().Placement()
	if pl == nil {
		return nil
	}
	return pl.Table()
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
	if n.closed == nil {
		return "", 0, errNotMade
	}
	if lifecycle(n.phase.Load()) == stateClosed {
		return "", 0, ErrClosed
	}
	if !ref.IsVirtual() {
		return ref.Node(), 0, nil
	}
	return n.rt().Locate(ref)
}

// FederationStats are a node's federation protocol counters.
type FederationStats struct {
	federation.Stats // the protocol's own counters
	// HandoffsAborted counts transfers the old owner aborted.
	HandoffsAborted uint64
	// HandoffsPromoted counts planned moves from this node to a follower
	// in the shard's in-sync set: a promotion, which ships none of the
	// actors' state (the follower has it).
	HandoffsPromoted uint64
	// Hydrated counts activations started here by warm handoffs (the old
	// owner's HydrateRequest); HydrateBusy the HydrateRequests this node
	// answered BUSY because its backlog was full; HydrateRetries the BUSY
	// answers this node, as the old owner, waited out and retried.
	Hydrated, HydrateBusy, HydrateRetries uint64
	// MailBusy counts mail from peers this node refused BUSY because it
	// needed an activation while the hydration backlog was full (the
	// sender sends it again after the wait the refusal asks for).
	MailBusy uint64
	// StreamsRefused counts raft, handoff and replication streams this
	// node refused because the peer that opened them (with a cluster
	// certificate) is no longer a member when it opens them: not in its
	// placement table, and not live in gossip. Links are made with
	// members only, so these come from nodes that left after linking.
	StreamsRefused uint64
}

// FederationStats returns the node's federation counters (zero for a
// standalone node).
func (n *Node) FederationStats() FederationStats { return FederationStats(n.rt().Counters()) }

// ReplicationStats returns the counters of the replication of state at
// rest (all zero on a node outside a cluster).
func (n *Node) ReplicationStats() replica.Stats {
	if n.repl == nil {
		return replica.Stats{}
	}
	return n.repl.Stats()
}

// ReplicaLag is how far one follower is behind this node, as the owner
// of shards whose in-sync sets hold it.
type ReplicaLag struct {
	replica.Lag
	// Shards counts the shards this node owns, by its applied table,
	// whose in-sync set has the follower.
	Shards int
}

// ReplicationLag returns, for every follower of a shard this node owns
// and every node it is sending records to or catching up, what that
// follower has not acknowledged yet. Sorted by follower; nil on a node
// outside a cluster.
func (n *Node) ReplicationLag() []ReplicaLag {
	shards := n.rt().FollowedShards()
	if n.repl == nil || shards == nil {
		return nil
	}
	var out []ReplicaLag
	for _, l := range n.repl.Lags() {
		k := shards[l.Follower]
		delete(shards, l.Follower)
		if k == 0 && l.Queued == 0 && l.InFlight == 0 && !l.CatchingUp {
			continue // a former follower with nothing pending
		}
		out = append(out, ReplicaLag{Lag: l, Shards: k})
	}
	for f, k := range shards { // followers sent nothing yet
		out = append(out, ReplicaLag{Lag: replica.Lag{Follower: f, SinceAck: -1}, Shards: k})
	}
	slices.SortFunc(out, func(a, b ReplicaLag) int { return strings.Compare(a.Follower, b.Follower) })
	return out
}

// PolicyViews returns, for every kind in this node's applied placement
// table, the digest the cluster agrees on and the nodes that publish
// another (see placement.Table.Policy). nil for a standalone node.
func (n *Node) PolicyViews() []placement.PolicyView {
	return n.rt().PolicyViews()
}

// PolicyDisagreements returns the views of PolicyViews in which some
// live node publishes a digest other than the agreed one: the kinds a
// rolling upgrade has not finished for. Those nodes own none of the
// kind's shards until they agree.
func (n *Node) PolicyDisagreements() []placement.PolicyView {
	return n.rt().PolicyDisagreements()
}

// host is the node as its cluster engine sees it.
type host struct{ n *Node }

var _ cluster.Host = host{}

func (h host) Running() (*reminders.Holder, error) {
	r, err := h.n.running()
	if err != nil {
		return nil, err
	}
	return r.hold, nil
}

func (h host) Hosts(kind string) bool { return h.n.kind(kind) != nil }

func (h host) StatusHere(ctx context.Context, ref actor.Ref) (cluster.Status, error) {
	st, err := h.n.statusHere(ctx, ref)
	return cluster.Status(st), err
}

func (h host) PassivateHere(ctx context.Context, ref actor.Ref) error {
	return h.n.passivateHere(ctx, ref)
}

func (h host) ListReminders(ctx context.Context, ref actor.Ref) ([]reminders.Info, error) {
	rem := h.n.Reminders()
	e, err := rem.engine()
	if err != nil {
		return nil, err
	}
	return rem.listHere(ctx, e, ref)
}

func (h host) CancelReminder(ctx context.Context, ref actor.Ref, name string) error {
	rem := h.n.Reminders()
	e, err := rem.engine()
	if err != nil {
		return err
	}
	return rem.cancelHere(ctx, e, ref, name)
}
