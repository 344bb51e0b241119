package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
)

func init() {
	addCommand(newAgentCmd)
	addCommand(newExitCodesTopic)
}

// newExitCodesTopic is a help topic listed by tempest --help.
func newExitCodesTopic() *cobra.Command {
	return &cobra.Command{
		Use:   "exit-codes",
		Short: "Exit codes of the client commands (tempest help exit-codes)",
		Long:  exitCodesHelp,
	}
}

func newAgentCmd() *cobra.Command {
	var c agentConfig
	cmd := &cobra.Command{
		Use:   "agent --data-dir DIR [flags]",
		Short: "Run a Tempest node",
		Long: `Run a Tempest node: gossip membership, raft placement, actor mail over
QUIC with mutual TLS, and the HTTP API (members, placement, manifest, the
JSON gateway to actors, /healthz, /readyz, /metrics). The demo kinds echo,
counter and ticker are registered, and a program built on package cli
registers its own beside them.

Every flag can also be set as an environment variable TEMPEST_<FLAG>
(dashes as underscores, e.g. TEMPEST_DATA_DIR) and in the YAML file given
by --config (keys are flag names). Precedence: flag > environment > file >
default.

SIGTERM or SIGINT shuts the node down gracefully within --drain-timeout:
readiness turns false, its shards are handed off, raft leadership moves,
it leaves the gossip cluster, then in-flight asks finish or fail.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyLayers(cmd.Flags(), os.Getenv, "config"); err != nil {
				return err
			}
			c.register = register
			return runAgent(cmd.Context(), c, os.Getenv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	bindAgentFlags(cmd.Flags(), &c)
	return cmd
}

// runAgent validates c, runs the node until ctx ends, then shuts it down
// gracefully.
func runAgent(ctx context.Context, c agentConfig, getenv func(string) string, stdout, stderr io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	if err := checkDataDir(c.DataDir); err != nil {
		return configError("data-dir", "%v", err)
	}
	mat, err := c.loadMaterial(getenv)
	if err != nil {
		return err
	}
	var token []byte
	if c.HTTPTokenFile != "" {
		tok, err := readToken(c.HTTPTokenFile)
		if err != nil {
			return configError("http-token-file", "%v", err)
		}
		if len(tok) < httpapi.MinTokenBytes {
			return configError("http-token-file", "the token must be at least %d characters", httpapi.MinTokenBytes)
		}
		token = []byte(tok)
	}
	log := newLogger(stderr, c.LogLevel, c.LogFormat)
	warnSharedSecrets(log, c)
	if c.tracer, err = newTracerProvider(ctx, getenv, c.Name); err != nil {
		return err
	}
	a, err := startAgent(ctx, c, mat, token, log, true)
	if err != nil {
		if c.tracer != nil {
			_ = c.tracer.Shutdown(context.Background())
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info("stopped before the node started", "error", err)
			return nil // a signal during the start: a clean stop
		}
		return err
	}
	if c.tracer != nil {
		log.Info("tracing on: spans exported over OTLP/HTTP")
	}
	printBanner(stdout, c, a, mat)
	select {
	case <-ctx.Done():
		log.Info("shutting down", "drain_timeout", c.DrainTimeout)
	case <-a.node.Done():
		log.Warn("node closed")
	case <-a.node.StoreDamaged():
		// Every activation and persisted update fails from now on: stop,
		// so that the shards move to nodes that can serve them, and exit
		// with the code of a damaged file (a restart checks it and
		// refuses it until it is restored or moved aside).
		damage := a.node.StoreDamage()
		log.Error("state store damaged while running: stopping", "error", damage)
		if err := a.stop(c.DrainTimeout); err != nil {
			log.Warn("shutdown after the damage", "error", err)
		}
		return corruptExit(damage, c.DataDir)
	}
	return a.stop(c.DrainTimeout)
}

// checkDataDir creates dir if it is missing and checks that the agent
// can write in it, so that a --data-dir that is a file, lies under one,
// or is read-only is a usage error naming the flag, not a failure deep
// in the start.
func checkDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

// agent is a running node with its HTTP API.
type agent struct {
	node     *tempest.Node
	met      *httpapi.Metrics
	srv      *http.Server
	httpAddr string // actual listen address
	httpTLS  bool
	api      *httpapi.Server
	log      *slog.Logger
	tracer   *sdktrace.TracerProvider // nil when not tracing
	wg       sync.WaitGroup
}

// checkBindable tries the gossip and QUIC addresses before the node
// binds them, so that one in use is reported as the HTTP address is: a
// usage error naming its flag, not a failure deep in the node's start.
func checkBindable(c agentConfig) error {
	for _, b := range []struct{ flag, network, addr string }{
		{"gossip-addr", "tcp", c.GossipAddr}, {"gossip-addr", "udp", c.GossipAddr}, {"quic-addr", "udp", c.QUICAddr},
	} {
		var err error
		if b.network == "tcp" {
			var l net.Listener
			if l, err = net.Listen("tcp", b.addr); err == nil {
				err = l.Close()
			}
		} else {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", b.addr); err == nil {
				err = pc.Close()
			}
		}
		if err != nil {
			return configError(b.flag, "%v", err)
		}
	}
	return nil
}

// startAgent builds, registers and starts a node and its HTTP API.
// bridge sends raft's and memberlist's go-metrics into this node's
// registry (one node per process only).
func startAgent(ctx context.Context, c agentConfig, mat tlsMaterial, token []byte, log *slog.Logger, bridge bool) (*agent, error) {
	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		return nil, configError("http-addr", "%v", err)
	}
	a := &agent{met: httpapi.NewMetrics(version), httpAddr: ln.Addr().String(), httpTLS: c.HTTPTLS, log: log}
	if bridge {
		if err := a.met.BridgeGoMetrics(); err != nil {
			log.Warn("go-metrics bridge", "error", err)
		}
	}
	cfg := tempest.Config{
		Name:         c.Name,
		DataDir:      c.DataDir,
		Logger:       log,
		Events:       a.met.Event,
		CloseTimeout: c.DrainTimeout,
	}
	cfg.Scheduler.Workers = c.Workers
	cfg.Scheduler.Latency = a.met
	cfg.Reminders.Lateness = a.met.ObserveReminderLateness
	if c.tracer != nil {
		cfg.TracerProvider = c.tracer
		a.tracer = c.tracer
	}
	if c.clustered() {
		if err := checkBindable(c); err != nil {
			_ = ln.Close()
			return nil, err
		}
		gossipAdvertise, err := resolveAdvertise(ctx, c.Advertise, net.DefaultResolver, advertiseResolveTimeout)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		cc := &tempest.ClusterConfig{
			GossipAddr:      c.GossipAddr,
			GossipAdvertise: gossipAdvertise,
			QUICAddr:        c.QUICAddr,
			AdvertiseHost:   c.Advertise,
			HTTPAddr:        advertisedHTTP(c, a.httpAddr),
			Seeds:           c.Join,
			BootstrapExpect: c.BootstrapExpect,
			GossipKeys:      mat.keys,
			Certificate:     mat.cert,
			CAs:             mat.pool,
			Version:         version,
			// The handoff gets two thirds of the drain; the rest is for
			// writing the remaining actors' state at rest.
			LeaveTimeout: c.DrainTimeout * 2 / 3,
		}
		cc.Placement.Shards = c.Shards
		if c.Timing == "fast" {
			cc.GossipTiming = membership.FastTiming()
			cc.Placement = fastPlacement(c.Shards)
		}
		cc.Placement.Replicas = c.Replicas
		cc.Replication.SyncReplicas = c.ReplicaFsync
		cc.Replication.MinInSync = c.MinInSync
		cfg.Cluster = cc
	}
	n, err := tempest.New(cfg)
	if err != nil {
		_ = ln.Close()
		return nil, withCode(exitUsage, err)
	}
	persistence, err := demo.ParsePersistence(c.Persistence)
	if err != nil {
		_ = ln.Close()
		return nil, withCode(exitUsage, err)
	}
	if err := demo.Register(n, demo.Options{IdleTimeout: c.IdleTimeout, CounterPersistence: &persistence}); err != nil {
		_ = ln.Close()
		return nil, err
	}
	if c.register != nil {
		if err := c.register(n); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("registering the program's kinds: %w", err)
		}
	}
	// The node runs until Close: its context must outlive the signal.
	if err := n.Start(context.Background()); err != nil {
		_ = ln.Close()
		if errors.Is(err, placement.ErrOtherNodesData) {
			return nil, withCode(exitUsage, err) // --name or --data-dir is wrong
		}
		return nil, corruptExit(err, c.DataDir)
	}
	a.node = n
	a.met.Attach(n)
	acfg := httpapi.Config{Node: n, Token: token, MetricsPublic: c.MetricsPublic, Metrics: a.met, Logger: log,
		Version: version,
		Limits:  httpapi.Limits{MaxConns: c.HTTPMaxConns, MaxConnsPerClient: c.HTTPMaxPerIP}}
	api, err := httpapi.New(acfg)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	a.api = api
	// The connection limits count TCP connections, under TLS if any.
	ln = api.Listener(ln)
	if c.HTTPTLS {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{mat.cert}, MinVersion: tls.VersionTLS12})
	}
	a.srv = api.HTTPServer()
	a.srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "error", err)
		}
	}()
	return a, nil
}

// stop shuts the node down gracefully (handoff, leave) while the HTTP
// API keeps answering (readiness false, asks fail with a clear error),
// then stops the HTTP API.
func (a *agent) stop(drain time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := a.node.Shutdown(ctx)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if serr := a.srv.Shutdown(sctx); serr != nil {
		_ = a.srv.Close()
	}
	a.wg.Wait()
	if a.tracer != nil {
		// Flush the spans of the last asks.
		if terr := a.tracer.Shutdown(sctx); terr != nil {
			a.log.Warn("trace export at shutdown", "error", terr)
		}
	}
	if err != nil {
		a.log.Warn("graceful shutdown incomplete", "error", err)
		return fmt.Errorf("shutdown: %w", err)
	}
	a.log.Info("node stopped")
	return nil
}

// httpURL is the base URL of the agent's HTTP API.
func (a *agent) httpURL() string {
	if a.httpTLS {
		return "https://" + a.httpAddr
	}
	return "http://" + a.httpAddr
}

// advertiseResolveTimeout bounds how long the agent waits for a DNS name
// given to --advertise to resolve (a Kubernetes pod's own record appears
// shortly after the pod starts).
const advertiseResolveTimeout = time.Minute

// hostResolver is the part of *net.Resolver resolveAdvertise needs.
type hostResolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// resolveAdvertise returns the IP gossip advertises for --advertise:
// the value itself when it is an IP (or empty), else the first address
// (IPv4 preferred) its DNS name resolves to, retried until timeout or
// until stop ends (a signal: the agent then stops at once, not after the
// timeout). Gossip needs an IP; QUIC and HTTP keep the name, so peers
// dial the stable name and a restart with a new IP needs no manual step.
func resolveAdvertise(stop context.Context, adv string, r hostResolver, timeout time.Duration) (string, error) {
	if adv == "" || net.ParseIP(adv) != nil {
		return adv, nil
	}
	ctx, cancel := context.WithTimeout(stop, timeout)
	defer cancel()
	var lastErr error
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		addrs, err := r.LookupIPAddr(ctx, adv)
		if err == nil && len(addrs) > 0 {
			for _, a := range addrs {
				if a.IP.To4() != nil {
					return a.IP.String(), nil
				}
			}
			return addrs[0].IP.String(), nil
		}
		if err == nil {
			err = errors.New("no addresses")
		}
		lastErr = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if err := stop.Err(); err != nil {
				return "", fmt.Errorf("stopped while resolving --advertise %q: %w", adv, err)
			}
			return "", configError("advertise", "%q did not resolve within %s: %v", adv, timeout, lastErr)
		case <-t.C:
		}
	}
}

// advertisedHTTP is the HTTP address published to other nodes: the
// listen address, with an unspecified host replaced by --advertise or
// the gossip host.
func advertisedHTTP(c agentConfig, listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return listen
	}
	switch gh, _, _ := net.SplitHostPort(c.GossipAddr); {
	case c.Advertise != "":
		host = c.Advertise
	case gh != "" && !net.ParseIP(gh).IsUnspecified():
		host = gh
	default:
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// fastPlacement is the placement timing of loopback clusters (the dev
// cluster and tests): the default raft, lease and failure-detection
// numbers (failover in a few seconds, see docs/cluster.md), with a
// faster reconcile loop, voter replacement and smaller raft segments.
func fastPlacement(shards int) placement.Config {
	var p placement.Config
	p.Shards = shards
	p.CommitTimeout = 10 * time.Millisecond
	p.DeadVoterGrace = 5 * time.Second
	p.ReconcileInterval = 100 * time.Millisecond
	p.ApplyTimeout = 2 * time.Second
	p.MaxMoving = 16
	p.WALSegmentSize = 1 << 20
	return p
}

// printBanner prints what the node is and where it listens.
func printBanner(w io.Writer, c agentConfig, a *agent, mat tlsMaterial) {
	man := a.node.Manifest()
	fmt.Fprintf(w, "%s agent (version %s): node %q\n", program, version, c.Name)
	fmt.Fprintf(w, "  data dir:      %s\n", c.DataDir)
	fmt.Fprintf(w, "  http:          %s (token %s, tls %s)\n", a.httpURL(), onOff(c.HTTPTokenFile != ""), onOff(c.HTTPTLS))
	if c.clustered() {
		fmt.Fprintf(w, "  gossip:        %s (encryption %s)\n", c.GossipAddr, onOff(len(mat.keys) > 0))
		fmt.Fprintf(w, "  quic:          %s (mTLS on, CA %s)\n", c.QUICAddr, c.TLSCA)
		if c.Advertise != "" {
			fmt.Fprintf(w, "  advertise:     %s\n", c.Advertise)
		}
		fmt.Fprintf(w, "  join:          %s\n", orNone(strings.Join(c.Join, ", ")))
		fmt.Fprintf(w, "  bootstrap:     expect %d, timing %s\n", c.BootstrapExpect, c.Timing)
	} else {
		fmt.Fprintln(w, "  cluster:       none (standalone node: no TLS material)")
	}
	fmt.Fprintf(w, "  kinds:         %s\n", strings.Join(a.node.Kinds(), ", "))
	fmt.Fprintf(w, "  persistence:   counter %s\n", c.Persistence)
	fmt.Fprintf(w, "  manifest:      profile %s, digest %s\n", man.Profile, man.Digest())
	for _, cl := range manifest.Clauses {
		fmt.Fprintf(w, "    %-28s %s\n", cl.String()+":", man.Clause(cl))
	}
	if c.InsecureDev {
		fmt.Fprintln(w, "WARNING: --insecure-dev: this node runs without the protections production needs (TLS material or HTTP token). Do not expose it.")
	}
	if c.clustered() && len(mat.keys) == 0 {
		fmt.Fprintln(w, "WARNING: gossip is not encrypted: set --gossip-key-file or $"+membership.KeyEnv+" (tempest keygen).")
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
