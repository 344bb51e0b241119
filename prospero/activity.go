package prospero

import "time"

// Activity tracks the active identities of a node for passivation: the
// least recently used order across the node (to shed load when more
// actors are active than allowed) and, per kind, the idle order (to
// passivate actors idle past their kind's timeout).
//
// It is a deterministic core: no clock, no goroutines; callers pass the
// time in. It is not safe for concurrent use. Every operation is O(1)
// except the victim queries, which are O(victims).
type Activity struct {
	byID  map[Identity]*actNode
	lru   actNode // sentinel of the node-wide list; lru.next is the least recently used
	kinds map[string]*actNode
}

type actNode struct {
	id   Identity
	last time.Time
	idle time.Duration // the kind's idle timeout; < 0: never idle

	prev, next   *actNode // node-wide LRU list
	kprev, knext *actNode // per-kind list, also least recently used first
}

// NewActivity returns an empty tracker.
func NewActivity() *Activity {
	a := &Activity{byID: make(map[Identity]*actNode), kinds: make(map[string]*actNode)}
	a.lru.prev, a.lru.next = &a.lru, &a.lru
	return a
}

// Len returns the number of tracked (active) identities.
func (a *Activity) Len() int { return len(a.byID) }

// Contains reports whether id is tracked.
func (a *Activity) Contains(id Identity) bool { _, ok := a.byID[id]; return ok }

// Touch records activity of id at now, making it the most recently
// used. idle is the kind's idle timeout (< 0: never idle); it is taken
// from the first Touch of an identity.
func (a *Activity) Touch(id Identity, idle time.Duration, now time.Time) {
	n, ok := a.byID[id]
	if ok {
		n.unlinkAll()
	} else {
		n = &actNode{id: id, idle: idle}
		a.byID[id] = n
	}
	n.last = now
	// Append at the most recently used end of both lists.
	n.prev, n.next = a.lru.prev, &a.lru
	n.prev.next, a.lru.prev = n, n
	k := a.kinds[id.Kind]
	if k == nil {
		k = &actNode{}
		k.kprev, k.knext = k, k
		a.kinds[id.Kind] = k
	}
	n.kprev, n.knext = k.kprev, k
	n.kprev.knext, k.kprev = n, n
}

// UsedBefore reports whether id is tracked with a last use before t.
func (a *Activity) UsedBefore(id Identity, t time.Time) bool {
	n, ok := a.byID[id]
	return ok && n.last.Before(t)
}

// Remove stops tracking id; it reports whether id was tracked.
func (a *Activity) Remove(id Identity) bool {
	n, ok := a.byID[id]
	if !ok {
		return false
	}
	n.unlinkAll()
	delete(a.byID, id)
	if k := a.kinds[id.Kind]; k != nil && k.knext == k {
		delete(a.kinds, id.Kind)
	}
	return true
}

// Keys appends to dst the keys of the tracked identities of kind, least
// recently used first, and returns dst. O(identities of kind).
func (a *Activity) Keys(kind string, dst []string) []string {
	k := a.kinds[kind]
	if k == nil {
		return dst
	}
	for n := k.knext; n != k; n = n.knext {
		dst = append(dst, n.id.Key)
	}
	return dst
}

func (n *actNode) unlinkAll() {
	n.prev.next, n.next.prev = n.next, n.prev
	n.kprev.knext, n.knext.kprev = n.knext, n.kprev
	n.prev, n.next, n.kprev, n.knext = nil, nil, nil, nil
}

// Idle appends to dst the identities idle at now (last activity at
// least their kind's timeout ago), least recently used first per kind,
// and returns dst. It does not remove them.
func (a *Activity) Idle(now time.Time, dst []Identity) []Identity {
	for _, k := range a.kinds {
		for n := k.knext; n != k; n = n.knext {
			if n.idle < 0 || now.Sub(n.last) < n.idle {
				break // the rest of this kind were used more recently
			}
			dst = append(dst, n.id)
		}
	}
	return dst
}

// Over appends to dst the least recently used identities beyond max
// (Len()-max of them, oldest first) and returns dst. max <= 0 means no
// limit. It does not remove them.
func (a *Activity) Over(max int, dst []Identity) []Identity {
	if max <= 0 {
		return dst
	}
	for n := a.lru.next; n != &a.lru && len(a.byID)-max > 0; n = n.next {
		if len(dst) >= len(a.byID)-max {
			break
		}
		dst = append(dst, n.id)
	}
	return dst
}

// NextIdle returns the earliest time at which some tracked identity
// becomes idle, and false if none ever will.
func (a *Activity) NextIdle() (time.Time, bool) {
	var best time.Time
	found := false
	for _, k := range a.kinds {
		if n := k.knext; n != k && n.idle >= 0 {
			if t := n.last.Add(n.idle); !found || t.Before(best) {
				best, found = t, true
			}
		}
	}
	return best, found
}
