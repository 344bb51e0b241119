package prospero

// HydrationGate bounds concurrent hydrations (activations that load
// state at rest) on a node, queueing the rest in FIFO order. It is a
// deterministic core, not safe for concurrent use; the caller
// guarantees an identity is queued at most once.
type HydrationGate struct {
	max      int
	inflight int
	queue    []Identity // FIFO; head at queue[head]
	head     int
}

// NewHydrationGate returns a gate admitting max concurrent hydrations;
// max <= 0 means unbounded.
func NewHydrationGate(max int) *HydrationGate { return &HydrationGate{max: max} }

// Acquire asks to hydrate id now. It returns true when a slot was
// taken (the caller starts the hydration and later calls Release), and
// false when id was queued instead.
func (g *HydrationGate) Acquire(id Identity) bool {
	if g.max <= 0 || g.inflight < g.max {
		g.inflight++
		return true
	}
	g.queue = append(g.queue, id)
	return false
}

// Release frees the slot of a finished hydration. If an identity was
// waiting, the slot passes straight to it: Release returns it and true,
// and the caller starts its hydration.
func (g *HydrationGate) Release() (Identity, bool) {
	if g.head < len(g.queue) {
		id := g.queue[g.head]
		g.queue[g.head] = Identity{}
		g.head++
		if g.head == len(g.queue) {
			g.queue, g.head = g.queue[:0], 0
		} else if g.head > 64 && g.head*2 > len(g.queue) {
			g.queue = append(g.queue[:0], g.queue[g.head:]...)
			g.head = 0
		}
		return id, true
	}
	if g.inflight > 0 {
		g.inflight--
	}
	return Identity{}, false
}

// InFlight returns the number of hydrations holding a slot.
func (g *HydrationGate) InFlight() int { return g.inflight }

// Waiting returns the number of queued identities.
func (g *HydrationGate) Waiting() int { return len(g.queue) - g.head }
