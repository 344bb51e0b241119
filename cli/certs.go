package cli

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/wire"
)

func init() { addCommand(newCertsCmd) }

// newCertsCmd groups the certificate commands: a cluster CA and node
// certificates for the mutual-TLS QUIC links between nodes.
func newCertsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create the cluster CA and node certificates for mutual TLS",
		Long: `Nodes talk over QUIC with mutual TLS: every node presents a certificate
issued by the cluster CA whose first DNS name is the node name, and refuses
peers whose certificate does not chain to the CA, is expired, or names
another node. See docs/transport.md for rotation.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newCertsCACmd(), newCertsNodeCmd())
	return cmd
}

func newCertsCACmd() *cobra.Command {
	var out, name string
	var days int
	cmd := &cobra.Command{
		Use:   "ca --out DIR",
		Short: "Create a cluster CA as DIR/ca.pem and DIR/ca-key.pem",
		Long: `Create a new cluster certificate authority (ECDSA P-256): DIR/ca.pem is
the certificate every node trusts, DIR/ca-key.pem (mode 0600) signs node
certificates and should stay offline. An existing CA key is never
overwritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return withCode(2, errors.New("--out is required"))
			}
			validity, err := validityOf(days)
			if err != nil {
				return err
			}
			ca, err := wire.NewCA(name, time.Now(), validity)
			if err != nil {
				return err
			}
			if err := wire.WriteCA(out, ca); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (valid until %s)\n",
				filepath.Join(out, wire.CACertFile), filepath.Join(out, wire.CAKeyFile), ca.Cert.NotAfter.UTC().Format(time.DateOnly))
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write ca.pem and ca-key.pem into (created if missing)")
	cmd.Flags().StringVar(&name, "name", "tempest cluster CA", "CA subject common name")
	cmd.Flags().IntVar(&days, "days", 3650, "validity in days")
	return cmd
}

func newCertsNodeCmd() *cobra.Command {
	var caDir, name, out string
	var dns []string
	var ips []net.IP
	var days int
	cmd := &cobra.Command{
		Use:   "node --ca DIR --name NAME --out DIR",
		Short: "Issue a node certificate as DIR/node.pem and DIR/node-key.pem",
		Long: `Issue a node certificate (ECDSA P-256) signed by the CA in --ca. The node
name is the certificate's first DNS name and must equal the name the node
runs with; --dns and --ip add names the node is reachable under. The key is
written with mode 0600; existing node files are replaced atomically, which
is how a certificate is rotated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if caDir == "" || name == "" || out == "" {
				return withCode(2, errors.New("--ca, --name and --out are required"))
			}
			validity, err := validityOf(days)
			if err != nil {
				return err
			}
			if err := wire.ValidateNodeName(name); err != nil {
				return withCode(2, err)
			}
			ca, err := wire.LoadCA(caDir)
			if err != nil {
				return err
			}
			certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{
				Name: name, DNS: dns, IPs: ips,
				NotBefore: time.Now().Add(-5 * time.Minute), // tolerate small clock skew
				Validity:  validity,
			})
			if err != nil {
				return err
			}
			if err := wire.WriteNodeCert(out, certPEM, keyPEM); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s for node %q\n",
				filepath.Join(out, wire.NodeCertFile), filepath.Join(out, wire.NodeKeyFile), name)
			return err
		},
	}
	cmd.Flags().StringVar(&caDir, "ca", "", "directory holding ca.pem and ca-key.pem")
	cmd.Flags().StringVar(&name, "name", "", "node name (the certificate's first DNS name)")
	cmd.Flags().StringVar(&out, "out", "", "directory to write node.pem and node-key.pem into (created if missing)")
	cmd.Flags().StringSliceVar(&dns, "dns", nil, "extra DNS names (repeatable or comma-separated)")
	cmd.Flags().IPSliceVar(&ips, "ip", nil, "IP addresses (repeatable or comma-separated)")
	cmd.Flags().IntVar(&days, "days", 365, "validity in days")
	return cmd
}

// maxDays bounds --days: 100 years, well within what a time.Duration
// holds (a larger count would wrap around to a short or negative span).
const maxDays = 36500

// validityOf is --days as a duration.
func validityOf(days int) (time.Duration, error) {
	if days <= 0 || days > maxDays {
		return 0, withCode(exitUsage, fmt.Errorf("--days must be between 1 and %d", maxDays))
	}
	return time.Duration(days) * 24 * time.Hour, nil
}
