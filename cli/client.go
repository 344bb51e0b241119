package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/placement"
)

func init() {
	addCommand(newMembersCmd)
	addCommand(newPlacementCmd)
	addCommand(newManifestCmd)
	addCommand(newTellCmd)
	addCommand(newAskCmd)
	addCommand(newStatusCmd)
	addCommand(newPassivateCmd)
	addCommand(newHealthCmd)
}

// defaultAddr is the HTTP API the client commands talk to by default.
const defaultAddr = "http://127.0.0.1:7948"

// tokenEnv holds the bearer token itself (--token-file names a file).
const tokenEnv = "TEMPEST_TOKEN"

// clientFlags are the flags every client command shares.
type clientFlags struct {
	addr      string
	tokenFile string
	tlsCA     string
}

func (f *clientFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "addr", defaultAddr, "the node's HTTP API ($TEMPEST_ADDR)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token ($TEMPEST_TOKEN_FILE; or the token in $TEMPEST_TOKEN)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA certificate to verify an https node ($TEMPEST_TLS_CA)")
}

// apiClient talks to one node's HTTP API.
type apiClient struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// newClient builds the client from the flags, filling unset ones from
// the environment.
func (f *clientFlags) client(fs *pflag.FlagSet, getenv func(string) string) (*apiClient, error) {
	for _, name := range []string{"addr", "token-file", "tls-ca"} {
		fl := fs.Lookup(name)
		if fl.Changed {
			continue
		}
		if v := getenv(envName(name)); v != "" {
			if err := fs.Set(name, v); err != nil {
				return nil, configError(name, "$%s: %v", envName(name), err)
			}
		}
	}
	u, err := parseAddr(f.addr)
	if err != nil {
		return nil, configError("addr", "%v", err)
	}
	c := &apiClient{base: u, hc: &http.Client{}}
	switch {
	case f.tokenFile != "":
		if c.token, err = readToken(f.tokenFile); err != nil {
			return nil, configError("token-file", "%v", err)
		}
	default:
		if c.token, err = parseToken([]byte(getenv(tokenEnv))); err != nil {
			return nil, configError("token-file", "$%s: %v", tokenEnv, err)
		}
	}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, configError("tls-ca", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configError("tls-ca", "%s holds no PEM certificate", f.tlsCA)
		}
		c.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	return c, nil
}

// parseAddr parses the base URL of an HTTP API: http://host:port,
// https://host:port, or host:port for http.
func parseAddr(addr string) (*url.URL, error) {
	full := addr
	if !strings.Contains(full, "://") {
		full = "http://" + full
	}
	u, err := url.Parse(full)
	if err != nil || u.Hostname() == "" || u.Port() == "" || (u.Scheme != "http" && u.Scheme != "https") ||
		strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		// A path would be put before every endpoint's: a node's API is at
		// its root. Without a port a name alone ("garbage", "localhost")
		// would be dialled on port 80 and fail as an unreachable node.
		return nil, fmt.Errorf("%q: want http://host:port or https://host:port, with no path", addr)
	}
	u.Path, u.RawPath = "", ""
	return u, nil
}

// apiError is an error answer of the HTTP API.
type apiError struct {
	Status int
	Code   string
	Msg    string
}

// Error is the node's message; an application error's (422) starts with
// its code (bank.insufficient_funds: ...), which scripts branch on.
func (e *apiError) Error() string {
	if e.Status == http.StatusUnprocessableEntity && e.Code != "" {
		return e.Code + ": " + e.Msg
	}
	return e.Msg
}

// exitFor maps an HTTP status to the client's exit code.
func exitFor(status int) int {
	switch status {
	case http.StatusGatewayTimeout:
		return exitDeadline
	case http.StatusTooManyRequests:
		return exitRefused
	case http.StatusNotFound:
		return exitUnknownKind
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return exitBadJSON
	case http.StatusServiceUnavailable:
		return exitUnavailable
	case http.StatusUnauthorized:
		return exitUnauthorized
	case http.StatusUnprocessableEntity:
		return exitAppError
	}
	return exitFailure
}

// do sends one request and returns the body of a 2xx answer; other
// answers become errors with the matching exit code.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body []byte) ([]byte, error) {
	// path is escaped (actorPath escapes a key's slashes): keep it as
	// the raw path so that it is not escaped twice.
	u := *c.base
	prefix := strings.TrimSuffix(u.EscapedPath(), "/")
	raw := prefix + path
	unescaped, err := url.PathUnescape(raw)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	u.Path, u.RawPath = unescaped, raw
	u.RawQuery = query.Encode()
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, withCode(exitDeadline, fmt.Errorf("%s: no answer in time", c.base.Host))
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, withCode(exitUnreachable, fmt.Errorf("cannot reach the node at %s: %v", c.base.Host, err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, withCode(exitUnreachable, fmt.Errorf("reading the answer of %s: %v", c.base.Host, err))
	}
	if resp.StatusCode/100 == 2 {
		return b, nil
	}
	var eb httpapi.ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		// Not an answer of the API (a plain HTTP request to a node that
		// serves HTTPS, a proxy): its status says nothing of the request's
		// JSON, kind or actor.
		msg := fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		if text := firstLine(b); text != "" {
			msg += ": " + text
		}
		return nil, withCode(exitFailure, &apiError{Status: resp.StatusCode, Msg: msg})
	}
	msg := strings.TrimPrefix(eb.Error, "tempest: ") // main adds the prefix
	return nil, withCode(exitFor(resp.StatusCode), &apiError{Status: resp.StatusCode, Code: eb.Code, Msg: msg})
}

// firstLine is the first line of an answer's body that is not the API's,
// printable and at most 200 bytes, for an error message.
func firstLine(b []byte) string {
	line, _, _ := strings.Cut(string(b[:min(len(b), 200)]), "\n")
	line = strings.TrimSpace(strings.ToValidUTF8(line, "?"))
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, line)
}

// actorPath is /v1/actors/{kind}/{key} for a KIND/KEY argument.
func actorPath(arg string) (string, error) {
	kind, key, ok := strings.Cut(arg, "/")
	if !ok || kind == "" || key == "" {
		return "", withCode(exitUsage, fmt.Errorf("%q: want KIND/KEY", arg))
	}
	if err := actor.CheckVirtual(kind, key); err != nil {
		return "", withCode(exitUsage, err)
	}
	return "/v1/actors/" + pathSegment(kind) + "/" + pathSegment(key), nil
}

// pathSegment escapes s as one segment of a URL path. url.PathEscape
// leaves "." and ".." as they are, and the server refuses a path with
// such a segment (400 invalid_key: it is not clean, and cleaned it would
// name another actor, or no endpoint): as a whole segment they are
// escaped too.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// jsonArg checks a JSON argument before it is sent.
func jsonArg(s string) ([]byte, error) {
	b := []byte(s)
	if !json.Valid(b) {
		return nil, withCode(exitBadJSON, fmt.Errorf("the message is not valid JSON: %s", s))
	}
	return b, nil
}

func newMembersCmd() *cobra.Command {
	var f clientFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "members [--json]",
		Short: "List the cluster's members: name, address, status, raft role, manifest profile",
		Long: `List the members of the node at --addr's gossip view: name, gossip
address, status, raft role, manifest profile and HTTP address. A member
that has not proved its name to that node with a certificate of the
cluster CA is shown "alive (unproven)": anyone with the gossip key can be
one; it is never in placement, and its addresses are only what it
advertised.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			b, err := c.do(cmd.Context(), http.MethodGet, "/v1/members", nil, nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				_, err = fmt.Fprintln(out, string(compactJSON(b)))
				return err
			}
			var mb httpapi.MembersBody
			if err := json.Unmarshal(b, &mb); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tADDRESS\tSTATUS\tRAFT\tPROFILE\tHTTP")
			for _, m := range mb.Members {
				status := m.Status
				if !m.Proven && (status == "alive" || status == "suspect") {
					// A gossip member without a cluster certificate:
					// outside placement, its addresses unverified.
					status += " (unproven)"
				}
				if m.DataID != "" && m.RecordedDataID != "" && m.DataID != m.RecordedDataID {
					// Lost its data directory: down until its shards
					// failed over, then added back as a new server.
					status += " (new data directory)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", safe(m.Name), orDash(m.Address), safe(status), safe(m.Raft), orDash(m.Profile), orDash(m.HTTP))
			}
			return tw.Flush()
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newPlacementCmd() *cobra.Command {
	var f clientFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "placement [--json]",
		Short: "Show the placement table: leader, epoch, shards per node",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			b, err := c.do(cmd.Context(), http.MethodGet, "/v1/placement", nil, nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				_, err = fmt.Fprintln(out, string(compactJSON(b)))
				return err
			}
			var p httpapi.PlacementBody
			if err := json.Unmarshal(b, &p); err != nil {
				return err
			}
			if p.Standalone {
				_, err = fmt.Fprintf(out, "standalone node %s: it owns every actor\n", safe(p.Node))
				return err
			}
			if !p.Current {
				fmt.Fprintf(out, "warning: %s's placement lease is not fresh: this table may be behind the cluster's (the node just started, or cannot reach the leader); ask another node with --addr\n", safe(p.Node))
			}
			fmt.Fprintf(out, "leader: %s\nepoch: %d (raft term %d)\nshards: %d per group, %d groups, %d moving, %d unassigned\nreplicas: %d per shard, %d shards under-replicated, %d below %d copies\n",
				orDash(p.Leader), p.Epoch, p.Term, p.ShardCount, p.Groups, p.Moving, p.Unassigned, p.Replicas, p.UnderReplicated, p.BelowReplicas, p.Replicas)
			if err := printNodes(out, p.Nodes); err != nil {
				return err
			}
			if err := printReplication(out, p.Node, p.Replication); err != nil {
				return err
			}
			return printPolicies(out, p.Policies)
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newManifestCmd() *cobra.Command {
	var f clientFlags
	var asJSON bool
	var node string
	cmd := &cobra.Command{
		Use:   "manifest [--node NAME] [--json]",
		Short: "Show a node's assumption manifest",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			q := url.Values{}
			if node != "" {
				q.Set("node", node)
			}
			b, err := c.do(cmd.Context(), http.MethodGet, "/v1/manifest", q, nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				_, err = fmt.Fprintln(out, string(compactJSON(b)))
				return err
			}
			var mb httpapi.ManifestBody
			if err := json.Unmarshal(b, &mb); err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "node: %s\ndigest: %s\n%s", mb.Node, mb.Manifest.Digest(), mb.Manifest)
			return err
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&node, "node", "", "the node whose manifest to show (default: the node at --addr)")
	return cmd
}

func newTellCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "tell KIND/KEY JSON",
		Short: "Send a message without waiting for a reply (prints nothing on success)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := actorPath(args[0])
			if err != nil {
				return err
			}
			body, err := jsonArg(args[1])
			if err != nil {
				return err
			}
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			_, err = c.do(cmd.Context(), http.MethodPost, path+"/tell", nil, body)
			return err
		},
	}
	f.bind(cmd.Flags())
	return cmd
}

func newAskCmd() *cobra.Command {
	var f clientFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "ask KIND/KEY JSON [--timeout 5s]",
		Short: "Send a message and print the reply as compact JSON",
		Example: `  tempest ask echo/a '{"text":"hi"}'
  tempest ask counter/zoe '{"Add":{"n":5}}'      # a counter never used before: prints {"n":5}`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 || timeout > httpapi.MaxAskTimeout {
				return configError("timeout", "want a positive duration up to %v", httpapi.MaxAskTimeout)
			}
			path, err := actorPath(args[0])
			if err != nil {
				return err
			}
			body, err := jsonArg(args[1])
			if err != nil {
				return err
			}
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			// The node answers 504 at the deadline; the client waits a
			// little longer so that it reads that answer.
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout+2*time.Second)
			defer cancel()
			b, err := c.do(ctx, http.MethodPost, path+"/ask", url.Values{"timeout": {timeout.String()}}, body)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(compactJSON(b)))
			return err
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().DurationVar(&timeout, "timeout", httpapi.DefaultAskTimeout, "how long to wait for the reply")
	return cmd
}

func newStatusCmd() *cobra.Command {
	var f clientFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status KIND/KEY [--json]",
		Short: "Show what a reference designates: state, node, incarnation, active",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := actorPath(args[0])
			if err != nil {
				return err
			}
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			b, err := c.do(cmd.Context(), http.MethodGet, path, nil, nil)
			if err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), b, asJSON)
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printStatus(out io.Writer, b []byte, asJSON bool) error {
	if asJSON {
		_, err := fmt.Fprintln(out, string(compactJSON(b)))
		return err
	}
	var st httpapi.StatusBody
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%s/%s: %s on %s (incarnation %d, active %t)\n", safe(st.Kind), safe(st.Key), st.State, orDash(st.Node), st.Incarnation, st.Active); err != nil {
		return err
	}
	if st.PolicyDissenters > 0 {
		if _, err := fmt.Fprintf(out, "warning: %d node(s) publish another policy for %s and own none of its shards until they agree (see tempest placement)\n",
			st.PolicyDissenters, st.Kind); err != nil {
			return err
		}
	}
	return nil
}

// printPolicies prints each kind's agreed policy digest, the nodes that
// publish it and those that publish another (which own none of the kind's
// shards).
func printPolicies(out io.Writer, views []placement.PolicyView) error {
	if len(views) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nKIND\tPOLICY\tAGREE\tDIFFER")
	for _, v := range views {
		differ := "-"
		if len(v.Differ) > 0 {
			var parts []string
			for _, node := range slices.Sorted(maps.Keys(v.Differ)) {
				parts = append(parts, safe(node)+"="+short(v.Differ[node]))
			}
			differ = strings.Join(parts, ",") + " (no shards until they agree)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", safe(v.Kind), short(v.Digest), orDash(strings.Join(v.Agree, ",")), differ)
	}
	return tw.Flush()
}

// printNodes lists the table's nodes with what each owns and follows,
// and why a node's state store fails, if one does.
func printNodes(out io.Writer, nodes []httpapi.PlacementNode) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tSHARDS\tREPLICA OF")
	for _, n := range nodes {
		status := n.Status
		if n.StoreFailing != "" {
			status += ", store failing"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", safe(n.Name), safe(status), n.Shards, n.Follows)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range nodes {
		if n.StoreFailing != "" {
			if _, err := fmt.Fprintf(out, "%s: state store failing, given no shards or new replica places: %s\n", safe(n.Name), safe(n.StoreFailing)); err != nil {
				return err
			}
		}
	}
	return nil
}

// printReplication prints the lag of each follower of the shards node
// owns: what it has not acknowledged yet.
func printReplication(out io.Writer, node string, rs []httpapi.PlacementReplica) error {
	if len(rs) == 0 {
		return nil
	}
	fmt.Fprintf(out, "\nreplication from %s (the shards it owns; ask another node with --addr for its own):\n", safe(node))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FOLLOWER\tSHARDS\tSTATE\tQUEUED\tIN FLIGHT\tLAG\tLAST ACK\tACKED")
	for _, r := range rs {
		state := "in sync"
		switch {
		case r.CatchingUp:
			state = "catching up"
		case r.Shards == 0:
			state = "left the sets"
		}
		last := "never"
		if r.LastAckSeconds >= 0 {
			last = secs(r.LastAckSeconds) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%s\t%d\n", safe(r.Follower), r.Shards, state, r.QueuedRecords, r.InFlightRecords,
			secs(r.LagSeconds), last, r.AckedRecords)
	}
	return tw.Flush()
}

// secs prints seconds as a rounded duration.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

// short abbreviates a policy digest for tables; --json prints it whole.
func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return orDash(digest)
}

func newPassivateCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "passivate KIND/KEY",
		Short: "Put an actor to rest now: its state is written and it becomes Dormant",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := actorPath(args[0])
			if err != nil {
				return err
			}
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			_, err = c.do(cmd.Context(), http.MethodPost, path+"/passivate", nil, nil)
			return err
		},
	}
	f.bind(cmd.Flags())
	return cmd
}

func newHealthCmd() *cobra.Command {
	var f clientFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 when the node is ready, non-zero otherwise (a container health check)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				// Zero would fail every check at once as "unreachable".
				return configError("timeout", "want a positive duration, got %v", timeout)
			}
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			_, err = c.do(ctx, http.MethodGet, "/readyz", nil, nil)
			var ae *apiError
			if errors.As(err, &ae) {
				return withCode(exitFailure, fmt.Errorf("not ready: %s", ae.Msg))
			}
			if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return withCode(exitUnreachable, err)
			}
			return err
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the node")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return safe(s)
}

// safe is s for a terminal: quoted, with escapes, when it holds a
// character that is not printable (a control sequence, a tab or a line
// break), so that a name gossiped or a key chosen by someone else can
// neither drive the terminal nor forge a row of the table.
func safe(s string) string {
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// compactJSON is b without insignificant space (b when it is not JSON).
func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

// maxToken bounds a token file's token (httpapi.MaxTokenBytes).
const maxToken = httpapi.MaxTokenBytes

// parseToken is a bearer token as a file or the environment holds it:
// surrounding white space (a final newline) is dropped, and what is left
// must be printable ASCII on one line (no tab, no control character, no
// byte over 0x7e, which an Authorization header cannot carry or carries
// differently through proxies) of httpapi.MinTokenBytes to
// httpapi.MaxTokenBytes; nothing at all is no token.
func parseToken(b []byte) (string, error) {
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", nil // none
	}
	if err := httpapi.CheckToken([]byte(tok)); err != nil {
		return "", err
	}
	return tok, nil
}

// readSmallFile reads a file of configuration (a token, a key, a
// certificate): a regular file of at most limit bytes. A named pipe
// would block the start until something wrote to it, and a wrong path
// (a log, /dev/zero) would be read whole.
func readSmallFile(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes: not a token, key or certificate file", path, limit)
	}
	return b, nil
}

// readToken reads a token file, refusing one far longer than a token
// before reading it whole (a wrong path: a log, /dev/zero).
func readToken(path string) (string, error) {
	b, err := readSmallFile(path, 4*maxToken)
	if err != nil {
		return "", err
	}
	tok, err := parseToken(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
}
