package placement

import (
	"fmt"
	"slices"
	"time"

	"github.com/tempest-actors/tempest/manifest"
)

// PeerState is what membership believes about a peer.
type PeerState uint8

// Peer states.
const (
	// PeerAlive: the peer answers gossip (memberlist alive or suspect).
	PeerAlive PeerState = iota + 1
	// PeerLeaving: the peer announced a graceful leave and is draining.
	PeerLeaving
	// PeerLeft: the peer left gracefully.
	PeerLeft
	// PeerFailed: failure detection declared the peer dead.
	PeerFailed
	// PeerUnproven: gossip lists the peer, but it has not (yet) proved its
	// name with a certificate of the cluster CA over mutual TLS, or its
	// proof no longer matches what gossip says about it (a new address or
	// process). Gossip metadata is only a hint: such a peer enters
	// nothing (table, raft, bootstrap) and changes nothing it holds; a
	// raft server that stays unproven is removed like a dead one.
	PeerUnproven
)

// KindSpec is a kind a node registered: its name, the clauses it
// requires and the digest of its policy on that node (opaque to
// placement: nodes whose digests differ disagree about the kind), and
// its deadline policy, which nodes that do not host the kind apply to
// the asks they make to it (0: not published).
type KindSpec struct {
	Name     string              `json:"name"`
	Requires []manifest.ClauseID `json:"requires,omitempty"`
	Digest   string              `json:"digest,omitempty"`
	// AskTimeout is the deadline of an ask that sets none, MaxAskTimeout
	// the latest deadline an ask may have (a later one is clamped).
	AskTimeout    time.Duration `json:"ask_timeout_ns,omitempty"`
	MaxAskTimeout time.Duration `json:"max_ask_timeout_ns,omitempty"`
}

// Peer is one cluster member as membership reports it.
type Peer struct {
	Name     string
	Addr     string // QUIC address
	HTTPAddr string
	Version  string
	Manifest manifest.Manifest
	// Kinds, when not nil, are the kinds the peer hosts as the peer itself
	// reports them (with their policy digests); the leader then publishes
	// them into the table for it, as it does Sync, so a node without a
	// Forwarder still receives shards. nil means unknown (gossip carries
	// kind names but not digests): the table keeps what the node
	// published itself.
	Kinds []KindSpec
	// DataID is the identity of the peer's data directory (LoadDataID),
	// carried in its gossip metadata; "" if unknown.
	DataID string
	State  PeerState
	// Sync is the sync barrier the peer asks for (Node.PendingSync, carried
	// in its gossip metadata); the leader applies it. This lets a node
	// without a Forwarder recover from a lease lapse.
	Sync string
	// InCluster is true when the peer already has raft state
	// (Node.InCluster, carried in its gossip metadata). No node bootstraps
	// while an alive peer reports it: a newcomer whose name happens to
	// sort lowest must join the existing cluster, not start another.
	InCluster bool
}

// Membership is the view of the cluster that placement consumes; the
// membership package implements it over memberlist, tests use a fake.
type Membership interface {
	// Members returns every known peer, this node included, in any
	// order; the caller owns the slice. Safe for concurrent use.
	Members() []Peer
	// Changed returns a channel that is closed (or receives) when
	// Members may have changed. Signals may be coalesced; placement also
	// re-reads Members periodically, so a missed signal only delays.
	Changed() <-chan struct{}
}

// BootstrapDecision decides whether this node bootstraps the cluster:
// only a node without raft state, once at least expect peers are alive
// and none of the others reports raft state already (InCluster), and
// only the node whose name sorts lowest among them; it bootstraps the
// lowest expect names as voters. Every node computes the same answer
// from the same view, so exactly one bootstraps. The shell additionally
// requires the view to be stable for a while before acting, since views
// may differ briefly while gossip converges.
func BootstrapDecision(self string, expect int, peers []Peer, hasState bool) ([]string, bool) {
	if hasState || expect <= 0 {
		return nil, false
	}
	var names []string
	for _, p := range peers {
		if p.State != PeerAlive {
			continue
		}
		if p.InCluster && p.Name != self {
			return nil, false // a cluster exists: wait to be added to it
		}
		names = append(names, p.Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < expect || names[0] != self {
		return nil, false
	}
	return names[:expect], true
}

// RaftServer is a raft configuration entry as the voter planner sees it.
type RaftServer struct {
	ID    string
	Voter bool
}

// ChangeOp is a raft configuration change.
type ChangeOp uint8

// Configuration changes.
const (
	AddNonvoter ChangeOp = iota + 1
	Promote
	RemoveServer
	// RecordDataID records the peer's data ID in the table (OpDataID);
	// ConfigChange.DataID holds it.
	RecordDataID
	// ForgetDataID removes the data ID of a name that is neither in the
	// raft configuration nor in gossip any more.
	ForgetDataID
)

func (o ChangeOp) String() string {
	switch o {
	case AddNonvoter:
		return "add-nonvoter"
	case Promote:
		return "promote"
	case RemoveServer:
		return "remove"
	case RecordDataID:
		return "record-data-id"
	case ForgetDataID:
		return "forget-data-id"
	}
	return fmt.Sprintf("ChangeOp(%d)", uint8(o))
}

// ConfigChange is one change the leader should make to the raft
// configuration, or (RecordDataID, ForgetDataID) to the data IDs the
// table records.
type ConfigChange struct {
	Op     ChangeOp
	ID     string
	DataID string // RecordDataID
}

// VoterInput is what PlanVoters looks at.
type VoterInput struct {
	Self    string
	Servers []RaftServer
	Peers   []Peer
	// DataIDs are the data IDs the table records, by node name.
	DataIDs map[string]string
	// Owns reports whether a node owns a shard in the table (asked only
	// of a node that lost its data directory); nil: none does.
	Owns      func(name string) bool
	MaxVoters int
	// DeadSince reports since when (leader clock) a peer has been failed
	// or missing; ok false if it is alive.
	DeadSince func(name string) (time.Time, bool)
	Grace     time.Duration
	Now       time.Time
}

// PlanVoters returns, in order, the raft configuration changes that keep
// up to MaxVoters live voters (a live peer is PeerAlive: it proved its
// name; a PeerUnproven one counts as missing): live peers missing from the configuration
// join as non-voters; live non-voters are promoted (lowest name first)
// while voters are short; a voter dead for longer than Grace is removed
// once a live non-voter has been promoted in its place (or when there is
// none: keeping a dead voter only hurts quorum); peers that left are
// removed. The leader (Self) is never removed here; it leaves through
// leadership transfer. At most one change per dead voter per call keeps
// each step small.
//
// Data IDs (see LoadDataID), once every server and every peer that has
// not left gossips one: a live peer joins only after its data ID is
// recorded (a RecordDataID change precedes its AddNonvoter); a server
// with none recorded gets the one it gossips; a server that gossips
// another data ID than the recorded one lost its data directory and is
// removed as a dead one past its grace would be, so that it comes back
// as a new server once it owns no shard (its shards fail over while it is
// down). The data ID of a name neither in the configuration nor in gossip
// is forgotten (ForgetDataID).
func PlanVoters(in VoterInput) []ConfigChange {
	byName := map[string]Peer{}
	for _, p := range in.Peers {
		byName[p.Name] = p
	}
	inConf := map[string]RaftServer{}
	for _, s := range in.Servers {
		inConf[s.ID] = s
	}
	alive := func(name string) bool {
		p, ok := byName[name]
		return ok && p.State == PeerAlive
	}
	// replaced: in the configuration, alive with another data directory
	// than the one recorded.
	replaced := func(name string) bool {
		return name != in.Self && alive(name) && lostData(in.DataIDs[name], byName[name].DataID)
	}
	// The first data ID is recorded only once every server and every
	// proven peer that has not left gossips one: a build from before them cannot
	// read a log or snapshot holding them. After that a build from before
	// cannot read the log anyway.
	recordable := len(in.DataIDs) > 0
	if !recordable {
		recordable = true
		for _, p := range in.Peers {
			// An unproven peer (gossip's word only) cannot hold it back:
			// it is not a server, and a proven one counts once proven.
			if p.State != PeerLeft && p.State != PeerUnproven && p.DataID == "" {
				recordable = false
			}
		}
		for id := range inConf {
			if _, ok := byName[id]; !ok {
				recordable = false
			}
		}
	}
	var out []ConfigChange
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		d := byName[n].DataID
		_, inCfg := inConf[n]
		if lostData(in.DataIDs[n], d) && in.Owns != nil && in.Owns(n) {
			// Lost its data directory while owning shards: it is down
			// until they failed over (reconcileNodes), and comes back
			// only then, so that it never serves them empty.
			continue
		}
		switch {
		case !recordable || !alive(n) || d == "" || d == in.DataIDs[n]:
		case !inCfg || in.DataIDs[n] == "":
			out = append(out, ConfigChange{Op: RecordDataID, ID: n, DataID: d})
		}
		if !inCfg && alive(n) {
			out = append(out, ConfigChange{Op: AddNonvoter, ID: n})
		}
	}
	var liveVoters int
	var deadVoters, candidates, gone []string
	ids := make([]string, 0, len(in.Servers))
	for _, s := range in.Servers {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := inConf[id]
		p, known := byName[id]
		switch {
		case id == in.Self:
			if s.Voter {
				liveVoters++
			}
		case known && p.State == PeerLeft:
			gone = append(gone, id)
		case replaced(id):
			if s.Voter {
				deadVoters = append(deadVoters, id)
			} else {
				gone = append(gone, id)
			}
		case alive(id):
			if s.Voter {
				liveVoters++
			} else {
				candidates = append(candidates, id)
			}
		default: // failed, leaving or unknown
			since, dead := in.DeadSince(id)
			expired := dead && !in.Now.Before(since.Add(in.Grace))
			if s.Voter {
				if expired {
					deadVoters = append(deadVoters, id)
				} else {
					liveVoters++ // within grace: may come back, keep its seat
				}
			} else if expired {
				gone = append(gone, id)
			}
		}
	}
	// voters and up count the configuration's voters and those alive now
	// (this node included, dead ones within their grace not), after the
	// promotions below.
	voters, up := 0, 0
	for _, srv := range in.Servers {
		if srv.Voter {
			voters++
			if srv.ID == in.Self || (alive(srv.ID) && !replaced(srv.ID)) {
				up++
			}
		}
	}
	for liveVoters < in.MaxVoters && len(candidates) > 0 {
		out = append(out, ConfigChange{Op: Promote, ID: candidates[0]})
		candidates = candidates[1:]
		liveVoters++
		voters++
		up++
	}
	// A voter is removed only if the voters left alive are a majority of
	// those left: raft uses a new configuration as soon as it is
	// appended, so removing one (a node that left, one dead past its
	// grace) while another voter is down would leave a configuration
	// without a quorum (a drain while another node crashed) that no node
	// coming back could repair; kept, the voter that left regains quorum
	// when it returns.
	remove := func(id string) {
		if inConf[id].Voter {
			if up*2 <= voters-1 {
				return
			}
			voters--
		}
		out = append(out, ConfigChange{Op: RemoveServer, ID: id})
	}
	for _, id := range deadVoters {
		remove(id)
	}
	for _, id := range gone {
		remove(id)
	}
	forgotten := make([]string, 0, len(in.DataIDs))
	for name := range in.DataIDs {
		_, inCfg := inConf[name]
		if _, known := byName[name]; !inCfg && !known {
			forgotten = append(forgotten, name)
		}
	}
	slices.Sort(forgotten)
	for _, name := range forgotten {
		out = append(out, ConfigChange{Op: ForgetDataID, ID: name})
	}
	return out
}
