package membership_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/membership"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait for gossip to converge. Generous because the
// race detector on two busy cores slows gossip down a lot; passing runs
// take far less.
const waitFor = 30 * time.Second

func testLogger() *slog.Logger {
	if os.Getenv("MEMBERSHIP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// nodeConfig is a loopback config with an ephemeral port and fast timing.
func nodeConfig(name string, seeds ...string) membership.Config {
	return membership.Config{
		Name:   name,
		Bind:   "127.0.0.1:0",
		Seeds:  seeds,
		Timing: membership.FastTiming(),
		Meta: membership.Meta{
			QUICAddr: "127.0.0.1:7947",
			HTTPAddr: "127.0.0.1:7948",
			Kinds:    []string{"counter"},
			Version:  "test",
		},
		LeaveTimeout: 5 * time.Second,
		Logger:       testLogger(),
	}
}

// startNode creates and starts a node, closing it when the test ends.
func startNode(t *testing.T, cfg membership.Config) *membership.Membership {
	t.Helper()
	m, err := membership.New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	if err := m.Start(t.Context()); err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	return m
}

// joinNode starts a node and waits for its first join.
func joinNode(t *testing.T, cfg membership.Config) *membership.Membership {
	t.Helper()
	m := startNode(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := m.WaitJoined(ctx); err != nil {
		t.Fatalf("%s: WaitJoined: %v", cfg.Name, err)
	}
	return m
}

func addrOf(m *membership.Membership) string { return m.Local().Addr.String() }

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func memberOf(c membership.Cluster, name string) (membership.Member, bool) {
	for _, m := range c.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return membership.Member{}, false
}

// hasAlive reports whether c sees exactly the given names alive (or
// suspect).
func hasAlive(c membership.Cluster, names ...string) bool {
	alive := map[string]bool{}
	for _, m := range c.Members() {
		if !m.Status.Gone() {
			alive[m.Name] = true
		}
	}
	if len(alive) != len(names) {
		return false
	}
	for _, n := range names {
		if !alive[n] {
			return false
		}
	}
	return true
}

// awaitEvent reads events until one matches, failing after waitFor.
// Non-matching events are skipped and returned for inspection.
func awaitEvent(t *testing.T, sub *membership.Subscription, what string, match func(membership.Event) bool) (membership.Event, []membership.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	var skipped []membership.Event
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v (skipped %s)", what, err, describe(skipped))
		}
		if match(ev) {
			return ev, skipped
		}
		skipped = append(skipped, ev)
	}
}

func describe(evs []membership.Event) string {
	s := "["
	for i, ev := range evs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s:%s@%s", ev.Type, ev.Member.Name, ev.Member.Addr)
	}
	return s + "]"
}

// freeSharedPort returns a port free for TCP and UDP on every given IP.
func freeSharedPort(t *testing.T, ips ...string) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := true
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			tl, err1 := net.Listen("tcp", addr)
			ul, err2 := net.ListenPacket("udp", addr)
			if tl != nil {
				tl.Close()
			}
			if ul != nil {
				ul.Close()
			}
			if err1 != nil || err2 != nil {
				ok = false
			}
		}
		if ok {
			return port
		}
	}
	t.Fatal("no shared free port")
	return 0
}

// staticResolver resolves names from a map.
type staticResolver map[string][]string

func (r staticResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	ips, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]net.IPAddr, 0, len(ips))
	for _, s := range ips {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	return out, nil
}
