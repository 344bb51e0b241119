package placement

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// Log attribute keys.
const (
	logKeyNode  = "node"
	logKeyPeer  = "peer"
	logKeyErr   = "err"
	logKeyShard = "shard"
)

// Node is one node's placement: a raft member holding the replicated
// table, the leader's reconciler and planner, and the fence that decides
// whether this node may serve a shard right now.
//
// Methods are safe for concurrent use. Start it once; Close stops every
// goroutine it started and shuts raft down.
type Node struct {
	cfg   Config
	kinds []KindSpec // cfg.Kinds normalised, as the table holds them
	log   *slog.Logger
	clock Clock
	fsm   *FSM
	lease Lease
	// lapseGap is cfg.LapseGap().
	lapseGap time.Duration

	wal       *raftwal.WAL
	meta      *metadb.BoltMetaDB
	mark      *logMark
	snaps     *raft.FileSnapshotStore
	raft      *raft.Raft
	observer  *raft.Observer
	obsCh     chan raft.Observation
	hadState  bool
	startNano int64

	kick      chan struct{}
	confirmCh chan Move
	refuseCh  chan Move
	witnessCh chan witnessed

	mu      sync.Mutex
	started bool
	closed  bool
	leaving bool
	// storeFailing is what ReportStore last said: why this node's state
	// store cannot write, "" when it can; storeKnown once it said
	// anything. selfReport proposes it.
	storeFailing string
	storeKnown   bool
	verifiedAt   time.Time // lease anchor of the last quorum-confirmed leadership check (see leaderAnchor)
	// verifiedStart is the start of that check: a leader's gaps in
	// contact are looked for between these, not between anchors, which
	// may lag a round behind (leaderAnchor) without contact lost.
	verifiedStart time.Time
	prevAnchor    time.Time // lease anchor (a leader's: verifiedStart) at the previous look
	prevTerm      uint64    // the term that anchor was renewed in (0: unknown)
	lapsed        bool      // lease lapsed since the last completed sync barrier
	syncNonce     string    // barrier requested since the lapse ("" = none yet)
	syncCount     uint64
	failing       map[string]time.Time // peers whose heartbeats fail → last contact
	// failNoted is when each failure in failing was observed (clock
	// frame): a peer that answered a heartbeat since is not failing,
	// whatever raft reports (see stillFailing).
	failNoted map[string]time.Time
	// leaderSeen is the last leader raft reported (self included);
	// prevLeader and prevContact are, while this node leads, the leader
	// before it and this node's last contact with that one.
	leaderSeen  string
	prevLeader  string
	prevContact time.Time
	// presumed is the previous leader while it counts as failing from
	// prevContact without a failed heartbeat; "" once it answered one.
	presumed string
	// witnessSeen is the last witness of a previous leader this node
	// got while leading (see askWitnesses).
	witnessSeen witnessed
	// caughtUpTerm is the term in which this leader's applied table
	// caught up with its log (a barrier applied). See syncHeld.
	caughtUpTerm uint64
	// leaderStart is when this node's current term as leader began
	// (written by the run goroutine, under mu).
	leaderStart time.Time
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	// raftWaits counts the goroutines waiting for a raft future (a
	// VerifyLeader round, verifyLeader; an Apply, applyLocal, whose
	// caller may be another node's loop through forwarding): Close lets
	// raft answer them before it shuts raft down, since raft leaves a
	// future it has queued but not taken unanswered forever once it is
	// shut down. Added to under mu, and not once closed is set.
	raftWaits sync.WaitGroup

	// Owned by the run goroutine.
	planner   *Planner
	deadSince map[string]time.Time
	// backSince: when a peer's gossip state turned alive again after it
	// was not (a restart). Raft failures of the previous process count
	// only from then (raftLost).
	backSince  map[string]time.Time
	transfers  map[ShardRef]Move
	viewKey    string
	viewSince  time.Time
	bootstrapd bool
	wasLeader  bool
	// witnessAsked is the term whose predecessor's witnesses were asked
	// for; witness the answer, while it holds (see applyWitness).
	witnessAsked uint64
	witness      witnessed
	// stepTable is the table the leader's passes last read, unchanged
	// while stepChanged is open (see stepRead).
	stepTable   *Table
	stepChanged <-chan struct{}
	// plannedAt is the instant of the planner's last Step: the deadlines
	// at or before it were acted on, so the loop wakes for the next one
	// after it, not at once for one that passed (a down node stays in
	// the table, its fence long over).
	plannedAt time.Time
}

// logCacheEntries is how many of the newest raft entries are kept in
// memory (raft.LogCache), as Consul and Nomad keep theirs.
const logCacheEntries = 512

// stepRead returns the current table for the leader's pass, copying it
// only when it changed since the last pass read it. The result is shared
// between passes: it must not be modified.
func (n *Node) stepRead() *Table {
	n.stepTable, n.stepChanged = n.fsm.tableSince(n.stepTable, n.stepChanged)
	return n.stepTable
}

// witnessed is what a new leader learnt from its voters of the leader
// before it (see askWitnesses).
type witnessed struct {
	term uint64
	node string
	// contact is this node's last contact with node as its follower;
	// at bounds node's last lease renewal (both in the clock's frame).
	contact, at time.Time
}

// New opens the raft stores in cfg.DataDir and creates the raft
// instance. Call Start to run it.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	log := cfg.Logger.With(logKeyNode, cfg.Name)
	kinds, _ := normalizeKinds(cfg.Kinds) // Validate checked them
	n := &Node{
		cfg:       cfg,
		kinds:     kinds,
		log:       log,
		clock:     cfg.Clock,
		fsm:       NewFSM(),
		lease:     Lease{Duration: cfg.Lease},
		lapseGap:  cfg.LapseGap(),
		obsCh:     make(chan raft.Observation, 64),
		kick:      make(chan struct{}, 1),
		confirmCh: make(chan Move, 64),
		refuseCh:  make(chan Move, 64),
		witnessCh: make(chan witnessed, 1),
		startNano: time.Now().UnixNano(),
		failing:   map[string]time.Time{},
		failNoted: map[string]time.Time{},
		deadSince: map[string]time.Time{},
		backSince: map[string]time.Time{},
		transfers: map[ShardRef]Move{},
		planner: NewPlanner(PlannerConfig{
			FenceDelay:   FenceDelay(cfg.Lease, cfg.ClockDrift, cfg.LeaseMargin),
			MaxMoving:    cfg.MaxMoving,
			ConfirmMoves: cfg.Handoff != nil,
		}),
	}
	walDir := filepath.Join(cfg.DataDir, "raft", "wal")
	if err := checkRaftDir(cfg.DataDir, cfg.Name); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(walDir, metadb.FileName))
	created := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
			// raft/ or raft/wal is a file: damage. A full disk, a
			// read-only file system or permissions are not.
			return nil, damaged(walDir, fmt.Errorf("placement: %w", err))
		}
		return nil, fmt.Errorf("placement: %w", err)
	}
	hl := newHCLog(cfg.Logger.With(logKeyNode, cfg.Name), "raft", cfg.Clock.Now)
	// The WAL does not close its metadata database on Close (it holds a
	// file lock), so the node owns it and closes it after the WAL.
	meta := &metadb.BoltMetaDB{}
	if err := loadWALMeta(walDir, meta); err != nil {
		_ = meta.Close()
		return nil, err
	}
	wal, err := raftwal.Open(walDir, raftwal.WithSegmentSize(cfg.WALSegmentSize),
		raftwal.WithLogger(hl.Named("wal")), raftwal.WithMetaStore(meta))
	if err != nil {
		_ = meta.Close()
		// wal-meta.db read back above: what fails now is a segment.
		return nil, damaged(walDir, fmt.Errorf("placement: open raft log: %w", err))
	}
	closeWAL := func() { _ = wal.Close(); _ = meta.Close() }
	snapIndex, err := verifySnapshots(filepath.Join(cfg.DataDir, "raft", "snapshots"))
	if err != nil {
		closeWAL()
		return nil, err
	}
	history, err := raftHistory(wal, wal, snapIndex)
	if err != nil {
		closeWAL()
		return nil, &CorruptError{Path: filepath.Join(walDir, "wal-meta.db"), Err: err}
	}
	if err := checkMemberFile(cfg.DataDir, history); err != nil {
		closeWAL()
		return nil, err
	}
	mark, err := openLogMark(filepath.Join(cfg.DataDir, "raft", markFile), history)
	if err != nil {
		closeWAL()
		return nil, err
	}
	closeWAL = func() { _ = wal.Close(); _ = meta.Close(); _ = mark.close() }
	// Data IDs recorded by entries in the log are expected of their
	// nodes before those entries are applied, which after a restart waits
	// for a leader (see LoadDataID).
	logged := map[string]loggedDataID{}
	seen := func(l *raft.Log, c Command) {
		if c.Op == OpDataID && c.DataID != "" {
			logged[c.Name] = loggedDataID{id: c.DataID, index: l.Index, term: l.Term}
		}
	}
	if err := verifyLog(walDir, created, wal, snapIndex, mark.get(), seen); err != nil {
		closeWAL()
		return nil, err
	}
	if err := markRaftDir(cfg.DataDir, cfg.Name); err != nil {
		closeWAL()
		return nil, err
	}
	// Recent entries are kept in memory too: a leader reads every entry
	// back to replicate it, and raft-wal's read checks each frame.
	logs, err := raft.NewLogCache(logCacheEntries, &markedLog{LogStore: wal, mark: mark})
	if err != nil {
		closeWAL()
		return nil, fmt.Errorf("placement: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.DataDir, "raft"), 2, hl.Named("snapshots"))
	if err != nil {
		closeWAL()
		return nil, damaged(filepath.Join(cfg.DataDir, "raft", "snapshots"), fmt.Errorf("placement: open snapshots: %w", err))
	}
	has, err := raft.HasExistingState(logs, wal, snaps)
	if err != nil {
		closeWAL()
		return nil, fmt.Errorf("placement: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.Name)
	rc.Logger = hl
	// Raft also emits every per-peer metric a second time with the peer's
	// name inside the metric name; the labelled form (peer_id) is enough.
	rc.NoLegacyTelemetry = true
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	// A removed node keeps running as a follower that hears from no
	// leader: its lease lapses and it stops serving; if re-added it
	// catches up. Shutting it down would need a restart to rejoin.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		closeWAL()
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, wal, snaps, cfg.Transport)
	if err != nil {
		closeWAL()
		return nil, fmt.Errorf("placement: start raft: %w", err)
	}
	n.wal, n.meta, n.mark, n.snaps, n.raft, n.hadState = wal, meta, mark, snaps, r, has
	n.fsm.setLogged(logged)
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation, raft.PeerObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(n.observer)
	return n, nil
}

// Start runs the node's goroutines until ctx ends or Close is called.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if n.started {
		return nil
	}
	n.started = true
	ctx, n.cancel = context.WithCancel(ctx)
	n.wg.Add(3)
	go n.run(ctx)
	go n.observe(ctx)
	go n.verifyLoop(ctx)
	return nil
}

// Close shuts raft down, closes its stores and waits (until ctx ends)
// for the node's goroutines to stop; raft's shutdown too is waited for
// until ctx ends only (its stores are then left open). It does not leave
// the cluster (see Leave). Idempotent.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	cancel := n.cancel
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	// A VerifyLeader round or a proposal raft took (this node's own, or
	// one another node forwarded here) is answered within a round of
	// heartbeats or a commit (or when it steps down) while raft
	// runs; one it took just as it shuts down may never be (an Apply
	// future has no shutdown channel), and its waiter would be left
	// behind: the run loop, stopped by cancel, blocked in Close's wait
	// below forever. So our goroutines get up to 2 s to finish first.
	verified := make(chan struct{})
	go func() { n.raftWaits.Wait(); close(verified) }()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	settle, stop := context.WithTimeout(ctx, 2*time.Second)
	for _, ch := range []chan struct{}{verified, done} {
		select {
		case <-ch:
		case <-settle.Done():
		}
	}
	stop()
	// Then shut raft down: it fails what our goroutines may still be
	// blocked on (a Handoff that ignores its context aside).
	n.raft.DeregisterObserver(n.observer)
	shut := make(chan error, 1)
	go func() { shut <- n.raft.Shutdown().Error() }()
	var err error
	select {
	case err = <-shut:
	case <-ctx.Done():
		// Raft's goroutines did not stop (a replication stuck in its
		// transport, say): its stores stay open under them, and the
		// caller (a process about to exit) is not held past ctx.
		return fmt.Errorf("placement: close: raft did not shut down: %w", ctx.Err())
	}
	// Raft closes the transport (its listener) but not the pooled
	// outgoing connections, whose server-side goroutines on the peers
	// would otherwise wait on them forever.
	if cs, ok := n.cfg.Transport.(interface{ CloseStreams() }); ok {
		cs.CloseStreams()
	}
	// Raft no longer touches its stores once Shutdown returned, but for
	// heartbeats its transport is still handling (see StopHeartbeats).
	if st, ok := n.cfg.Transport.(interface{ StopHeartbeats() }); ok {
		st.StopHeartbeats()
	}
	if cerr := n.wal.Close(); err == nil {
		err = cerr
	}
	if cerr := n.meta.Close(); err == nil {
		err = cerr
	}
	if cerr := n.mark.close(); err == nil {
		err = cerr
	}
	select {
	case <-done:
	case <-ctx.Done():
		// Only a Handoff that ignores its context can hold us here.
		return ctx.Err()
	}
	return err
}

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// FSM returns the node's state machine (read access to the table).
func (n *Node) FSM() *FSM { return n.fsm }

// Table returns a copy of the applied table.
func (n *Node) Table() *Table { return n.fsm.Table() }

// Changed returns a channel closed at the next change of the table.
func (n *Node) Changed() <-chan struct{} { return n.fsm.Changed() }

// IsLeader reports whether this node is the raft leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the current leader's name ("" if unknown).
func (n *Node) Leader() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

// Term returns the current raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// Raft exposes the raft instance for status pages and tests. Do not
// apply commands through it directly.
func (n *Node) Raft() *raft.Raft { return n.raft }

// Snapshot forces a raft snapshot (operators; tests).
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Locate returns where kind/key lives according to the applied table.
func (n *Node) Locate(kind, key string) (Location, error) {
	var loc Location
	var err error
	n.fsm.Read(func(t *Table) { loc, err = t.Locate(kind, key) })
	return loc, err
}

// Owner returns the shard's entry in the applied table.
func (n *Node) Owner(ref ShardRef) (Shard, bool) {
	var s Shard
	var ok bool
	n.fsm.Read(func(t *Table) { s, ok = t.Shard(ref) })
	return s, ok
}

// LeaseAnchor returns the instant (in the configured clock's frame) this
// node's lease was last renewed: as a follower its last contact from a
// leader (the receipt of the last heartbeat it accepted when the
// transport is a HeartbeatClock); while it leads (or has not yet seen its own step-down) the
// renewal its last quorum-confirmed leadership check gave (leaderAnchor).
// Raft's contact
// time is no renewal while leading: it dates from before the election,
// and raft stamps it anew at a step-down, when no leader granted
// anything. Zero if never.
func (n *Node) LeaseAnchor() time.Time {
	a, _, _ := n.leaseAnchors()
	return a
}

// leaseAnchors returns LeaseAnchor, the instant whose gaps count as lost
// contact (the same for a follower, the start of the last successful
// check for a leader) and the term it was renewed in (0 if unknown).
func (n *Node) leaseAnchors() (anchor, contact time.Time, term uint64) {
	n.mu.Lock()
	leading, verified, started := n.leaderSeen == n.cfg.Name, n.verifiedAt, n.verifiedStart
	n.mu.Unlock()
	if leading || n.raft.State() == raft.Leader {
		return verified, started, n.raft.CurrentTerm()
	}
	a, term := n.followerAnchor()
	return a, a, term
}

// LeaseFresh reports whether this node's lease is fresh at now: it
// heard from a leader within the lease, and has not lost contact for
// longer than half a lease since it last completed a sync barrier.
//
// Why the barrier: a node cut off for a while keeps its stale table.
// When contact resumes, heartbeats renew the lease before the log has
// caught up, and for that moment the stale table may still name it the
// owner of shards that were reassigned meanwhile. So a node that saw a
// gap in contact (or just started) treats itself as lapsed and proposes
// an OpSync barrier with a fresh nonce; once it applies its own nonce,
// its table contains every change committed before it.
func (n *Node) LeaseFresh(now time.Time) bool { return !n.LeaseUntil(now).IsZero() }

// LeaseUntil is LeaseFresh that also says how long the lease lasts: when
// it is fresh at now, the instant it runs out unless renewed (the anchor
// it was renewed at plus the lease, on the same clock as now); otherwise
// the zero time.
func (n *Node) LeaseUntil(now time.Time) time.Time {
	a, contact, term := n.leaseAnchors()
	fresh := n.lease.Fresh(a, now)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.noteAnchorLocked(contact, term, fresh)
	if !fresh || n.lapsed {
		return time.Time{}
	}
	return a.Add(n.lease.Duration)
}

// noteAnchorLocked detects lapses: an expired lease, a jump between
// consecutive anchors of more than LapseGap (contact was lost and
// regained between two looks, or this process stalled while renewals
// queued up; looks happen at least every LapseGap/4), or a renewal in a
// newer term than the last one: a new leader renews this node before
// its table shows what the new leader committed first (a crashed
// predecessor marked down, see "A crashed leader's fence"), so the node
// serves again only after its barrier of the new term.
func (n *Node) noteAnchorLocked(a time.Time, term uint64, fresh bool) {
	if term > n.prevTerm && n.prevTerm != 0 {
		// A barrier asked for before (its entry may still be in a log the
		// new leader commits early) must not end this lapse: only one
		// asked for now, in the new term, follows what that leader
		// committed first.
		n.lapsed, n.syncNonce = true, ""
	}
	if !fresh || n.prevAnchor.IsZero() || a.Sub(n.prevAnchor) > n.lapseGap {
		if !n.lapsed {
			n.lapsed, n.syncNonce = true, ""
		}
	}
	if a.After(n.prevAnchor) {
		n.prevAnchor = a
	}
	if term > n.prevTerm {
		n.prevTerm = term
	}
}

// resync proposes (once per lapse) and then recognises this node's sync
// barrier.
func (n *Node) resync(ctx context.Context) {
	now := n.clock.Now()
	if !n.LeaseFreshRaw(now) {
		return
	}
	n.mu.Lock()
	if !n.lapsed {
		n.mu.Unlock()
		return
	}
	if n.syncNonce == "" {
		n.syncCount++
		n.syncNonce = fmt.Sprintf("%s/%d/%d", n.cfg.Name, n.startNano, n.syncCount)
	}
	nonce := n.syncNonce
	n.mu.Unlock()
	var have string
	n.fsm.Read(func(t *Table) {
		if ni, ok := t.Nodes[n.cfg.Name]; ok {
			have = ni.Sync
		}
	})
	if have == nonce {
		n.mu.Lock()
		if n.syncNonce == nonce {
			n.lapsed, n.syncNonce = false, ""
		}
		n.mu.Unlock()
		return
	}
	if n.cfg.Forwarder == nil && !n.IsLeader() {
		return // membership carries PendingSync to the leader
	}
	if _, err := n.Propose(ctx, Command{Op: OpSync, Name: n.cfg.Name, Nonce: nonce}); err != nil {
		n.log.Debug("placement: sync barrier", logKeyErr, err)
	}
}

// DataIDOf returns the data ID recorded for node name ("" if none): the
// data directory raft streams to it are meant for (GuardStreamLayer).
// It is the applied table's, or, until they are applied, that of the
// newest record in the log this node opened with.
func (n *Node) DataIDOf(name string) string {
	return n.fsm.dataIDOf(name, func(index, term uint64) bool {
		var l raft.Log
		return n.wal.GetLog(index, &l) == nil && l.Term == term
	})
}

// InCluster reports whether this node has raft state (it bootstrapped,
// was added by a leader, or restarted with data). Membership publishes it
// (Peer.InCluster) so that newcomers never bootstrap a second cluster.
func (n *Node) InCluster() bool {
	return n.hadState || n.raft.LastIndex() > 0
}

// PendingSync returns the nonce of the sync barrier this node waits for
// ("" if none). Membership publishes it in the node's gossip metadata so
// that the leader can apply the barrier even when followers cannot
// forward commands (see Peer.Sync).
func (n *Node) PendingSync() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.lapsed {
		return ""
	}
	return n.syncNonce
}

// LeaseFreshRaw reports lease freshness from contact alone, ignoring the
// sync barrier (status pages).
func (n *Node) LeaseFreshRaw(now time.Time) bool { return n.lease.Fresh(n.LeaseAnchor(), now) }

// Check is the fence: nil only if this node may serve ref right now for
// mail stamped with epoch (0 = unstamped). See CheckOwnership for the
// errors; callers map ErrLeaseExpired and ErrNodeDown to
// ErrProcessUnavailable, hold mail on ErrHandoff, and answer
// *NotOwnerError to the sender.
func (n *Node) Check(ref ShardRef, epoch uint64, now time.Time) error {
	fresh := n.LeaseFresh(now)
	var err error
	n.fsm.Read(func(t *Table) { err = CheckOwnership(t, n.cfg.Name, ref, epoch, fresh) })
	return err
}

// Propose applies c through raft: directly on the leader, through the
// Forwarder elsewhere (ErrNotLeader without one). An error wrapping
// raft.ErrLeadershipLost is indeterminate (the command may still
// commit); commands are idempotent, so retrying is safe.
func (n *Node) Propose(ctx context.Context, c Command) (Result, error) {
	b, err := c.Encode()
	if err != nil {
		return Result{}, err
	}
	if n.IsLeader() {
		return n.applyLocal(ctx, b)
	}
	leader := n.Leader()
	if n.cfg.Forwarder == nil || leader == "" {
		return Result{}, ErrNotLeader
	}
	return Result{}, n.cfg.Forwarder.Forward(ctx, leader, b)
}

// ApplyForwarded applies a command that node from forwarded (from is
// the name its link proved with the cluster certificate). It returns
// ErrNotLeader if this node is not the leader. A node may forward only
// changes of its own (see Forwardable); anything else fails with
// ErrNotForwardable. A command from this node itself (from its own name)
// is applied as it comes.
func (n *Node) ApplyForwarded(ctx context.Context, from string, cmd []byte) error {
	c, err := DecodeCommand(cmd)
	if err != nil {
		return err
	}
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if from != n.cfg.Name {
		n.fsm.Read(func(t *Table) { err = Forwardable(t, from, c) })
		if err != nil {
			return err
		}
	}
	if c.Op == OpSync && n.syncHeld(c.Name, n.raft.CurrentTerm()) {
		return fmt.Errorf("%w: %s led before this leader; its barrier waits for its down status", ErrSyncHeld, c.Name)
	}
	_, err = n.applyLocal(ctx, cmd)
	return err
}

func (n *Node) applyLocal(ctx context.Context, b []byte) (Result, error) {
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeout = d
		}
	}
	if timeout <= 0 {
		return Result{}, context.DeadlineExceeded
	}
	// The timeout bounds only the enqueueing: the wait for the future is
	// counted so that Close lets raft answer it first (see raftWaits).
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return Result{}, ErrClosed
	}
	n.raftWaits.Add(1)
	n.mu.Unlock()
	defer n.raftWaits.Done()
	f := n.raft.Apply(b, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return Result{}, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return Result{}, fmt.Errorf("placement: apply: %w", err)
	}
	r, _ := f.Response().(Result)
	return r, r.Err
}

// KindsPublished reports whether this node's applied table holds the
// kinds of Config.Kinds for it: until then the node owns none of their
// shards. Safe for concurrent use.
func (n *Node) KindsPublished() bool {
	ok := false
	n.fsm.Read(func(t *Table) {
		if ni, found := t.Nodes[n.cfg.Name]; found {
			ok = slices.EqualFunc(ni.Kinds, n.kinds, sameKind)
		}
	})
	return ok
}

// PublishKinds records the kinds this node hosts, with their
// requirements and policy digests (OpHosts), creating the group of any
// kind the table has not seen. Only this node's entry changes; the node
// must already be in the table (the leader adds it from membership),
// else the command is skipped and the caller publishes again later.
func (n *Node) PublishKinds(ctx context.Context, kinds []KindSpec) error {
	if _, err := normalizeKinds(kinds); err != nil {
		return err
	}
	_, err := n.Propose(ctx, Command{Op: OpHosts, Name: n.cfg.Name, Kinds: kinds})
	return err
}

// ReportStore says whether this node's state store can write: failing
// is why not (made valid UTF-8 and cut to 256 bytes), or "" once its
// writes work again. The node records it in its table entry (OpStore),
// retrying until it applied; while it says failing, the node is not
// eligible for any shard or replica set (Table.Eligible), so the leader
// hands its shards to other nodes and the owners of the shards it
// follows replicate to others instead. Until ReportStore is first
// called the node proposes nothing about its store, whatever its table
// entry says.
func (n *Node) ReportStore(failing string) {
	failing = storeReason(failing)
	n.mu.Lock()
	changed := n.storeFailing != failing || !n.storeKnown
	n.storeFailing, n.storeKnown = failing, true
	n.mu.Unlock()
	if changed {
		n.poke()
	}
}

// storeReason is failing as raft's JSON carries it unchanged: valid
// UTF-8 (JSON would replace each bad byte with three), at most
// maxFailingLen bytes. Otherwise the table's copy would never equal the
// node's, and it would propose its report again at every step.
func storeReason(failing string) string {
	failing = strings.ToValidUTF8(failing, "")
	if len(failing) > maxFailingLen {
		failing = strings.ToValidUTF8(failing[:maxFailingLen], "")
	}
	return failing
}

// Leave drains this node: it asks for status draining, waits until every
// shard it owns has been handed off (or ctx ends), and, if it is the
// leader, transfers leadership. Call it before membership's leave. Once
// this node is draining while it still owns shards and no other node in
// the table is up with a store that writes, nothing can take them: it
// returns ErrNoDrainTarget then rather than wait for ctx.
func (n *Node) Leave(ctx context.Context) error {
	n.mu.Lock()
	n.leaving = true
	n.mu.Unlock()
	n.poke()
	retry := time.NewTicker(n.cfg.ReconcileInterval / 4)
	defer retry.Stop()
	proposed := false
	for {
		ch := n.fsm.Changed()
		var owned, up int
		var status NodeStatus
		n.fsm.Read(func(t *Table) {
			owned = len(t.Owned(n.cfg.Name))
			if ni, ok := t.Nodes[n.cfg.Name]; ok {
				status = ni.Status
			}
			for name, ni := range t.Nodes {
				if name != n.cfg.Name && ni.Status == StatusUp && ni.StoreFailing == "" {
					up++
				}
			}
		})
		if status != StatusDraining && status != StatusDown && !proposed {
			if _, err := n.Propose(ctx, Command{Op: OpStatus, Name: n.cfg.Name, Status: StatusDraining}); err != nil {
				n.log.Debug("placement: leave: propose draining", logKeyErr, err)
			} else {
				proposed = true
			}
		}
		if owned == 0 && (status == StatusDraining || status == StatusDown || status == 0) {
			break
		}
		if status == StatusDraining && up == 0 {
			return fmt.Errorf("%w (%d shards)", ErrNoDrainTarget, owned)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-retry.C:
			proposed = false
		}
	}
	if n.IsLeader() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("placement: leadership transfer: %w", err)
		}
	}
	return nil
}

func (n *Node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// observe turns raft observations into leader-side contact tracking.
func (n *Node) observe(ctx context.Context) {
	defer n.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-n.obsCh:
			n.noteContact(o, n.inConfiguration, n.leaderContact)
			n.poke()
		}
	}
}

// noteContact records what a raft observation says about the leader's
// contact with a peer. inConfig reports whether a peer is in the latest
// raft configuration; lastContact is this node's own last contact with
// a leader (raft's LastContact, in the clock's frame).
//
// raft reports that heartbeats resumed only from the replication that saw
// them fail. When a peer is removed (it left) its replication stops, and a
// heartbeat already in flight may still fail after the removal; when the
// peer comes back under the same name it gets a new replication, which
// never reports that the old one's failures are over. A failure recorded
// from the old replication would then mark the returning node down for as
// long as this leader leads. So a failure from a peer outside the
// configuration is ignored, and starting or stopping a peer's replication
// forgets its failures.
//
// A new leader's replication to a peer starts with the election as its
// last contact, so a crashed leader would be noticed only DownAfter
// after the election that replaced it. The new leader knows better: it
// last heard from the previous leader when it last had contact as a
// follower (it campaigned because that contact stopped), so a failure
// of the previous leader counts from then.
//
// A leader that steps down lapses: raft stamps its contact time at the
// step-down, which must not renew a lease that no leader granted.
func (n *Node) noteContact(o raft.Observation, inConfig func(raft.ServerID) bool, lastContact func() time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch d := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		if !inConfig(d.PeerID) {
			return
		}
		if string(d.PeerID) == n.presumed {
			n.presumed = "" // failing for real now
			if _, ok := n.failing[string(d.PeerID)]; ok {
				n.failNoted[string(d.PeerID)] = n.clock.Now()
			}
		}
		if _, ok := n.failing[string(d.PeerID)]; !ok {
			at := n.clock.Now()
			if !d.LastContact.IsZero() {
				at = at.Add(-time.Since(d.LastContact))
			}
			if string(d.PeerID) == n.prevLeader && !n.prevContact.IsZero() && n.prevContact.Before(at) {
				at = n.prevContact
			}
			n.noteFailingLocked(string(d.PeerID), at, n.clock.Now())
		}
	case raft.ResumedHeartbeatObservation:
		n.forgetFailingLocked(string(d.PeerID))
	case raft.PeerObservation:
		if string(d.Peer.ID) == n.presumed && !d.Removed {
			// The replication this term starts for the previous leader:
			// its presumed failure is this term's, keep it.
			return
		}
		n.forgetFailingLocked(string(d.Peer.ID))
	case raft.LeaderObservation:
		clear(n.failing)
		clear(n.failNoted)
		n.presumed = ""
		id, self := string(d.LeaderID), n.cfg.Name
		if n.leaderSeen == self && id != self {
			n.lapsed, n.syncNonce = true, ""
			if a, ok := n.cfg.Transport.(requestAborter); ok {
				// Its appends and heartbeats in flight are stale now.
				a.abortRequests()
			}
		}
		switch {
		case id == self && n.leaderSeen != self:
			n.prevLeader, n.prevContact = n.leaderSeen, lastContact()
			if _, ok := n.cfg.Transport.(HeartbeatClock); ok && n.prevLeader != "" && !n.prevContact.IsZero() && inConfig(raft.ServerID(n.prevLeader)) {
				// Failing since then, unless it answers a heartbeat of
				// this term (reconcileNodes asks the transport).
				n.noteFailingLocked(n.prevLeader, n.prevContact, n.prevContact)
				n.presumed = n.prevLeader
			}
		case id != self:
			n.prevLeader, n.prevContact = "", time.Time{}
		}
		if id != "" || n.leaderSeen == self {
			n.leaderSeen = id
		}
	}
}

// noteFailingLocked records peer as failing since (its last contact),
// observed at noted. Guarded by mu.
func (n *Node) noteFailingLocked(peer string, since, noted time.Time) {
	if n.failNoted == nil {
		n.failNoted = map[string]time.Time{}
	}
	n.failing[peer], n.failNoted[peer] = since, noted
}

// forgetFailingLocked: peer is not failing. Guarded by mu.
func (n *Node) forgetFailingLocked(peer string) {
	delete(n.failing, peer)
	delete(n.failNoted, peer)
}

// stillFailing returns the failing peers (→ since when) after dropping
// those that answered a heartbeat since their failure was observed. That
// covers the previous leader presumed failing, which raft never saw fail,
// and any failure whose end raft never reports: a heartbeat of a
// replication stopped meanwhile (the peer left and came back, or was
// removed and added again) that fails after the new replication started,
// which never saw a failure and so never reports heartbeats resumed.
// Kept, such a failure would hold a running, answering node down for as
// long as this leader leads.
func (n *Node) stillFailing() map[string]time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	failing := make(map[string]time.Time, len(n.failing))
	for k, v := range n.failing {
		if noted, ok := n.failNoted[k]; ok && n.answeredSince(k, noted) {
			n.forgetFailingLocked(k)
			if k == n.presumed {
				n.presumed = ""
			}
			continue
		}
		failing[k] = v
	}
	return failing
}

// syncHeld reports whether this leader, in term, must not yet commit
// node's sync barrier: node led before it, has answered none of this term's
// heartbeats, and is not down in the applied table. Its barrier then
// follows its down status in the log, so it applies that status before
// it may serve again in this term (a node lapses when it steps down and
// when a new term renews it): renewals in this term cannot make it
// serve, which "A crashed leader's fence" relies on. Without Witnesses
// no fence depends on it, and nothing is held.
func (n *Node) syncHeld(node string, term uint64) bool {
	if n.cfg.Witnesses == nil || node == n.cfg.Name {
		return false
	}
	if _, ok := n.cfg.Transport.(LeaseWitness); !ok {
		return false // no witness is taken, and answers cannot be seen
	}
	n.mu.Lock()
	// Before this node handled the observation of its own election,
	// leaderSeen still names the leader it followed.
	unseen := n.leaderSeen == node
	prev, contact := n.prevLeader, n.prevContact
	caughtUp, leading := n.caughtUpTerm, n.leaderStart
	n.mu.Unlock()
	switch {
	case unseen:
		// An observation raft dropped must not hold it for the term: an
		// answer since this node leads releases it.
		if !leading.IsZero() && n.answeredSince(node, leading) {
			return false
		}
	case node != prev || n.answeredSince(node, contact):
		return false
	}
	if caughtUp != term {
		return true // the applied table may lag the log: its status of node too
	}
	down := false
	n.fsm.Read(func(t *Table) {
		ni, ok := t.Nodes[node]
		down = ok && ni.Status == StatusDown
	})
	return !down
}

func (n *Node) caughtUpTermNow() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.caughtUpTerm
}

// leaderContact is this node's last contact with a leader, in the
// clock's frame: the last heartbeat it accepted when the transport
// tells (raft's LastContact also counts votes this node granted).
func (n *Node) leaderContact() time.Time {
	a, _ := n.followerAnchor()
	return a
}

// followerAnchor is leaderContact and, when the transport tells, the
// term of that heartbeat (0 if not).
func (n *Node) followerAnchor() (time.Time, uint64) {
	if hc, ok := n.cfg.Transport.(HeartbeatClock); ok {
		hb, term := hc.LastHeartbeatTerm()
		if hb.IsZero() {
			return time.Time{}, 0
		}
		return n.clock.Now().Add(-time.Since(hb)), term
	}
	return n.lastContact(), 0
}

// answeredSince reports whether the transport saw peer answer a
// heartbeat after since (clock frame); false if it cannot tell.
func (n *Node) answeredSince(peer string, since time.Time) bool {
	hc, ok := n.cfg.Transport.(HeartbeatClock)
	if !ok {
		return false
	}
	at := hc.LastAnswer(raft.ServerID(peer))
	if at.IsZero() {
		return false
	}
	return n.clock.Now().Add(-time.Since(at)).After(since)
}

// lastContact is raft's LastContact in the clock's frame (zero if none).
func (n *Node) lastContact() time.Time {
	lc := n.raft.LastContact()
	if lc.IsZero() {
		return time.Time{}
	}
	return n.clock.Now().Add(-time.Since(lc))
}

// inConfiguration reports whether id is in the latest raft configuration
// (committed or not).
func (n *Node) inConfiguration(id raft.ServerID) bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return true // unknown: keep the observation
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return true
		}
	}
	return false
}

// verifyLoop renews the leader's own lease: the start of each successful
// VerifyLeader round is an instant at which a quorum still followed us.
func (n *Node) verifyLoop(ctx context.Context) {
	defer n.wg.Done()
	// Looks often enough that the ordinary spacing of renewals stays
	// well below the lapse gap: a look sees the anchor advance by at most
	// about a period plus the spacing of heartbeats. The leader checks
	// its leadership every other look: its anchor then advances by about
	// half a lapse gap plus one round trip.
	period := max(n.lapseGap/4, 10*time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.LeaseFresh(n.clock.Now()) // look at the anchor often enough to see gaps
		if tick%2 != 0 || n.raft.State() != raft.Leader {
			continue
		}
		start := n.clock.Now()
		if err := n.verifyLeader(ctx); err != nil {
			continue
		}
		anchor, ok := n.leaderAnchor(start)
		n.mu.Lock()
		if start.After(n.verifiedStart) {
			n.verifiedStart = start
		}
		if ok && anchor.After(n.verifiedAt) {
			n.verifiedAt = anchor
		}
		n.mu.Unlock()
	}
}

// leaderAnchor is the renewal a successful VerifyLeader round that
// began at start gives this leader: start, or earlier, the send of the
// latest heartbeat that a quorum of voters (this one included) accepted
// when the transport tells (LeaseWitness). The round may count answers
// to appends sent before it began; a heartbeat's send precedes its
// receipt, which the voter that accepted it can vouch for when a new
// leader asks (see "A crashed leader's fence"). False when no quorum
// accepted a heartbeat yet.
func (n *Node) leaderAnchor(start time.Time) (time.Time, bool) {
	lw, ok := n.cfg.Transport.(LeaseWitness)
	if !ok {
		return start, true
	}
	others, err := n.otherVoters()
	if err != nil {
		return time.Time{}, false
	}
	// A quorum of len(others)+1 voters is this one and len(others)/2 more.
	need := (len(others) + 1) / 2
	if need == 0 {
		return start, true
	}
	hb := lw.QuorumAnswered(others, need)
	if hb.IsZero() {
		return time.Time{}, false
	}
	if at := n.clock.Now().Add(-time.Since(hb)); at.Before(start) {
		return at, true
	}
	return start, true
}

// otherVoters are the voters of the latest raft configuration but this
// node.
func (n *Node) otherVoters() ([]raft.ServerID, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var others []raft.ServerID
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.Name {
			others = append(others, s.ID)
		}
	}
	return others, nil
}

// Witness answers a new leader of term that asks when the leader before
// it could last have renewed a lease (Config.Witnesses): how long ago,
// on this node's clock, it last accepted or sent a heartbeat of a term
// below term, or started, whichever was later. From then on it accepts
// and sends no heartbeat of an older term, so the answer stays true.
// ErrNoWitness if raft here has not reached term yet (ask again
// shortly) or the transport keeps no record of heartbeats.
func (n *Node) Witness(term uint64) (time.Duration, error) {
	lw, ok := n.cfg.Transport.(LeaseWitness)
	if !ok {
		return 0, fmt.Errorf("%w: the raft transport keeps no record of heartbeats", ErrNoWitness)
	}
	if cur := n.raft.CurrentTerm(); cur < term {
		return 0, fmt.Errorf("%w: this node is at term %d, asked about %d", ErrNoWitness, cur, term)
	}
	return max(time.Since(lw.Witness(term)), 0), nil
}

// askWitnesses runs on a new leader of term whose previous leader prev
// went silent (it last heard from it at contact): it asks every other
// voter for its Witness of term and, when all answer within budget,
// hands the run loop the latest instant any of them (or this node) saw
// a renewal of an older term. That bounds prev's last renewal: as
// leader through heartbeats a quorum accepted (leaderAnchor), as a
// follower through heartbeats a leader sent. Run by step, in a
// goroutine of its own.
func (n *Node) askWitnesses(ctx context.Context, term uint64, prev string, contact time.Time, others []string, budget time.Duration) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	latest := n.clock.Now().Add(-time.Since(n.cfg.Transport.(LeaseWitness).Witness(term)))
	answers := make(chan time.Time, len(others))
	for _, peer := range others {
		go func() {
			answers <- n.askWitness(ctx, peer, term)
		}()
	}
	ok := true
	for range others {
		at := <-answers
		switch {
		case at.IsZero():
			ok = false
		case at.After(latest):
			latest = at
		}
	}
	if !ok {
		n.log.Debug("placement: not every voter witnessed the previous leader's term; its fence counts from the election", "previous", prev)
		return
	}
	select {
	case n.witnessCh <- witnessed{term: term, node: prev, contact: contact, at: latest}:
	case <-ctx.Done():
	}
}

// askWitness asks peer for its Witness of term until it answers or ctx
// ends, and returns the bound it gives in this clock's frame (zero if
// none). The peer's clock may run faster than this one by ClockDrift,
// so its age counts for less here.
func (n *Node) askWitness(ctx context.Context, peer string, term uint64) time.Time {
	for {
		age, err := n.cfg.Witnesses.LeaseWitness(ctx, peer, term)
		if err == nil {
			return n.clock.Now().Add(-time.Duration(float64(age) / (1 + n.cfg.ClockDrift)))
		}
		if !errors.Is(err, ErrNoWitness) {
			n.log.Debug("placement: lease witness", "peer", peer, logKeyErr, err)
			return time.Time{}
		}
		t := time.NewTimer(witnessRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Time{}
		case <-t.C:
		}
	}
}

// witnessRetry spaces the questions to a voter whose raft has not yet
// reached the new term.
const witnessRetry = 20 * time.Millisecond

// applyWitness gives the planner the witness of this term's previous
// leader, or asks the voters for it, before a Step. The witness holds
// only while the previous leader has answered no heartbeat since this
// node last heard from it: once it answered, this leader may have
// renewed it, and a later down status of it is another failure, fenced
// from when it is seen.
func (n *Node) applyWitness(ctx context.Context) {
	if n.cfg.Witnesses == nil {
		return
	}
	if _, ok := n.cfg.Transport.(LeaseWitness); !ok {
		return
	}
	term := n.raft.CurrentTerm()
	if w := n.witness; w.node != "" {
		if w.term == term && !n.answeredSince(w.node, w.contact) {
			n.planner.Witnessed(w.node, w.at)
			return
		}
		n.planner.Witnessed(w.node, time.Time{})
		n.witness = witnessed{}
	}
	if n.witnessAsked == term {
		return
	}
	n.mu.Lock()
	prev, contact := n.prevLeader, n.prevContact
	_, failing := n.failing[prev]
	n.mu.Unlock()
	if prev == "" || !failing || n.answeredSince(prev, contact) {
		return // no previous leader, or it answered this term's heartbeats
	}
	voters, err := n.otherVoters()
	if err != nil {
		return
	}
	n.witnessAsked = term
	if !slices.Contains(voters, raft.ServerID(prev)) {
		return
	}
	var others []string
	for _, v := range voters {
		if string(v) != prev {
			others = append(others, string(v))
		}
	}
	// Past this the witness gains nothing over the fence counted from
	// the election.
	budget := n.planner.cfg.FenceDelay
	n.wg.Add(1)
	go n.askWitnesses(ctx, term, prev, contact, others, budget)
}

// verifyLeader runs one raft VerifyLeader round. Its future has no
// deadline, so the wait ends with ctx too; the goroutine left waiting
// for raft's answer is counted (raftWaits), and Close lets raft answer
// it before shutting raft down (a future queued then would never be).
func (n *Node) verifyLeader(ctx context.Context) error {
	// Counted under mu, and not once Close began: Close waits for the
	// count, which no Add may then race.
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	n.raftWaits.Add(1)
	n.mu.Unlock()
	f := n.raft.VerifyLeader()
	done := make(chan error, 1)
	go func() {
		defer n.raftWaits.Done()
		done <- f.Error()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the reconcile loop: bootstrap, then (on the leader) membership
// → table, voters, planner, handoffs.
func (n *Node) run(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.ReconcileInterval)
	defer t.Stop()
	// deadline wakes the loop when a fence delay of the planner runs out:
	// failover must not wait for the next periodic pass.
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()
	for {
		n.step(ctx)
		wake := time.Hour
		if at, ok := n.planner.NextDeadline(n.plannedAt); ok && n.wasLeader {
			wake = max(at.Sub(n.clock.Now()), time.Millisecond)
		}
		deadline.Reset(wake)
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
		case <-t.C:
		case <-n.kick:
		case <-n.cfg.Membership.Changed():
		case <-n.fsm.Changed():
		case <-n.raft.LeaderCh():
		case m := <-n.confirmCh:
			n.planner.Confirm(m)
			n.drainTransfers()
		case m := <-n.refuseCh:
			n.planner.Refuse(m)
			n.drainTransfers()
		case w := <-n.witnessCh:
			if n.wasLeader && w.term == n.raft.CurrentTerm() {
				n.witness = w
				n.mu.Lock()
				n.witnessSeen = w
				n.mu.Unlock()
				n.log.Info("placement: every voter witnessed when the previous leader went silent",
					"previous", w.node, "silentFor", n.clock.Now().Sub(w.at).Round(time.Millisecond))
			}
		}
	}
}

// drainTransfers hands the planner every transfer outcome already
// reported, so that one step completes (and replaces) all of them in one
// command each instead of paying a whole step, with its raft commits,
// per finished handoff: a draining node's shards finish as fast as they
// are shipped rather than one step at a time.
func (n *Node) drainTransfers() {
	for {
		select {
		case m := <-n.confirmCh:
			n.planner.Confirm(m)
		case m := <-n.refuseCh:
			n.planner.Refuse(m)
		default:
			return
		}
	}
}

func (n *Node) step(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	now := n.clock.Now()
	peers := n.cfg.Membership.Members()
	n.maybeBootstrap(peers, now)
	n.selfReport(ctx)
	n.resync(ctx)
	if n.raft.State() != raft.Leader {
		if n.wasLeader {
			// A future term starts its timers afresh: that only ever
			// delays a reassignment, never hastens it.
			n.planner = NewPlanner(n.planner.cfg)
			clear(n.deadSince)
			clear(n.backSince)
			clear(n.transfers)
			n.witness = witnessed{}
			n.wasLeader = false
		}
		return
	}
	if !n.wasLeader {
		n.mu.Lock()
		n.leaderStart = now
		n.mu.Unlock()
	}
	if term := n.raft.CurrentTerm(); n.caughtUpTermNow() != term {
		// Plan (and judge barriers, syncHeld) only from a table that has
		// applied everything committed before this term.
		if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
			n.log.Debug("placement: barrier of a new term", logKeyErr, err)
			return
		}
		n.mu.Lock()
		n.caughtUpTerm = term
		n.mu.Unlock()
	}
	if hold := n.leaderStart.Add(2 * n.cfg.LeaderLeaseTimeout); now.Before(hold) {
		// Refreshed while the hold lasts: the observation naming the
		// previous leader may be handled after this term's first step.
		n.mu.Lock()
		prev := n.prevLeader
		n.mu.Unlock()
		n.planner.Hold(hold, prev)
	}
	n.wasLeader = true
	n.reconcileNodes(ctx, peers, now)
	n.reconcileVoters(ctx, peers, now)
	n.applyWitness(ctx)
	table := n.stepRead()
	n.plannedAt = now
	for _, c := range n.planner.Step(table, now) {
		if _, err := n.Propose(ctx, c); err != nil {
			n.log.Debug("placement: propose plan", "op", c.Op, logKeyErr, err)
			return
		}
	}
	n.startTransfers(ctx)
}

func (n *Node) maybeBootstrap(peers []Peer, now time.Time) {
	if n.bootstrapd || n.hadState || n.cfg.BootstrapExpect == 0 {
		return
	}
	if n.raft.LastIndex() > 0 {
		n.bootstrapd = true // a leader already reached us
		return
	}
	var alive []string
	for _, p := range peers {
		if p.State == PeerAlive {
			alive = append(alive, fmt.Sprintf("%s/%t", p.Name, p.InCluster))
		}
	}
	slices.Sort(alive)
	key := fmt.Sprint(alive)
	if key != n.viewKey {
		n.viewKey, n.viewSince = key, now
		return
	}
	// The view must have held for a couple of reconcile periods: gossip
	// views differ briefly while they converge.
	if now.Sub(n.viewSince) < 2*n.cfg.ReconcileInterval {
		return
	}
	voters, ok := BootstrapDecision(n.cfg.Name, n.cfg.BootstrapExpect, peers, false)
	if !ok {
		return
	}
	conf := raft.Configuration{}
	for _, v := range voters {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v), Address: raft.ServerAddress(v)})
	}
	err := n.raft.BootstrapCluster(conf).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		n.log.Warn("placement: bootstrap failed", logKeyErr, err)
		return
	}
	n.bootstrapd = true
	n.log.Info("placement: bootstrapped cluster", "voters", voters)
}

// selfReport asks for status up when this node, not leaving, finds
// itself draining in the table (it left earlier and came back), and
// records its store's health (ReportStore) when the table differs.
func (n *Node) selfReport(ctx context.Context) {
	n.mu.Lock()
	leaving, failing, known := n.leaving, n.storeFailing, n.storeKnown
	n.mu.Unlock()
	var st NodeStatus
	published, reported := true, true
	n.fsm.Read(func(t *Table) {
		if ni, ok := t.Nodes[n.cfg.Name]; ok {
			st = ni.Status
			published = slices.EqualFunc(ni.Kinds, n.kinds, sameKind)
			reported = !known || ni.StoreFailing == failing
		}
	})
	if !reported {
		if _, err := n.Propose(ctx, Command{Op: OpStore, Name: n.cfg.Name, Failing: failing}); err != nil {
			n.log.Debug("placement: report store", logKeyErr, err)
		}
	}
	if leaving {
		return
	}
	if !published {
		// Only this node knows what it registered; gossip carries at most
		// the names. Until this applies it owns none of its kinds' shards.
		if err := n.PublishKinds(ctx, n.kinds); err != nil {
			n.log.Debug("placement: publish kinds", logKeyErr, err)
		}
	}
	if st == StatusDraining {
		if _, err := n.Propose(ctx, Command{Op: OpStatus, Name: n.cfg.Name, Status: StatusUp}); err != nil {
			n.log.Debug("placement: report up", logKeyErr, err)
		}
	}
}

// raftLostAt reports whether a peer whose raft heartbeats fail since
// since counts as lost at now: failing for downAfter, counted from no
// earlier than back, when gossip last saw it come back (zero: never). A
// restarted peer's previous process stopped answering before it left;
// the leader's failed heartbeat to it reports that process's last
// contact, which would mark the new one down as soon as it is back and
// abort every move to it.
func raftLostAt(since, back, now time.Time, downAfter time.Duration) bool {
	if back.After(since) {
		since = back
	}
	return now.Sub(since) >= downAfter
}

// returnedAt is when a peer that gossip sees alive again at now counts
// as back, for raftLostAt: now, unless raft has kept failing to reach it
// since before a return already counted (prev, the last one): a peer
// whose gossip state flaps between failed and alive while its raft
// heartbeats keep failing (a lossy or one-way link) would otherwise
// restart the clock at every flap and never be marked down, its shards
// never failing over. A restart is a first return within a failure (the
// previous process's), or ends the failure once raft reaches the new
// process.
func returnedAt(prev, failingSince time.Time, failing bool, now time.Time) time.Time {
	if failing && !prev.IsZero() && !prev.Before(failingSince) {
		return prev
	}
	return now
}

// reconcileNodes turns membership and raft contact into node commands.
func (n *Node) reconcileNodes(ctx context.Context, peers []Peer, now time.Time) {
	table := n.stepRead()
	if table.ShardCount == 0 {
		if _, err := n.Propose(ctx, Command{Op: OpInit, Shards: n.cfg.Shards, Replicas: n.cfg.Replicas}); err != nil {
			n.log.Debug("placement: init", logKeyErr, err)
			return
		}
		table = n.stepRead()
	}
	failing := n.stillFailing()
	seen := map[string]bool{}
	var cmds []Command
	for _, p := range peers {
		seen[p.Name] = true
		cur := table.Nodes[p.Name]
		if p.State == PeerUnproven {
			// Only a proved identity enters the table or changes what
			// it holds there; until then it counts as missing for the
			// raft configuration (a voter keeps its seat for the grace).
			if _, ok := n.deadSince[p.Name]; !ok {
				n.deadSince[p.Name] = now
			}
			continue
		}
		since, raftFailing := failing[p.Name]
		if _, was := n.deadSince[p.Name]; was && p.State == PeerAlive {
			// Back (deadSince is dropped below).
			n.backSince[p.Name] = returnedAt(n.backSince[p.Name], since, raftFailing, now)
		}
		raftLost := raftFailing && raftLostAt(since, n.backSince[p.Name], now, n.cfg.DownAfter)
		// A node that lost its data directory (it gossips another data
		// ID than the one recorded) holds none of the state at rest of
		// the shards it owns: down, they fail over to their in-sync
		// followers, and it is recorded anew only once it owns none
		// (PlanVoters).
		replaced := p.State == PeerAlive && lostData(table.DataIDs[p.Name], p.DataID)
		want := StatusUp
		switch {
		case p.State == PeerFailed || raftLost || replaced:
			want = StatusDown
		case p.State == PeerLeaving:
			want = StatusDraining
		case p.State == PeerLeft:
			if cur == nil {
				continue
			}
			if len(table.Owned(p.Name)) == 0 {
				cmds = append(cmds, Command{Op: OpRemove, Name: p.Name})
				continue
			}
			want = StatusDown // it is gone; whatever it still owns fails over
		case cur != nil && cur.Status == StatusDraining:
			want = StatusDraining // only the node itself reports up again
		}
		if p.State != PeerAlive {
			if _, ok := n.deadSince[p.Name]; !ok {
				n.deadSince[p.Name] = now
			}
		} else {
			delete(n.deadSince, p.Name)
		}
		info := NodeInfo{Name: p.Name, Addr: p.Addr, HTTPAddr: p.HTTPAddr, Version: p.Version, Manifest: p.Manifest, Status: want}
		if cur == nil {
			if want == StatusUp {
				cmds = append(cmds, Command{Op: OpNode, Node: &info})
			}
		} else if want == StatusDown || want == StatusDraining {
			if cur.Status != want && !(want == StatusDraining && cur.Status == StatusDown) {
				cmds = append(cmds, Command{Op: OpStatus, Name: p.Name, Status: want})
			}
		} else if !sameNode(cur, &info) {
			cmds = append(cmds, Command{Op: OpNode, Node: &info})
		}
		if p.State == PeerAlive && p.Sync != "" && cur != nil && cur.Sync != p.Sync && !n.syncHeld(p.Name, n.raft.CurrentTerm()) {
			cmds = append(cmds, Command{Op: OpSync, Name: p.Name, Nonce: p.Sync})
		}
		if p.State == PeerAlive && p.Kinds != nil && cur != nil {
			if ks, err := normalizeKinds(p.Kinds); err == nil && !slices.EqualFunc(cur.Kinds, ks, sameKind) {
				cmds = append(cmds, Command{Op: OpHosts, Name: p.Name, Kinds: ks})
			}
		}
	}
	for _, name := range table.NodeNames() {
		if seen[name] {
			continue
		}
		if _, ok := n.deadSince[name]; !ok {
			n.deadSince[name] = now
		}
		if table.Nodes[name].Status != StatusDown {
			cmds = append(cmds, Command{Op: OpStatus, Name: name, Status: StatusDown})
		} else if len(table.Owned(name)) == 0 {
			cmds = append(cmds, Command{Op: OpRemove, Name: name})
		}
	}
	for _, c := range cmds {
		if _, err := n.Propose(ctx, c); err != nil {
			n.log.Debug("placement: reconcile", "op", c.Op, logKeyErr, err)
			return
		}
	}
}

// reconcileVoters applies PlanVoters to the raft configuration.
func (n *Node) reconcileVoters(ctx context.Context, peers []Peer, now time.Time) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	var servers []RaftServer
	for _, s := range f.Configuration().Servers {
		servers = append(servers, RaftServer{ID: string(s.ID), Voter: s.Suffrage == raft.Voter})
	}
	var dataIDs map[string]string
	n.fsm.Read(func(t *Table) { dataIDs = maps.Clone(t.DataIDs) })
	owns := func(name string) (owns bool) {
		n.fsm.Read(func(t *Table) { owns = len(t.Owned(name)) > 0 })
		return owns
	}
	changes := PlanVoters(VoterInput{
		Self:      n.cfg.Name,
		Servers:   servers,
		Peers:     peers,
		DataIDs:   dataIDs,
		Owns:      owns,
		MaxVoters: n.cfg.MaxVoters,
		DeadSince: func(name string) (time.Time, bool) {
			t, ok := n.deadSince[name]
			if !ok {
				if !slices.ContainsFunc(peers, func(p Peer) bool { return p.Name == name }) {
					n.deadSince[name] = now
					return now, true
				}
			}
			return t, ok
		},
		Grace: n.cfg.DeadVoterGrace,
		Now:   now,
	})
	idx := f.Index()
	for _, c := range changes {
		id, addr := raft.ServerID(c.ID), raft.ServerAddress(c.ID)
		if c.Op == RecordDataID || c.Op == ForgetDataID {
			// Committed before the node is added: raft streams to it
			// then name this data directory.
			if r, err := n.Propose(ctx, Command{Op: OpDataID, Name: c.ID, DataID: c.DataID}); err != nil || r.Err != nil {
				n.log.Debug("placement: data ID", logKeyPeer, c.ID, "op", c.Op, logKeyErr, errors.Join(err, r.Err))
				return
			}
			if c.Op == RecordDataID {
				n.log.Info("placement: data ID recorded", logKeyPeer, c.ID, "data_id", c.DataID)
			}
			continue
		}
		var fut raft.IndexFuture
		switch c.Op {
		case AddNonvoter:
			fut = n.raft.AddNonvoter(id, addr, idx, n.cfg.ApplyTimeout)
		case Promote:
			fut = n.raft.AddVoter(id, addr, idx, n.cfg.ApplyTimeout)
		case RemoveServer:
			fut = n.raft.RemoveServer(id, idx, n.cfg.ApplyTimeout)
		}
		if err := fut.Error(); err != nil {
			n.log.Debug("placement: voter change", logKeyPeer, c.ID, "op", c.Op, logKeyErr, err)
			return
		}
		idx = fut.Index()
		n.log.Info("placement: raft configuration changed", logKeyPeer, c.ID, "op", c.Op)
	}
}

// startTransfers runs Handoff.Transfer for moves that began and have no
// transfer running.
func (n *Node) startTransfers(ctx context.Context) {
	if n.cfg.Handoff == nil {
		return
	}
	var moving []Move
	n.fsm.Read(func(t *Table) {
		for _, gn := range t.GroupNames() {
			for i, s := range t.Groups[gn].Shards {
				if s.MovingTo != "" {
					moving = append(moving, Move{Shard: ShardRef{Group: gn, Index: i}, From: s.Owner, Epoch: s.Epoch, To: s.MovingTo})
				}
			}
		}
	})
	live := map[ShardRef]bool{}
	for _, m := range moving {
		live[m.Shard] = true
		if cur, ok := n.transfers[m.Shard]; ok && cur == m {
			continue
		}
		n.transfers[m.Shard] = m
		// Read on this goroutine: step replaces n.planner when this node
		// stops leading, while the transfer may still run.
		// A move that must be confirmed gets the time until the
		// planner's backstop abort, less one fence delay: a slow ship
		// still finishes, and its outcome arrives first.
		budget := n.planner.cfg.FenceDelay
		if n.planner.cfg.ConfirmMoves {
			budget *= staleMoveFences - 1
		}
		n.wg.Add(1)
		go func(m Move) {
			defer n.wg.Done()
			tctx, cancel := context.WithTimeout(ctx, budget)
			defer cancel()
			outcome := n.confirmCh
			if err := n.cfg.Handoff.Transfer(tctx, m); err != nil {
				// The old owner may be alive and serving with state it did
				// not ship: completing the move would lose that state.
				msg := "placement: handoff failed; aborting the move"
				if errors.Is(err, ErrMoveRefused) {
					msg = "placement: handoff refused by the old owner; aborting the move"
				}
				level := slog.LevelWarn
				n.mu.Lock()
				if n.leaving {
					// This node stops too (a whole cluster stopping):
					// its moves failing is expected, not a fault.
					level = slog.LevelInfo
				}
				n.mu.Unlock()
				n.log.Log(ctx, level, msg, logKeyShard, m.Shard.String(), "from", m.From, "to", m.To, logKeyErr, err)
				outcome = n.refuseCh
			}
			select {
			case outcome <- m:
			case <-ctx.Done():
			}
		}(m)
	}
	for ref := range n.transfers {
		if !live[ref] {
			delete(n.transfers, ref)
		}
	}
}

// Status is a point-in-time summary of a node's placement role, for
// status pages and the CLI.
type Status struct {
	Name         string `json:"name"`
	Leader       string `json:"leader"`
	RaftState    string `json:"raft_state"` // Leader, Follower, Candidate, Shutdown
	Voter        bool   `json:"voter"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	TableVersion uint64 `json:"table_version"`
	ShardsOwned  int    `json:"shards_owned"`
	LeaseFresh   bool   `json:"lease_fresh"`
	PendingSync  string `json:"pending_sync,omitempty"`
}

// Status returns the node's current Status.
func (n *Node) Status() Status {
	st := Status{
		Name:         n.cfg.Name,
		Leader:       n.Leader(),
		RaftState:    n.raft.State().String(),
		Term:         n.raft.CurrentTerm(),
		AppliedIndex: n.raft.AppliedIndex(),
		LeaseFresh:   n.LeaseFresh(n.clock.Now()),
		PendingSync:  n.PendingSync(),
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == n.cfg.Name {
				st.Voter = s.Suffrage == raft.Voter
			}
		}
	}
	n.fsm.Read(func(t *Table) {
		st.TableVersion = t.Version
		st.ShardsOwned = len(t.Owned(n.cfg.Name))
	})
	return st
}
