package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
)

// syncBuilder is a strings.Builder safe for a writer and a reader.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runAgentInProcess runs runAgent until the test ends it with stop.
func runAgentInProcess(t *testing.T, c agentConfig, env map[string]string) (out *syncBuilder, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &syncBuilder{}
	errc := make(chan error, 1)
	go func() { errc <- runAgent(ctx, c, func(k string) string { return env[k] }, out, &syncBuilder{}) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(60 * time.Second):
				err = fmt.Errorf("agent did not stop")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return out, stop
}

func TestAgentStandaloneInsecureDev(t *testing.T) {
	leakCheck(t)
	var c agentConfig
	c = defaultAgentConfig()
	c.Name, c.DataDir, c.InsecureDev = "solo", t.TempDir(), true
	c.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	out, stop := runAgentInProcess(t, c, nil)
	addr := "http://" + c.HTTPAddr
	waitFor(t, 20*time.Second, "the agent ready", func() bool {
		_, _, err := cli(t, "health", "--addr", addr)
		return err == nil
	})
	if got, _, err := cli(t, "ask", "counter/a", `{"Add":{"n":3}}`, "--addr", addr); err != nil || got != "{\"n\":3}\n" {
		t.Fatalf("ask: %q %v", got, err)
	}
	// The banner is printed once the node runs, maybe after it answers.
	waitFor(t, 10*time.Second, "the banner", func() bool { return strings.Contains(out.String(), "WARNING") })
	banner := out.String()
	for _, want := range []string{`node "solo"`, "standalone", "WARNING: --insecure-dev", "profile", "Fairness"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if _, _, err := cli(t, "health", "--addr", addr); exitCode(err) != exitUnreachable {
		t.Fatalf("health after stop: %v", err)
	}
}

func TestAgentClusterOfOneWithHTTPTLSAndToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster node")
	}
	leakCheck(t)
	dir := t.TempDir()
	ca, err := wire.NewCA("test CA", time.Now().Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteCA(filepath.Join(dir, "ca"), ca); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{Name: "one", DNS: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteNodeCert(filepath.Join(dir, "one"), certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	key, _ := membership.NewKey()
	token := "a-long-enough-test-token"
	tokenFile := writeFile(t, "token", token+"\n")
	c := defaultAgentConfig()
	c.Name, c.DataDir = "one", filepath.Join(dir, "data")
	c.GossipAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.QUICAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	port := freePort(t)
	c.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", port)
	c.TLSCA = filepath.Join(dir, "ca", wire.CACertFile)
	c.TLSCert = filepath.Join(dir, "one", wire.NodeCertFile)
	c.TLSKey = filepath.Join(dir, "one", wire.NodeKeyFile)
	c.HTTPTLS, c.HTTPTokenFile, c.Timing, c.Shards, c.Workers = true, tokenFile, "fast", 16, 2
	out, stop := runAgentInProcess(t, c, map[string]string{membership.KeyEnv: membership.EncodeKey(key)})
	addr := fmt.Sprintf("https://localhost:%d", port)
	auth := []string{"--addr", addr, "--tls-ca", c.TLSCA, "--token-file", tokenFile}
	waitFor(t, 30*time.Second, "the agent ready", func() bool {
		_, _, err := cli(t, append([]string{"health"}, auth...)...)
		return err == nil
	})
	if got, _, err := cli(t, append([]string{"ask", "echo/a", `{"text":"tls"}`}, auth...)...); err != nil || got != "{\"text\":\"tls\"}\n" {
		t.Fatalf("ask over https: %q %v", got, err)
	}
	got, _, err := cli(t, append([]string{"members"}, auth...)...)
	if err != nil || !strings.Contains(got, "leader") {
		t.Fatalf("members: %q %v", got, err)
	}
	if _, _, err := cli(t, "members", "--addr", addr, "--tls-ca", c.TLSCA); exitCode(err) != exitUnauthorized {
		t.Fatalf("members without the token: %v", err)
	}
	if _, _, err := cli(t, "health", "--addr", addr); exitCode(err) != exitUnreachable {
		t.Fatalf("https without the CA must fail verification: %v", err)
	}
	waitFor(t, 10*time.Second, "the banner", func() bool { return strings.Contains(out.String(), "Admission") })
	banner := out.String()
	for _, want := range []string{"encryption on", "mTLS on", "token on, tls on", "https://"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	_ = os.Remove(tokenFile)
}
