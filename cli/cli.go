// Package cli is the tempest command: the agent that runs a node, the
// development cluster, and the client commands that talk to running
// nodes. cmd/node is its program; a program of your own runs it with your
// kinds registered on every node it starts:
//
//	func main() {
//		cli.Main(cli.Options{Register: func(n *tempest.Node) error {
//			return n.Register("account", newAccount, tempest.KindOptions{...})
//		}})
//	}
//
// and `yourprogram agent ...` or `yourprogram dev` then host them beside
// the demo kinds (see docs/first-kind.md, "Your kinds under the agent").
//
// Every subcommand lives in its own file and registers itself with
// addCommand from an init function, so commands stay independent.
package cli

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
	"github.com/spf13/pflag"

	tempest "github.com/tempest-actors/tempest"
)

// Options is what a program adds to the tempest command it runs.
type Options struct {
	// Version is what `version`, the banner, /metrics and traces
	// report ("dev" when empty).
	Version string
	// Register, when set, registers the program's kinds (and their
	// messages, errors and gateways) on each node that `agent` and
	// `dev` start, after the demo kinds and before the node starts. An
	// error stops the node from starting.
	Register func(n *tempest.Node) error
	// Name is the program's name in its usage lines and help examples,
	// in the agent's and dev's banners and in the commands dev suggests
	// ("tempest" when empty).
	Name string
}

// version, register and program are the Options Main was given.
var (
	version  = "dev"
	register func(n *tempest.Node) error
	program  = "tempest"
)

// Main runs the tempest command with the process's arguments and exits:
// 0, or the code the error calls for (see `tempest exit-codes`). SIGTERM
// and SIGINT cancel the command's context (the agent shuts down
// gracefully). Call it once, from main.
func Main(o Options) {
	if o.Version != "" {
		version = o.Version
	}
	register = o.Register
	if o.Name != "" {
		program = o.Name
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(exitCode(err))
	}
}

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

// withCode wraps err so that Main exits with code.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// errorLine is what Main prints for err: one "tempest:" prefix, also
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
		Use:           program,
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
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return withCode(exitUsage, fmt.Errorf("unknown help topic %q", strings.Join(args, " ")))
			}
			return cmd.Help()
		},
	})
	// Cobra adds its completion command at Execute; added now, its
	// subcommands' argument errors are usage errors too.
	root.InitDefaultCompletionCmd()
	usageExits(root)
	if program != "tempest" {
		renameExamples(root)
	}
	return root
}

// usageExits makes every argument error in cmd's tree a usage error
// (exit 2), an unknown subcommand of a command group included: a typo
// in a script must not pass for success.
func usageExits(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		usageExits(c)
	}
	if cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())
			}
			return nil
		}
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	if v := cmd.Args; v != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := v(c, args)
			var ee *exitError
			if err == nil || errors.As(err, &ee) {
				return err
			}
			return withCode(exitUsage, err)
		}
	}
}

// renameExamples makes the help texts and examples of cmd and its
// subcommands call the program by its name (Options.Name).
func renameExamples(cmd *cobra.Command) {
	cmd.Example = strings.ReplaceAll(cmd.Example, "tempest ", program+" ")
	cmd.Long = strings.ReplaceAll(cmd.Long, "tempest ", program+" ")
	cmd.Flags().VisitAll(func(f *pflag.Flag) { f.Usage = strings.ReplaceAll(f.Usage, "tempest ", program+" ") })
	for _, c := range cmd.Commands() {
		renameExamples(c)
	}
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
