package membership

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Resolver looks up the addresses of a host name. *net.Resolver implements
// it; tests inject a fake.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// seed is a parsed seed: an IP literal or a name to resolve, and a port.
type seed struct {
	host string
	ip   netip.Addr // valid when host is an IP literal
	port uint16
}

// CheckSeed reports why s is not a seed Config.Seeds takes (nil when it
// is): "host:port", "host", an IP literal or a DNS name.
func CheckSeed(s string) error {
	_, err := parseSeed(s)
	return err
}

// parseSeed accepts "host:port", "host", "[v6]:port", "v6" and "[v6]"; a
// missing port means DefaultPort.
func parseSeed(s string) (seed, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return seed{}, fmt.Errorf("%w: empty seed", ErrInvalidConfig)
	}
	host, port := raw, strconv.Itoa(DefaultPort)
	if h, p, err := net.SplitHostPort(raw); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(raw, "[") && strings.HasSuffix(raw, "]") {
		host = raw[1 : len(raw)-1]
	} else if strings.Count(raw, ":") == 1 {
		return seed{}, fmt.Errorf("%w: seed %q: %w", ErrInvalidConfig, s, err)
	}
	if host == "" {
		return seed{}, fmt.Errorf("%w: seed %q has no host", ErrInvalidConfig, s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return seed{}, fmt.Errorf("%w: seed %q: bad port %q", ErrInvalidConfig, s, port)
	}
	sd := seed{host: host, port: uint16(p)}
	if ip, err := netip.ParseAddr(host); err == nil {
		sd.ip = ip.Unmap()
	} else if !hostName(host) {
		// Resolving it could only fail, on every attempt, forever.
		return seed{}, fmt.Errorf("%w: seed %q: %q is neither an IP address nor a DNS name", ErrInvalidConfig, s, host)
	}
	return sd, nil
}

// hostName reports whether s has the form of a DNS name: dot-separated
// labels of letters, digits, '-' and '_', none empty or over 63 bytes.
func hostName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// resolveSeeds resolves every seed to all of its addresses, in seed order,
// without duplicates. Names that fail to resolve are reported in errs but
// do not stop the others.
func resolveSeeds(ctx context.Context, r Resolver, seeds []string) (addrs []netip.AddrPort, errs []error) {
	seen := make(map[netip.AddrPort]bool)
	add := func(ip netip.Addr, port uint16) {
		ap := netip.AddrPortFrom(ip.Unmap(), port)
		if !seen[ap] {
			seen[ap] = true
			addrs = append(addrs, ap)
		}
	}
	for _, s := range seeds {
		sd, err := parseSeed(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if sd.ip.IsValid() {
			add(sd.ip, sd.port)
			continue
		}
		ips, err := r.LookupIPAddr(ctx, sd.host)
		if err != nil {
			errs = append(errs, fmt.Errorf("membership: resolving seed %q: %w", sd.host, err))
			continue
		}
		for _, ia := range ips {
			if ip, ok := netip.AddrFromSlice(ia.IP); ok {
				add(ip, sd.port)
			}
		}
	}
	return addrs, errs
}

// localIPs returns the addresses of this host's interfaces plus loopback
// and unspecified addresses, to recognize seeds that point at this node.
func localIPs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{
		netip.IPv4Unspecified(): true, netip.IPv6Unspecified(): true,
		netip.MustParseAddr("127.0.0.1"): true, netip.IPv6Loopback(): true,
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out[pfx.Addr().Unmap()] = true
		}
	}
	return out
}

// nextBackoff doubles d up to max.
func nextBackoff(d, lo, hi time.Duration) time.Duration {
	if d < lo {
		return lo
	}
	return min(2*d, hi)
}
