package cli

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSharedSecretFilesWarn(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("secret-secret-secret\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name            string
		token, key, tls os.FileMode
		warned          []string
	}{
		{"private", 0o600, 0o400, 0o600, nil},
		{"world-readable token", 0o644, 0o600, 0o600, []string{"--http-token-file"}},
		{"group-readable key", 0o600, 0o640, 0o400, []string{"--gossip-key-file"}},
		{"world-readable node key", 0o600, 0o600, 0o644, []string{"--tls-key"}},
		{"all", 0o604, 0o660, 0o640, []string{"--http-token-file", "--gossip-key-file", "--tls-key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultAgentConfig()
			c.HTTPTokenFile = write("token", tc.token)
			c.GossipKeyFile = write("gossip.key", tc.key)
			c.TLSKey = write("node-key.pem", tc.tls)
			var buf bytes.Buffer
			warnSharedSecrets(slog.New(slog.NewTextHandler(&buf, nil)), c)
			out := buf.String()
			if got := strings.Count(out, "readable by group or others"); got != len(tc.warned) {
				t.Fatalf("%d warnings, want %d:\n%s", got, len(tc.warned), out)
			}
			for _, flag := range tc.warned {
				if !strings.Contains(out, flag) {
					t.Errorf("no warning for %s:\n%s", flag, out)
				}
			}
		})
	}
}
