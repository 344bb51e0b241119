package cli

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// freeBase returns a base port whose dev ports (base+10i, +1, +2 for i <
// nodes) are free for TCP and UDP on 127.0.0.1.
func freeBase(t *testing.T, nodes int) int {
	t.Helper()
	free := func(p int) bool {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		defer l.Close()
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		u.Close()
		return true
	}
	for range 100 {
		base := freePort(t)
		if base+10*nodes > 65000 {
			continue
		}
		ok := true
		for i := range nodes {
			for d := range 3 {
				ok = ok && free(base+10*i+d)
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

func TestDevClusterTour(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	leakCheck(t)
	base := freeBase(t, 2)
	logFile := filepath.Join(t.TempDir(), "nodes.log")
	out, errOut, err := cli(t, "dev", "--nodes", "2", "--base-port", fmt.Sprint(base), "--tour", "--exit-after-tour", "--log-file", logFile)
	if err != nil {
		t.Fatalf("dev: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	// The nodes' logs go to the file, not between the lines of the tour.
	if errOut != "" {
		t.Errorf("stderr is not empty:\n%s", errOut)
	}
	logs, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "node=dev-1") || strings.Contains(out, "node=dev-") {
		t.Errorf("the node logs are not in %s alone:\nstdout:\n%s\nlog file:\n%s", logFile, out, logs)
	}
	for _, want := range []string{
		"cluster ready",
		"logs (level info): " + logFile,
		fmt.Sprintf("http://127.0.0.1:%d", base+12),
		"raft leader",
		"(runs on dev-",
		"tempest tell counter/alice",
		`{"n":11}   (1 + 10)`,
		"Dormant (active false)",
		"hydrated from rest: now Valid",
		"its reminder woke it",
		`"running":true`,
		"tempest reminders ticker/alarm  ->  tick on dev-",
		"Ctrl-C stops the cluster",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tour output lacks %q:\n%s", want, out)
		}
	}
	// The base port is not the default one: every example command the
	// banner prints names an address.
	examples := 0
	_, banner, _ := strings.Cut(out, "Talk to it from another terminal")
	for _, line := range strings.Split(banner, "\n") {
		if strings.HasPrefix(line, "  tempest ") {
			examples++
			if !strings.Contains(line, " --addr http://127.0.0.1:") {
				t.Errorf("an example without --addr: %q", line)
			}
		}
	}
	if examples == 0 {
		t.Errorf("no example commands:\n%s", out)
	}
	if strings.Count(out, "(runs on dev-") != 6 {
		t.Errorf("want six asks with their owner:\n%s", out)
	}
	if _, _, err := cli(t, "dev", "--nodes", "0"); exitCode(err) != exitUsage {
		t.Errorf("dev --nodes 0: %v", err)
	}
}
