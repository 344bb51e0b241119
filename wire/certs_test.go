package wire

import (
	"bytes"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCertFilesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	if err := WriteCA(dir, ca); err == nil {
		t.Error("WriteCA overwrote an existing CA key")
	}
	for file, want := range map[string]os.FileMode{CAKeyFile: 0o600, CACertFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", file, got, want)
		}
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !loaded.Key.Equal(ca.Key) {
		t.Error("loaded CA differs")
	}
	pool, err := LoadCAPool(dir)
	if err != nil {
		t.Fatal(err)
	}

	certPEM, keyPEM, err := loaded.Issue(NodeCertRequest{
		Name: "node-1", DNS: []string{"node-1", "svc.local"}, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	nodeDir := filepath.Join(dir, "node")
	if err := WriteNodeCert(nodeDir, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(nodeDir, NodeKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node key: %v, mode %v", err, fi.Mode())
	}
	cert, err := LoadNodeCert(nodeDir)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := leaf.DNSNames, []string{"node-1", "svc.local"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("DNS names %v, want %v (node name first, no duplicates)", got, want)
	}
	if _, err := verifyChain([][]byte{leaf.Raw}, pool, time.Now(), x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("issued certificate does not verify: %v", err)
	}
	if _, err := verifyChain([][]byte{leaf.Raw}, pool, time.Now().Add(2*time.Hour), x509.ExtKeyUsageServerAuth); !errors.Is(err, ErrBadCertificate) {
		t.Errorf("expired certificate: got %v, want ErrBadCertificate", err)
	}
	if !certHasName(leaf, "node-1") || certHasName(leaf, "svc.local") || certHasName(leaf, "") {
		t.Error("only the first DNS name is the node name")
	}
	k1, err := StatelessResetKeyFrom(cert)
	if err != nil {
		t.Fatal(err)
	}
	cert2, _ := LoadNodeCert(nodeDir)
	if k2, _ := StatelessResetKeyFrom(cert2); k1 != k2 {
		t.Error("stateless reset key is not stable across loads")
	}
	other := newPKI(t).cert(t, "node-1")
	if k3, _ := StatelessResetKeyFrom(other); bytes.Equal(k1[:], k3[:]) {
		t.Error("different keys derive the same stateless reset key")
	}
}

func TestIssueRejectsBadRequests(t *testing.T) {
	ca, err := NewCA("test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []NodeCertRequest{
		{Name: "", Validity: time.Hour},
		{Name: "has space", Validity: time.Hour},
		{Name: "ok", Validity: 0},
	} {
		if _, _, err := ca.Issue(req); err == nil {
			t.Errorf("Issue(%+v) succeeded", req)
		}
	}
}
