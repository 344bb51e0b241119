package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTempest is a stand-in for the tempest binary that records its
// arguments and writes what the real commands would.
const fakeTempest = `#!/bin/sh
echo "$*" >> "$CALLS"
case "$1 $2" in
"certs ca") mkdir -p "$4" && echo ca > "$4/ca.pem" ;;
"certs node") mkdir -p "$8" && echo "$6" > "$8/node.pem" ;;
"keygen ") echo "key-$$" ;;
*) echo "unexpected: $*" >&2; exit 3 ;;
esac
`

func TestInitCreatesOnceAndKeeps(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tempest")
	if err := os.WriteFile(bin, []byte(fakeTempest), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	t.Setenv("CALLS", calls)
	out := filepath.Join(dir, "secrets")
	args := []string{"--dir", out, "--nodes", "n1, n2", "--tempest", bin}
	var stdout, stderr bytes.Buffer
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	b, _ := os.ReadFile(calls)
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := []string{
		"certs ca --out " + out + "/ca",
		"certs node --ca " + out + "/ca --name n1 --out " + out + "/n1 --days 365",
		"certs node --ca " + out + "/ca --name n2 --out " + out + "/n2 --days 365",
		"keygen", "keygen",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	gossip, _ := os.ReadFile(filepath.Join(out, "gossip.key"))
	token, _ := os.ReadFile(filepath.Join(out, "http.token"))
	if !strings.HasPrefix(string(gossip), "key-") || !strings.HasPrefix(string(token), "key-") || string(gossip) == string(token) {
		t.Fatalf("gossip key %q and token %q: want two different generated keys", gossip, token)
	}
	for _, f := range []string{"gossip.key", "http.token"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want 0600", f, err, st.Mode())
		}
	}

	// A second run keeps everything.
	if err := os.Remove(calls); err != nil {
		t.Fatal(err)
	}
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if _, err := os.Stat(calls); !os.IsNotExist(err) {
		b, _ := os.ReadFile(calls)
		t.Fatalf("second run called tempest: %s", b)
	}
	if again, _ := os.ReadFile(filepath.Join(out, "gossip.key")); string(again) != string(gossip) {
		t.Fatal("the gossip key changed")
	}
}

func TestInitFailsWhenTempestFails(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tempest")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run([]string{"--dir", filepath.Join(dir, "s"), "--nodes", "n1", "--tempest", bin}, &stdout, &stderr); err == nil {
		t.Fatal("run succeeded although tempest failed")
	}
	if err := run([]string{"--dir", filepath.Join(dir, "s")}, &stdout, &stderr); err == nil {
		t.Fatal("run succeeded without --nodes")
	}
}
