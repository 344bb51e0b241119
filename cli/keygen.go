package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/membership"
)

func init() { addCommand(newKeygenCmd) }

// newKeygenCmd prints or writes a new random key: a gossip encryption
// key, also good as an HTTP API token.
func newKeygenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen [--out FILE]",
		Short: "Print (or write to a file) a new random 32-byte key, base64-encoded",
		Long: `Print a new random 32-byte (AES-256) gossip encryption key in standard
base64 on stdout, or with --out write it to FILE with mode 0600 (an
existing FILE is never overwritten). Use it for --gossip-key-file or the
` + membership.KeyEnv + ` environment variable, or as the HTTP API token
(--http-token-file). See docs/membership.md for key rotation.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := membership.NewKey()
			if err != nil {
				return err
			}
			line := membership.EncodeKey(key) + "\n"
			if out == "" {
				_, err = fmt.Fprint(cmd.OutOrStdout(), line)
				return err
			}
			if err := writeSecretFile(out, []byte(line)); err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "wrote", out)
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the key to this file (mode 0600) instead of stdout; it must not exist")
	return cmd
}

// errSecretExists is returned by writeSecretFile when the file exists.
var errSecretExists = errors.New("exists; refusing to overwrite it")

// writeSecretFile creates path (and its directory, mode 0700) with data
// and mode 0600. The file appears complete or not at all, and an
// existing file is never replaced: it fails with errSecretExists.
func writeSecretFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-secret-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// A hard link, unlike a rename, fails when the target exists.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s %w", path, errSecretExists)
		}
		return err
	}
	return nil
}
