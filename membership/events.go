package membership

import (
	"context"
	"errors"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// ErrClosed is returned by operations on a closed Membership, Fake or
// Subscription.
var ErrClosed = errors.New("membership: closed")

// Cluster is the view of membership that placement and the node depend on.
// *Membership and *Fake implement it.
type Cluster interface {
	// LocalName returns this node's name. Safe for concurrent use.
	LocalName() string
	// Members returns a snapshot of every known member, this node included,
	// sorted by name: alive and suspect ones, and dead or departed ones
	// until they are forgotten. The caller owns the slice. Safe for
	// concurrent use.
	Members() []Member
	// Subscribe starts a subscription to membership events. Its Snapshot
	// is the member list at the instant of subscribing, and its events are
	// every change after that instant, in order, none lost. The caller
	// must Close it. After the cluster is closed, it returns a closed
	// subscription. Safe for concurrent use.
	Subscribe() *Subscription
}

// Status is a member's liveness as seen by this node.
type Status int

// Member statuses.
const (
	StatusAlive   Status = iota // answering probes
	StatusSuspect               // missed probes; may still refute (Fake only: memberlist does not expose suspicion)
	StatusDead                  // declared failed by the cluster
	StatusLeft                  // departed gracefully
)

func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusSuspect:
		return "suspect"
	case StatusDead:
		return "dead"
	case StatusLeft:
		return "left"
	}
	return "unknown"
}

// Gone reports whether s is dead or left.
func (s Status) Gone() bool { return s == StatusDead || s == StatusLeft }

// Member is one node as seen by this node.
type Member struct {
	Name   string
	Addr   netip.AddrPort // gossip address
	Status Status
	Meta   Meta
	// MetaErr is non-nil when the node's metadata could not be decoded;
	// Meta then holds only Name. Such a node should host nothing.
	MetaErr error
	// Since is when this node last saw the member's status or metadata
	// change (by its Clock).
	Since time.Time
}

func (m Member) clone() Member {
	m.Meta = m.Meta.clone()
	return m
}

// EventType says what happened to a member.
type EventType int

// Event types.
const (
	EventJoin   EventType = iota // a member appeared or came back from dead/left
	EventUpdate                  // a member's metadata (or address) changed
	EventLeave                   // a member departed gracefully
	EventFail                    // a member was declared dead
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	}
	return "unknown"
}

// Event is one membership change. Member is the member's state after it.
type Event struct {
	Type   EventType
	Member Member
}

// Subscription is an ordered, unbounded queue of events. Events are
// produced by gossip handlers that must never block, so a subscriber that
// stops reading only grows its own queue. Next, Ready and Drain may be
// called from one consumer goroutine at a time; Close from any goroutine.
type Subscription struct {
	snapshot []Member
	ready    chan struct{} // holds a token while events may be pending
	hub      *hub

	mu     sync.Mutex
	queue  []Event
	closed bool
	done   chan struct{}
}

// Snapshot returns the members at the instant of subscribing. The caller
// owns the slice.
func (s *Subscription) Snapshot() []Member {
	out := make([]Member, len(s.snapshot))
	for i, m := range s.snapshot {
		out[i] = m.clone()
	}
	return out
}

// Ready returns a channel that receives a value when events may be pending;
// call Drain then. For select loops.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Done is closed when the subscription or its cluster is closed. Events
// queued before may still be drained.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Drain returns and removes all pending events, oldest first.
func (s *Subscription) Drain() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// Next returns the oldest pending event, waiting for one. It returns the
// context's error when ctx ends first, and ErrClosed once the subscription
// is closed and its queue is empty.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			if len(s.queue) == 0 {
				s.queue = nil
			}
			s.mu.Unlock()
			return ev, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return Event{}, ErrClosed
		}
		select {
		case <-s.ready:
		case <-s.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close ends the subscription; it is idempotent.
func (s *Subscription) Close() {
	if s.hub != nil {
		s.hub.unsubscribe(s)
	}
	s.close()
}

func (s *Subscription) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
}

func (s *Subscription) push(ev Event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// hub is the member table and the subscriber list shared by Membership and
// Fake. It applies events in the order given and never blocks.
type hub struct {
	now       func() time.Time
	retention time.Duration

	mu      sync.Mutex
	members map[string]Member
	subs    map[*Subscription]struct{}
	closed  bool
}

func newHub(now func() time.Time, retention time.Duration) *hub {
	return &hub{
		now:       now,
		retention: retention,
		members:   make(map[string]Member),
		subs:      make(map[*Subscription]struct{}),
	}
}

// apply records the event's member state, stamps Since, and queues the
// event for every subscriber.
func (h *hub) apply(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	ev.Member.Since = h.now()
	h.members[ev.Member.Name] = ev.Member
	h.pruneLocked(ev.Member.Since)
	for s := range h.subs {
		s.push(Event{Type: ev.Type, Member: ev.Member.clone()})
	}
}

// pruneLocked forgets members gone for longer than the retention.
func (h *hub) pruneLocked(now time.Time) {
	for name, m := range h.members {
		if m.Status.Gone() && now.Sub(m.Since) > h.retention {
			delete(h.members, name)
		}
	}
}

func (h *hub) get(name string) (Member, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.members[name]
	return m.clone(), ok
}

func (h *hub) snapshotLocked() []Member {
	h.pruneLocked(h.now())
	out := make([]Member, 0, len(h.members))
	for _, m := range h.members {
		out = append(out, m.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (h *hub) snapshot() []Member {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snapshotLocked()
}

func (h *hub) subscribe() *Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &Subscription{ready: make(chan struct{}, 1), done: make(chan struct{}), hub: h}
	s.snapshot = h.snapshotLocked()
	if h.closed {
		s.closed = true
		close(s.done)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *hub) unsubscribe(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
}

// close closes every subscription; later events are dropped.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		s.close()
	}
	h.subs = nil
}
