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
//
// A deposit is not idempotent, so the test retries it only as a careful
// client would: after a failure, whose outcome may be unknown (a deadline,
// a dropped connection), it reads the balance and deposits again only if
// the first deposit did not happen.
func TestStopsCleanlyAndKeepsBalances(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	dir, port := t.TempDir(), freePorts(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/actors/account/alice/ask", port+1)
	// post returns the reply to one ask, or "" with the status when it
	// failed (0: no HTTP answer).
	post := func(body string) (string, int) {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return "", 0
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Logf("ask %s: %d %s", body, resp.StatusCode, b)
			return "", resp.StatusCode
		}
		return strings.TrimSpace(string(b)), http.StatusOK
	}
	once := func(ask func() string) string {
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"-dir", dir, "-http-port", fmt.Sprint(port)}, log) }()
		var reply string
		for reply == "" {
			select {
			case err := <-done:
				stop()
				t.Fatalf("bank stopped early: %v", err)
			default:
			}
			if reply = ask(); reply == "" {
				time.Sleep(50 * time.Millisecond) // polling until the nodes serve
			}
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("stop: %v", err)
		}
		return reply
	}
	const balance = `{"GetBalance":null}`
	unknown := false // a deposit failed: it may have happened
	deposited := once(func() string {
		if unknown {
			got, code := post(balance)
			if code != http.StatusOK || got != `{"cents":0}` {
				return got // "" to read again, or the balance it left
			}
			unknown = false // it did not happen
		}
		if reply, code := post(`{"Deposit":{"amount":100}}`); code == http.StatusOK {
			return reply
		}
		unknown = true
		return ""
	})
	if deposited != `{"cents":100}` {
		t.Fatalf("deposit: %s", deposited)
	}
	if got := once(func() string { reply, _ := post(balance); return reply }); got != `{"cents":100}` {
		t.Fatalf("balance after a restart: %s", got)
	}
}
