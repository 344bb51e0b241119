package cli

import (
	"context"
	"crypto/tls"
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
the node at --addr, the nodes given with --target and every other member
whose address is verified, or only the node at --addr with --local), in
key order:
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
			return runActors(cmd.Context(), c, args[0], o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&o.dormant, "dormant", false, "also list dormant identities at rest on each node")
	cmd.Flags().BoolVar(&o.local, "local", false, "only the node at --addr")
	cmd.Flags().StringSliceVar(&o.targets, "target", nil, "another node's HTTP API to list, trusted like --addr (repeatable)")
	cmd.Flags().IntVar(&o.limit, "limit", 100, "identities printed per node (the count is always complete)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the API's pages as JSON lines")
	return cmd
}

type actorsOptions struct {
	dormant, local, json bool
	limit                int
	targets              []string
}

func runActors(ctx context.Context, c *apiClient, kind string, o actorsOptions, out, note io.Writer) error {
	targets := []*apiClient{c}
	if !o.local {
		var skipped []string
		var release func()
		var err error
		targets, skipped, release, err = clusterTargets(ctx, c, o.targets)
		defer release()
		if err != nil {
			return err
		}
		noteSkipped(note, skipped)
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
					fmt.Fprintf(out, "%s: %d %s\n", safe(ab.Node), ab.Count, plural(ab.Count, "identity", "identities"))
					total += ab.Count
				}
				for _, e := range ab.Actors {
					if printed < o.limit {
						fmt.Fprintf(out, "  %s/%s  %s\n", safe(kind), safe(e.Key), e.State)
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

// clusterTargets returns the clients of a command that covers the
// cluster (bench, actors) and the members it leaves out, each with the
// reason. The node at --addr and the addresses given with --target are
// trusted as given: the token goes to them. Another member of the node
// at --addr is added only when its HTTP address is verified: it is alive,
// it proved its name to that node with a certificate of the cluster CA,
// and its API is https, whose certificate must verify for its node name
// (the TLS handshake of every request checks that). Over plain HTTP a
// member's address is only what it advertised in gossip, which anyone
// holding the gossip key can forge, so it is left out. release closes
// the idle connections of the clients built here.
func clusterTargets(ctx context.Context, c *apiClient, given []string) (targets []*apiClient, skipped []string, release func(), err error) {
	var transports []*http.Transport
	release = func() {
		for _, t := range transports {
			t.CloseIdleConnections()
		}
	}
	targets = []*apiClient{c}
	seen := map[string]bool{c.base.Host: true}
	for _, g := range given {
		u, err := parseAddr(g)
		if err != nil {
			return nil, nil, release, configError("target", "%v", err)
		}
		if seen[u.Host] {
			continue
		}
		seen[u.Host] = true
		targets = append(targets, &apiClient{base: u, token: c.token, hc: c.hc})
	}
	b, err := c.do(ctx, http.MethodGet, "/v1/members", nil, nil)
	if err != nil {
		return nil, nil, release, err
	}
	var mb httpapi.MembersBody
	if err := json.Unmarshal(b, &mb); err != nil {
		return nil, nil, release, fmt.Errorf("%s: members: %v", c.base.Host, err)
	}
	for _, m := range mb.Members {
		if m.Name == mb.Node || m.Status != "alive" || m.HTTP == "" || seen[m.HTTP] {
			continue
		}
		switch {
		case !m.Proven:
			skipped = append(skipped, fmt.Sprintf("%s (%s): it has not proved its name with a cluster certificate", m.Name, m.HTTP))
			continue
		case c.base.Scheme != "https":
			skipped = append(skipped, fmt.Sprintf("%s (%s): an address from gossip cannot be verified over plain HTTP", m.Name, m.HTTP))
			continue
		}
		var tc *tls.Config
		if t, ok := c.hc.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
			tc = t.TLSClientConfig.Clone()
		} else {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tc.ServerName = m.Name // its certificate must be the member's
		tr := &http.Transport{TLSClientConfig: tc}
		transports = append(transports, tr)
		seen[m.HTTP] = true
		u := *c.base
		u.Host = m.HTTP
		targets = append(targets, &apiClient{base: &u, token: c.token, hc: &http.Client{Transport: tr}})
	}
	return targets, skipped, release, nil
}

// noteSkipped tells, on w, which members a command leaves out and how
// to include them.
func noteSkipped(w io.Writer, skipped []string) {
	if len(skipped) == 0 {
		return
	}
	fmt.Fprintf(w, "not sent to %d %s whose address is not verified (give trusted addresses with --target):\n",
		len(skipped), plural(len(skipped), "member", "members"))
	for _, s := range skipped {
		fmt.Fprintf(w, "  %s\n", safe(s))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
