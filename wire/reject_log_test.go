package wire

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

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
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer udp.Close()
	defer tr.Close()
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
