package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// rawPeer is a hand-driven QUIC client used to misbehave towards a node.
type rawPeer struct {
	tr   *quic.Transport
	conn *quic.Conn
}

// dialRaw connects to target with cert, trusting pool, and sends a Hello
// claiming name claim. It returns the Hello reply status, or an error if
// the node closed the connection instead.
func dialRaw(t *testing.T, target *QUIC, cert tls.Certificate, pool *x509.CertPool, claim string) (*rawPeer, HelloStatus, error) {
	return dialRawVersion(t, target, cert, pool, claim, ProtocolVersion)
}

func dialRawVersion(t *testing.T, target *QUIC, cert tls.Certificate, pool *x509.CertPool, claim string, version uint64) (*rawPeer, HelloStatus, error) {
	t.Helper()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	rp := &rawPeer{tr: tr}
	t.Cleanup(func() {
		if rp.conn != nil {
			rp.conn.CloseWithError(0, "")
		}
		tr.Close()
		udp.Close()
	})
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	conn, err := tr.Dial(ctx, target.Addr(), clientTLS(staticCreds(cert, pool), time.Now, target.Name()), &quic.Config{MaxIdleTimeout: 30 * time.Second})
	if err != nil {
		return rp, 0, err
	}
	rp.conn = conn
	hs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return rp, 0, err
	}
	if _, err := hs.Write(appendFrame(nil, encodeHello(Hello{Version: version, Name: claim}))); err != nil {
		return rp, 0, err
	}
	hs.Close()
	hs.SetReadDeadline(time.Now().Add(waitTimeout))
	raw, err := io.ReadAll(hs)
	if err != nil {
		return rp, 0, err
	}
	body, err := singleFrame(raw)
	if err != nil {
		return rp, 0, err
	}
	status, _, err := decodeHelloReply(body)
	return rp, status, err
}

// lane opens a uni stream and writes data on it.
func (rp *rawPeer) lane(t *testing.T, data []byte) *quic.SendStream {
	t.Helper()
	st, err := rp.conn.OpenUniStreamSync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(data); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitReset waits until the node resets st and returns the error code.
func waitReset(t *testing.T, st *quic.SendStream) uint64 {
	t.Helper()
	select {
	case <-st.Context().Done():
	case <-time.After(waitTimeout):
		t.Fatal("stream was not reset")
	}
	var se *quic.StreamError
	if !errors.As(context.Cause(st.Context()), &se) {
		t.Fatalf("stream ended with %v, want a stream reset", context.Cause(st.Context()))
	}
	return uint64(se.ErrorCode)
}

// newTwo starts nodes a and b of a QUIC cluster.
func newTwo(t *testing.T) (c *quicCluster, a, b *QUIC, sa, sb *sink) {
	c = newQUICCluster(t)
	sa, sb = newSink(), newSink()
	a = c.start(t, c.config(t, "a", sa, nil))
	b = c.start(t, c.config(t, "b", sb, nil))
	return
}

// checkStillWorks proves b -> a delivery still works and returns a's frames.
func checkStillWorks(t *testing.T, b *QUIC, sa *sink, tag string) []received {
	t.Helper()
	if err := b.Send("a", 1, []byte(tag)); err != nil {
		t.Fatal(err)
	}
	return sa.waitFor(t, tag, func(r []received) bool {
		for _, x := range r {
			if string(x.frame) == tag {
				return true
			}
		}
		return false
	})
}

func TestBadCertificatesDeliverNothing(t *testing.T) {
	c, _, b, sa, _ := newTwo(t)
	other := newPKI(t)
	both := c.pki.pool.Clone()
	both.AddCert(other.ca.Cert)

	cases := []struct {
		name string
		cert tls.Certificate
		cas  *x509.CertPool
	}{
		{"wrong CA", other.cert(t, "evil"), both},
		{"expired", c.pki.certAt(t, "evil", time.Now().Add(-2*time.Hour), time.Hour), c.pki.pool},
		{"not yet valid", c.pki.certAt(t, "evil", time.Now().Add(time.Hour), time.Hour), c.pki.pool},
		{"self-signed", selfSigned(t, "evil"), c.pki.pool},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := newEvents()
			cfg := c.config(t, "evil", newSink(), ev)
			cfg.Certificate, cfg.CAs = tc.cert, tc.cas
			evil := c.start(t, cfg)
			if err := evil.Send("a", 1, []byte("from evil")); err != nil {
				t.Fatal(err)
			}
			// The dial may look fine before a rejects the certificate;
			// what matters is that the link never comes up and nothing
			// reaches a's handler.
			down := ev.waitEvent(t, "a", false)
			if !errors.Is(down.Err, ErrUnavailable) {
				t.Errorf("down event: %v", down.Err)
			}
			for _, r := range checkStillWorks(t, b, sa, "probe "+tc.name) {
				if r.from == "evil" {
					t.Fatalf("frame from evil delivered: %q", r.frame)
				}
			}
			evil.Close()
		})
	}
}

func TestHelloNameMustMatchCertificate(t *testing.T) {
	c, a, b, sa, _ := newTwo(t)
	// A valid cluster certificate for "mallory" claiming to be "b".
	rp, _, err := dialRaw(t, a, c.pki.cert(t, "mallory"), c.pki.pool, "b")
	if err == nil {
		t.Fatal("hello with a foreign name was answered")
	}
	if rp.conn != nil {
		if st, err := rp.conn.OpenUniStream(); err == nil {
			st.Write(appendFrame([]byte{1}, []byte("spoofed")))
		}
	}
	if got := a.Stats().HelloRejected; got != 1 {
		t.Errorf("HelloRejected: got %d, want 1", got)
	}
	for _, r := range checkStillWorks(t, b, sa, "probe") {
		if string(r.frame) == "spoofed" {
			t.Fatal("spoofed frame delivered")
		}
	}
}

func TestDialedPeerMustPresentItsName(t *testing.T) {
	c, a, _, _, _ := newTwo(t)
	ev := newEvents()
	sc := newSink()
	cfg := c.config(t, "x", sc, ev)
	x := c.start(t, cfg)
	// x believes "ghost" lives at a's address, but a's certificate names "a".
	c.res.set("ghost", a.Addr().String())
	if err := x.Send("ghost", 1, []byte("misrouted")); err != nil {
		t.Fatal(err)
	}
	down := ev.waitEvent(t, "ghost", false)
	if !errors.Is(down.Err, ErrUnavailable) {
		t.Errorf("down event: %v", down.Err)
	}
}

func TestBadFramesResetOnlyTheirStream(t *testing.T) {
	c, a, b, sa, _ := newTwo(t)
	rp, status, err := dialRaw(t, a, c.pki.cert(t, "raw"), c.pki.pool, "raw")
	if err != nil || status != HelloStatusAccepted {
		t.Fatalf("raw hello: status %d, err %v", status, err)
	}
	huge := binary.AppendUvarint([]byte{1}, uint64(DefaultMaxFrameSize+1))
	nonMinimal := []byte{1, 0x80, 0x00}
	cases := []struct {
		name string
		data []byte
		fin  bool
		code uint64
	}{
		{"oversized", huge, false, CodeFrameTooLarge},
		{"non-minimal length", nonMinimal, false, CodeMalformedFrame},
		{"overlong length", append([]byte{1}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), false, CodeMalformedFrame},
		{"truncated", append([]byte{1}, 10, 'a', 'b'), true, CodeMalformedFrame},
		{"bad lane", []byte{200, 1, 'x'}, false, CodeBadLane},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := rp.lane(t, tc.data)
			if tc.fin {
				st.Close()
				// A FIN'd stream reports nothing back; wait on the counter
				// through a later frame on a fresh stream instead.
				ok := rp.lane(t, appendFrame([]byte{2}, []byte("after "+tc.name)))
				defer ok.Close()
				sa.waitFor(t, "frame after truncation", func(r []received) bool {
					for _, x := range r {
						if string(x.frame) == "after "+tc.name {
							return true
						}
					}
					return false
				})
				return
			}
			if got := waitReset(t, st); got != tc.code {
				t.Errorf("reset code: got %#x, want %#x", got, tc.code)
			}
		})
	}
	st := a.Stats()
	// The truncated frame is counted when its reader sees the FIN, which
	// may still be pending here.
	if st.Oversized != 1 || st.Malformed < 3 || st.Malformed > 4 {
		t.Errorf("counters: oversized=%d malformed=%d, want 1 and 3..4", st.Oversized, st.Malformed)
	}
	// The raw peer's link still works on a fresh lane stream, and so does b.
	good := rp.lane(t, appendFrame([]byte{1}, []byte("still here")))
	defer good.Close()
	sa.waitFor(t, "frame from raw peer", func(r []received) bool {
		for _, x := range r {
			if x.from == "raw" && string(x.frame) == "still here" {
				return true
			}
		}
		return false
	})
	checkStillWorks(t, b, sa, "b still works")
}

func TestStreamHoardingPeerDoesNotHurtOthers(t *testing.T) {
	c, a, b, sa, _ := newTwo(t)
	rp, status, err := dialRaw(t, a, c.pki.cert(t, "hoarder"), c.pki.pool, "hoarder")
	if err != nil || status != HelloStatusAccepted {
		t.Fatalf("raw hello: status %d, err %v", status, err)
	}
	// Open every stream a allows, send a byte on each, never close.
	var uni, bidi int
	for {
		st, err := rp.conn.OpenUniStream()
		if err != nil {
			break
		}
		st.Write([]byte{1})
		uni++
	}
	for {
		st, err := rp.conn.OpenStream()
		if err != nil {
			break
		}
		st.Write([]byte{3})
		bidi++
	}
	// The Hello's slot comes back once the Hello is done on both sides:
	// wait for it, then the peer has all it gets.
	for bidi < DefaultMaxStreams {
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		st, err := rp.conn.OpenStreamSync(ctx)
		cancel()
		if err != nil {
			t.Fatalf("bidi stream %d of %d: %v", bidi+1, DefaultMaxStreams, err)
		}
		st.Write([]byte{3})
		bidi++
	}
	if _, err := rp.conn.OpenStream(); err == nil {
		bidi++
	}
	// The limits a peer gets (docs/operations.md): DefaultMaxStreams
	// service streams beside its Hello, and two uni streams per lane.
	if bidi != DefaultMaxStreams || uni != 2*(1+MaxMailLanes) {
		t.Fatalf("hoarder opened %d uni and %d bidi streams, want %d and %d", uni, bidi, 2*(1+MaxMailLanes), DefaultMaxStreams)
	}
	// a and b keep talking, frames and service streams alike.
	checkStillWorks(t, b, sa, "b unaffected")
	ln, err := a.ListenStream("svc")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := b.DialStream(t.Context(), "a", "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("ping"))
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	buf := make([]byte, 4)
	sc.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("service stream: %q, %v", buf, err)
	}
}

func TestReconnectAfterPeerRestart(t *testing.T) {
	c := newQUICCluster(t)
	ea := newEvents()
	sb := newSink()
	a := c.start(t, c.config(t, "a", newSink(), ea))
	b := c.start(t, c.config(t, "b", sb, nil))
	if err := a.Send("b", 1, []byte("first")); err != nil {
		t.Fatal(err)
	}
	sb.waitN(t, 1)
	b.Close()
	ea.waitEvent(t, "b", false)

	// A new incarnation of b on a new port.
	sb2 := newSink()
	c.start(t, c.config(t, "b", sb2, nil))
	deadline := time.After(waitTimeout)
	for i := 0; len(sb2.snapshot()) == 0; i++ {
		err := a.Send("b", 1, []byte("again"))
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
		select {
		case <-sb2.notify:
		case <-time.After(20 * time.Millisecond): // back-off is 10..100ms
		case <-deadline:
			t.Fatal("no delivery after restart")
		}
	}
	if got := string(sb2.snapshot()[0].frame); got != "again" {
		t.Errorf("got %q", got)
	}
}

func TestQueueFullRefuses(t *testing.T) {
	c := newQUICCluster(t)
	c.tweak = func(cfg *Config) { cfg.LaneQueueBytes = 4096 }
	sb := newSink()
	release := make(chan struct{})
	sb.block = func(Lane) { <-release }
	a := c.add(t, "a", newSink(), nil).(*QUIC)
	c.add(t, "b", sb, nil)
	defer close(release)
	// b's handler is stuck, so QUIC flow control eventually stops a's
	// writer and the bounded queue fills: Send must refuse, not block.
	frame := make([]byte, 1000)
	deadline := time.After(waitTimeout)
	for {
		err := a.Send("b", 1, frame)
		if errors.Is(err, ErrQueueFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-deadline:
			t.Fatal("queue never filled")
		default:
		}
	}
	if a.Stats().QueueFull == 0 {
		t.Error("QueueFull not counted")
	}
}

func TestConfigValidate(t *testing.T) {
	p := newPKI(t)
	good := Config{
		Name: "n1", Certificate: p.cert(t, "n1"), CAs: p.pool,
		Resolve: newResolver().resolve, Handler: newSink().handle,
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no name":       func(c *Config) { c.Name = "" },
		"bad name":      func(c *Config) { c.Name = "a b" },
		"cert mismatch": func(c *Config) { c.Name = "n2" },
		"no CAs":        func(c *Config) { c.CAs = nil },
		"no resolve":    func(c *Config) { c.Resolve = nil },
		"no handler":    func(c *Config) { c.Handler = nil },
		"lanes":         func(c *Config) { c.MailLanes = MaxMailLanes + 1 },
		"backoff":       func(c *Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Millisecond },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

func TestStreamToUnknownServiceIsReset(t *testing.T) {
	_, _, b, _, _ := newTwo(t)
	conn, err := b.DialStream(t.Context(), "a", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(waitTimeout))
	_, err = conn.Read(make([]byte, 1))
	var se *quic.StreamError
	if !errors.As(err, &se) || uint64(se.ErrorCode) != CodeUnknownService {
		t.Fatalf("read: got %v, want a reset with CodeUnknownService", err)
	}
	if _, err := b.DialStream(t.Context(), "a", ""); err == nil {
		t.Error("empty service name accepted")
	}
}

func TestUnsupportedVersionRejected(t *testing.T) {
	c, a, _, _, _ := newTwo(t)
	rp, status, err := dialRawVersion(t, a, c.pki.cert(t, "future"), c.pki.pool, "future", ProtocolVersion+1)
	if err != nil || status != HelloStatusRejected {
		t.Fatalf("hello with a future version: status %v, err %v; want REJECTED", status, err)
	}
	rp.conn.CloseWithError(0, "")
	if got := a.Stats().HelloRejected; got != 1 {
		t.Errorf("HelloRejected: got %d, want 1", got)
	}
}

// A peer Admit refuses gets NOT_MEMBER: its Connect and DialStream fail
// with ErrNotMember, and the refusal counts (apart from bad Hellos); a
// peer Admit accepts links as before.
func TestAdmitRefusesNonMembers(t *testing.T) {
	c := newQUICCluster(t)
	sa := newSink()
	cfg := c.config(t, "a", sa, nil)
	cfg.Admit = func(peer string) error {
		if peer == "member" {
			return nil
		}
		return errors.New("not a member")
	}
	a := c.start(t, cfg)

	outsider := c.start(t, c.config(t, "outsider", newSink(), nil))
	err := outsider.Connect(context.Background(), "a")
	if !errors.Is(err, ErrNotMember) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("outsider's Connect: %v, want ErrNotMember (and ErrUnavailable)", err)
	}
	if st := a.Stats(); st.NotMember != 1 || st.HelloRejected != 0 {
		t.Errorf("NotMember %d, HelloRejected %d; want 1 and 0", st.NotMember, st.HelloRejected)
	}
	// A stream waits for no link that will not come: with no deadline, it
	// fails once the dial does.
	outsider.Redial("a")
	if _, err := outsider.DialStream(context.Background(), "a", "svc"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("outsider's DialStream: %v, want ErrNotMember", err)
	}
	if _, status, err := dialRaw(t, a, c.pki.cert(t, "raw"), c.pki.pool, "raw"); err != nil || status != HelloStatusNotMember {
		t.Fatalf("raw hello: status %v, err %v; want NOT_MEMBER", status, err)
	}

	member := c.start(t, c.config(t, "member", newSink(), nil))
	if err := member.Connect(context.Background(), "a"); err != nil {
		t.Fatalf("member's Connect: %v", err)
	}
	if err := member.Send("a", 1, []byte("from a member")); err != nil {
		t.Fatal(err)
	}
	for _, r := range sa.waitFor(t, "member's frame", func(r []received) bool {
		for _, x := range r {
			if string(x.frame) == "from a member" {
				return true
			}
		}
		return false
	}) {
		if r.from != "member" {
			t.Fatalf("frame from %s delivered: %q", r.from, r.frame)
		}
	}
}

// A dial that fails at once (the peer does not resolve) ends Connect and
// DialStream with its error: they never wait for a context instead. The
// dial may end before the caller starts waiting for it; thousands of
// tries make that window likely.
func TestFailedDialEndsTheWait(t *testing.T) {
	c := newQUICCluster(t)
	a := c.start(t, c.config(t, "a", newSink(), nil))
	l, err := a.link("nowhere")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		l.mu.Lock()
		l.nextAttempt = time.Time{} // the back-off over, without dialing
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if i%2 == 0 {
			err = a.Connect(ctx, "nowhere")
		} else {
			_, err = a.DialStream(ctx, "nowhere", "svc")
		}
		expired := ctx.Err()
		cancel()
		if err == nil || expired != nil {
			t.Fatalf("try %d: %v (context: %v); want the dial's error at once", i, err, expired)
		}
	}
}
