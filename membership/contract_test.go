package membership_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/membership"
)

// harness lets one contract suite drive any Cluster: the observed cluster
// has local node "n0"; peers are added and removed by script (Fake) or by
// real nodes joining, updating, crashing and leaving (Membership).
type harness interface {
	cluster() membership.Cluster
	join(t *testing.T, name string, meta membership.Meta)
	update(t *testing.T, name string, meta membership.Meta)
	fail(t *testing.T, name string)
	leave(t *testing.T, name string)
	close(t *testing.T)
}

type fakeHarness struct{ f *membership.Fake }

func (h *fakeHarness) cluster() membership.Cluster { return h.f }
func (h *fakeHarness) join(_ *testing.T, name string, meta membership.Meta) {
	h.f.Join(membership.Member{Name: name, Meta: meta})
}
func (h *fakeHarness) update(t *testing.T, name string, meta membership.Meta) {
	if err := h.f.Update(membership.Member{Name: name, Meta: meta}); err != nil {
		t.Fatal(err)
	}
}
func (h *fakeHarness) fail(t *testing.T, name string) {
	if err := h.f.Fail(name); err != nil {
		t.Fatal(err)
	}
}
func (h *fakeHarness) leave(t *testing.T, name string) {
	if err := h.f.Leave(name); err != nil {
		t.Fatal(err)
	}
}
func (h *fakeHarness) close(*testing.T) { h.f.Close() }

type realHarness struct {
	n0    *membership.Membership
	peers map[string]*membership.Membership
}

func (h *realHarness) cluster() membership.Cluster { return h.n0 }
func (h *realHarness) join(t *testing.T, name string, meta membership.Meta) {
	cfg := nodeConfig(name, addrOf(h.n0))
	cfg.Meta = meta
	h.peers[name] = joinNode(t, cfg)
}
func (h *realHarness) update(t *testing.T, name string, meta membership.Meta) {
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := h.peers[name].UpdateMeta(ctx, meta); err != nil {
		t.Fatal(err)
	}
}
func (h *realHarness) fail(_ *testing.T, name string) { h.peers[name].Halt() }
func (h *realHarness) leave(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := h.peers[name].Close(ctx); err != nil {
		t.Fatal(err)
	}
}
func (h *realHarness) close(t *testing.T) {
	if err := h.n0.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestClusterContract(t *testing.T) {
	for name, newHarness := range map[string]func(t *testing.T) harness{
		"fake": func(*testing.T) harness {
			return &fakeHarness{f: membership.NewFake(membership.Member{
				Name: "n0", Meta: membership.Meta{Version: "test"},
			})}
		},
		"memberlist": func(t *testing.T) harness {
			return &realHarness{n0: joinNode(t, nodeConfig("n0")), peers: map[string]*membership.Membership{}}
		},
	} {
		t.Run(name, func(t *testing.T) { runContract(t, newHarness(t)) })
	}
}

func runContract(t *testing.T, h harness) {
	c := h.cluster()
	if got := c.LocalName(); got != "n0" {
		t.Fatalf("LocalName = %q, want n0", got)
	}
	sub := c.Subscribe()
	defer sub.Close()
	snap := sub.Snapshot()
	if len(snap) != 1 || snap[0].Name != "n0" || snap[0].Status != membership.StatusAlive || snap[0].Meta.Name != "n0" {
		t.Fatalf("initial snapshot = %+v, want n0 alone and alive", snap)
	}
	if !snap[0].Addr.IsValid() {
		t.Fatalf("local member has no address: %+v", snap[0])
	}

	is := func(typ membership.EventType, name string) func(membership.Event) bool {
		return func(ev membership.Event) bool { return ev.Type == typ && ev.Member.Name == name }
	}

	// Join, with metadata.
	h.join(t, "p1", membership.Meta{QUICAddr: "10.0.0.1:7947", Kinds: []string{"b", "a"}, ManifestDigest: "d1"})
	ev, _ := awaitEvent(t, sub, "p1 join", is(membership.EventJoin, "p1"))
	if ev.Member.Status != membership.StatusAlive || ev.Member.Meta.QUICAddr != "10.0.0.1:7947" ||
		ev.Member.Meta.ManifestDigest != "d1" || len(ev.Member.Meta.Kinds) != 2 || ev.Member.Meta.Kinds[0] != "a" {
		t.Fatalf("join event member = %+v", ev.Member)
	}
	h.join(t, "p2", membership.Meta{})
	awaitEvent(t, sub, "p2 join", is(membership.EventJoin, "p2"))
	eventually(t, "n0, p1 and p2 alive", func() bool { return hasAlive(c, "n0", "p1", "p2") })

	// Metadata update.
	h.update(t, "p1", membership.Meta{QUICAddr: "10.0.0.1:9999", ManifestDigest: "d2"})
	ev, _ = awaitEvent(t, sub, "p1 update", func(ev membership.Event) bool {
		return ev.Type == membership.EventUpdate && ev.Member.Name == "p1" && ev.Member.Meta.ManifestDigest == "d2"
	})
	if ev.Member.Meta.QUICAddr != "10.0.0.1:9999" || len(ev.Member.Meta.Kinds) != 0 {
		t.Fatalf("update event member = %+v", ev.Member)
	}
	eventually(t, "p1's new metadata in Members", func() bool {
		m, ok := memberOf(c, "p1")
		return ok && m.Meta.ManifestDigest == "d2"
	})

	// Crash: reported as a failure, and dead in Members.
	h.fail(t, "p2")
	ev, _ = awaitEvent(t, sub, "p2 fail", is(membership.EventFail, "p2"))
	if ev.Member.Status != membership.StatusDead {
		t.Fatalf("fail event status = %v, want dead", ev.Member.Status)
	}
	if m, ok := memberOf(c, "p2"); !ok || m.Status != membership.StatusDead {
		t.Fatalf("after failure, Members has p2 = %+v (present %v), want dead", m, ok)
	}

	// Graceful leave: reported as a leave.
	h.leave(t, "p1")
	ev, skipped := awaitEvent(t, sub, "p1 leave", func(ev membership.Event) bool {
		return ev.Member.Name == "p1" && (ev.Type == membership.EventLeave || ev.Type == membership.EventFail)
	})
	if ev.Type != membership.EventLeave || ev.Member.Status != membership.StatusLeft {
		t.Fatalf("p1 departure reported as %s/%s, want leave/left (skipped %s)", ev.Type, ev.Member.Status, describe(skipped))
	}
	if m, ok := memberOf(c, "p1"); !ok || m.Status != membership.StatusLeft {
		t.Fatalf("after leave, Members has p1 = %+v", m)
	}

	// A late subscriber's snapshot has the same view.
	late := c.Subscribe()
	defer late.Close()
	got := map[string]membership.Status{}
	for _, m := range late.Snapshot() {
		got[m.Name] = m.Status
	}
	want := map[string]membership.Status{"n0": membership.StatusAlive, "p1": membership.StatusLeft, "p2": membership.StatusDead}
	for n, st := range want {
		if got[n] != st {
			t.Fatalf("late snapshot = %v, want %v", got, want)
		}
	}

	// Closing the cluster ends subscriptions after their queue drains.
	h.close(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	for {
		_, err := sub.Next(ctx)
		if errors.Is(err, membership.ErrClosed) {
			break
		}
		if err != nil {
			t.Fatalf("Next after close: %v, want ErrClosed", err)
		}
	}
	select {
	case <-sub.Done():
	default:
		t.Fatal("Done not closed after the cluster closed")
	}
	closedSub := c.Subscribe()
	if _, err := closedSub.Next(ctx); !errors.Is(err, membership.ErrClosed) {
		t.Fatalf("Subscribe after close: Next = %v, want ErrClosed", err)
	}
}

func TestFakeExactSequence(t *testing.T) {
	f := membership.NewFake(membership.Member{Name: "a"})
	defer f.Close()
	sub := f.Subscribe()
	defer sub.Close()
	addr := netip.MustParseAddrPort("10.0.0.2:7946")
	f.Join(membership.Member{Name: "b", Addr: addr})
	if err := f.Suspect("b"); err != nil {
		t.Fatal(err)
	}
	if m, _ := memberOf(f, "b"); m.Status != membership.StatusSuspect {
		t.Fatalf("b status = %v, want suspect", m.Status)
	}
	if err := f.Fail("b"); err != nil {
		t.Fatal(err)
	}
	if err := f.Fail("b"); err == nil {
		t.Fatal("failing a dead member succeeded")
	}
	f.Join(membership.Member{Name: "b", Addr: netip.MustParseAddrPort("10.0.0.3:7946")})
	if err := f.Leave("b"); err != nil {
		t.Fatal(err)
	}
	if err := f.Update(membership.Member{Name: "zz"}); err == nil {
		t.Fatal("update of an unknown member succeeded")
	}
	var got []string
	for _, ev := range sub.Drain() {
		got = append(got, ev.Type.String()+":"+ev.Member.Name+"@"+ev.Member.Addr.String()+"/"+ev.Member.Status.String())
	}
	want := []string{
		"join:b@10.0.0.2:7946/alive",
		"fail:b@10.0.0.2:7946/dead",
		"join:b@10.0.0.3:7946/alive",
		"leave:b@10.0.0.3:7946/left",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	select {
	case <-sub.Ready():
	default:
		t.Fatal("Ready had no token although events were queued")
	}
	if evs := sub.Drain(); len(evs) != 0 {
		t.Fatalf("second drain = %v", evs)
	}
}

func TestFakeTruncatesLongKindsLikeGossip(t *testing.T) {
	f := membership.NewFake(membership.Member{Name: "a"})
	defer f.Close()
	var kinds []string
	for i := range 200 {
		kinds = append(kinds, "kind-"+time.Duration(i).String())
	}
	f.Join(membership.Member{Name: "b", Meta: membership.Meta{Kinds: kinds}})
	m, _ := memberOf(f, "b")
	if !m.Meta.Truncated() || m.Meta.KindsDigest != membership.KindsDigest(kinds) || len(m.Meta.Kinds) != 0 {
		t.Fatalf("b meta = %+v, want kinds replaced by their digest", m.Meta)
	}
}

func TestSubscriptionNextHonoursContext(t *testing.T) {
	f := membership.NewFake(membership.Member{Name: "a"})
	defer f.Close()
	sub := f.Subscribe()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := sub.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want context.Canceled", err)
	}
	sub.Close()
	sub.Close()
	if _, err := sub.Next(t.Context()); !errors.Is(err, membership.ErrClosed) {
		t.Fatalf("Next after Close = %v, want ErrClosed", err)
	}
	f.Join(membership.Member{Name: "b"}) // not delivered to a closed subscription
	if evs := sub.Drain(); len(evs) != 0 {
		t.Fatalf("closed subscription got %v", evs)
	}
}
