// Command bank runs the bank example as a cluster of three nodes in one
// process on loopback, each serving the HTTP API (the JSON gateway of the
// account kind, the admin endpoints, /metrics and the probes) on its own
// port, so that curl and the tempest client commands reach it:
//
//	go run ./examples/bank/cmd/bank -dir /tmp/bank
//	curl -s -X POST localhost:8081/v1/actors/account/alice/ask -d '{"Deposit":{"amount":100}}'
//	tempest ask --addr localhost:8082 account alice '{"GetBalance":null}'
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

func run(ctx context.Context, args []string, log *slog.Logger) error {
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

	var nodes []*tempest.Node
	defer func() {
		for _, n := range nodes {
			if err := n.Close(context.WithoutCancel(ctx)); err != nil {
				log.Warn("close", "node", n.Name(), "error", err)
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
		if err := n.Start(ctx); err != nil {
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
		srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http", "node", name, "error", err)
			}
		}()
		defer srv.Close()
	}
	for _, n := range nodes {
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("bank: 3 nodes ready; HTTP on 127.0.0.1:%d-%d\n", *port, *port+2)
	<-ctx.Done()
	return nil
}
