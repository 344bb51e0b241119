package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tempest-actors/tempest/wire"
)

// parseAgent parses args with env and the config file layers, like
// `tempest agent` does, and validates the result.
func parseAgent(t *testing.T, args []string, env map[string]string) (agentConfig, error) {
	t.Helper()
	var c agentConfig
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	bindAgentFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := applyLayers(fs, func(k string) string { return env[k] }, "config"); err != nil {
		return c, err
	}
	return c, c.validate()
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAgentConfigPrecedence(t *testing.T) {
	file := writeFile(t, "agent.yaml", `
data-dir: /from/file
http-addr: 127.0.0.1:9001
gossip-addr: 127.0.0.1:9002
log-level: debug
bootstrap-expect: 3
join: [a.example:7946, b.example]
insecure-dev: true
drain-timeout: 7s
tls-ca: ca.pem
tls-cert: node.pem
tls-key: node-key.pem
`)
	env := map[string]string{
		"TEMPEST_CONFIG":      file,
		"TEMPEST_HTTP_ADDR":   "127.0.0.1:9101",
		"TEMPEST_LOG_LEVEL":   "warn",
		"TEMPEST_LOG_FORMAT":  "json",
		"TEMPEST_QUIC_ADDR":   "127.0.0.1:9103",
		"TEMPEST_UNUSED_NAME": "ignored",
	}
	c, err := parseAgent(t, []string{"--log-level", "error", "--join", "c.example"}, env)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"data-dir from the file", c.DataDir, "/from/file"},
		{"http-addr: env over file", c.HTTPAddr, "127.0.0.1:9101"},
		{"gossip-addr from the file", c.GossipAddr, "127.0.0.1:9002"},
		{"quic-addr from env", c.QUICAddr, "127.0.0.1:9103"},
		{"log-level: flag over env and file", c.LogLevel, "error"},
		{"log-format from env", c.LogFormat, "json"},
		{"bootstrap-expect from the file", c.BootstrapExpect, 3},
		{"join: flag over file", strings.Join(c.Join, ","), "c.example"},
		{"drain-timeout from the file", c.DrainTimeout, 7 * time.Second},
		{"insecure-dev from the file", c.InsecureDev, true},
		{"default shards", c.Shards, 1024},
		{"default timing", c.Timing, "lan"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.what, ch.got, ch.want)
		}
	}

	// A list from the file when no flag or env sets it.
	c, err = parseAgent(t, []string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Join, ","); got != "a.example:7946,b.example" {
		t.Errorf("join from the file: got %q", got)
	}
	// A comma-separated list from env.
	c, err = parseAgent(t, []string{"--config", file}, map[string]string{"TEMPEST_JOIN": "x:1, y:2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Join, []string{"x:1", "y:2"}) {
		t.Errorf("join from env: got %q", c.Join)
	}
}

func TestAgentConfigErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--data-dir", dir, "--insecure-dev"}
	badFile := writeFile(t, "bad.yaml", "data-dir: /x\nno-such-flag: 1\n")
	notYAML := writeFile(t, "bad2.yaml", "- a\n- b\n")
	twice := writeFile(t, "twice.yaml", "workers: 2\nworkers: 4\n")
	emptyItem := writeFile(t, "empty-item.yaml", "join: [\"\"]\n")
	cases := []struct {
		args []string
		env  map[string]string
		flag string
	}{
		{[]string{"--insecure-dev"}, nil, "--data-dir"},
		{append(base, "--name", "a b"), nil, "--name"},
		{append(base, "--gossip-addr", "nope"), nil, "--gossip-addr"},
		{append(base, "--quic-addr", "127.0.0.1:99999"), nil, "--quic-addr"},
		{append(base, "--http-addr", ":x"), nil, "--http-addr"},
		{append(base, "--advertise", "host_name.example"), nil, "--advertise"},
		{append(base, "--advertise", "10.0.0.1:7946"), nil, "--advertise"},
		{append(base, "--bootstrap-expect", "-1"), nil, "--bootstrap-expect"},
		{append(base, "--log-level", "loud"), nil, "--log-level"},
		{append(base, "--log-format", "xml"), nil, "--log-format"},
		{append(base, "--drain-timeout", "0s"), nil, "--drain-timeout"},
		{append(base, "--timing", "slow"), nil, "--timing"},
		{append(base, "--shards", "0"), nil, "--shards"},
		{append(base, "--min-in-sync", "0"), nil, "--min-in-sync"},
		{append(base, "--replicas", "2", "--min-in-sync", "3"), nil, "--min-in-sync"},
		{append(base, "--persistence", "sometimes"), nil, "--persistence"},
		{append(base, "--workers", "100000000"), nil, "--workers"},
		{append(base, "--join", ":::bad"), nil, "--join"},
		{append(base, "--join", "a,,b"), nil, "--join"},
		{base, map[string]string{"TEMPEST_JOIN": ","}, "--join"},
		{base, map[string]string{"TEMPEST_JOIN": "a:1,,b:2"}, "--join"},
		{base, map[string]string{"TEMPEST_BOOTSTRAP_EXPECT": "many"}, "--bootstrap-expect"},
		{base, map[string]string{"TEMPEST_DRAIN_TIMEOUT": "soon"}, "--drain-timeout"},
		{append(base, "--config", badFile), nil, "--config"},
		{append(base, "--config", notYAML), nil, "--config"},
		{append(base, "--config", twice), nil, "--config"},
		{append(base, "--config", emptyItem), nil, "--join"},
		{append(base, "--config", filepath.Join(dir, "missing.yaml")), nil, "--config"},
		{[]string{"--data-dir", dir}, nil, "--tls-cert"},
		{[]string{"--data-dir", dir, "--tls-cert", "c.pem", "--tls-key", "k.pem"}, nil, "--tls-ca"},
		{[]string{"--data-dir", dir, "--tls-ca", "ca.pem", "--tls-cert", "c.pem"}, nil, "--tls-key"},
		{append(base, "--join", "a:1"), nil, "--tls-cert"},
		{[]string{"--data-dir", dir, "--tls-ca", "a", "--tls-cert", "b", "--tls-key", "c", "--http-addr", "0.0.0.0:7948"}, nil, "--http-token-file"},
		{append(base, "--http-tls"), nil, "--http-tls"},
	}
	for _, tc := range cases {
		_, err := parseAgent(t, tc.args, tc.env)
		if err == nil {
			t.Errorf("%q %v: no error", tc.args, tc.env)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, tc.flag+":") {
			t.Errorf("%q %v: error %q is not one line starting with %s:", tc.args, tc.env, msg, tc.flag)
		}
		if exitCode(err) != exitUsage {
			t.Errorf("%q: exit code %d, want %d", tc.args, exitCode(err), exitUsage)
		}
	}
}

func TestAgentConfigTLSMaterialErrors(t *testing.T) {
	dir := t.TempDir()
	c, err := parseAgent(t, []string{"--data-dir", dir, "--name", "n1", "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--tls-cert", filepath.Join(dir, "node.pem"), "--tls-key", filepath.Join(dir, "node-key.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.loadMaterial(func(string) string { return "" })
	if err == nil || !strings.HasPrefix(err.Error(), "--tls-cert:") {
		t.Fatalf("missing certificate files: got %v", err)
	}
	c.TLSCA, c.TLSCert, c.TLSKey = "", "", ""
	c.GossipKeyFile = writeFile(t, "key", "not base64!\n")
	if _, err := c.loadMaterial(func(string) string { return "" }); err == nil || !strings.HasPrefix(err.Error(), "--gossip-key-file:") {
		t.Fatalf("bad gossip key file: got %v", err)
	}
	c.GossipKeyFile = ""
	if _, err := c.loadMaterial(func(k string) string { return map[string]string{"TEMPEST_GOSSIP_KEY": "bad"}[k] }); err == nil {
		t.Fatal("bad $TEMPEST_GOSSIP_KEY accepted")
	}
}

func TestAgentCommandRefusesInvalidConfig(t *testing.T) {
	var out, errOut strings.Builder
	err := run(t.Context(), []string{"agent", "--insecure-dev"}, strings.NewReader(""), &out, &errOut)
	if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("got %v (code %d), want a usage error naming --data-dir", err, exitCode(err))
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		t.Fatal("not an exitError")
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7948": true, "[::1]:1": true, "localhost:80": true,
		"0.0.0.0:7948": false, ":7948": false, "10.0.0.1:1": false, "bad": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestAgentClusterNeedsAGossipKey: as the HTTP token off loopback, a
// cluster node does not run with unencrypted gossip (anyone reaching the
// port could join it and accuse live members) unless --insecure-dev says
// so; a key from the file or the environment will do.
func TestAgentClusterNeedsAGossipKey(t *testing.T) {
	dir := t.TempDir()
	var out, errOut strings.Builder
	if err := run(t.Context(), []string{"secrets", "init", "--dir", dir, "--nodes", "n1"}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", t.TempDir(), "--name", "n1", "--tls-ca", filepath.Join(dir, "ca", "ca.pem"),
		"--tls-cert", filepath.Join(dir, "n1", "node.pem"), "--tls-key", filepath.Join(dir, "n1", "node-key.pem")}
	c, err := parseAgent(t, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) string { return "" }
	if _, err := c.loadMaterial(noEnv); err == nil || !strings.HasPrefix(err.Error(), "--gossip-key-file:") || exitCode(err) != exitUsage {
		t.Fatalf("a cluster node without a gossip key: %v, want a usage error naming --gossip-key-file", err)
	}
	key, err := os.ReadFile(filepath.Join(dir, "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := c.loadMaterial(func(k string) string { return map[string]string{"TEMPEST_GOSSIP_KEY": string(key)}[k] }); err != nil || len(m.keys) != 1 {
		t.Fatalf("a key from the environment: %v", err)
	}
	c.GossipKeyFile = filepath.Join(dir, "gossip.key")
	if _, err := c.loadMaterial(noEnv); err != nil {
		t.Fatalf("a key file: %v", err)
	}
	c.GossipKeyFile, c.InsecureDev = "", true
	if _, err := c.loadMaterial(noEnv); err != nil {
		t.Fatalf("--insecure-dev without a key: %v", err)
	}
}

// TestAgentRefusesANodeCertificateAsTheCA: --tls-ca given a node's own
// certificate (not a CA's) would verify no peer: the node would start and
// only ever fail to link. It is refused at start, naming the flag.
func TestAgentRefusesANodeCertificateAsTheCA(t *testing.T) {
	dir := t.TempDir()
	var out, errOut strings.Builder
	if err := run(t.Context(), []string{"secrets", "init", "--dir", dir, "--nodes", "n1"}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	cert := filepath.Join(dir, "n1", "node.pem")
	c, err := parseAgent(t, []string{"--data-dir", t.TempDir(), "--name", "n1", "--tls-ca", cert,
		"--tls-cert", cert, "--tls-key", filepath.Join(dir, "n1", "node-key.pem"), "--gossip-key-file", filepath.Join(dir, "gossip.key")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.loadMaterial(func(string) string { return "" }); err == nil || !strings.HasPrefix(err.Error(), "--tls-ca:") || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("a node certificate as the CA: %v, want an error naming --tls-ca", err)
	}
	c.TLSCA = filepath.Join(dir, "ca", "ca.pem")
	if _, err := c.loadMaterial(func(string) string { return "" }); err != nil {
		t.Fatalf("the CA's certificate: %v", err)
	}
}

// TestAgentRefusesACertificateNoPeerAccepts: a node certificate another
// CA issued, or one out of its validity period, starts a node that can
// never link; it is refused at start, naming --tls-cert.
func TestAgentRefusesACertificateNoPeerAccepts(t *testing.T) {
	dir := t.TempDir()
	var out, errOut strings.Builder
	for _, sub := range []string{"a", "b"} {
		if err := run(t.Context(), []string{"secrets", "init", "--dir", filepath.Join(dir, sub), "--nodes", "n1"}, strings.NewReader(""), &out, &errOut); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := wire.LoadCA(filepath.Join(dir, "a", "ca"))
	if err != nil {
		t.Fatal(err)
	}
	expired := filepath.Join(dir, "expired")
	certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{Name: "n1", NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteNodeCert(expired, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	agent := func(certDir string) error {
		c, err := parseAgent(t, []string{"--data-dir", t.TempDir(), "--name", "n1", "--tls-ca", filepath.Join(dir, "a", "ca", "ca.pem"),
			"--tls-cert", filepath.Join(certDir, "node.pem"), "--tls-key", filepath.Join(certDir, "node-key.pem"),
			"--gossip-key-file", filepath.Join(dir, "a", "gossip.key")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.loadMaterial(func(string) string { return "" })
		return err
	}
	for _, tc := range []struct{ name, dir, want string }{
		{"another CA's", filepath.Join(dir, "b", "n1"), "does not verify against the CA"},
		{"expired", expired, "expired on"},
	} {
		if err := agent(tc.dir); err == nil || !strings.HasPrefix(err.Error(), "--tls-cert:") || !strings.Contains(err.Error(), tc.want) || exitCode(err) != exitUsage {
			t.Errorf("%s certificate: %v, want an error naming --tls-cert: %s", tc.name, err, tc.want)
		}
	}
	if err := agent(filepath.Join(dir, "a", "n1")); err != nil {
		t.Fatalf("the CA's own node certificate: %v", err)
	}
	// The certificate given as the key, and another node's key: the
	// error names --tls-key, not --tls-cert.
	cert := filepath.Join(dir, "a", "n1", "node.pem")
	for _, key := range []string{cert, filepath.Join(dir, "b", "n1", "node-key.pem")} {
		c, err := parseAgent(t, []string{"--data-dir", t.TempDir(), "--name", "n1", "--tls-ca", filepath.Join(dir, "a", "ca", "ca.pem"),
			"--tls-cert", cert, "--tls-key", key, "--gossip-key-file", filepath.Join(dir, "a", "gossip.key")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.loadMaterial(func(string) string { return "" }); err == nil || !strings.HasPrefix(err.Error(), "--tls-key:") {
			t.Errorf("--tls-key %s: %v, want an error naming --tls-key", key, err)
		}
	}
}

// TestAgentAddressInUseNamesTheFlag: a gossip or QUIC address another
// process holds is a usage error naming its flag, as the HTTP address is.
func TestAgentAddressInUseNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	if _, err := runCLI(t, "secrets", "init", "--dir", dir, "--nodes", "n1"); err != nil {
		t.Fatal(err)
	}
	held, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldTCP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer heldTCP.Close()
	base := []string{"agent", "--name", "n1", "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0",
		"--tls-ca", filepath.Join(dir, "ca", "ca.pem"), "--tls-cert", filepath.Join(dir, "n1", "node.pem"),
		"--tls-key", filepath.Join(dir, "n1", "node-key.pem"), "--gossip-key-file", filepath.Join(dir, "gossip.key")}
	for _, tc := range []struct{ flag, gossip, quic string }{
		{"--quic-addr", "127.0.0.1:0", held.LocalAddr().String()},
		{"--gossip-addr", heldTCP.Addr().String(), "127.0.0.1:0"},
	} {
		_, err := runCLI(t, append(base, "--gossip-addr", tc.gossip, "--quic-addr", tc.quic)...)
		if exitCode(err) != exitUsage || !strings.HasPrefix(fmt.Sprint(err), tc.flag+":") {
			t.Errorf("%s in use: %v (exit %d), want a usage error naming it", tc.flag, err, exitCode(err))
		}
	}
}
