package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/httpapi"
)

func init() { addCommand(newActorsCmd) }

func newActorsCmd() *cobra.Command {
	var f clientFlags
	var o actorsOptions
	cmd := &cobra.Command{
		Use:   "actors KIND [--dormant] [--local] [--limit 100] [--json]",
		Short: "List the identities of a kind on every node: active ones, with --dormant also those at rest",
		Long: `List the identities of KIND node by node (GET /v1/actors?kind=KIND on
each alive member, or only the node at --addr with --local), in key order:
the active ones, and with --dormant also the dormant ones whose state at
rest the node holds for the shards it owns. Each node's count is printed
with at most --limit of its identities; --json prints every page of
every node as the API returns it.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.limit < 1 {
				return configError("limit", "must be positive")
			}
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			return runActors(cmd.Context(), c, args[0], o, cmd.OutOrStdout())
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.dormant, "dormant", false, "also list dormant identities at rest on each node")
	cmd.Flags().BoolVar(&o.local, "local", false, "only the node at --addr")
	cmd.Flags().IntVar(&o.limit, "limit", 100, "identities printed per node (the count is always complete)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the API's pages as JSON lines")
	return cmd
}

type actorsOptions struct {
	dormant, local, json bool
	limit                int
}

func runActors(ctx context.Context, c *apiClient, kind string, o actorsOptions, out io.Writer) error {
	targets := []*apiClient{c}
	if !o.local {
		targets = memberClients(ctx, c)
	}
	total := 0
	for _, t := range targets {
		printed, after := 0, ""
		for {
			q := url.Values{"kind": {kind}, "limit": {strconv.Itoa(httpapi.MaxActorsLimit)}}
			if o.dormant {
				q.Set("dormant", "true")
			}
			if after != "" {
				q.Set("after", after)
			}
			b, err := t.do(ctx, http.MethodGet, "/v1/actors", q, nil)
			if err != nil {
				return err
			}
			var ab httpapi.ActorsBody
			if err := json.Unmarshal(b, &ab); err != nil {
				return fmt.Errorf("%s: %v", t.base.Host, err)
			}
			if o.json {
				fmt.Fprintln(out, string(compactJSON(b)))
			} else {
				if after == "" {
					fmt.Fprintf(out, "%s: %d %s\n", ab.Node, ab.Count, plural(ab.Count, "identity", "identities"))
					total += ab.Count
				}
				for _, e := range ab.Actors {
					if printed < o.limit {
						fmt.Fprintf(out, "  %s/%s  %s\n", kind, e.Key, e.State)
					}
					printed++
				}
			}
			if ab.Next == "" || (!o.json && printed >= o.limit) {
				if !o.json && ab.Count > o.limit {
					fmt.Fprintf(out, "  ... and %d more\n", ab.Count-o.limit)
				}
				break
			}
			after = ab.Next
		}
	}
	if !o.json && len(targets) > 1 {
		fmt.Fprintf(out, "%d %s of %s on %d nodes\n", total, plural(total, "identity", "identities"), kind, len(targets))
	}
	return nil
}

// memberClients returns c and a client for every other alive member
// with an HTTP address (the same token and transport); just c if the
// members cannot be read.
func memberClients(ctx context.Context, c *apiClient) []*apiClient {
	targets := []*apiClient{c}
	b, err := c.do(ctx, http.MethodGet, "/v1/members", nil, nil)
	if err != nil {
		return targets
	}
	var mb httpapi.MembersBody
	if json.Unmarshal(b, &mb) != nil {
		return targets
	}
	for _, m := range mb.Members {
		if m.Status != "alive" || m.HTTP == "" || m.HTTP == c.base.Host {
			continue
		}
		u := *c.base
		u.Host = m.HTTP
		targets = append(targets, &apiClient{base: &u, token: c.token, hc: c.hc})
	}
	return targets
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
