package cli

import (
	"fmt"
	"log/slog"
	"os"
)

// warnSharedSecrets logs a warning for each secret file (the HTTP token,
// the gossip keys, the node's private key) that group or others may
// read: anyone who can read the token can call every API endpoint,
// anyone who can read the gossip key can join gossip, and anyone who can
// read the node's key can act as the node (see docs/operations.md, Trust
// model). It
// only warns, since some platforms mount secrets with broad modes and no
// way to change them; stat errors were reported when the files were
// read.
func warnSharedSecrets(log *slog.Logger, c agentConfig) {
	for _, f := range []struct{ flag, path string }{
		{"http-token-file", c.HTTPTokenFile},
		{"gossip-key-file", c.GossipKeyFile},
		{"tls-key", c.TLSKey},
	} {
		if f.path == "" {
			continue
		}
		fi, err := os.Stat(f.path)
		if err != nil || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		log.Warn("secret file is readable by group or others; make it 0600 or 0400",
			slog.String("flag", "--"+f.flag), slog.String("file", f.path),
			slog.String("mode", fmt.Sprintf("%#o", fi.Mode().Perm())))
	}
}
