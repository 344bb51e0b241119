package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/membership"
)

func init() { addCommand(newKeygenCmd) }

// newKeygenCmd prints a new random gossip encryption key.
func newKeygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Print a new random 32-byte gossip encryption key, base64-encoded",
		Long: `Print a new random 32-byte (AES-256) gossip encryption key in standard
base64 on stdout. Store it in a file for --gossip-key-file, or in the
` + membership.KeyEnv + ` environment variable. See docs/membership.md for
key rotation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := membership.NewKey()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), membership.EncodeKey(key))
			return err
		},
	}
}
