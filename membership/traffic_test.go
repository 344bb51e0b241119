package membership_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/membership"
)

// lockedBuffer is a bytes.Buffer for concurrent log writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// keyedNode starts node a with a gossip key of its own, logging at info
// into logs, and dials its gossip port over UDP (closed when the test
// ends).
func keyedNode(t *testing.T) (a *membership.Membership, logs *lockedBuffer, udp net.Conn) {
	t.Helper()
	key, err := membership.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	logs = &lockedBuffer{}
	cfg := nodeConfig("a")
	cfg.GossipKeys = [][]byte{key}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a = startNode(t, cfg)
	if udp, err = net.Dial("udp", a.Local().Addr.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	return a, logs, udp
}

// Ten thousand packets no key decrypts, garbage streams and a peer with
// another key are counted exactly and logged as a few summary lines,
// not one line each.
func TestBadGossipTrafficIsCountedAndRateLimited(t *testing.T) {
	a, logs, udp := keyedNode(t)
	addr := a.Local().Addr.String()
	r := rand.New(rand.NewPCG(5, 6))
	pkt := make([]byte, 120)
	const packets = 10_000
	for sent := 0; sent < packets; {
		// Batches small enough for the socket buffer: every packet
		// must arrive for the count to be exact.
		for range 200 {
			for i := range pkt {
				pkt[i] = byte(r.Uint32())
			}
			pkt[0] = 1 // the encryption version byte: "decrypt failed", not "unsupported version"
			if _, err := udp.Write(pkt); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		deadline := time.Now().Add(waitFor)
		for a.Dropped().Undecryptable < uint64(sent) {
			if time.Now().After(deadline) {
				t.Fatalf("dropped %d of %d packets sent", a.Dropped().Undecryptable, sent)
			}
			time.Sleep(time.Millisecond) // polling a counter, not synchronising
		}
	}
	const streams = 20
	for range streams {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("\x01 this is no gossip stream at all"))
		_ = c.Close()
	}
	// A node with another key tries to join.
	other, err := membership.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	bcfg := nodeConfig("b", addr)
	bcfg.GossipKeys = [][]byte{other}
	startNode(t, bcfg)

	deadline := time.Now().Add(waitFor)
	for a.Dropped().Undecryptable+a.Dropped().Malformed < packets+streams+1 {
		if time.Now().After(deadline) {
			t.Fatalf("dropped %+v, want at least %d", a.Dropped(), packets+streams+1)
		}
		time.Sleep(time.Millisecond)
	}
	if got := a.Dropped(); got.Undecryptable < packets {
		t.Errorf("undecryptable %d, want at least %d", got.Undecryptable, packets)
	}
	for _, m := range a.Members() {
		if m.Name == "b" {
			t.Errorf("the node with another key is a member: %+v", m)
		}
	}
	out := logs.String()
	lines := strings.Count(out, "\n")
	if lines > 20 {
		t.Fatalf("%d log lines for %d bad packets and %d streams:\n%s", lines, packets, streams, out)
	}
	if n := strings.Count(out, "gossip traffic dropped"); n == 0 || n > 3 {
		t.Errorf("%d summary lines, want 1 to 3 (one per cause within the interval):\n%s", n, out)
	}
	if !strings.Contains(out, fmt.Sprintf("cause=%s count=1 total=1", membership.CauseUndecryptable)) {
		t.Errorf("no line for the first undecryptable packet:\n%s", out)
	}
}

// Packets and streams whose label header does not decode (truncated, or
// empty) are dropped before decryption: they are counted as malformed
// and logged as a summary line, not one error line each. Garbage streams
// whose sender resets the connection at once are counted once each, and
// memberlist's failure to answer them logs nothing above debug.
func TestBadLabelsAndResetStreamsAreCountedAndRateLimited(t *testing.T) {
	a, logs, udp := keyedNode(t)
	addr := a.Local().Addr.String()
	// 244 is memberlist's label header: a label of 16 bytes with one
	// present, then an empty label.
	bad := [][]byte{{0xf4, 0x10, 0x41}, {0xf4, 0x00, 0x01}}
	const packets = 2000
	for sent := 0; sent < packets; {
		for range 100 {
			if _, err := udp.Write(bad[sent%len(bad)]); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		deadline := time.Now().Add(waitFor)
		for a.Dropped().Malformed < uint64(sent) {
			if time.Now().After(deadline) {
				t.Fatalf("dropped %+v of %d packets sent", a.Dropped(), sent)
			}
			time.Sleep(time.Millisecond) // polling a counter, not synchronising
		}
	}
	const streams = 10
	for range streams {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte{0xf4, 0x10, 0x41})
		_ = c.Close()
	}
	const resets = 100
	for range resets {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("\x01 this is no gossip stream at all"))
		_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
		_ = c.Close()
	}
	deadline := time.Now().Add(waitFor)
	for got := a.Dropped(); got.Malformed < packets+streams || got.Undecryptable < resets; got = a.Dropped() {
		if time.Now().After(deadline) {
			t.Fatalf("dropped %+v, want %d malformed and %d undecryptable", got, packets+streams, resets)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // lines written after the count, if any
	if got := a.Dropped(); got.Malformed != packets+streams || got.Undecryptable != resets {
		t.Errorf("dropped %+v, want %d malformed and %d undecryptable", got, packets+streams, resets)
	}
	out := logs.String()
	if n := strings.Count(out, "cannot decode label"); n > 1 {
		t.Errorf("%d lines about undecodable labels, want at most one summary:\n%s", n, out)
	}
	if n := strings.Count(out, "level=ERROR"); n > 0 {
		t.Errorf("%d error lines:\n%s", n, out)
	}
	if n := strings.Count(out, "\n"); n > 10 {
		t.Errorf("%d log lines for %d bad packets and %d streams:\n%s", n, packets, streams+resets, out)
	}
}
