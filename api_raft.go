package tempest

import "github.com/hashicorp/raft"

// RaftRole is a node's role in the raft configuration of the placement
// table.
type RaftRole string

// Raft roles. RoleNone: the node is not in the raft configuration (not
// added yet, removed, or a standalone node).
const (
	RoleLeader   RaftRole = "leader"
	RoleVoter    RaftRole = "voter"
	RoleNonVoter RaftRole = "non-voter"
	RoleNone     RaftRole = "none"
)

// RaftInfo is this node's view of the placement raft group.
type RaftInfo struct {
	// Leader is the leader's name ("" if unknown).
	Leader string
	// Term is this node's current raft term.
	Term uint64
	// Roles maps every server of the latest raft configuration this node
	// knows to its role (the leader as RoleLeader).
	Roles map[string]RaftRole
}

// Role returns name's role (RoleNone when it is not in the configuration).
func (r RaftInfo) Role(name string) RaftRole {
	if role, ok := r.Roles[name]; ok {
		return role
	}
	return RoleNone
}

// RaftInfo returns this node's view of the placement raft group; zero
// for a standalone node or before Start. It asks raft for its latest
// configuration, which may wait for raft's main loop: it is meant for
// status pages and metrics, not for hot paths. The caller owns the map.
func (n *Node) RaftInfo() RaftInfo {
	pl := n.rt().Placement()
	if pl == nil || lifecycle(n.phase.Load()) != stateStarted {
		return RaftInfo{}
	}
	info := RaftInfo{Leader: pl.Leader(), Term: pl.Term(), Roles: map[string]RaftRole{}}
	f := pl.Raft().GetConfiguration()
	if f.Error() != nil {
		return info
	}
	for _, s := range f.Configuration().Servers {
		role := RoleNonVoter
		if s.Suffrage == raft.Voter {
			role = RoleVoter
		}
		if string(s.ID) == info.Leader {
			role = RoleLeader
		}
		info.Roles[string(s.ID)] = role
	}
	return info
}
