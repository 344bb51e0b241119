package membership_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/membership"
)

func TestFiveNodesJoinAndSeeMetadata(t *testing.T) {
	// Each node seeds only from the previous one: the cluster still forms
	// as one, through gossip.
	var nodes []*membership.Membership
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("n%d", i)
		cfg := nodeConfig(name)
		if i > 0 {
			cfg.Seeds = []string{addrOf(nodes[i-1])}
		}
		cfg.Meta.QUICAddr = "127.0.0.1:" + strconv.Itoa(17000+i)
		cfg.Meta.ManifestDigest = "digest-" + name
		cfg.Meta.Kinds = []string{"counter", "kind-" + name}
		nodes = append(nodes, joinNode(t, cfg))
		names = append(names, name)
	}
	for _, n := range nodes {
		eventually(t, n.LocalName()+" sees all five", func() bool { return hasAlive(n, names...) })
	}
	for _, n := range nodes {
		for i, peer := range names {
			m, _ := memberOf(n, peer)
			if m.MetaErr != nil || m.Meta.QUICAddr != "127.0.0.1:"+strconv.Itoa(17000+i) ||
				m.Meta.ManifestDigest != "digest-"+peer || len(m.Meta.Kinds) != 2 || m.Meta.Version != "test" || m.Meta.BootID == 0 {
				t.Fatalf("%s sees %s with meta %+v (err %v)", n.LocalName(), peer, m.Meta, m.MetaErr)
			}
			if m.Addr != nodes[i].Local().Addr {
				t.Fatalf("%s sees %s at %v, want %v", n.LocalName(), peer, m.Addr, nodes[i].Local().Addr)
			}
		}
	}
}

func TestRestartSameNameNewAddressRejoins(t *testing.T) {
	// The survivors remember the dead c for longer than the test may
	// wait, so only the dead-node reclaim lets the new c in; and no
	// periodic push/pull or re-join happens within the test either, so
	// the new c gets in only by reacting to the name conflict.
	long := 2 * waitFor
	ca, cb := nodeConfig("a"), nodeConfig("b")
	for _, cfg := range []*membership.Config{&ca, &cb} {
		cfg.Timing.GossipToTheDeadTime = long
		cfg.Timing.PushPullInterval = long
	}
	a := joinNode(t, ca)
	cb.Seeds = []string{addrOf(a)}
	b := joinNode(t, cb)
	c := joinNode(t, nodeConfig("c", addrOf(a)))
	eventually(t, "three nodes", func() bool { return hasAlive(a, "a", "b", "c") && hasAlive(b, "a", "b", "c") })
	sub := a.Subscribe()
	defer sub.Close()
	oldAddr, oldBoot := c.Local().Addr, c.Local().Meta.BootID

	c.Halt() // crash: no leave
	// Restart at once, before the failure is detected, on a new port.
	cfgC2 := nodeConfig("c", addrOf(b))
	cfgC2.Timing.PushPullInterval = long
	cfgC2.Timing.RejoinInterval = long
	c2 := joinNode(t, cfgC2)
	newAddr := c2.Local().Addr
	if newAddr == oldAddr {
		t.Fatalf("restarted node got the same address %v", newAddr)
	}
	for _, n := range []*membership.Membership{a, b} {
		eventually(t, n.LocalName()+" sees c at its new address", func() bool {
			m, ok := memberOf(n, "c")
			return ok && m.Status == membership.StatusAlive && m.Addr == newAddr && m.Meta.BootID != oldBoot
		})
	}
	eventually(t, "c sees a and b", func() bool { return hasAlive(c2, "a", "b", "c") })
	// Placement learns about it: c rejoined (join event at the new address).
	ev, skipped := awaitEvent(t, sub, "c join at new address", func(ev membership.Event) bool {
		return ev.Member.Name == "c" && ev.Member.Addr == newAddr && ev.Type == membership.EventJoin
	})
	if ev.Member.Meta.BootID == oldBoot {
		t.Fatalf("join event carries the old boot id")
	}
	for _, s := range skipped {
		if s.Member.Name == "c" && s.Type != membership.EventFail && s.Type != membership.EventUpdate {
			t.Fatalf("unexpected event before the rejoin: %s", describe(skipped))
		}
	}
}

func TestGracefulLeaveThenRejoin(t *testing.T) {
	a := joinNode(t, nodeConfig("a"))
	b := joinNode(t, nodeConfig("b", addrOf(a)))
	eventually(t, "a sees b", func() bool { return hasAlive(a, "a", "b") })
	sub := a.Subscribe()
	defer sub.Close()
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(t.Context()); err != nil { // idempotent
		t.Fatal(err)
	}
	b.Halt() // no-op after Close
	ev, _ := awaitEvent(t, sub, "b departs", func(ev membership.Event) bool {
		return ev.Member.Name == "b" && ev.Member.Status.Gone()
	})
	if ev.Type != membership.EventLeave {
		t.Fatalf("b's departure reported as %s, want leave", ev.Type)
	}
	if err := b.UpdateMeta(t.Context(), membership.Meta{}); !errors.Is(err, membership.ErrClosed) {
		t.Fatalf("UpdateMeta after Close = %v, want ErrClosed", err)
	}
	if err := b.Start(t.Context()); !errors.Is(err, membership.ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
	// The same name comes back (same or new address) and is alive again.
	b2 := joinNode(t, nodeConfig("b", addrOf(a)))
	awaitEvent(t, sub, "b joins again", func(ev membership.Event) bool {
		return ev.Member.Name == "b" && ev.Type == membership.EventJoin && ev.Member.Addr == b2.Local().Addr
	})
}

func TestMetadataLimits(t *testing.T) {
	cfg := nodeConfig("a")
	cfg.Meta.ManifestDigest = strings.Repeat("x", membership.MetaLimit)
	_, err := membership.New(cfg)
	var tl *membership.MetaTooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("New with huge metadata = %v, want *MetaTooLargeError", err)
	}

	a := joinNode(t, nodeConfig("a"))
	b := joinNode(t, nodeConfig("b", addrOf(a)))
	before := a.Meta()
	huge := before
	huge.HTTPAddr = strings.Repeat("h", membership.MetaLimit)
	if err := a.UpdateMeta(t.Context(), huge); !errors.Is(err, membership.ErrMetaTooLarge) {
		t.Fatalf("UpdateMeta with huge metadata = %v, want ErrMetaTooLarge", err)
	}
	if got := a.Meta(); got.HTTPAddr != before.HTTPAddr {
		t.Fatalf("failed update changed metadata to %+v", got)
	}

	// Many kinds: gossiped as a digest; the sender keeps its full list.
	many := before
	many.Kinds = nil
	for i := range 80 {
		many.Kinds = append(many.Kinds, fmt.Sprintf("some.long.kind.name.%03d", i))
	}
	if err := a.UpdateMeta(t.Context(), many); err != nil {
		t.Fatal(err)
	}
	if got := a.Meta(); len(got.Kinds) != 80 || got.BootID != before.BootID {
		t.Fatalf("local meta after update: %d kinds, boot %d (want 80, %d)", len(got.Kinds), got.BootID, before.BootID)
	}
	eventually(t, "b sees a's kinds digest", func() bool {
		m, _ := memberOf(b, "a")
		return m.Meta.Truncated() && m.Meta.KindsDigest == membership.KindsDigest(many.Kinds)
	})
}

func TestWrongOrMissingKeyIsRejected(t *testing.T) {
	k1, _ := membership.NewKey()
	k2, _ := membership.NewKey()
	withKeys := func(cfg membership.Config, keys ...[]byte) membership.Config {
		cfg.GossipKeys = keys
		return cfg
	}
	a := joinNode(t, withKeys(nodeConfig("a"), k1))
	b := joinNode(t, withKeys(nodeConfig("b", addrOf(a)), k1))
	eventually(t, "keyed pair forms", func() bool { return hasAlive(a, "a", "b") && hasAlive(b, "a", "b") })

	for name, keys := range map[string][][]byte{"wrong-key": {k2}, "no-key": nil} {
		bad := startNode(t, withKeys(nodeConfig(name, addrOf(a), addrOf(b)), keys...))
		// Give it several join attempts (fast back-off) before judging.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := bad.WaitJoined(ctx)
		cancel()
		if err == nil {
			t.Fatalf("%s: joined a cluster it has no key for", name)
		}
		for _, n := range []*membership.Membership{a, b} {
			if _, ok := memberOf(n, name); ok {
				t.Fatalf("%s: %s lists it as a member", name, n.LocalName())
			}
		}
		if m, ok := memberOf(bad, "a"); ok {
			t.Fatalf("%s: learned about a: %+v", name, m)
		}
		bad.Halt()
		if err := bad.WaitJoined(t.Context()); !errors.Is(err, membership.ErrClosed) {
			t.Fatalf("%s: WaitJoined after Halt = %v, want ErrClosed", name, err)
		}
	}
}

func TestKeyRotation(t *testing.T) {
	k1, _ := membership.NewKey()
	k2, _ := membership.NewKey()
	cfgA, cfgB := nodeConfig("a"), nodeConfig("b")
	cfgA.GossipKeys = [][]byte{k1}
	a := joinNode(t, cfgA)
	cfgB.GossipKeys = [][]byte{k1}
	cfgB.Seeds = []string{addrOf(a)}
	b := joinNode(t, cfgB)
	eventually(t, "pair forms", func() bool { return hasAlive(a, "a", "b") })
	nodes := []*membership.Membership{a, b}

	// 1. install everywhere, 2. use everywhere, 3. remove the old key.
	for _, n := range nodes {
		if err := n.InstallKey(k2); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if err := n.UseKey(k2); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		if err := n.RemoveKey(k1); err != nil {
			t.Fatal(err)
		}
		if keys := n.Keys(); len(keys) != 1 || string(keys[0]) != string(k2) {
			t.Fatalf("%s keyring after rotation has %d keys", n.LocalName(), len(keys))
		}
	}
	if err := a.RemoveKey(k2); err == nil {
		t.Fatal("removing the primary key succeeded")
	}
	// A node holding only the new key joins; the old key is refused.
	cfgC := nodeConfig("c", addrOf(a))
	cfgC.GossipKeys = [][]byte{k2}
	c := joinNode(t, cfgC)
	eventually(t, "all see c", func() bool {
		return hasAlive(a, "a", "b", "c") && hasAlive(b, "a", "b", "c") && hasAlive(c, "a", "b", "c")
	})
	cfgD := nodeConfig("d", addrOf(a))
	cfgD.GossipKeys = [][]byte{k1}
	d := startNode(t, cfgD)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := d.WaitJoined(ctx); err == nil {
		t.Fatal("node with the removed key joined")
	}

	plain := joinNode(t, nodeConfig("plain"))
	if err := plain.InstallKey(k1); !errors.Is(err, membership.ErrEncryptionDisabled) {
		t.Fatalf("InstallKey without encryption = %v, want ErrEncryptionDisabled", err)
	}
	if plain.Keys() != nil {
		t.Fatal("Keys without encryption is not nil")
	}
}

func TestHeadlessServiceSeeds(t *testing.T) {
	// Three nodes on distinct loopback IPs and one shared port, all seeded
	// with one DNS name that resolves to every node (itself included) and
	// to an address where nothing listens yet, as a Kubernetes headless
	// service with publishNotReadyAddresses does. They start together and
	// must form one cluster.
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	port := freeSharedPort(t, ips...)
	resolver := staticResolver{"tempest.default.svc.cluster.local": append(ips, "127.0.0.5")}
	var nodes []*membership.Membership
	for i, ip := range ips {
		cfg := nodeConfig(fmt.Sprintf("pod-%d", i), "tempest.default.svc.cluster.local:"+strconv.Itoa(port))
		cfg.Bind = ip + ":" + strconv.Itoa(port)
		cfg.Resolver = resolver
		nodes = append(nodes, startNode(t, cfg))
	}
	for _, n := range nodes {
		if got, want := n.Local().Addr, netip.MustParseAddrPort(n.Local().Addr.Addr().String()+":"+strconv.Itoa(port)); got != want {
			t.Fatalf("bound %v", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		err := n.WaitJoined(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", n.LocalName(), err)
		}
	}
	for _, n := range nodes {
		eventually(t, n.LocalName()+" sees all pods", func() bool { return hasAlive(n, "pod-0", "pod-1", "pod-2") })
	}
}

func TestSingleNodeWithoutSeedsIsJoined(t *testing.T) {
	n := startNode(t, nodeConfig("solo"))
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := n.WaitJoined(ctx); err != nil {
		t.Fatal(err)
	}
	unstarted, err := membership.New(nodeConfig("unstarted"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unstarted.WaitJoined(ctx); !errors.Is(err, membership.ErrNotStarted) {
		t.Fatalf("WaitJoined before Start = %v, want ErrNotStarted", err)
	}
	if err := unstarted.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRejoinAfterBeingForgotten(t *testing.T) {
	// b knows a only as a seed. After a's view of b is lost (b crashed and
	// came back while a had already forgotten it), the periodic re-join
	// brings them together again without any new call.
	cfgA := nodeConfig("a")
	a := joinNode(t, cfgA)
	b := joinNode(t, nodeConfig("b", addrOf(a)))
	eventually(t, "pair forms", func() bool { return hasAlive(a, "a", "b") })
	aAddr := a.Local().Addr
	a.Halt()
	eventually(t, "b declares a dead", func() bool {
		m, _ := memberOf(b, "a")
		return m.Status == membership.StatusDead
	})
	// a restarts on the same address with no seeds: only b's re-join loop
	// can reconnect them.
	cfgA2 := nodeConfig("a")
	cfgA2.Bind = aAddr.String()
	a2 := startNode(t, cfgA2)
	eventually(t, "a sees b again", func() bool { return hasAlive(a2, "a", "b") })
	eventually(t, "b sees a again", func() bool { return hasAlive(b, "a", "b") })
}

func TestJoinedByOthersCountsAsJoined(t *testing.T) {
	// a's only seed is an address where nothing listens (its real peers
	// are not up yet, say). b joins a; a must then count as joined even
	// though its own attempts keep failing.
	cfgA := nodeConfig("a", "127.0.0.1:1")
	cfgA.Timing.JoinBackoffMin, cfgA.Timing.JoinBackoffMax = 50*time.Millisecond, 100*time.Millisecond
	a := startNode(t, cfgA)
	joinNode(t, nodeConfig("b", addrOf(a)))
	eventually(t, "a sees b", func() bool { return hasAlive(a, "a", "b") })
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := a.WaitJoined(ctx); err != nil {
		t.Fatalf("a: WaitJoined = %v although b joined it", err)
	}
}
