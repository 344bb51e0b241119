package cli

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeResolver answers from a script: an error for the first fails
// lookups, then addrs.
type fakeResolver struct {
	fails int
	addrs []net.IPAddr
	calls int
}

func (f *fakeResolver) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	f.calls++
	if f.calls <= f.fails {
		return nil, errors.New("no such host")
	}
	return f.addrs, nil
}

func TestResolveAdvertise(t *testing.T) {
	v6 := net.IPAddr{IP: net.ParseIP("fd00::7")}
	v4 := net.IPAddr{IP: net.ParseIP("10.1.2.3")}

	for _, ip := range []string{"", "10.0.0.9", "fd00::1"} {
		got, err := resolveAdvertise(t.Context(), ip, &fakeResolver{fails: 1 << 30}, time.Second)
		if err != nil || got != ip {
			t.Fatalf("resolveAdvertise(%q) = %q, %v; want it unchanged", ip, got, err)
		}
	}

	r := &fakeResolver{fails: 2, addrs: []net.IPAddr{v6, v4}}
	got, err := resolveAdvertise(t.Context(), "tempest-0.tempest.default.svc", r, 30*time.Second)
	if err != nil || got != "10.1.2.3" {
		t.Fatalf("got %q, %v; want the IPv4 address after retries", got, err)
	}
	if r.calls != 3 {
		t.Fatalf("resolver called %d times, want 3", r.calls)
	}

	got, err = resolveAdvertise(t.Context(), "only-v6", &fakeResolver{addrs: []net.IPAddr{v6}}, time.Second)
	if err != nil || got != "fd00::7" {
		t.Fatalf("got %q, %v; want the IPv6 address", got, err)
	}

	_, err = resolveAdvertise(t.Context(), "never.example", &fakeResolver{fails: 1 << 30}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "--advertise") {
		t.Fatalf("err = %v; want a config error naming --advertise", err)
	}
	if exitCode(err) != exitUsage {
		t.Fatalf("exit code %d, want %d", exitCode(err), exitUsage)
	}

	// A signal while it resolves stops it at once, not after the timeout.
	stop, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = resolveAdvertise(stop, "never.example", &fakeResolver{fails: 1 << 30}, time.Hour)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v after the stop; want context.Canceled", err)
	}
}

func TestValidHostName(t *testing.T) {
	for _, ok := range []string{"a", "tempest-0.tempest.default.svc.cluster.local", "node1.", "X-1"} {
		if !validHostName(ok) {
			t.Errorf("%q rejected", ok)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "a..b", "a_b", "a b", "a:1", strings.Repeat("a", 64)} {
		if validHostName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
