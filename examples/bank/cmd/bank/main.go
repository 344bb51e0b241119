// Command bank runs the bank example as a cluster of three nodes in one
// process on loopback, each serving the HTTP API (the JSON gateway of the
// account kind, the admin endpoints, /metrics and the probes) on its own
// port, so that curl and the tempest client commands reach it:
//
//	go run ./examples/bank/cmd/bank -dir /tmp/bank
//	curl -s -X POST localhost:8081/v1/actors/account/alice/ask -d '{"Deposit":{"amount":100}}'
//	tempest ask --addr localhost:8082 account/alice '{"GetBalance":null}'
//
// The nodes talk QUIC with mutual TLS under a CA generated at start-up
// and gossip with a generated key; their state is kept under -dir, so
// balances survive a restart. In production each node is its own
// process with certificates from `tempest certs` (see docs/deploy.md).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/examples/bank"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/wire"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], log); err != nil {
		fmt.Fprintln(os.Stderr, "bank:", err)
		os.Exit(1)
	}
}

// run runs the cluster until ctx ends, then stops it; it returns an
// error also when a node's graceful shutdown did not complete.
func run(ctx context.Context, args []string, log *slog.Logger) (err error) {
	fs := flag.NewFlagSet("bank", flag.ContinueOnError)
	dir := fs.String("dir", "bank-data", "directory of the nodes' state")
	port := fs.Int("http-port", 8081, "HTTP port of the first node; the others use the next ones")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ca, err := wire.NewCA("bank example CA", time.Now().Add(-time.Minute), 24*time.Hour)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	key, err := membership.NewKey()
	if err != nil {
		return err
	}

	// Stopped as `tempest dev` stops its nodes: one by one, last first,
	// each with Shutdown under a deadline, so that each graceful leave
	// hands its shards to the nodes still running and the last one,
	// with no one to hand off to, writes its state at rest at once.
	var nodes []*tempest.Node
	var servers []*http.Server
	defer func() {
		for i := len(nodes) - 1; i >= 0; i-- {
			n, drain := nodes[i], 15*time.Second
			if i == 0 {
				drain = 2 * time.Second
			}
			sctx, cancel := context.WithTimeout(context.Background(), drain)
			if serr := n.Shutdown(sctx); serr != nil {
				err = errors.Join(err, fmt.Errorf("shutdown %s: %w", n.Name(), serr))
			}
			cancel()
			if i < len(servers) {
				hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := servers[i].Shutdown(hctx); err != nil {
					_ = servers[i].Close()
				}
				hcancel()
			}
		}
	}()
	seed := ""
	for i := range 3 {
		name := fmt.Sprintf("bank%d", i+1)
		certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: 24 * time.Hour})
		if err != nil {
			return err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return err
		}
		cc := &tempest.ClusterConfig{
			GossipAddr: "127.0.0.1:0", QUICAddr: "127.0.0.1:0",
			BootstrapExpect: 3, GossipKeys: [][]byte{key},
			Certificate: cert, CAs: pool,
		}
		if seed != "" {
			cc.Seeds = []string{seed}
		}
		met := httpapi.NewMetrics("example")
		cfg := tempest.Config{Name: name, DataDir: filepath.Join(*dir, name), Cluster: cc,
			Logger: log, Events: met.Event}
		cfg.Scheduler.Latency = met
		n, err := tempest.New(cfg)
		if err != nil {
			return err
		}
		if err := bank.Register(n); err != nil {
			return err
		}
		// Start's context bounds the start only; the node runs until
		// Shutdown.
		if err := n.Start(context.Background()); err != nil {
			return err
		}
		nodes = append(nodes, n)
		met.Attach(n)
		if seed == "" {
			for _, m := range n.Members() {
				if m.Name == name {
					seed = m.Addr.String()
				}
			}
		}
		api, err := httpapi.New(httpapi.Config{Node: n, Metrics: met, Logger: log})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port+i))
		if err != nil {
			return err
		}
		// The server and listener of the API bound connections, header
		// sizes and timeouts (httpapi.Limits; docs/operations.md, "Limits").
		srv := api.HTTPServer()
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(api.Listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http", "node", name, "error", err)
			}
		}()
	}
	for _, n := range nodes {
		if err := n.WaitReady(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: not a failure
			}
			return err
		}
	}
	fmt.Printf("bank: 3 nodes ready; HTTP on 127.0.0.1:%d-%d\n", *port, *port+2)
	<-ctx.Done()
	return nil
}
