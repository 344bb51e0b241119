//go:build unix

package cli

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A named pipe given as a key, certificate or token file would block the
// start until something wrote to it (SIGTERM did not end the wait): it
// is refused naming the flag.
func TestSecretFileThatIsANamedPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "secret.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseAgent(t, []string{"--data-dir", t.TempDir(), "--insecure-dev", "--gossip-key-file", fifo}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.loadMaterial(func(string) string { return "" }); err == nil ||
		!strings.HasPrefix(err.Error(), "--gossip-key-file:") || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a named pipe as the gossip key file: %v", err)
	}
	if _, err := readToken(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a named pipe as the token file: %v", err)
	}
}
