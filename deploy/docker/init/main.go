// Command tempest-init prepares the shared secrets of a container cluster
// with the tempest binary itself: a cluster CA and one certificate per
// node (tempest certs), a gossip encryption key and an HTTP API token
// (tempest keygen). It ships in the tempest image next to /tempest
// because that image has no shell to redirect tempest keygen's output
// into a file.
//
// It is idempotent: files that exist are kept, so a cluster that is
// restarted keeps its CA, certificates and keys.
//
//	tempest-init --dir /etc/tempest --nodes node1,node2,node3
//
// writes DIR/ca/{ca.pem,ca-key.pem}, DIR/NODE/{node.pem,node-key.pem},
// DIR/gossip.key and DIR/http.token.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tempest-init:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tempest-init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "/etc/tempest", "directory to write the CA, node certificates and keys into")
	nodes := fs.String("nodes", "", "comma-separated node names to issue certificates for")
	bin := fs.String("tempest", "/tempest", "path of the tempest binary")
	days := fs.Int("days", 365, "node certificate validity in days")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodes == "" {
		return errors.New("--nodes is required")
	}
	tempest := func(args ...string) ([]byte, error) {
		var out bytes.Buffer
		cmd := exec.Command(*bin, args...)
		cmd.Stdout = &out
		cmd.Stderr = stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("tempest %s: %w", strings.Join(args, " "), err)
		}
		return out.Bytes(), nil
	}

	caDir := filepath.Join(*dir, "ca")
	if !exists(filepath.Join(caDir, "ca.pem")) {
		if _, err := tempest("certs", "ca", "--out", caDir); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "created the cluster CA in", caDir)
	}
	for _, name := range strings.Split(*nodes, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		out := filepath.Join(*dir, name)
		if exists(filepath.Join(out, "node.pem")) {
			continue
		}
		if _, err := tempest("certs", "node", "--ca", caDir, "--name", name, "--out", out,
			"--days", fmt.Sprint(*days)); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "issued the certificate of", name)
	}
	for _, f := range []string{"gossip.key", "http.token"} {
		path := filepath.Join(*dir, f)
		if exists(path) {
			continue
		}
		key, err := tempest("keygen")
		if err != nil {
			return err
		}
		if err := writeSecret(path, key); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "created", path)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeSecret writes data to path with mode 0600, atomically.
func writeSecret(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
