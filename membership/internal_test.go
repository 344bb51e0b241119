package membership

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseLogLine(t *testing.T) {
	for _, tc := range []struct {
		in    string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=1.2.3.4:5\n", slog.LevelDebug, "Stream connection from=1.2.3.4:5"},
		{"[INFO] memberlist: Suspect b has failed\n", slog.LevelInfo, "Suspect b has failed"},
		{"[WARN] memberlist: Refuting a dead message\n", slog.LevelWarn, "Refuting a dead message"},
		{"[ERR] memberlist: Conflicting address\n", slog.LevelError, "Conflicting address"},
		{"[ERR] Failed to shutdown transport: x\n", slog.LevelError, "Failed to shutdown transport: x"},
		{"no tag at all", slog.LevelInfo, "no tag at all"},
		{"[ERR] memberlist: Failed to send indirect UDP ping: write udp 127.0.0.1:1->127.0.0.1:2: use of closed network connection\n", slog.LevelDebug,
			"Failed to send indirect UDP ping: write udp 127.0.0.1:1->127.0.0.1:2: use of closed network connection"},
		{"[ODD] memberlist: x", slog.LevelInfo, "[ODD] memberlist: x"},
		{"[ERR] memberlist: Failed to send error: write tcp 127.0.0.1:1->127.0.0.1:2: write: connection reset by peer from=127.0.0.1:2\n", slog.LevelDebug,
			"Failed to send error: write tcp 127.0.0.1:1->127.0.0.1:2: write: connection reset by peer from=127.0.0.1:2"},
	} {
		level, msg := parseLogLine([]byte(tc.in))
		if level != tc.level || msg != tc.msg {
			t.Errorf("%q: got %v %q, want %v %q", tc.in, level, msg, tc.level, tc.msg)
		}
	}
}

// Every line memberlist v0.7.0 writes about a packet or stream it
// received and dropped, as it formats them, is classified; lines about
// this node's own sends and load are not.
func TestDropCauseCoversMemberlistLines(t *testing.T) {
	const from = " from=10.0.0.9:7946"
	for _, tc := range []struct {
		line, cause string
	}{
		// net.go, ingestPacket and handleConn; label.go; security.go.
		{"[ERR] memberlist: cannot decode label; packet has been truncated" + from, CauseMalformed},
		{"[ERR] memberlist: label header cannot be empty when present" + from, CauseMalformed},
		{"[ERR] memberlist: unexpected double packet label header:" + from, CauseMalformed},
		{`[ERR] memberlist: discarding packet with unacceptable label "x":` + from, CauseMalformed},
		{"[ERR] memberlist: failed to receive and remove the stream label header: cannot decode label; stream has been truncated" + from, CauseMalformed},
		{"[ERR] memberlist: failed to receive and remove the stream label header: label header cannot be empty when present" + from, CauseMalformed},
		{"[ERR] memberlist: unexpected double stream label header:" + from, CauseMalformed},
		{`[ERR] memberlist: discarding stream with unacceptable label "x":` + from, CauseMalformed},
		{"[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message" + from, CauseUndecryptable},
		{"[ERR] memberlist: Decrypt packet failed: cannot decrypt empty payload" + from, CauseUndecryptable},
		{"[ERR] memberlist: Decrypt packet failed: unsupported encryption version 9" + from, CauseUndecryptable},
		{"[ERR] memberlist: Decrypt packet failed: payload is too small to decrypt: 3" + from, CauseUndecryptable},
		{"[ERR] memberlist: failed to receive: no installed keys could decrypt the message" + from, CauseUndecryptable},
		{"[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted" + from, CauseUndecryptable},
		{"[ERR] memberlist: failed to receive: remote state is encrypted and encryption is not configured" + from, CauseUndecryptable},
		{"[ERR] memberlist: failed to receive: cannot decompress unknown algorithm 7" + from, CauseMalformed},
		{"[WARN] memberlist: Got invalid checksum for UDP packet: 1, 2", CauseMalformed},
		{"[ERR] memberlist: missing message type byte" + from, CauseMalformed},
		{"[ERR] memberlist: UDP packet too short (0 bytes)" + from, CauseMalformed},
		{"[ERR] memberlist: msg type (99) not supported" + from, CauseMalformed},
		{"[ERR] memberlist: Message type (99) not supported" + from + " (packet handler)", CauseMalformed},
		{"[ERR] memberlist: Received invalid msgType (99)" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode compound request: truncated len slice" + from, CauseMalformed},
		{"[WARN] memberlist: Compound request had 2 truncated messages" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode ping: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode ping request: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode indirect ping request: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode ack response: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode nack response: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode suspect message: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode alive message: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decode dead message: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to decompress payload: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to receive user message: EOF" + from, CauseMalformed},
		{"[ERR] memberlist: Failed to read remote state: number of nodes in header (9999999) exceeds limit" + from, CauseMalformed},
		{"[ERR] memberlist: Failed push/pull merge: Node 'x' protocol version (0) is incompatible: [1, 5]" + from, CauseMalformed},
		{"[WARN] memberlist: Got ping for unexpected node x" + from, CauseMalformed},
		{"[WARN] memberlist: Got ping for unexpected node 'x'" + from, CauseMalformed},
		{"[WARN] memberlist: Ignoring an alive message for 'x' (10.0.0.9:7946) because protocol version(s) are wrong: 0 <= 0 <= 0 should be >0", CauseMalformed},
		{"[WARN] memberlist: ignoring alive message for 'x' (10.0.0.9:7946) because Vsn is not present", CauseMalformed},
		{"[WARN] memberlist: ignoring alive message for 'x': refused", CauseMalformed},
		{"[WARN] memberlist: Rejected node x (10.0.0.9): not allowed", CauseMalformed},
		{"[WARN] memberlist: Rejected IP update from x to 10.0.0.8 for node 10.0.0.9: not allowed", CauseMalformed},
		// This node's own sends, load and state: logged as they are.
		{"[ERR] memberlist: Failed to send gossip to 10.0.0.9:7946: i/o timeout", ""},
		{"[ERR] memberlist: Failed to send ack: EOF" + from, ""},
		{"[ERR] memberlist: Failed to push local state: EOF" + from, ""},
		{"[ERR] memberlist: Push/Pull with x failed: i/o timeout", ""},
		{"[ERR] memberlist: Too many pending push/pull requests", ""},
		{"[WARN] memberlist: handler queue full, dropping message (2)" + from, ""},
		{"[ERR] memberlist: Conflicting address for x. Mine: 10.0.0.8:1 Theirs: 10.0.0.9:1 Old state: 0", ""},
		{"[WARN] memberlist: Refuting a suspect message (from: x)", ""},
	} {
		_, msg := parseLogLine([]byte(tc.line))
		cause, ok := dropCause([]byte(msg))
		if cause != tc.cause || ok != (tc.cause != "") {
			t.Errorf("%q: cause %q, %v; want %q", tc.line, cause, ok, tc.cause)
		}
	}
}

func TestStdLoggerBridgesLevels(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	std := newStdLogger(l, nil)
	std.Printf("[DEBUG] memberlist: hidden")
	std.Printf("[WARN] memberlist: shown %d", 7)
	out := buf.String()
	if strings.Contains(out, "hidden") {
		t.Fatalf("debug line passed an info-level handler: %s", out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, `msg="shown 7"`) || !strings.Contains(out, "source=memberlist") {
		t.Fatalf("unexpected output: %s", out)
	}
}

func TestParseSeed(t *testing.T) {
	for in, want := range map[string]seed{
		"a.example":       {host: "a.example", port: DefaultPort},
		"a.example:9000":  {host: "a.example", port: 9000},
		"10.0.0.1":        {host: "10.0.0.1", ip: netip.MustParseAddr("10.0.0.1"), port: DefaultPort},
		"10.0.0.1:1":      {host: "10.0.0.1", ip: netip.MustParseAddr("10.0.0.1"), port: 1},
		"[::1]:7000":      {host: "::1", ip: netip.MustParseAddr("::1"), port: 7000},
		"::1":             {host: "::1", ip: netip.MustParseAddr("::1"), port: DefaultPort},
		"[fe80::1]":       {host: "fe80::1", ip: netip.MustParseAddr("fe80::1"), port: DefaultPort},
		" svc.ns.svc:12 ": {host: "svc.ns.svc", port: 12},
	} {
		got, err := parseSeed(in)
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a:", ":7946", "a:0", "a:70000", "a:b", ":::bad", "a b", "exa$mple:80", "a..b"} {
		if _, err := parseSeed(in); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%q: err = %v, want ErrInvalidConfig", in, err)
		}
	}
}

// mapResolver is a Resolver backed by a map; it counts lookups.
type mapResolver struct {
	hosts   map[string][]string
	lookups int
}

func (r *mapResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	r.lookups++
	ips, ok := r.hosts[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, s := range ips {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	return out, nil
}

func TestResolveSeedsAllRecords(t *testing.T) {
	r := &mapResolver{hosts: map[string][]string{
		"tempest.default.svc": {"10.0.0.1", "10.0.0.2", "fd00::3"},
		"other":               {"10.0.0.2"},
	}}
	addrs, errs := resolveSeeds(t.Context(), r, []string{"tempest.default.svc", "other:7946", "10.0.0.9:1", "missing"})
	want := []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:7946"),
		netip.MustParseAddrPort("10.0.0.2:7946"),
		netip.MustParseAddrPort("[fd00::3]:7946"),
		netip.MustParseAddrPort("10.0.0.9:1"),
	}
	if !reflect.DeepEqual(addrs, want) {
		t.Fatalf("got %v, want %v", addrs, want)
	}
	if len(errs) != 1 {
		t.Fatalf("got errors %v, want one for the missing name", errs)
	}
	var dnsErr *net.DNSError
	if !errors.As(errs[0], &dnsErr) {
		t.Fatalf("error %v does not wrap the lookup error", errs[0])
	}
	// Names are resolved afresh on every attempt; IP literals never are.
	before := r.lookups
	r.hosts["tempest.default.svc"] = []string{"10.0.0.4"}
	addrs, _ = resolveSeeds(t.Context(), r, []string{"tempest.default.svc", "10.0.0.9"})
	if r.lookups != before+1 || len(addrs) != 2 || addrs[0] != netip.MustParseAddrPort("10.0.0.4:7946") {
		t.Fatalf("second attempt: lookups %d→%d, addrs %v", before, r.lookups, addrs)
	}
}

func TestNextBackoff(t *testing.T) {
	lo, hi := 100*time.Millisecond, time.Second
	var got []time.Duration
	d := time.Duration(0)
	for range 6 {
		d = nextBackoff(d, lo, hi)
		got = append(got, d)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
