package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
	"sigs.k8s.io/yaml"
)

func TestKeygenPrintsRandomKey(t *testing.T) {
	gen := func() string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"keygen"}, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatalf("keygen: %v (stderr %q)", err, errOut.String())
		}
		if errOut.Len() != 0 {
			t.Fatalf("keygen wrote to stderr: %q", errOut.String())
		}
		return out.String()
	}
	out := gen()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("output %q is not one line", out)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil || len(raw) != 32 {
		t.Fatalf("output %q: %d bytes, err %v; want 32 bytes of base64", out, len(raw), err)
	}
	if _, err := membership.ParseKeys([]byte(out)); err != nil {
		t.Fatalf("output does not load as a key file: %v", err)
	}
	if gen() == out {
		t.Fatal("two runs printed the same key")
	}
}

func TestKeygenRejectsArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"keygen", "extra"}, strings.NewReader(""), &out, &errOut); err == nil {
		t.Fatal("keygen with an argument succeeded")
	}
}

func TestKeygenOutWritesPrivateFileOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "gossip.key")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"keygen", "--out", path}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("keygen --out: %v (stderr %q)", err, errOut.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := membership.ParseKeys(b); err != nil {
		t.Fatalf("%s does not load as a key file: %v", path, err)
	}
	if strings.Contains(out.String(), strings.TrimSpace(string(b))) {
		t.Fatal("the key was also printed")
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", st.Mode(), err)
	}
	// A second run must not replace the key.
	err = run(t.Context(), []string{"keygen", "--out", path}, strings.NewReader(""), &out, &errOut)
	if !errors.Is(err, errSecretExists) {
		t.Fatalf("second keygen --out: %v, want errSecretExists", err)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, b) {
		t.Fatal("the existing key was changed")
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".tmp-*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

func TestSecretsInitCreatesOnceAndKeeps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	args := []string{"secrets", "init", "--dir", dir, "--nodes", "n1,n2"}
	var out, errOut bytes.Buffer
	if err := run(t.Context(), args, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("secrets init: %v (stderr %q)", err, errOut.String())
	}
	read := func(rel string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca, err := wire.LoadCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, n := range []string{"n1", "n2"} {
		cert, err := tls.X509KeyPair(read(n+"/node.pem"), read(n+"/node-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: n, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("certificate of %s: %v", n, err)
		}
	}
	gossip, token := read("gossip.key"), read("http.token")
	if _, err := membership.ParseKeys(gossip); err != nil || bytes.Equal(gossip, token) {
		t.Fatalf("gossip key %q (%v) and token %q: want two different keys", gossip, err, token)
	}
	for _, f := range []string{"gossip.key", "http.token", "ca/ca-key.pem", "n1/node-key.pem"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", f, st.Mode(), err)
		}
	}

	// Again, with one more node: everything kept, n3 issued by the same CA.
	n1 := read("n1/node.pem")
	out.Reset()
	args[len(args)-1] = "n1,n2,n3"
	if err := run(t.Context(), args, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("second secrets init: %v", err)
	}
	if got := strings.TrimSpace(out.String()); got != "issued the certificate of n3" {
		t.Errorf("second run reported %q", got)
	}
	if !bytes.Equal(read("gossip.key"), gossip) || !bytes.Equal(read("http.token"), token) || !bytes.Equal(read("n1/node.pem"), n1) {
		t.Fatal("a second run changed an existing file")
	}
	if again, err := wire.LoadCA(filepath.Join(dir, "ca")); err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("the CA changed: %v", err)
	}

	for _, bad := range [][]string{
		{"secrets", "init", "--dir", dir},
		{"secrets", "init", "--nodes", "n1"},
		{"secrets", "init", "--dir", dir, "--nodes", "not a name"},
	} {
		if err := run(t.Context(), bad, strings.NewReader(""), &out, &errOut); exitCode(err) != exitUsage {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
}

// TestComposeInitRunsOnThisBinary runs the compose cluster's one-shot
// init service's command (the image has no other binary) twice against
// a scratch directory: it must create the secrets the nodes mount, then
// succeed again without changes on the next start.
func TestComposeInitRunsOnThisBinary(t *testing.T) {
	b, err := os.ReadFile("../deploy/compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Entrypoint []string `json:"entrypoint"`
			Command    []string `json:"command"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	svc, ok := compose.Services["init"]
	if !ok || len(svc.Entrypoint) != 0 {
		t.Fatalf("init service %+v: want one that runs the image's /tempest entrypoint", svc)
	}
	dir, private := t.TempDir(), t.TempDir()
	args := make([]string, len(svc.Command))
	for i, a := range svc.Command {
		a = strings.ReplaceAll(a, "/etc/tempest-ca", private)
		args[i] = strings.ReplaceAll(a, "/etc/tempest", dir)
	}
	for range 2 {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), args, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut.String())
		}
	}
	for _, f := range []string{"ca/ca.pem", "node1/node.pem", "node3/node-key.pem", "gossip.key", "http.token"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the nodes mount %s: %v", f, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*", "ca-key.pem")); len(m) != 0 {
		t.Errorf("the CA key is in the volume the nodes mount: %v", m)
	}
	if _, err := wire.LoadCA(private); err != nil {
		t.Errorf("the CA kept for the init service: %v", err)
	}
}

// TestSecretsInitMovesTheCAKeyOff: a directory prepared without
// --ca-dir (the CA key next to the certificate the nodes read) keeps its
// CA when --ca-dir is given later: the CA moves there, the nodes' copy
// keeps the certificate only, and new certificates come from the same CA.
func TestSecretsInitMovesTheCAKeyOff(t *testing.T) {
	dir, private := filepath.Join(t.TempDir(), "shared"), filepath.Join(t.TempDir(), "ca")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"secrets", "init", "--dir", dir, "--nodes", "n1"}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	before, err := wire.LoadCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), []string{"secrets", "init", "--dir", dir, "--ca-dir", private, "--nodes", "n1,n2"}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "ca", "ca-key.pem")); !os.IsNotExist(err) {
		t.Fatalf("the CA key is still beside the nodes' certificate: %v", err)
	}
	after, err := wire.LoadCA(private)
	if err != nil || !after.Cert.Equal(before.Cert) {
		t.Fatalf("the CA moved: %v (same certificate: %v)", err, err == nil && after.Cert.Equal(before.Cert))
	}
	pool, err := wire.LoadCAPool(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, "n2", "node.pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "n2", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("n2's certificate, issued after the move: %v", err)
	}
}

// TestSecretsInitCADirRefusesToGuess: with --ca-dir, what does not fit is
// refused, not guessed at: a CA certificate the nodes trust whose CA is
// not in --ca-dir (its volume lost) does not make init create a new CA;
// a rotation's bundle of two CA certificates is kept as it is; a CA key
// beside the nodes' certificate that is another CA's is not removed.
func TestSecretsInitCADirRefusesToGuess(t *testing.T) {
	initWith := func(dir, ca string, nodes string) error {
		var out, errOut bytes.Buffer
		return run(t.Context(), []string{"secrets", "init", "--dir", dir, "--ca-dir", ca, "--nodes", nodes}, strings.NewReader(""), &out, &errOut)
	}
	dir, ca := t.TempDir(), t.TempDir()
	if err := initWith(dir, ca, "n1"); err != nil {
		t.Fatal(err)
	}
	trusted, err := os.ReadFile(filepath.Join(dir, "ca", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	// The CA's volume is lost.
	if err := initWith(dir, t.TempDir(), "n1,n2"); exitCode(err) != exitUsage {
		t.Fatalf("the CA gone from --ca-dir: %v, want a usage error", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "ca", "ca.pem")); !bytes.Equal(got, trusted) {
		t.Fatal("the certificate the nodes trust was replaced")
	}
	if _, err := os.Stat(filepath.Join(dir, "n2")); !os.IsNotExist(err) {
		t.Fatalf("n2 was issued a certificate by a CA the nodes do not trust: %v", err)
	}
	// A rotation: the nodes trust the old and a new CA.
	other, err := wire.NewCA("next CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := other.PEM()
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(bytes.Clone(trusted), next...)
	if err := os.WriteFile(filepath.Join(dir, "ca", "ca.pem"), bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := initWith(dir, ca, "n1,n2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "ca", "ca.pem")); !bytes.Equal(got, bundle) {
		t.Fatal("the rotation's bundle was replaced")
	}
	// Another CA's key beside the nodes' certificate stays.
	if err := wire.WriteCA(filepath.Join(t.TempDir(), "x"), other); err != nil {
		t.Fatal(err)
	}
	_, keyPEM, _ := other.PEM()
	if err := os.WriteFile(filepath.Join(dir, "ca", "ca-key.pem"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := initWith(dir, ca, "n1"); exitCode(err) != exitUsage {
		t.Fatalf("another CA's key in DIR/ca: %v, want a usage error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca", "ca-key.pem")); err != nil {
		t.Fatalf("another CA's key was removed: %v", err)
	}
}

// --ip and --dns put the addresses clients of the HTTPS API dial into
// every node certificate issued: a client checks that the certificate
// names the address.
func TestSecretsInitExtraNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if _, err := runCLI(t, "secrets", "init", "--dir", dir, "--nodes", "n1,n2", "--ip", "127.0.0.1", "--dns", "api.example"); err != nil {
		t.Fatal(err)
	}
	ca, err := wire.LoadCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, n := range []string{"n1", "n2"} {
		leaf := readPEMCert(t, filepath.Join(dir, n, "node.pem"))
		for _, name := range []string{n, "127.0.0.1", "api.example"} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Errorf("%s's certificate for %s: %v", n, name, err)
			}
		}
	}
	if _, err := runCLI(t, "secrets", "init", "--dir", dir, "--nodes", "n3", "--ip", "not-an-ip"); exitCode(err) != exitUsage {
		t.Errorf("--ip not-an-ip: %v (exit %d), want a usage error", err, exitCode(err))
	}
}
