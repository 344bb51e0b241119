package tempest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire"
)

// rogue joins c's gossip with the cluster's gossip key under name, and
// advertises quicAddr as its QUIC address. It holds no certificate of
// the cluster CA.
func rogue(t *testing.T, c *tempesttest.Cluster, name, quicAddr string) *membership.Membership {
	t.Helper()
	cc := c.Config(name).Cluster // the seeds, the gossip key and timing
	mc := membership.DefaultConfig()
	mc.Name = name
	mc.Bind = "127.0.0.1:0"
	mc.Seeds = cc.Seeds
	mc.GossipKeys = cc.GossipKeys
	mc.Timing = cc.GossipTiming
	mc.Meta = membership.Meta{Name: name, QUICAddr: quicAddr, HTTPAddr: "127.0.0.1:1",
		Kinds: []string{demo.Echo, demo.Counter}, Version: "test"}
	ml, err := membership.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ml.Halt)
	return ml
}

// foreignQUIC runs a QUIC listener whose certificate names name but was
// issued by another CA than the cluster's.
func foreignQUIC(t *testing.T, name string) *wire.QUIC {
	t.Helper()
	ca, err := wire.NewCA("another CA", time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tr, err := wire.NewQUIC(wire.Config{Name: name, ListenAddr: "127.0.0.1:0", Certificate: cert, CAs: pool,
		Resolve: func(context.Context, string) (string, error) { return "", fmt.Errorf("no peers") },
		Handler: func(string, wire.Lane, []byte) error { return nil }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// A process holding the gossip key but no certificate of the cluster CA
// (one with a certificate of another CA, one with no QUIC listener at
// all) is a gossip member, never a placement member: it does not enter
// raft or the table, receives no shard and does not stall asks.
func TestRogueGossipMemberStaysOutOfPlacement(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})

	var (
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		ok, fails atomic.Int64
		lastErr   atomic.Value
	)
	for _, n := range c.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := n.Ask(actx, n.Ref(demo.Echo, fmt.Sprintf("k%d", i%64)), demo.EchoIn{Text: "x"})
				cancel()
				if err != nil {
					fails.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}

	// One rogue answers QUIC with a certificate of another CA; the other
	// advertises the QUIC address of a real node, whose certificate names
	// that node, not the rogue.
	foreign := foreignQUIC(t, "rogue-ca")
	rogue(t, c, "rogue-ca", foreign.Addr().String())
	var n1QUIC string
	for _, m := range c.Node("n1").Members() {
		if m.Name == "n1" {
			n1QUIC = m.Meta.QUICAddr
		}
	}
	rogue(t, c, "rogue-none", n1QUIC)
	for _, n := range c.Nodes() {
		waitFor(t, 10*time.Second, n.Name()+" lists the rogues alive and has failed to prove them twice", func() bool {
			alive := 0
			for _, m := range n.Members() {
				if (m.Name == "rogue-ca" || m.Name == "rogue-none") && m.Status == membership.StatusAlive {
					alive++
				}
			}
			st := n.Stats()
			return alive == 2 && st.Unproven == 2 && st.ProofsFailed >= 4
		})
	}
	for _, n := range c.Nodes() {
		for _, m := range n.Members() {
			rogue := m.Name == "rogue-ca" || m.Name == "rogue-none"
			if got := n.Proven(m); got == rogue {
				t.Errorf("%s: Proven(%s) = %v", n.Name(), m.Name, got)
			}
		}
	}
	close(stop)
	wg.Wait()
	if f := fails.Load(); f > 0 {
		t.Errorf("%d of %d asks failed while the rogues were members (last: %v)", f, f+ok.Load(), lastErr.Load())
	}
	if ok.Load() == 0 {
		t.Error("no ask succeeded")
	}

	// A legitimate node joining after the rogues is the barrier for the
	// table and raft: once it is a raft member owning shards, the leader
	// has planned with the rogues in its view many times over.
	c.Start("n4") // joins: it is not one of the nodes the cluster was bootstrapped with
	c.WaitSettled()
	waitFor(t, 10*time.Second, "n4 in raft", func() bool {
		return c.Node("n1").RaftInfo().Role("n4") != "none"
	})
	for _, n := range c.Nodes() {
		info := n.RaftInfo()
		for _, r := range []string{"rogue-ca", "rogue-none"} {
			if role := info.Role(r); role != "none" {
				t.Errorf("%s: %s has raft role %s", n.Name(), r, role)
			}
			if _, in := n.Table().Nodes[r]; in {
				t.Errorf("%s: %s is in the placement table", n.Name(), r)
			}
		}
	}
}

// impostor starts a node called name on a fresh data dir, joining c,
// without taking the place of c's node of that name.
func impostor(t *testing.T, c *tempesttest.Cluster, name string) *tempest.Node {
	t.Helper()
	cfg := c.Config(name)
	cfg.DataDir = t.TempDir()
	cfg.Cluster.BootstrapExpect = 0
	cfg.Cluster.LeaveTimeout = time.Second
	cfg.Logger = cfg.Logger.With("impostor", true)
	cfg.Events = nil // not the real node's history
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tempest.Halt(context.Background(), n) })
	return n
}

// A second process under a live node's name, with a valid certificate
// for that name (a copied data dir's twin, a stolen key), must not make
// the cluster mark the real node failed or fail asks.
func TestImpostorWithValidCertificateDoesNotFailTheRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 3})
	var (
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		ok, fails atomic.Int64
		lastErr   atomic.Value
		downSeen  atomic.Value
	)
	for _, name := range []string{"n1", "n3"} {
		n := c.Node(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if tab := n.Table(); tab != nil {
					if ni := tab.Nodes["n2"]; ni != nil && ni.Status != placement.StatusUp {
						downSeen.Store(fmt.Sprintf("%s sees n2 %v", n.Name(), ni.Status))
					}
				}
				actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := n.Ask(actx, n.Ref(demo.Echo, fmt.Sprintf("k%d", i%64)), demo.EchoIn{Text: "x"})
				cancel()
				if err != nil {
					fails.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	rejected := func(name string) uint64 { return c.Node(name).Stats().Transport.HelloRejected }
	before1, before3 := rejected("n1"), rejected("n3")
	impostor(t, c, "n2")
	// The window: the impostor proves its gossip peers, so it has dialed
	// n1 and n3 under the name n2 and been refused, with asks going on
	// (or, were it let in, many asks went through its links).
	waitFor(t, 60*time.Second, "the impostor to have dialed n1 and n3", func() bool {
		return rejected("n1") > before1 && rejected("n3") > before3 && ok.Load() > 1000 || ok.Load() > 8000
	})
	close(stop)
	wg.Wait()
	if v := downSeen.Load(); v != nil {
		t.Errorf("the real n2 was marked failed: %v", v)
	}
	if f := fails.Load(); f > 0 {
		t.Errorf("%d of %d asks failed while the impostor ran (last: %v)", f, f+ok.Load(), lastErr.Load())
	}
}

// A holder of a certificate of the cluster CA for a name that is no
// member (outside gossip and the table: a retired node's certificate, one
// issued for another purpose) cannot link over QUIC: its Hello is refused
// NOT_MEMBER, so it sends no mail, no control message and opens no raft,
// handoff or replication stream (raft takes the sender and leader names
// its messages carry on trust, so such a peer could otherwise pose as any
// voter). Each refusal is counted.
func TestNonMemberCannotLink(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := demoCluster(t, tempesttest.Options{Nodes: 2})
	n1 := c.Node("n1")
	var n1Addr string
	for _, m := range n1.Members() {
		if m.Name == "n1" {
			n1Addr = m.Meta.QUICAddr
		}
	}
	cc := c.Config("mallory").Cluster
	tr, err := wire.NewQUIC(wire.Config{Name: "mallory", ListenAddr: "127.0.0.1:0", Certificate: cc.Certificate, CAs: cc.CAs,
		Resolve: func(_ context.Context, peer string) (string, error) {
			if peer == "n1" {
				return n1Addr, nil
			}
			return "", fmt.Errorf("no peer %q", peer)
		},
		Handler: func(string, wire.Lane, []byte) error { return nil }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	refused := func() uint64 { return n1.Stats().Transport.NotMember }
	before := refused()
	if err := tr.Connect(t.Context(), "n1"); !errors.Is(err, wire.ErrNotMember) {
		t.Fatalf("a non-member's link: %v, want wire.ErrNotMember", err)
	}
	for _, service := range []string{placement.RaftService, "tempest-replica", "tempest-state"} {
		tr.Redial("n1") // past the back-off: each tries n1 again
		if conn, err := tr.DialStream(t.Context(), "n1", service); !errors.Is(err, wire.ErrNotMember) {
			if conn != nil {
				_ = conn.Close()
			}
			t.Fatalf("%s: a non-member's stream: %v, want wire.ErrNotMember", service, err)
		}
	}
	if got := refused(); got < before+4 {
		t.Errorf("n1 counted %d links refused to non-members, want at least %d", got-before, 4)
	}
	if st := tr.Stats(); st.LinksUp != 0 {
		t.Fatalf("a non-member's link came up %d times", st.LinksUp)
	}
}
