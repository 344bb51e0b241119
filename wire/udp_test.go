package wire

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// refusing is a PacketConn whose sends the kernel refuses with EPERM
// while refuse is set, as it does when a firewall rule drops them on the
// way out.
type refusing struct {
	net.PacketConn
	refuse  atomic.Bool
	refused atomic.Uint64
}

func (r *refusing) WriteTo(p []byte, addr net.Addr) (int, error) {
	if r.refuse.Load() {
		r.refused.Add(1)
		return 0, &net.OpError{Op: "write", Net: "udp", Addr: addr, Err: os.NewSyscallError("sendto", syscall.EPERM)}
	}
	return r.PacketConn.WriteTo(p, addr)
}

// Sends refused by the kernel are lost packets to QUIC: the link stays up
// through them, and what was sent meanwhile arrives once they pass again.
func TestRefusedSendsDoNotEndTheLink(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	conn := &refusing{PacketConn: udp}
	b := linkThroughRefusals(t, func(cfg *Config) { cfg.PacketConn = conn },
		func(*QUIC) { conn.refuse.Store(true) }, func() { conn.refuse.Store(false) },
		func(*QUIC) uint64 { return conn.refused.Load() })
	if st := b.Stats(); st.LinksDown != 0 || st.SendsRefused == 0 {
		t.Fatalf("b: %d links down, %d sends refused counted", st.LinksDown, st.SendsRefused)
	}
	// Each datagram is sent once more at once before it counts as lost
	// (the kernel may refuse one spuriously).
	if st := b.Stats(); conn.refused.Load() < 2*st.SendsRefused {
		t.Fatalf("%d writes refused for %d datagrams counted lost: not each tried twice", conn.refused.Load(), st.SendsRefused)
	}
}

// The same with the kernel refusing: an iptables rule drops what b's own
// socket (a *net.UDPConn, written with WriteMsgUDP) sends. Needs root and
// iptables; skipped otherwise.
func TestKernelRefusedSendsDoNotEndTheLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for an iptables rule")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("no iptables")
	}
	var rule []string
	removed := false
	remove := func() {
		if !removed && rule != nil {
			removed = true
			if out, err := exec.Command("iptables", append([]string{"-D"}, rule...)...).CombinedOutput(); err != nil {
				t.Errorf("removing the iptables rule: %v: %s", err, out)
			}
		}
	}
	t.Cleanup(remove)
	linkThroughRefusals(t, nil, func(b *QUIC) {
		_, port, _ := net.SplitHostPort(b.Addr().String())
		r := []string{"OUTPUT", "-o", "lo", "-p", "udp", "--sport", port, "-j", "DROP"}
		if out, err := exec.Command("iptables", append([]string{"-I"}, r...)...).CombinedOutput(); err != nil {
			t.Skipf("iptables: %v: %s", err, out)
		}
		rule = r
	}, remove, func(b *QUIC) uint64 { return b.Stats().SendsRefused })
}

// linkThroughRefusals links a and b (b configured by tweakB), has b's
// sends refused (refuse) until refused counts five or a link went down,
// lets them pass again (allow), and checks that what each sent meanwhile
// arrives and that no link went down. It returns b.
func linkThroughRefusals(t *testing.T, tweakB func(*Config), refuse func(b *QUIC), allow func(), refused func(b *QUIC) uint64) *QUIC {
	t.Helper()
	c := newQUICCluster(t)
	sa, ea := newSink(), newEvents()
	a := c.start(t, c.config(t, "a", sa, ea))
	sb, eb := newSink(), newEvents()
	cfgB := c.config(t, "b", sb, eb)
	if tweakB != nil {
		tweakB(&cfgB)
	}
	b := c.start(t, cfgB)
	sendRetry(t, a, "b", 1, []byte("before"))
	sb.waitN(t, 1)
	sendRetry(t, b, "a", 1, []byte("before"))
	sa.waitN(t, 1)

	refuse(b)
	sendRetry(t, b, "a", 1, []byte("during"))
	sendRetry(t, a, "b", 1, []byte("during"))
	deadline := time.Now().Add(waitTimeout)
	for refused(b) < 5 && b.Stats().LinksDown == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no send of b's was refused")
		}
		time.Sleep(5 * time.Millisecond)
	}
	allow()
	sa.waitN(t, 2)
	sb.waitN(t, 2)
	for _, e := range []*events{ea, eb} {
		e.mu.Lock()
		for _, ev := range e.evs {
			if !ev.Up {
				t.Errorf("link %s went down: %v", ev.Peer, ev.Err)
			}
		}
		e.mu.Unlock()
	}
	return b
}

// Redial ends a link's dial back-off: a peer unreachable long enough to
// be dialed only every BackoffMax is linked again at once.
func TestRedialEndsTheBackoff(t *testing.T) {
	c := newQUICCluster(t)
	c.tweak = func(cfg *Config) {
		cfg.BackoffMin, cfg.BackoffMax, cfg.HandshakeTimeout = time.Hour, time.Hour, 300*time.Millisecond
	}
	ea := newEvents()
	a := c.start(t, c.config(t, "a", newSink(), ea))
	// b is not there yet: a's dial fails and backs off for an hour.
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := udp.LocalAddr().String()
	udp.Close()
	c.res.set("b", addr)
	if err := a.Send("b", 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	ea.waitEvent(t, "b", false)
	if err := a.Send("b", 1, []byte("x")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("send during the back-off: %v, want ErrUnavailable", err)
	}
	udp2, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Skipf("cannot rebind %s: %v", addr, err)
	}
	sb := newSink()
	cfgB := c.config(t, "b", sb, nil)
	cfgB.PacketConn = udp2
	t.Cleanup(func() { udp2.Close() })
	c.start(t, cfgB)
	a.Redial("b")
	ea.waitEvent(t, "b", true)
	sendRetry(t, a, "b", 1, []byte("after"))
	sb.waitN(t, 1)
}
