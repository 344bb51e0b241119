package tempest

// ObservePlacementReads makes fn (nil: none) be called at every read of
// n's applied placement table; n must be a started cluster node.
func ObservePlacementReads(n *Node, fn func()) { n.eng.Placement().FSM().ObserveReads(fn) }
