package federation_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/wire"
)

// TestControlPlaneImmunityAcrossNodes: on a real QUIC link with mutual
// TLS, every mail lane from a to b is saturated (b's mail handler is
// stuck, so b reads nothing more from any lane, and a's queue of each
// lane stays full), and a federation request from a to b is still
// answered while none of that mail has moved. Control messages travel on
// a lane of their own, so they never wait behind actor mail; this also
// needs QUIC's shared connection window to hold every mail lane's
// stream window with room to spare (wire sets it so), or mail behind a
// slow reader would stop the control lane.
func TestControlPlaneImmunityAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("real QUIC")
	}
	ca, err := wire.NewCA("test CA", time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cert := func(name string) tls.Certificate {
		certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	const lanes = 4
	release := make(chan struct{})
	var mu sync.Mutex
	handled := map[wire.Lane]int{} // frames b's mail handler was given, by lane
	addrs := sync.Map{}
	resolve := func(_ context.Context, peer string) (string, error) {
		if a, ok := addrs.Load(peer); ok {
			return a.(string), nil
		}
		return "", errors.New("unknown peer")
	}
	newNode := func(name string, h *handler, mail wire.Handler) (*federation.Endpoint, *wire.QUIC) {
		s := &quicSender{}
		ep, err := federation.New(federation.Config{Sender: s, Handler: h, Codes: codes, Unavailable: wire.ErrUnavailable})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := wire.NewQUIC(wire.Config{Name: name, ListenAddr: "127.0.0.1:0", Certificate: cert(name), CAs: pool,
			Resolve: resolve, MailLanes: lanes, LaneQueueBytes: 64 << 10,
			Handler: func(from string, lane wire.Lane, frame []byte) error {
				if lane == wire.ControlLane {
					return ep.Handle(from, frame)
				}
				return mail(from, lane, frame)
			},
			Events: func(ev wire.LinkEvent) {
				if !ev.Up {
					ep.LinkDown(ev.Peer)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		s.tr = tr
		addrs.Store(name, tr.Addr().String())
		return ep, tr
	}
	answered := make(chan struct{}, 1)
	hb := &handler{forward: func(context.Context, string, *federation.ForwardCommand) error {
		answered <- struct{}{}
		return nil
	}}
	epA, trA := newNode("a", &handler{}, func(string, wire.Lane, []byte) error { return nil })
	epB, trB := newNode("b", hb, func(_ string, lane wire.Lane, _ []byte) error {
		mu.Lock()
		handled[lane]++
		mu.Unlock()
		<-release
		return nil
	})
	released := false
	defer func() {
		if !released {
			close(release)
		}
		epA.Close()
		epB.Close()
		_ = trA.Close()
		_ = trB.Close()
	}()

	keys := map[wire.Lane]uint64{} // a recipient hash on each mail lane
	for k := uint64(1); len(keys) < lanes; k++ {
		if l := wire.MailLane(k, lanes); keys[l] == 0 {
			keys[l] = k
		}
	}
	// Fill every mail lane until a's queue for it stays full: b reads
	// nothing more from a stuck lane, so QUIC's flow control stops a's
	// writer, and then its bounded queue stops taking frames.
	frame := make([]byte, 16<<10)
	queued := map[wire.Lane]int{}
	for lane, key := range keys {
		for {
			err := trA.Send("b", key, frame)
			if err == nil {
				queued[lane] += len(frame)
				continue
			}
			if !errors.Is(err, wire.ErrQueueFull) && !errors.Is(err, wire.ErrUnavailable) {
				t.Fatal(err)
			}
			// Full (or the link still coming up): wait for room a while.
			// A queue that takes nothing for a second behind a reader that
			// reads nothing is saturated.
			wctx, wcancel := context.WithTimeout(t.Context(), time.Second)
			err = trA.SendWait(wctx, "b", key, frame)
			wcancel()
			if err == nil {
				queued[lane] += len(frame)
				continue
			}
			if !errors.Is(err, wire.ErrQueueFull) {
				t.Fatal(err)
			}
			break
		}
	}
	// Every mail lane is stuck (b's reader of each holds at most one frame,
	// and a's queue of each stays full): a control request still goes
	// through, and its answer comes back.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := epA.Call(ctx, "b", &federation.ForwardCommand{Command: []byte("policy")}); err != nil {
		t.Fatalf("control request with every mail lane saturated: %v", err)
	}
	<-answered
	mu.Lock()
	for lane := range keys {
		if handled[lane] > 1 {
			t.Errorf("lane %d: b handled %d frames by the time the control answer came, want at most the 1 it is stuck on", lane, handled[lane])
		}
		if queued[lane] <= 1<<20 {
			t.Errorf("lane %d: only %d bytes queued before it refused more", lane, queued[lane])
		}
	}
	mu.Unlock()
	t.Logf("mail queued per lane behind the stuck reader: %v bytes", queued)
	close(release)
	released = true
}

type quicSender struct{ tr *wire.QUIC }

func (s *quicSender) SendControlWait(ctx context.Context, peer string, frame []byte) error {
	return s.tr.SendControlWait(ctx, peer, frame)
}
func (s *quicSender) SendControl(peer string, frame []byte) error {
	return s.tr.SendControl(peer, frame)
}
