package cli

import "github.com/spf13/cobra"

// Exit codes of the tempest binary. They are part of its contract:
// scripts branch on them (see docs/operations.md).
const (
	exitOK           = 0
	exitFailure      = 1  // any other error (also: node not ready, for health)
	exitUsage        = 2  // bad flags, arguments or configuration
	exitUnreachable  = 3  // the node's HTTP API could not be reached
	exitDeadline     = 4  // the ask's deadline passed (HTTP 504)
	exitRefused      = 5  // admission refused the message: mailbox full (HTTP 429)
	exitUnknownKind  = 6  // no such kind, reminder or node (HTTP 404)
	exitBadJSON      = 7  // the JSON does not fit the kind's schema (HTTP 400)
	exitUnavailable  = 8  // the owner node is gone or shutting down (HTTP 503)
	exitUnauthorized = 9  // missing or wrong bearer token (HTTP 401)
	exitCorrupt      = 10 // agent: a file in the data directory is damaged
	exitAppError     = 11 // the actor answered an application error (HTTP 422)
)

// exitCodesHelp is the exit code table shown by tempest --help.
const exitCodesHelp = `Exit codes:
  0  success
  1  other errors; for health: the node is not ready; an answer that is
     not the API's (plain http:// to an HTTPS node, a proxy), quoted
  2  usage error or invalid configuration (also an unknown command)
  3  node unreachable
  4  deadline exceeded
  5  refused (mailbox full)
  6  not found: unknown kind, reminder or node
  7  bad JSON (does not fit the kind's schema)
  8  process unavailable (owner gone or shutting down)
  9  unauthorized (missing or wrong token)
  10 agent: a file in the data directory is damaged (see the message)
  11 the actor answered an application error (the message starts with its code)`

// exactArgs is cobra.ExactArgs with the usage exit code.
func exactArgs(n int) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return withCode(exitUsage, cobra.ExactArgs(n)(cmd, args))
	}
}

// noArgs is cobra.NoArgs with the usage exit code.
func noArgs(cmd *cobra.Command, args []string) error {
	return withCode(exitUsage, cobra.NoArgs(cmd, args))
}
