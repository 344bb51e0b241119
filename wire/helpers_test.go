package wire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait in these tests; generous for busy CI.
const waitTimeout = 20 * time.Second

// testPKI is a cluster CA for tests.
type testPKI struct {
	ca   *CA
	pool *x509.CertPool
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := NewCA("test CA", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &testPKI{ca: ca, pool: pool}
}

func (p *testPKI) certAt(t testing.TB, name string, notBefore time.Time, validity time.Duration) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := p.ca.Issue(NodeCertRequest{Name: name, NotBefore: notBefore, Validity: validity})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (p *testPKI) cert(t testing.TB, name string) tls.Certificate {
	return p.certAt(t, name, time.Now().Add(-time.Minute), time.Hour)
}

// selfSigned returns a self-signed node-style certificate for name.
func selfSigned(t testing.TB, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := randomSerial()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// resolver is a name -> address book shared by test nodes.
type resolver struct {
	mu sync.Mutex
	m  map[string]string
}

func newResolver() *resolver { return &resolver{m: map[string]string{}} }

func (r *resolver) set(name, addr string) {
	r.mu.Lock()
	r.m[name] = addr
	r.mu.Unlock()
}

func (r *resolver) resolve(_ context.Context, name string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.m[name]
	if !ok {
		return "", fmt.Errorf("unknown node %q", name)
	}
	return a, nil
}

// received is one delivered frame.
type received struct {
	from  string
	lane  Lane
	frame []byte
}

// sink collects delivered frames and lets tests wait for them.
type sink struct {
	mu     sync.Mutex
	got    []received
	notify chan struct{}
	// reject, if set, makes the handler fail frames it returns true for.
	reject func(frame []byte) bool
	// block, if set, is called before recording (to stall a lane).
	block func(lane Lane)
}

func newSink() *sink { return &sink{notify: make(chan struct{}, 1)} }

func (s *sink) handle(from string, lane Lane, frame []byte) error {
	if s.block != nil {
		s.block(lane)
	}
	if s.reject != nil && s.reject(frame) {
		return errors.New("test: rejected frame")
	}
	s.mu.Lock()
	s.got = append(s.got, received{from: from, lane: lane, frame: append([]byte(nil), frame...)})
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return nil
}

func (s *sink) snapshot() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// waitFor waits until cond holds over the received frames.
func (s *sink) waitFor(t testing.TB, what string, cond func([]received) bool) []received {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		got := s.snapshot()
		if cond(got) {
			return got
		}
		select {
		case <-s.notify:
		case <-deadline:
			t.Fatalf("timed out waiting for %s (have %d frames)", what, len(got))
		}
	}
}

func (s *sink) waitN(t testing.TB, n int) []received {
	t.Helper()
	return s.waitFor(t, fmt.Sprintf("%d frames", n), func(r []received) bool { return len(r) >= n })
}

// events records link events.
type events struct {
	mu     sync.Mutex
	evs    []LinkEvent
	notify chan struct{}
}

func newEvents() *events { return &events{notify: make(chan struct{}, 1)} }

func (e *events) record(ev LinkEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// waitEvent waits for an event about peer with the given direction.
func (e *events) waitEvent(t testing.TB, peer string, up bool) LinkEvent {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		e.mu.Lock()
		for _, ev := range e.evs {
			if ev.Peer == peer && ev.Up == up {
				e.mu.Unlock()
				return ev
			}
		}
		e.mu.Unlock()
		select {
		case <-e.notify:
		case <-deadline:
			t.Fatalf("timed out waiting for link event peer=%s up=%v", peer, up)
		}
	}
}

// sendRetry sends, yielding while the lane queue is full.
func sendRetry(t testing.TB, tr Transport, peer string, key uint64, frame []byte) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := tr.Send(peer, key, frame)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrQueueFull) || time.Now().After(deadline) {
			t.Fatalf("send to %s: %v", peer, err)
		}
		runtime.Gosched()
	}
}
