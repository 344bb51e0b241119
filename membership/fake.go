package membership

import (
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// Fake is an in-memory Cluster for unit tests of components that consume
// membership (placement). Tests script what gossip would report: joins,
// metadata updates, suspicion, failures and departures. Every scripted
// change is delivered to subscribers in order, exactly as a real
// Membership would deliver it. Safe for concurrent use.
type Fake struct {
	local string
	hub   *hub

	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake whose local node, local, is already alive (like a
// real Membership, which knows itself from New on).
func NewFake(local Member) *Fake {
	f := &Fake{local: local.Name, now: time.Unix(0, 0).UTC()}
	f.hub = newHub(f.clock, 24*time.Hour)
	f.Join(local)
	return f
}

func (f *Fake) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(time.Millisecond)
	return f.now
}

// LocalName implements Cluster.
func (f *Fake) LocalName() string { return f.local }

// Members implements Cluster.
func (f *Fake) Members() []Member { return f.hub.snapshot() }

// Subscribe implements Cluster.
func (f *Fake) Subscribe() *Subscription { return f.hub.subscribe() }

// Join scripts a member joining (or coming back): status alive, event
// EventJoin. Meta.Name defaults to the member's name. The metadata goes
// through the gossip encoding, so a long kind list arrives as KindsDigest
// exactly as from a real node; Join panics if the metadata could not be
// gossiped at all (a real node would fail to start with it).
func (f *Fake) Join(m Member) {
	m = fill(m)
	m.Status = StatusAlive
	f.hub.apply(Event{Type: EventJoin, Member: m})
}

// Update scripts a metadata or address change of a known member.
func (f *Fake) Update(m Member) error {
	old, ok := f.hub.get(m.Name)
	if !ok || old.Status.Gone() {
		return fmt.Errorf("membership: fake: update of unknown or gone member %q", m.Name)
	}
	m = fill(m)
	if !m.Addr.IsValid() {
		m.Addr = old.Addr
	}
	m.Status = StatusAlive
	f.hub.apply(Event{Type: EventUpdate, Member: m})
	return nil
}

// Suspect marks a member suspect in Members. Like memberlist, it emits no
// event.
func (f *Fake) Suspect(name string) error {
	return f.setStatus(name, StatusSuspect, nil)
}

// Fail scripts a member being declared dead: event EventFail.
func (f *Fake) Fail(name string) error {
	t := EventFail
	return f.setStatus(name, StatusDead, &t)
}

// Leave scripts a graceful departure: event EventLeave.
func (f *Fake) Leave(name string) error {
	t := EventLeave
	return f.setStatus(name, StatusLeft, &t)
}

func (f *Fake) setStatus(name string, st Status, ev *EventType) error {
	m, ok := f.hub.get(name)
	if !ok || m.Status.Gone() {
		return fmt.Errorf("membership: fake: member %q is unknown or gone", name)
	}
	m.Status = st
	if ev == nil {
		f.hub.mu.Lock()
		m.Since = f.hub.members[name].Since
		f.hub.members[name] = m
		f.hub.mu.Unlock()
		return nil
	}
	f.hub.apply(Event{Type: *ev, Member: m})
	return nil
}

// Close closes every subscription. Idempotent.
func (f *Fake) Close() {
	f.hub.close()
}

func fill(m Member) Member {
	m = m.clone()
	if m.Meta.Name == "" {
		m.Meta.Name = m.Name
	}
	enc, err := m.Meta.encode()
	if err != nil {
		panic(fmt.Sprintf("membership: fake: member %q: %v", m.Name, err))
	}
	if m.Meta, err = decodeMeta(enc); err != nil {
		panic(fmt.Sprintf("membership: fake: member %q: %v", m.Name, err))
	}
	if !m.Addr.IsValid() {
		m.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), DefaultPort)
	}
	return m
}
