package cli

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
)

func init() { addCommand(newSecretsCmd) }

// Names of the files tempest secrets init writes.
const (
	secretsCADir     = "ca"
	secretsGossipKey = "gossip.key"
	secretsToken     = "http.token"
)

func newSecretsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Prepare the shared secrets of a cluster in one directory",
		Args:  noArgs,
	}
	cmd.AddCommand(newSecretsInitCmd())
	return cmd
}

func newSecretsInitCmd() *cobra.Command {
	var dir, caDir string
	var nodes, dns []string
	var ips []net.IP
	var days int
	cmd := &cobra.Command{
		Use:   "init --dir DIR --nodes NAME,...",
		Short: "Create the CA, node certificates, gossip key and API token a cluster needs, keeping those that exist",
		Long: `Create in DIR what a cluster's nodes share, as tempest certs and tempest
keygen would:

  DIR/ca/ca.pem, DIR/ca/ca-key.pem        the cluster CA
  DIR/NAME/node.pem, DIR/NAME/node-key.pem a certificate per node in --nodes
  DIR/gossip.key                          the gossip encryption key
  DIR/http.token                          the HTTP API token

Files that exist are kept, so running it again (a container cluster's
one-shot init at every start) changes nothing and a node added to --nodes
gets its certificate from the same CA. Keys are written with mode 0600.

A client of a node's HTTPS API (--http-tls) checks that the node's
certificate names the address it dials: --dns and --ip add those names
to every certificate issued (127.0.0.1 for nodes on one host, say);
tempest certs node issues one node's with its own.

With --ca-dir the CA (certificate and key) lives there instead, and
DIR/ca holds a copy of its certificate only, so that DIR can be given to
the nodes without the CA key. A CA found in DIR/ca from a run without
--ca-dir is moved there.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || len(nodes) == 0 {
				return withCode(exitUsage, errors.New("--dir and --nodes are required"))
			}
			validity, err := validityOf(days)
			if err != nil {
				return err
			}
			for _, name := range nodes {
				if err := wire.ValidateNodeName(name); err != nil {
					return withCode(exitUsage, err)
				}
			}
			return initSecrets(cmd.OutOrStdout(), dir, caDir, nodes, wire.NodeCertRequest{DNS: dns, IPs: ips, Validity: validity}, time.Now())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to write into (created if missing)")
	cmd.Flags().StringVar(&caDir, "ca-dir", "", "keep the CA and its key here, and only its certificate in DIR/ca (default DIR/ca)")
	cmd.Flags().StringSliceVar(&nodes, "nodes", nil, "node names to issue certificates for (comma-separated or repeated)")
	cmd.Flags().IntVar(&days, "days", 365, "validity of new node certificates in days")
	cmd.Flags().StringSliceVar(&dns, "dns", nil, "extra DNS names for every node certificate issued (repeatable or comma-separated)")
	cmd.Flags().IPSliceVar(&ips, "ip", nil, "IP addresses for every node certificate issued (repeatable or comma-separated)")
	return cmd
}

// initSecrets creates whatever of the cluster's secrets in dir is
// missing and reports each file it created on out. With caDir the CA is
// kept there and dir/ca holds its certificate only. Node certificates are
// issued as req says (its validity, extra names), each with its name.
func initSecrets(out io.Writer, dir, caDir string, nodes []string, req wire.NodeCertRequest, now time.Time) error {
	shared := filepath.Join(dir, secretsCADir)
	if caDir == "" || filepath.Clean(caDir) == filepath.Clean(shared) {
		caDir = shared
	} else if err := separateCA(out, shared, caDir); err != nil {
		return err
	}
	if !fileExists(filepath.Join(caDir, wire.CACertFile)) {
		ca, err := wire.NewCA("tempest cluster CA", now, 10*365*24*time.Hour)
		if err != nil {
			return err
		}
		if err := wire.WriteCA(caDir, ca); err != nil {
			return err
		}
		fmt.Fprintln(out, "created the cluster CA in", caDir)
		if caDir != shared {
			cert, err := os.ReadFile(filepath.Join(caDir, wire.CACertFile))
			if err != nil {
				return err
			}
			if err := wire.WriteCACert(shared, cert); err != nil {
				return err
			}
			fmt.Fprintln(out, "copied the CA certificate to", shared)
		}
	}
	var ca *wire.CA
	for _, name := range nodes {
		name = strings.TrimSpace(name)
		ndir := filepath.Join(dir, name)
		if fileExists(filepath.Join(ndir, wire.NodeCertFile)) {
			continue
		}
		if ca == nil {
			var err error
			if ca, err = wire.LoadCA(caDir); err != nil {
				return err
			}
		}
		req.Name, req.NotBefore = name, now.Add(-5*time.Minute)
		certPEM, keyPEM, err := ca.Issue(req)
		if err != nil {
			return err
		}
		if err := wire.WriteNodeCert(ndir, certPEM, keyPEM); err != nil {
			return err
		}
		fmt.Fprintln(out, "issued the certificate of", name)
	}
	for _, f := range []string{secretsGossipKey, secretsToken} {
		key, err := membership.NewKey()
		if err != nil {
			return err
		}
		path := filepath.Join(dir, f)
		switch err := writeSecretFile(path, []byte(membership.EncodeKey(key)+"\n")); {
		case errors.Is(err, errSecretExists):
		case err != nil:
			return err
		default:
			fmt.Fprintln(out, "created", path)
		}
	}
	return nil
}

// separateCA prepares a CA kept in caDir, with the nodes' copy of its
// certificate in shared (DIR/ca). A CA that a run without --ca-dir left
// in shared (its key next to the certificate the nodes read) moves to
// caDir. Anything that does not fit is refused rather than guessed at:
// a new CA would not be the one the nodes trust, and a key removed from
// shared may be the only copy.
//   - caDir holds the CA: shared's certificate (a bundle during a CA
//     rotation) must include it, or is written if missing; a key in
//     shared is removed only if it is that same CA's.
//   - caDir holds none: a CA in shared (certificate and key) moves; a
//     certificate there without its key is refused (the key is
//     elsewhere: a lost volume, a wrong --ca-dir); with nothing in
//     either, initSecrets creates the CA.
func separateCA(out io.Writer, shared, caDir string) error {
	sharedCert, sharedKey := filepath.Join(shared, wire.CACertFile), filepath.Join(shared, wire.CAKeyFile)
	if !fileExists(filepath.Join(caDir, wire.CACertFile)) {
		switch {
		case fileExists(sharedKey):
			ca, err := wire.LoadCA(shared)
			if err != nil {
				return err
			}
			if err := wire.WriteCA(caDir, ca); err != nil {
				return err
			}
			fmt.Fprintln(out, "moved the cluster CA to", caDir)
			return os.Remove(sharedKey)
		case fileExists(sharedCert):
			return withCode(exitUsage, fmt.Errorf("%s holds a CA certificate but %s no CA: its key is elsewhere (a lost volume, another --ca-dir); "+
				"refusing to create a new CA that the nodes would not trust", sharedCert, caDir))
		}
		return nil
	}
	ca, err := wire.LoadCA(caDir)
	if err != nil {
		return err
	}
	pemCA, _, err := ca.PEM()
	if err != nil {
		return err
	}
	if !fileExists(sharedCert) {
		if err := wire.WriteCACert(shared, pemCA); err != nil {
			return err
		}
		fmt.Fprintln(out, "copied the CA certificate to", shared)
	} else {
		pool, err := wire.LoadCAPool(shared)
		if err != nil {
			return err
		}
		if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return withCode(exitUsage, fmt.Errorf("%s does not hold the CA kept in %s: refusing to replace the certificate the nodes trust", sharedCert, caDir))
		}
	}
	if fileExists(sharedKey) {
		old, err := wire.LoadCA(shared)
		if err != nil || !old.Key.Equal(ca.Key) {
			return withCode(exitUsage, fmt.Errorf("%s holds the key of another CA than the one kept in %s: move one of them aside", sharedKey, caDir))
		}
		if err := os.Remove(sharedKey); err != nil {
			return err
		}
		fmt.Fprintln(out, "removed the CA key from", shared, "(kept in", caDir+")")
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
