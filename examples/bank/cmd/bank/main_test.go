package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// freePorts returns the first of three consecutive free loopback ports.
func freePorts(t *testing.T) int {
	t.Helper()
	for base := 20000 + int(time.Now().UnixNano()%20000); base < 60000; base += 7 {
		var lns []net.Listener
		for i := range 3 {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == 3 {
			return base
		}
	}
	t.Fatal("no three consecutive free ports")
	return 0
}

// TestStopsCleanlyAndKeepsBalances runs the example, deposits through its
// HTTP API, stops it as Ctrl-C does and runs it again on the same
// directory: every node's shutdown completes (run returns nil) and the
// balance is still there.
func TestStopsCleanlyAndKeepsBalances(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	dir, port := t.TempDir(), freePorts(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	once := func(body string) string {
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"-dir", dir, "-http-port", fmt.Sprint(port)}, log) }()
		var reply string
		url := fmt.Sprintf("http://127.0.0.1:%d/v1/actors/account/alice/ask", port+1)
		for reply == "" {
			select {
			case err := <-done:
				stop()
				t.Fatalf("bank stopped early: %v", err)
			default:
			}
			resp, err := http.Post(url, "application/json", strings.NewReader(body))
			if err != nil || resp.StatusCode != http.StatusOK {
				if resp != nil {
					resp.Body.Close()
				}
				time.Sleep(50 * time.Millisecond) // polling until the nodes serve
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			reply = strings.TrimSpace(string(b))
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("stop: %v", err)
		}
		return reply
	}
	if got := once(`{"Deposit":{"amount":100}}`); got != `{"cents":100}` {
		t.Fatalf("deposit: %s", got)
	}
	if got := once(`{"GetBalance":null}`); got != `{"cents":100}` {
		t.Fatalf("balance after a restart: %s", got)
	}
}
