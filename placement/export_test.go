package placement

import "time"

// VerifiedAtForTest is the leader's own lease anchor (see leaderAnchor).
func (n *Node) VerifiedAtForTest() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.verifiedAt
}

// WitnessForTest is the last witness of a previous leader this node got
// while leading: the leader, and the bound on its last renewal.
func (n *Node) WitnessForTest() (string, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.witnessSeen.node, n.witnessSeen.at
}
