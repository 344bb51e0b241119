package ariel

import (
	"math/bits"
	"unsafe"

	"github.com/tempest-actors/tempest/actor"
)

// A turn's sends are grouped by recipient as they are made: every send to
// a recipient in the turn joins that recipient's group, whether or not
// other sends came between. Admission reserves mailbox capacity per group
// (one slot for the first send, then chunks that double), and the flush
// delivers each group with one mailbox lock and at most one wake, in the
// order of each group's first send. Order within a group is send order,
// so per-sender FIFO holds; across recipients there is no order to keep.

// sendGroup is one recipient's share of the current turn's sends.
type sendGroup struct {
	c    *Cell
	n    int32 // sends admitted
	cred int32 // mailbox slots reserved and not used yet
	step int32 // size of the next reservation
	slot int32 // index in the lookup table, -1 while the groups are scanned
}

// Chunks of mailbox credit a group reserves after its first send: the
// first chunk, and the largest one.
const (
	creditChunk    = 8
	creditChunkMax = 64
)

// scanGroups is how many groups a turn looks through linearly before it
// indexes them in a hash table.
const scanGroups = 8

// groupTable maps cells to group numbers for a turn with many recipients:
// open addressing on the cell's address. Only slots of the current turn
// are set; reset clears them.
type groupTable struct {
	keys  []*Cell
	vals  []int32
	shift uint8
}

func (t *groupTable) hash(c *Cell) int {
	h := uint64(uintptr(unsafe.Pointer(c))) * 0x9e3779b97f4a7c15
	return int(h >> t.shift)
}

// find returns the group of c and -1, or -1 and the free slot for c.
func (t *groupTable) find(c *Cell) (g int32, slot int) {
	mask := len(t.keys) - 1
	for i := t.hash(c); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case c:
			return t.vals[i], i
		case nil:
			return -1, i
		}
	}
}

// index makes the table hold the groups at a load of at most one half
// and adds the groups not in it yet (a table that grows is rebuilt).
func (t *groupTable) index(groups []sendGroup) {
	want := 1 << bits.Len(uint(2*len(groups)-1))
	if want < 32 {
		want = 32
	}
	if want > len(t.keys) {
		t.keys = make([]*Cell, want)
		t.vals = make([]int32, want)
		t.shift = uint8(64 - bits.TrailingZeros(uint(want)))
		for i := range groups {
			groups[i].slot = -1
		}
	}
	for i := range groups {
		if groups[i].slot >= 0 {
			continue
		}
		_, slot := t.find(groups[i].c)
		t.keys[slot], t.vals[slot] = groups[i].c, int32(i)
		groups[i].slot = int32(slot)
	}
}

// groupOf returns the index of c's group in the current turn, making one
// if c was not sent to yet.
func (ex *executor) groupOf(c *Cell) int32 {
	if g := ex.lastG - 1; g >= 0 && ex.groups[g].c == c {
		return g
	}
	n := len(ex.groups)
	if n <= scanGroups {
		for i := 0; i < n; i++ {
			if ex.groups[i].c == c {
				ex.interleaved = true // another recipient came between
				return int32(i)
			}
		}
		ex.groups = append(ex.groups, sendGroup{c: c, step: creditChunk, slot: -1})
		if n+1 > scanGroups {
			ex.table.index(ex.groups)
		}
		return int32(n)
	}
	g, slot := ex.table.find(c)
	if g >= 0 {
		ex.interleaved = true
		return g
	}
	ex.groups = append(ex.groups, sendGroup{c: c, step: creditChunk, slot: int32(slot)})
	ex.table.keys[slot], ex.table.vals[slot] = c, int32(n)
	if len(ex.table.keys) < 2*(n+1) {
		ex.table.index(ex.groups)
	}
	return int32(n)
}

// admit reserves capacity for one send of the current turn to c and
// returns the send's group. Refusal stays synchronous.
func (ex *executor) admit(c *Cell) (int32, error) {
	g := ex.groupOf(c)
	ex.lastG = g + 1
	grp := &ex.groups[g]
	switch {
	case grp.cred > 0:
		if c.stopped.Load() {
			// Credit reserved before the stop admits nothing after
			// it: the send fails as one from outside the turn would.
			return g, actor.ErrActorTerminated
		}
		grp.cred--
	case grp.n == 0:
		if err := c.reserve(); err != nil {
			return g, err
		}
	default:
		if c.state.Load() == stStopped {
			return g, actor.ErrActorTerminated
		}
		got := c.reserveUpTo(grp.step)
		if got == 0 {
			return g, c.s.refusal
		}
		grp.cred = got - 1
		grp.step = min(grp.step*2, creditChunkMax)
	}
	grp.n++
	return g, nil
}

// closeGroups ends the turn's grouping: unused credit goes back to the
// recipients, and when sends to one recipient were interleaved with
// others the buffered sends are reordered (stably) so that each group is
// contiguous, in the order of its first send. The flush then delivers
// each run with one lock and at most one wake.
func (ex *executor) closeGroups() {
	if len(ex.groups) == 0 {
		return
	}
	for i := range ex.groups {
		if g := &ex.groups[i]; g.cred > 0 {
			g.c.unreserve(int(g.cred))
		}
	}
	if ex.interleaved && len(ex.outTo) > 0 {
		ex.regroup()
	}
	ex.resetGroups()
}

// resetGroups forgets the turn's groups (their credit already returned).
func (ex *executor) resetGroups() {
	for i := range ex.groups {
		g := &ex.groups[i]
		if g.slot >= 0 {
			ex.table.keys[g.slot] = nil
		}
		g.c = nil // the only pointer: no bulk clear needed
	}
	ex.groups = ex.groups[:0]
	ex.lastG = 0
	ex.interleaved = false
	if ex.sameC != nil {
		ex.sameC, ex.sameScope = nil, "" // resolved again in the next turn
	}
}

// regroup sorts the buffered sends by group with a counting sort, which
// keeps send order within each group.
func (ex *executor) regroup() {
	n := len(ex.outTo)
	pos := ex.gpos[:0]
	at := int32(0)
	for i := range ex.groups {
		pos = append(pos, at)
		at += ex.groups[i].n
	}
	ex.gpos = pos
	if int(at) != n {
		// Cannot happen: every buffered send was counted in its group.
		panic("ariel: send groups do not match the buffered sends")
	}
	to := growCells(ex.sortTo, n)
	env := growEnvelopes(ex.sortEnv, n)
	for i := 0; i < n; i++ {
		g := ex.outG[i]
		p := pos[g]
		pos[g]++
		to[p] = ex.outTo[i]
		moveEnvelope(&env[p], &ex.outEnv[i])
	}
	clear(ex.outTo)
	clear(ex.outEnv)
	ex.sortTo, ex.outTo = ex.outTo[:0], to
	ex.sortEnv, ex.outEnv = ex.outEnv[:0], env
}

func growCells(b []*Cell, n int) []*Cell {
	if cap(b) < n {
		return make([]*Cell, n, 2*n)
	}
	return b[:n]
}

func growEnvelopes(b []envelope, n int) []envelope {
	if cap(b) < n {
		return make([]envelope, n, 2*n)
	}
	return b[:n]
}
