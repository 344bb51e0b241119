package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/wire"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, strings.NewReader(""), &out, &errOut)
	return out.String(), err
}

func readPEMCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestCertsCAAndNode(t *testing.T) {
	dir := t.TempDir()
	caDir, nodeDir := filepath.Join(dir, "ca"), filepath.Join(dir, "n1")
	if _, err := runCLI(t, "certs", "ca", "--out", caDir); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, filepath.Join(caDir, "ca-key.pem")); got != 0o600 {
		t.Errorf("ca-key.pem mode %o, want 600", got)
	}
	ca := readPEMCert(t, filepath.Join(caDir, "ca.pem"))
	if !ca.IsCA {
		t.Error("ca.pem is not a CA certificate")
	}
	if _, err := runCLI(t, "certs", "node", "--ca", caDir, "--name", "node-1",
		"--dns", "tempest-0.tempest.svc", "--ip", "10.0.0.7", "--out", nodeDir); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, filepath.Join(nodeDir, "node-key.pem")); got != 0o600 {
		t.Errorf("node-key.pem mode %o, want 600", got)
	}
	leaf := readPEMCert(t, filepath.Join(nodeDir, "node.pem"))
	if len(leaf.DNSNames) == 0 || leaf.DNSNames[0] != "node-1" {
		t.Errorf("DNS names %v: node name must come first", leaf.DNSNames)
	}
	if !slices.Contains(leaf.DNSNames, "tempest-0.tempest.svc") {
		t.Errorf("DNS names %v lack the --dns name", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
		t.Errorf("IPs %v, want 10.0.0.7", leaf.IPAddresses)
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", leaf.PublicKey)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: time.Now()}); err != nil {
			t.Errorf("node cert does not verify for usage %v: %v", usage, err)
		}
	}
	// The files load the way a node loads them.
	if _, err := wire.LoadNodeCert(nodeDir); err != nil {
		t.Errorf("LoadNodeCert: %v", err)
	}
	if _, err := wire.LoadCAPool(caDir); err != nil {
		t.Errorf("LoadCAPool: %v", err)
	}
	// Re-issuing (rotation) replaces the node files.
	if _, err := runCLI(t, "certs", "node", "--ca", caDir, "--name", "node-1", "--out", nodeDir); err != nil {
		t.Fatalf("re-issue: %v", err)
	}
	if again := readPEMCert(t, filepath.Join(nodeDir, "node.pem")); again.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
		t.Error("re-issue kept the old certificate")
	}
}

func TestCertsCARefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	if _, err := runCLI(t, "certs", "ca", "--out", dir); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if _, err := runCLI(t, "certs", "ca", "--out", dir); err == nil {
		t.Fatal("second CA over the first succeeded")
	}
	after, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if !bytes.Equal(before, after) {
		t.Fatal("CA key changed")
	}
}

func TestCertsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"certs", "ca"},
		{"certs", "node", "--name", "n", "--out", dir},
		{"certs", "node", "--ca", dir, "--name", "bad name", "--out", dir},
		{"certs", "node", "--ca", dir, "--name", "n", "--out", dir, "--ip", "not-an-ip"},
		// A day count whose span a time.Duration cannot hold wrapped
		// around to a certificate valid for minutes.
		{"certs", "node", "--ca", dir, "--name", "n", "--out", dir, "--days", "213504"},
		{"certs", "ca", "--out", filepath.Join(dir, "ca2"), "--days", "0"},
		{"secrets", "init", "--dir", filepath.Join(dir, "s"), "--nodes", "n1", "--days", "99999999"},
	} {
		_, err := runCLI(t, args...)
		if exitCode(err) != 2 {
			t.Errorf("%v: exit code %d (err %v), want 2", args, exitCode(err), err)
		}
	}
	// A missing CA is a runtime failure, not a usage error.
	_, err := runCLI(t, "certs", "node", "--ca", filepath.Join(dir, "none"), "--name", "n", "--out", dir)
	if err == nil || exitCode(err) != 1 || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing CA: err %v, code %d", err, exitCode(err))
	}
}
