package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/reminders"
)

func init() { addCommand(newRemindersCmd) }

func newRemindersCmd() *cobra.Command {
	var f clientFlags
	var asJSON, cancel bool
	cmd := &cobra.Command{
		Use:   "reminders KIND/KEY [NAME] [--cancel] [--json]",
		Short: "List an actor's durable reminders, show one, or cancel one",
		Long: `List the durable reminders of KIND/KEY as its owner holds them (GET
/v1/actors/{kind}/{key}/reminders on any node: one that does not own the
identity asks the owner over the cluster's authenticated links): name,
next due time, period, catch-up policy, the sequence number of the last
tick delivered and whether a tick is on its way. With NAME only that
reminder; with NAME and --cancel the reminder is cancelled (DELETE): once
the command returns, no tick of it runs, also not one already on its way.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return withCode(exitUsage, fmt.Errorf("want KIND/KEY [NAME], got %d arguments", len(args)))
			}
			if cancel && len(args) != 2 {
				return withCode(exitUsage, fmt.Errorf("--cancel needs the reminder's NAME"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := actorPath(args[0])
			if err != nil {
				return err
			}
			path += "/reminders"
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(args) == 2 {
				switch name := args[1]; {
				case name == "":
					return withCode(exitUsage, errors.New("the reminder name is empty"))
				case len(name) > reminders.MaxNameBytes || !utf8.ValidString(name):
					// Refused here, as a bad KIND/KEY is: no node would take it.
					return withCode(exitUsage, fmt.Errorf("the reminder name must be valid UTF-8 of at most %d bytes", reminders.MaxNameBytes))
				}
				one := path + "/" + pathSegment(args[1])
				if cancel {
					_, err := c.do(cmd.Context(), http.MethodDelete, one, nil, nil)
					return err
				}
				b, err := c.do(cmd.Context(), http.MethodGet, one, nil, nil)
				if err != nil {
					return err
				}
				if asJSON {
					_, err = fmt.Fprintln(out, string(compactJSON(b)))
					return err
				}
				var rb httpapi.ReminderBody
				if err := json.Unmarshal(b, &rb); err != nil {
					return err
				}
				printReminder(out, rb)
				return nil
			}
			b, err := c.do(cmd.Context(), http.MethodGet, path, nil, nil)
			if err != nil {
				return err
			}
			if asJSON {
				_, err = fmt.Fprintln(out, string(compactJSON(b)))
				return err
			}
			var rb httpapi.RemindersBody
			if err := json.Unmarshal(b, &rb); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s/%s on %s: %d %s\n", safe(rb.Kind), safe(rb.Key), safe(rb.Node), len(rb.Reminders), plural(len(rb.Reminders), "reminder", "reminders"))
			for _, r := range rb.Reminders {
				printReminder(out, r)
			}
			return nil
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&cancel, "cancel", false, "cancel the reminder NAME")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")
	return cmd
}

// printReminder prints one reminder on a line: name, schedule, progress.
func printReminder(out io.Writer, r httpapi.ReminderBody) {
	every := "once"
	if r.Period != "" {
		every = "every " + r.Period
	}
	catchup := r.Catchup
	if r.MaxCatchup > 0 {
		catchup = fmt.Sprintf("%s %d", catchup, r.MaxCatchup)
	}
	state := fmt.Sprintf("next %s", r.Next.Format(time.RFC3339))
	if r.Outstanding {
		state = "tick on its way"
	}
	fmt.Fprintf(out, "  %s  %s, %s  (catch-up %s, last seq %d)\n", safe(r.Name), every, state, catchup, r.LastSeq)
}
