package wire

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// clientTransport is a QUIC transport on a port of its own, closed when
// the test ends: a peer dialling the node by hand.
func clientTransport(t *testing.T) (*quic.Transport, net.PacketConn) {
	t.Helper()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() {
		tr.Close()
		udp.Close()
	})
	return tr, udp
}

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Handshakes with a certificate of another CA and Hellos naming another
// node are each counted, and logged as one line per cause and interval.
func TestRefusedConnectionsAreCountedAndRateLimited(t *testing.T) {
	c := newQUICCluster(t)
	var logs lockedLog
	cfg := c.config(t, "a", newSink(), nil)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := c.start(t, cfg)

	other := newPKI(t)
	both := c.pki.pool.Clone()
	both.AddCert(other.ca.Cert)
	foreign := other.cert(t, "evil")
	tr, _ := clientTransport(t)
	const handshakes = 50
	for range handshakes {
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		conn, err := tr.Dial(ctx, a.Addr(), clientTLS(staticCreds(foreign, both), time.Now, "a"), &quic.Config{})
		if err == nil {
			// The server refuses the certificate after the client's
			// side of the handshake completed: wait for that.
			<-conn.Context().Done()
		}
		cancel()
	}
	const hellos = 20
	for range hellos {
		// A cluster certificate for "mallory" claiming to be "b".
		if _, _, err := dialRaw(t, a, c.pki.cert(t, "mallory"), c.pki.pool, "b"); err == nil {
			t.Fatal("a hello naming another node was answered")
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for a.Stats().TLSRejected < handshakes || a.Stats().HelloRejected < hellos {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want %d TLS and %d hello rejections", a.Stats(), handshakes, hellos)
		}
		time.Sleep(time.Millisecond) // polling counters
	}
	if st := a.Stats(); st.TLSRejected != handshakes || st.HelloRejected != hellos {
		t.Errorf("TLSRejected %d, HelloRejected %d; want %d, %d", st.TLSRejected, st.HelloRejected, handshakes, hellos)
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("%d log lines for %d refused connections, want 2 (one per cause):\n%s", n, handshakes+hellos, out)
	}
	for _, want := range []string{"cause=" + causeTLSRejected, "cause=" + causeHelloRejected} {
		if !strings.Contains(out, want) {
			t.Errorf("no line with %s:\n%s", want, out)
		}
	}
}

// A second process with a valid certificate for b, at another address
// than b's, cannot take over a's live link with b: mail a sends to b
// keeps reaching the real b.
func TestSecondHolderOfANameDoesNotTakeOverTheLink(t *testing.T) {
	c, a, b, sa, sb := newTwo(t)
	checkStillWorks(t, b, sa, "b is linked") // the a–b session is up
	rp, status, err := dialRaw(t, a, c.pki.cert(t, "b"), c.pki.pool, "b")
	if err == nil && status == HelloStatusAccepted {
		t.Fatal("a accepted a second link for b from another address")
	}
	_ = rp
	if got := a.Stats().HelloRejected; got != 1 {
		t.Errorf("HelloRejected: got %d, want 1", got)
	}
	if err := a.Send("b", 1, []byte("to the real b")); err != nil {
		t.Fatal(err)
	}
	sb.waitFor(t, "mail at the real b", func(r []received) bool {
		for _, x := range r {
			if string(x.frame) == "to the real b" {
				return true
			}
		}
		return false
	})
}

// A peer that restarted at the address it advertises replaces its old
// session at once, even while that one still looks alive.
func TestRestartedPeerAtItsAdvertisedAddressReplacesTheLink(t *testing.T) {
	c, a, b, sa, _ := newTwo(t)
	checkStillWorks(t, b, sa, "b is linked")
	// "b" now advertises the raw dialer's address: a new process of b.
	tr, udp := clientTransport(t)
	c.res.set("b", udp.LocalAddr().String())
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	conn, err := tr.Dial(ctx, a.Addr(), clientTLS(staticCreds(c.pki.cert(t, "b"), c.pki.pool), time.Now, "a"), &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	hs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Write(appendFrame(nil, encodeHello(Hello{Version: ProtocolVersion, Name: "b"}))); err != nil {
		t.Fatal(err)
	}
	hs.Close()
	hs.SetReadDeadline(time.Now().Add(waitTimeout))
	raw, err := io.ReadAll(hs)
	if err != nil {
		t.Fatal(err)
	}
	body, err := singleFrame(raw)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, err := decodeHelloReply(body); err != nil || status != HelloStatusAccepted {
		t.Fatalf("hello from b's advertised address: %v %v, want accepted", status, err)
	}
}

// A peer sending junk frames, lane after lane, has every frame counted
// but is logged as at most one line per cause and interval: oversized
// frames, bad lengths and frames the handler rejects.
func TestBadLaneFramesAreCountedAndRateLimited(t *testing.T) {
	c := newQUICCluster(t)
	var logs lockedLog
	sa := newSink()
	sa.reject = func(f []byte) bool { return string(f) == "junk" }
	cfg := c.config(t, "a", sa, nil)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := c.start(t, cfg)
	rp, status, err := dialRaw(t, a, c.pki.cert(t, "raw"), c.pki.pool, "raw")
	if err != nil || status != HelloStatusAccepted {
		t.Fatalf("raw hello: status %d, err %v", status, err)
	}
	const each = 30
	for range each {
		for _, data := range [][]byte{
			binary.AppendUvarint([]byte{1}, uint64(DefaultMaxFrameSize+1)), // oversized
			{1, 0x80, 0x00},                        // non-minimal length
			appendFrame([]byte{1}, []byte("junk")), // rejected by the handler
		} {
			st := rp.lane(t, data)
			waitReset(t, st)
		}
	}
	if st := a.Stats(); st.Oversized != each || st.Malformed != 2*each {
		t.Errorf("oversized %d, malformed %d; want %d, %d", st.Oversized, st.Malformed, each, 2*each)
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n > 3 {
		t.Errorf("%d log lines for %d bad frames, want at most 3 (one per cause):\n%s", n, 3*each, out)
	}
	for _, want := range []string{"cause=" + causeFrameTooLarge, "cause=" + causeFrameMalformed, "cause=" + causeFrameRejected} {
		if !strings.Contains(out, want+" count=1 total=1") {
			t.Errorf("no line for the first event of %s:\n%s", want, out)
		}
	}
}

// Malformed mail frames are counted one by one and logged as at most one
// line per interval.
func TestMalformedMailFramesAreRateLimited(t *testing.T) {
	var logs lockedLog
	m, err := NewMailer(MailConfig{
		Registry: testRegistry(t), Local: &recLocal{},
		Complete: func(uint64, any, error) {},
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const frames = 200
	for i := range frames {
		if err := m.Handle("p", 1, []byte{0xff, byte(i), 0xff, 0xff}); err == nil {
			t.Fatal("a garbage frame was accepted")
		}
	}
	if got := m.Stats().DecodeErrors; got != frames {
		t.Errorf("DecodeErrors %d, want %d", got, frames)
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "count=1 total=1") {
		t.Errorf("%d log lines for %d malformed frames, want 1 for the first:\n%s", n, frames, out)
	}
}

// A Hello of another protocol version is refused through the rate-limited
// rejection lines, and only once its name matches the certificate: a
// cluster certificate for mallory claiming to be b is refused for the
// name, and no line names b as the peer.
func TestBadVersionHellosAreRateLimitedAndCheckTheNameFirst(t *testing.T) {
	c := newQUICCluster(t)
	var logs lockedLog
	cfg := c.config(t, "a", newSink(), nil)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := c.start(t, cfg)

	if _, status, err := dialRawVersion(t, a, c.pki.cert(t, "mallory"), c.pki.pool, "b", ProtocolVersion+1); err == nil {
		t.Fatalf("a hello naming another node than its certificate was answered %v", status)
	}
	const future = 10
	for range future {
		rp, status, err := dialRawVersion(t, a, c.pki.cert(t, "future"), c.pki.pool, "future", ProtocolVersion+1)
		if err != nil || status != HelloStatusRejected {
			t.Fatalf("hello with a future version: status %v, err %v; want REJECTED", status, err)
		}
		rp.conn.CloseWithError(0, "")
	}
	deadline := time.Now().Add(waitTimeout)
	for a.Stats().HelloRejected < 1+future {
		if time.Now().After(deadline) {
			t.Fatalf("HelloRejected %d, want %d", a.Stats().HelloRejected, 1+future)
		}
		time.Sleep(time.Millisecond) // polling a counter
	}
	if got := a.Stats().HelloRejected; got != 1+future {
		t.Errorf("HelloRejected %d, want %d", got, 1+future)
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 1 {
		t.Errorf("%d log lines for %d refused hellos, want 1:\n%s", n, 1+future, out)
	}
	if !strings.Contains(out, "cause="+causeHelloRejected) || !strings.Contains(out, "does not match certificate") ||
		!strings.Contains(out, "certificate=mallory") {
		t.Errorf("the first line is not the name mismatch, with the certificate's name:\n%s", out)
	}
	if strings.Contains(out, "peer=b") {
		t.Errorf("a line names the unverified claim as the peer:\n%s", out)
	}
}

// A handshake without a client certificate is refused like one with a
// bad certificate: counted as TLSRejected, logged as a rate-limited
// line, and nothing is served on it.
func TestHandshakesWithoutClientCertificateAreRefusedAndCounted(t *testing.T) {
	c := newQUICCluster(t)
	var logs lockedLog
	cfg := c.config(t, "a", newSink(), nil)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := c.start(t, cfg)

	tr, _ := clientTransport(t)
	// A client that checks a's certificate but presents none.
	noCert := clientTLS(staticCreds(tls.Certificate{}, c.pki.pool), time.Now, "a")
	noCert.GetClientCertificate = nil
	const handshakes = 20
	for range handshakes {
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		conn, err := tr.Dial(ctx, a.Addr(), noCert, &quic.Config{})
		if err == nil {
			// The client's side completes before the server checks it;
			// the server must then close, serving nothing.
			if hs, err := conn.OpenStreamSync(ctx); err == nil {
				hs.Write(appendFrame(nil, encodeHello(Hello{Version: ProtocolVersion, Name: "nocert"})))
				hs.Close()
				hs.SetReadDeadline(time.Now().Add(waitTimeout))
				if raw, err := io.ReadAll(hs); err == nil && len(raw) > 0 {
					t.Fatalf("a connection without a client certificate was answered: %x", raw)
				}
			}
			select {
			case <-conn.Context().Done():
			case <-ctx.Done():
				t.Fatal("a connection without a client certificate stayed open")
			}
		}
		cancel()
	}
	deadline := time.Now().Add(waitTimeout)
	for a.Stats().TLSRejected < handshakes {
		if time.Now().After(deadline) {
			t.Fatalf("TLSRejected %d, want %d", a.Stats().TLSRejected, handshakes)
		}
		time.Sleep(time.Millisecond) // polling a counter
	}
	if st := a.Stats(); st.TLSRejected != handshakes || st.HelloRejected != 0 || st.LinksUp != 0 {
		t.Errorf("stats %+v, want %d TLS rejections and no link", st, handshakes)
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "cause="+causeTLSRejected) ||
		!strings.Contains(out, "no client certificate") {
		t.Errorf("%d log lines, want 1 about the missing client certificate:\n%s", strings.Count(out, "\n"), out)
	}
}
