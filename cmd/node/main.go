// Command tempest runs a Tempest node and talks to running nodes.
//
// Every subcommand lives in its own file and registers itself with
// addCommand from an init function, so commands stay independent.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// commands holds the constructors registered by each command file.
var commands []func() *cobra.Command

// addCommand registers a subcommand constructor; call it from init.
func addCommand(f func() *cobra.Command) { commands = append(commands, f) }

// exitError carries a specific process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that main exits with code.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(exitCode(err))
	}
}

// errorLine is what main prints for err: one "tempest:" prefix, also
// for the library's errors, which carry it already.
func errorLine(err error) string {
	return "tempest: " + strings.TrimPrefix(err.Error(), "tempest: ")
}

// exitCode maps an error to the process exit code.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// run builds the command tree and executes it with args.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "tempest",
		Short:         "Tempest: a federated actor cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Usage errors (unknown flag, bad argument count) exit 2.
		PersistentPreRun: func(*cobra.Command, []string) {},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(2, err) })
	for _, f := range commands {
		root.AddCommand(f())
	}
	return root
}

func init() {
	addCommand(func() *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "Print the build version",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
				return err
			},
		}
	})
}
