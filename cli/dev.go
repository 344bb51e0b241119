package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
)

func init() { addCommand(newDevCmd) }

func newDevCmd() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev [--nodes 3] [--base-port 7946] [--tour]",
		Short: "Run a local cluster of real nodes on loopback, for trying Tempest",
		Long: `Run a local cluster of real nodes on 127.0.0.1 in this process: node i
(from 0) uses base-port+10i for gossip, +1 for QUIC and +2 for HTTP. A fresh
CA, node certificates and a gossip key are written to a temporary directory
(removed on exit unless --keep). The demo kinds echo, counter and ticker are
registered with a short idle timeout, so passivation and hydration are easy
to watch. --tour walks through cross-node asks, a tell, a passivation and
hydration, a durable reminder that wakes a dormant actor, and members, then
the cluster stays up until Ctrl-C. The nodes'
logs go to a file (printed at start, in the temporary directory unless
--log-file says otherwise; --log-file - is stderr), so the tour is not
interleaved with them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.nodes < 1 || o.nodes > 9 {
				return configError("nodes", "want 1 to 9")
			}
			if o.basePort < 1024 || o.basePort+10*o.nodes > 65535 {
				return configError("base-port", "want 1024 to %d", 65535-10*o.nodes)
			}
			if _, err := parseLevel(o.logLevel); err != nil {
				return configError("log-level", "%q: want debug, info, warn or error", o.logLevel)
			}
			return runDev(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().IntVar(&o.nodes, "nodes", 3, "number of nodes")
	cmd.Flags().IntVar(&o.basePort, "base-port", 7946, "gossip port of the first node")
	cmd.Flags().BoolVar(&o.tour, "tour", false, "walk through the main commands once the cluster is ready")
	cmd.Flags().DurationVar(&o.idle, "idle-timeout", 20*time.Second, "passivate idle actors after this long")
	cmd.Flags().StringVar(&o.logLevel, "log-level", "info", "log level of the nodes")
	cmd.Flags().StringVar(&o.logFile, "log-file", "", "file the nodes log to (default nodes.log in the temporary directory; - is stderr)")
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep the temporary directory (certificates, data) on exit")
	cmd.Flags().BoolVar(&o.exitAfterTour, "exit-after-tour", false, "stop the cluster once the tour is done")
	return cmd
}

type devOptions struct {
	nodes, basePort int
	tour, keep      bool
	exitAfterTour   bool
	idle            time.Duration
	logLevel        string
	logFile         string
}

func runDev(ctx context.Context, o devOptions, out, errOut io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "tempest-dev-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	ca, err := wire.NewCA("tempest dev CA", time.Now().Add(-time.Minute), 30*24*time.Hour)
	if err != nil {
		return err
	}
	if err := wire.WriteCA(filepath.Join(dir, "ca"), ca); err != nil {
		return err
	}
	key, err := membership.NewKey()
	if err != nil {
		return err
	}
	keyFile := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(membership.EncodeKey(key)+"\n"), 0o600); err != nil {
		return err
	}
	logOut, logPath := errOut, "stderr"
	if o.logFile != "-" {
		logPath = o.logFile
		if logPath == "" {
			logPath = filepath.Join(dir, "nodes.log")
		}
		f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return configError("log-file", "%v", err)
		}
		defer f.Close()
		logOut = f
	}
	log := newLogger(logOut, o.logLevel, "text")
	var agents []*agent
	defer func() {
		// One by one, last first: each graceful leave hands its shards
		// to the nodes still running. The last node has no one to hand
		// off to; its state is at rest on its own disk.
		for i := len(agents) - 1; i >= 0; i-- {
			d := 15 * time.Second
			if i == 0 {
				d = 2 * time.Second
			}
			_ = agents[i].stop(d)
		}
	}()
	seed := fmt.Sprintf("127.0.0.1:%d", o.basePort)
	for i := range o.nodes {
		name := fmt.Sprintf("dev-%d", i+1)
		certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{Name: name, DNS: []string{"localhost"},
			NotBefore: time.Now().Add(-time.Minute), Validity: 30 * 24 * time.Hour})
		if err != nil {
			return err
		}
		ndir := filepath.Join(dir, name)
		if err := wire.WriteNodeCert(ndir, certPEM, keyPEM); err != nil {
			return err
		}
		port := o.basePort + 10*i
		c := defaultAgentConfig()
		c.Name = name
		c.DataDir = filepath.Join(ndir, "data")
		c.GossipAddr = fmt.Sprintf("127.0.0.1:%d", port)
		c.QUICAddr = fmt.Sprintf("127.0.0.1:%d", port+1)
		c.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", port+2)
		c.Join = []string{seed}
		c.BootstrapExpect = o.nodes
		c.GossipKeyFile = keyFile
		c.TLSCA = filepath.Join(dir, "ca", wire.CACertFile)
		c.TLSCert = filepath.Join(ndir, wire.NodeCertFile)
		c.TLSKey = filepath.Join(ndir, wire.NodeKeyFile)
		c.Timing = "fast"
		c.Shards = 64
		c.IdleTimeout = o.idle
		c.Workers = 2
		c.register = register
		if err := c.validate(); err != nil {
			return err
		}
		mat, err := c.loadMaterial(func(string) string { return "" })
		if err != nil {
			return err
		}
		a, err := startAgent(ctx, c, mat, nil, log, i == 0)
		if err != nil {
			return fmt.Errorf("starting %s: %w", name, err)
		}
		agents = append(agents, a)
	}
	fmt.Fprintf(out, "%s dev: %d nodes on 127.0.0.1 (certificates and data in %s)\n", program, o.nodes, dir)
	for i, a := range agents {
		port := o.basePort + 10*i
		fmt.Fprintf(out, "  %s  gossip :%d  quic :%d  http %s\n", a.node.Name(), port, port+1, a.httpURL())
	}
	fmt.Fprintf(out, "  logs (level %s): %s\n", o.logLevel, logPath)
	clients := make([]*apiClient, len(agents))
	for i, a := range agents {
		u, _ := url.Parse(a.httpURL())
		clients[i] = &apiClient{base: u, hc: &http.Client{}}
	}
	if err := waitReady(ctx, clients, len(agents), 60*time.Second); err != nil {
		return err
	}
	fmt.Fprintln(out, "cluster ready.")
	if o.tour {
		if err := runTour(ctx, out, clients); err != nil {
			return fmt.Errorf("tour: %w", err)
		}
	}
	self := program
	if a0 := os.Args[0]; filepath.Base(a0) == program && strings.Contains(a0, "/") {
		self = a0 // e.g. ./bin/tempest under make run
	}
	fmt.Fprintf(out, "\nTalk to it from another terminal (any node's address works; the default is %s):\n", agents[0].httpURL())
	for _, ex := range []string{
		"members",
		"placement",
		`ask counter/alice '{"Add":{"n":5}}'`,
		`tell counter/alice '{"Add":{"n":1}}'`,
		"status counter/alice",
		"passivate counter/alice",
		"reminders ticker/alarm",
		`ask ticker/alarm '{"Stop":null}'`,
		`ask echo/hello '{"text":"hi"}' --addr ` + agents[len(agents)-1].httpURL(),
		"bench --duration 5s counter",
	} {
		if agents[0].httpURL() != defaultAddr && !strings.Contains(ex, "--addr ") {
			// Not the client's default address: a command copied from
			// here must say where the cluster is.
			ex += " --addr " + agents[0].httpURL()
		}
		fmt.Fprintf(out, "  %s %s\n", self, ex)
	}
	if agents[0].httpURL() != defaultAddr {
		fmt.Fprintf(out, "  (or export TEMPEST_ADDR=%s first, so that --addr can be left out)\n", agents[0].httpURL())
	}
	fmt.Fprintf(out, "  curl -s %s/metrics | grep ^tempest_\nCtrl-C stops the cluster.\n", agents[0].httpURL())
	if o.exitAfterTour {
		return nil
	}
	<-ctx.Done()
	fmt.Fprintln(out, "stopping the cluster (handing shards off)...")
	return nil
}

// placementSettled: the table c's node applied has every shard assigned
// and none moving, so that what a tour shows of placement holds for a
// while (a new cluster hands each kind's shards to their final owners
// in the first seconds).
func placementSettled(ctx context.Context, c *apiClient) bool {
	b, err := c.do(ctx, http.MethodGet, "/v1/placement", nil, nil)
	if err != nil {
		return false
	}
	var pb httpapi.PlacementBody
	if json.Unmarshal(b, &pb) != nil {
		return false
	}
	return pb.Standalone || (pb.ShardCount > 0 && pb.Moving == 0 && pb.Unassigned == 0)
}

// waitReady polls every node's /readyz and members, and the placement
// table, until all are ready, see each other and no shard is moving, or
// the timeout passes.
func waitReady(ctx context.Context, clients []*apiClient, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ready := 0
		for _, c := range clients {
			if _, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil); err != nil {
				break
			}
			b, err := c.do(ctx, http.MethodGet, "/v1/members", nil, nil)
			if err != nil {
				break
			}
			var mb httpapi.MembersBody
			if json.Unmarshal(b, &mb) != nil || aliveCount(mb) < want {
				break
			}
			ready++
		}
		if ready == len(clients) && placementSettled(ctx, clients[0]) {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the cluster was not ready within %v", timeout)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func aliveCount(mb httpapi.MembersBody) int {
	n := 0
	for _, m := range mb.Members {
		if m.Status == "alive" {
			n++
		}
	}
	return n
}

// runTour walks through the main operations against the running nodes,
// printing what it does as the equivalent CLI command.
func runTour(ctx context.Context, out io.Writer, clients []*apiClient) error {
	step := func(format string, args ...any) { fmt.Fprintf(out, "\n== "+format+"\n", args...) }
	node := func(i int) *apiClient { return clients[i%len(clients)] }
	ask := func(c *apiClient, actor, msg string) (string, error) {
		path, _ := actorPath(actor)
		b, err := c.do(ctx, http.MethodPost, path+"/ask", nil, []byte(msg))
		return string(compactJSON(b)), err
	}
	status := func(c *apiClient, actor string) (httpapi.StatusBody, error) {
		path, _ := actorPath(actor)
		var st httpapi.StatusBody
		b, err := c.do(ctx, http.MethodGet, path, nil, nil)
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		return st, err
	}

	step("members (tempest members)")
	b, err := clients[0].do(ctx, http.MethodGet, "/v1/members", nil, nil)
	if err != nil {
		return err
	}
	var mb httpapi.MembersBody
	if err := json.Unmarshal(b, &mb); err != nil {
		return err
	}
	for _, m := range mb.Members {
		fmt.Fprintf(out, "  %-8s %-16s %-6s raft %-9s profile %s\n", m.Name, m.Address, m.Status, m.Raft, m.Profile)
	}

	step("asks to counters, each sent through a different node; placement decides who runs each")
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	for i, k := range keys {
		actor := "counter/" + k
		via := node(i)
		reply, err := ask(via, actor, fmt.Sprintf(`{"Add":{"n":%d}}`, i+1))
		if err != nil {
			return fmt.Errorf("ask %s: %w", actor, err)
		}
		st, err := status(via, actor)
		// Right after start shards still move to their owners: a status
		// asked while the counter's shard moves says only that it is
		// unavailable for a moment. Ask again, for a few seconds at most.
		for try := 0; err == nil && st.Node == "" && try < 20; try++ {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			st, err = status(via, actor)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  tempest ask %-14s '{\"Add\":{\"n\":%d}}' --addr %s  ->  %s   (runs on %s)\n", actor, i+1, via.base.Host, reply, st.Node)
	}
	reply, err := ask(node(1), "echo/hello", `{"text":"hello, tempest"}`)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  tempest ask echo/hello '{\"text\":\"hello, tempest\"}'  ->  %s\n", reply)

	step("a tell (no reply), then an ask sees its effect")
	path, _ := actorPath("counter/alice")
	if _, err := node(2).do(ctx, http.MethodPost, path+"/tell", nil, []byte(`{"Add":{"n":10}}`)); err != nil {
		return err
	}
	fmt.Fprintln(out, `  tempest tell counter/alice '{"Add":{"n":10}}'`)
	reply, err = ask(node(0), "counter/alice", `{"Get":null}`)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  tempest ask counter/alice '{\"Get\":null}'  ->  %s   (1 + 10)\n", reply)

	step("passivation and hydration: the counter's value is kept at rest")
	st, err := status(node(0), "counter/alice")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  tempest status counter/alice  ->  %s on %s, incarnation %d, active %t\n", st.State, st.Node, st.Incarnation, st.Active)
	if _, err := node(0).do(ctx, http.MethodPost, path+"/passivate", nil, nil); err != nil {
		return err
	}
	st, err = status(node(0), "counter/alice")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  tempest passivate counter/alice; tempest status counter/alice  ->  %s (active %t)\n", st.State, st.Active)
	reply, err = ask(node(1), "counter/alice", `{"Get":null}`)
	if err != nil {
		return err
	}
	st, err = status(node(0), "counter/alice")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  tempest ask counter/alice '{\"Get\":null}'  ->  %s   (hydrated from rest: now %s, same incarnation %d)\n", reply, st.State, st.Incarnation)

	step("a durable reminder: it belongs to the identity, wakes it when dormant, and survives a crash of its node")
	reply, err = ask(node(1), "ticker/alarm", `{"Start":{"periodMs":1000}}`)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  tempest ask ticker/alarm '{\"Start\":{\"periodMs\":1000}}'  ->  %s\n", reply)
	tpath, _ := actorPath("ticker/alarm")
	if _, err := node(0).do(ctx, http.MethodPost, tpath+"/passivate", nil, nil); err != nil {
		return err
	}
	fmt.Fprintln(out, "  tempest passivate ticker/alarm   (dormant: no activation and no timer, only its reminder at rest)")
	// Status does not activate: the ticker is active again only once a
	// tick of its reminder hydrated it.
	t0 := time.Now()
	for {
		st, err := status(node(0), "ticker/alarm")
		if err != nil {
			return err
		}
		if st.Active {
			fmt.Fprintf(out, "  tempest status ticker/alarm  ->  active again after %.1f s, on %s: its reminder woke it\n", time.Since(t0).Seconds(), st.Node)
			break
		}
		if time.Since(t0) > 30*time.Second {
			return fmt.Errorf("ticker/alarm: not woken by its reminder within 30 s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	reply, err = ask(node(2), "ticker/alarm", `{"Get":null}`)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  tempest ask ticker/alarm '{\"Get\":null}'  ->  %s\n", reply)
	b, err = node(0).do(ctx, http.MethodGet, tpath+"/reminders", nil, nil)
	if err != nil {
		return err
	}
	var rb httpapi.RemindersBody
	if err := json.Unmarshal(b, &rb); err != nil {
		return err
	}
	for _, r := range rb.Reminders {
		fmt.Fprintf(out, "  tempest reminders ticker/alarm  ->  %s on %s: every %s, last seq %d\n", r.Name, rb.Node, r.Period, r.LastSeq)
	}

	step("placement (tempest placement)")
	b, err = clients[0].do(ctx, http.MethodGet, "/v1/placement", nil, nil)
	if err != nil {
		return err
	}
	var p httpapi.PlacementBody
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	fmt.Fprintf(out, "  leader %s, epoch %d, %d shards per group, %d groups (one per kind)\n", p.Leader, p.Epoch, p.ShardCount, p.Groups)
	for _, n := range p.Nodes {
		fmt.Fprintf(out, "  %-8s %-8s %d shards\n", n.Name, n.Status, n.Shards)
	}
	return nil
}
