package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/placement"
)

// startLocalNode runs a standalone node with the demo kinds behind an
// httptest server of its HTTP API.
func startLocalNode(t *testing.T, token string) *httptest.Server {
	t.Helper()
	n, err := tempest.New(tempest.Config{Name: "local", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	met := httpapi.NewMetrics("test")
	met.Attach(n)
	api, err := httpapi.New(httpapi.Config{Node: n, Metrics: met, Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return srv
}

// leakCheck verifies, after every other cleanup of t, that t left no
// goroutine behind (idle client connections are closed first).
func leakCheck(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		goleak.VerifyNone(t, ignore)
	})
}

// cli runs the tempest command line in this process.
func cli(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	// Synchronized: background goroutines of a node may still log while
	// it shuts down.
	var out, errOut syncBuilder
	err := run(t.Context(), args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestClientCommandsAgainstANode(t *testing.T) {
	leakCheck(t)
	srv := startLocalNode(t, "")
	addr := []string{"--addr", srv.URL}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, err := cli(t, append(args, addr...)...)
		if err != nil {
			t.Fatalf("%v: %v (stderr %q)", args, err, errOut)
		}
		return out
	}
	if got := ok("ask", "counter/alice", `{"Add":{"n":5}}`); got != "{\"n\":5}\n" {
		t.Fatalf("ask printed %q", got)
	}
	if got := ok("tell", "counter/alice", `{"Add":{"n":2}}`); got != "" {
		t.Fatalf("tell printed %q", got)
	}
	if got := ok("ask", "counter/alice", `{"Get":null}`, "--timeout", "2s"); got != "{\"n\":7}\n" {
		t.Fatalf("ask after tell printed %q", got)
	}
	if got := ok("ask", "echo/x", `{ "text" : "hi" }`); got != "{\"text\":\"hi\"}\n" {
		t.Fatalf("echo printed %q", got)
	}
	// Keys may hold any character, slashes and spaces included.
	if got := ok("ask", "counter/a/b c?d", `{"Add":{"n":1}}`); got != "{\"n\":1}\n" {
		t.Fatalf("ask to a key with a slash printed %q", got)
	}
	var odd httpapi.StatusBody
	if err := json.Unmarshal([]byte(ok("status", "counter/a/b c?d", "--json")), &odd); err != nil || odd.Key != "a/b c?d" || !odd.Active {
		t.Fatalf("status of a key with a slash: %+v %v", odd, err)
	}
	// "." and ".." are keys like any other, not path steps, and "/" one
	// like "a/b": each reaches its own actor.
	for i, key := range []string{".", "..", "a/..", "../x", "/"} {
		if got := ok("ask", "counter/"+key, fmt.Sprintf(`{"Add":{"n":%d}}`, 100+i)); got != fmt.Sprintf("{\"n\":%d}\n", 100+i) {
			t.Fatalf("ask to the key %q printed %q", key, got)
		}
		var st httpapi.StatusBody
		if err := json.Unmarshal([]byte(ok("status", "counter/"+key, "--json")), &st); err != nil || st.Key != key || st.Kind != "counter" {
			t.Fatalf("status of the key %q: %+v %v", key, st, err)
		}
	}
	// A key holding a terminal control sequence and a carriage return is
	// printed quoted: it can neither drive the terminal nor overwrite the
	// line.
	evil := "e\x1b[2J\rv"
	ok("ask", "counter/"+evil, `{"Add":{"n":1}}`)
	if got := ok("status", "counter/"+evil); strings.ContainsAny(got, "\x1b\r") || !strings.Contains(got, `counter/"e\x1b[2J\rv"`) {
		t.Fatalf("status of a key with control characters printed %q", got)
	}
	var st httpapi.StatusBody
	if err := json.Unmarshal([]byte(ok("status", "counter/alice", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.State != "Valid" || st.Node != "local" || !st.Active || st.Kind != "counter" || st.Key != "alice" {
		t.Fatalf("status %+v", st)
	}
	if got := ok("passivate", "counter/alice"); got != "" {
		t.Fatalf("passivate printed %q", got)
	}
	if got := ok("status", "counter/alice"); !strings.Contains(got, "Dormant") {
		t.Fatalf("status after passivate: %q", got)
	}
	if got := ok("ask", "counter/alice", `{"Get":null}`); got != "{\"n\":7}\n" {
		t.Fatalf("ask after passivation printed %q (hydration lost the value)", got)
	}
	if got := ok("members"); !strings.Contains(got, "local") || !strings.Contains(got, "alive") {
		t.Fatalf("members: %q", got)
	}
	if got := ok("members", "--json"); !json.Valid([]byte(got)) {
		t.Fatalf("members --json: %q", got)
	}
	if got := ok("placement"); !strings.Contains(got, "standalone") {
		t.Fatalf("placement: %q", got)
	}
	if got := ok("manifest"); !strings.Contains(got, "profile:") || !strings.Contains(got, "Fairness") {
		t.Fatalf("manifest: %q", got)
	}
	if got := ok("manifest", "--json"); !strings.Contains(got, `"profile"`) {
		t.Fatalf("manifest --json: %q", got)
	}
	ok("health")

	// Errors: one line on stderr (printed by main), distinct exit codes.
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"ask", "counter/a", `{"Add":{"n":"five"}}`}, exitBadJSON},
		{[]string{"ask", "counter/a", `{not json`}, exitBadJSON},
		{[]string{"ask", "nokind/a", `{}`}, exitUnknownKind},
		{[]string{"tell", "nokind/a", `{}`}, exitUnknownKind},
		{[]string{"status", "nokind/a"}, exitUnknownKind},
		{[]string{"ask", "counter", `{}`}, exitUsage},
		{[]string{"ask", "counter/a", `{}`, "--timeout", "-1s"}, exitUsage},
		{[]string{"ask", "counter/a"}, exitUsage},
		{[]string{"manifest", "--node", "nobody"}, exitUnknownKind},
		{[]string{"health", "--timeout", "0"}, exitUsage},
		{[]string{"health", "--timeout", "-1s"}, exitUsage},
		{[]string{"ask", "counter/\xff\xfe", `{}`}, exitUsage},
		{[]string{"tell", "counter/" + strings.Repeat("k", actor.MaxKeyLen+1), `{}`}, exitUsage},
		{[]string{"status", "count\xffer/a"}, exitUsage},
		{[]string{"passivate", "counter/\xff"}, exitUsage},
		{[]string{"ask", "counter/big", `{"Add":{"n":9223372036854775807}}`}, exitOK},
		{[]string{"ask", "counter/big", `{"Add":{"n":1}}`}, exitAppError},
	} {
		if tc.code == exitOK { // setting up the next case
			if _, errOut, err := cli(t, append(tc.args, addr...)...); err != nil {
				t.Fatalf("%v: %v (%s)", tc.args, err, errOut)
			}
			continue
		}
		_, _, err := cli(t, append(tc.args, addr...)...)
		if err == nil || exitCode(err) != tc.code {
			t.Errorf("%v: err %v, code %d, want %d", tc.args, err, exitCode(err), tc.code)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error is not one line: %q", tc.args, err)
		}
		if tc.code == exitAppError && !strings.HasPrefix(err.Error(), "overflow: ") {
			t.Errorf("%v: the application error %q does not start with its code", tc.args, err)
		}
	}
}

func TestClientUnreachableAndEnv(t *testing.T) {
	leakCheck(t)
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{
		{"ask", "echo/a", `{"text":"x"}`, "--addr", dead},
		{"members", "--addr", "http://" + dead},
		{"health", "--addr", dead},
	} {
		_, _, err := cli(t, args...)
		if exitCode(err) != exitUnreachable {
			t.Errorf("%v: err %v code %d, want %d", args, err, exitCode(err), exitUnreachable)
		}
	}

	// TEMPEST_ADDR and TEMPEST_TOKEN are read when no flag is given.
	token := "a-token-of-enough-length"
	srv := startLocalNode(t, token)
	t.Setenv("TEMPEST_ADDR", srv.URL)
	if _, _, err := cli(t, "members"); exitCode(err) != exitUnauthorized {
		t.Fatalf("without a token: %v (code %d)", err, exitCode(err))
	}
	t.Setenv("TEMPEST_TOKEN", token)
	if out, _, err := cli(t, "ask", "echo/a", `{"text":"env"}`); err != nil || out != "{\"text\":\"env\"}\n" {
		t.Fatalf("with env: %q %v", out, err)
	}
	t.Setenv("TEMPEST_TOKEN", "")
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cli(t, "health", "--token-file", tf); err != nil {
		t.Fatalf("health with --token-file: %v", err)
	}
	// A flag beats the environment.
	if _, _, err := cli(t, "members", "--token-file", tf, "--addr", dead); exitCode(err) != exitUnreachable {
		t.Fatalf("--addr did not override $TEMPEST_ADDR: %v", err)
	}
	// A client's token obeys the agent's rule: 16 characters at least.
	t.Setenv("TEMPEST_TOKEN", "short")
	if _, _, err := cli(t, "members"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("a 5-character token: %v (exit %d), want a usage error", err, exitCode(err))
	}
	t.Setenv("TEMPEST_TOKEN", token)
	// The node's API is at the root of --addr: a path is refused, not
	// put before every endpoint's.
	// Nor is an address without a port (it was dialled on port 80, and
	// failed as an unreachable node, exit 3).
	for _, addr := range []string{srv.URL + "/v1", srv.URL + "/?x=1", srv.URL + "#f", "garbage", "localhost", "http://localhost"} {
		if _, _, err := cli(t, "members", "--addr", addr); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "no path") {
			t.Errorf("--addr %s: %v (exit %d), want a usage error", addr, err, exitCode(err))
		}
	}
	if _, _, err := cli(t, "members", "--addr", srv.URL+"/"); err != nil {
		t.Errorf("--addr with a final slash: %v", err)
	}
}

// An answer that is not the API's (here: a plain HTTP request to a
// server that speaks HTTPS answers 400) says nothing of the request's
// JSON: it is a failure (exit 1) quoting what the server said, not exit
// 7 (bad JSON) or 6 (unknown kind).
func TestClientAnswerNotFromTheAPI(t *testing.T) {
	tls := httptest.NewTLSServer(http.NotFoundHandler())
	defer tls.Close()
	plain := "http://" + strings.TrimPrefix(tls.URL, "https://")
	_, _, err := cli(t, "ask", "echo/x", `{"text":"x"}`, "--addr", plain)
	if exitCode(err) != exitFailure || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "HTTPS") {
		t.Errorf("plain HTTP to an HTTPS server: %v (exit %d), want exit 1 quoting the answer", err, exitCode(err))
	}
	proxy := httptest.NewServer(http.NotFoundHandler())
	defer proxy.Close()
	_, _, err = cli(t, "ask", "echo/x", `{"text":"x"}`, "--addr", proxy.URL)
	if exitCode(err) != exitFailure || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404 not from the API: %v (exit %d), want exit 1", err, exitCode(err))
	}
}

func TestBenchAgainstANode(t *testing.T) {
	leakCheck(t)
	srv := startLocalNode(t, "")
	out, errOut, err := cli(t, "bench", "--addr", srv.URL, "--duration", "300ms", "--concurrency", "4", "--keys", "50", "counter")
	if err != nil {
		t.Fatalf("bench: %v (stderr %q)", err, errOut)
	}
	for _, want := range []string{"asks/s", "p50", "p99.9"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q: %q", want, out)
		}
	}
	if _, _, err := cli(t, "bench", "--addr", srv.URL, "--duration", "0s", "counter"); exitCode(err) != exitUsage {
		t.Errorf("bench --duration 0s: %v", err)
	}
	if _, _, err := cli(t, "bench", "--addr", srv.URL, "custom"); exitCode(err) != exitUsage {
		t.Errorf("bench of a kind without --body: %v", err)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 500, 0.99: 990, 0.999: 999, 1: 1000} {
		if got := percentile(d, q); got != want {
			t.Errorf("p%v = %v, want %v", q, got, want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}

// TestReplicationLagIsShown: tempest placement lists each follower of the
// answering node's shards with what it has not acknowledged.
func TestReplicationLagIsShown(t *testing.T) {
	var out bytes.Buffer
	rs := []httpapi.PlacementReplica{
		{Follower: "n2", Shards: 12, QueuedRecords: 3, InFlightRecords: 40, LagSeconds: 0.0123, LastAckSeconds: 0.002, AckedRecords: 900},
		{Follower: "n3", Shards: 0, CatchingUp: true, LastAckSeconds: -1},
	}
	if err := printReplication(&out, "n1", rs); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"replication from n1", "FOLLOWER", "LAG", "n2", "in sync", "12ms", "2ms ago", "900",
		"n3", "catching up", "never"} {
		if !strings.Contains(got, want) {
			t.Fatalf("placement output lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	if err := printReplication(&out, "n1", nil); err != nil || out.Len() != 0 {
		t.Fatalf("no followers: %q, %v", out.String(), err)
	}
}

// TestStoreFailingIsShown: tempest placement marks a node whose state
// store cannot write, and says why, quoting what the node reported.
func TestStoreFailingIsShown(t *testing.T) {
	var out bytes.Buffer
	nodes := []httpapi.PlacementNode{
		{Name: "n1", Status: "up", Shards: 40, Follows: 80},
		{Name: "n2", Status: "up", StoreFailing: "state store writes failing since 2026-12-06T21:00:00Z: no space left on device\x1b[2J"},
	}
	if err := printNodes(&out, nodes); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"n1  ", "up  ", "40", "n2", "up, store failing", "n2: state store failing, given no shards or new replica places: ", "no space left on device"} {
		if !strings.Contains(got, want) {
			t.Fatalf("placement output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b") || strings.Count(got, "store failing") != 2 {
		t.Fatalf("placement output:\n%q", got)
	}
}

// TestPolicyDisagreementIsShown: tempest placement lists each kind's
// agreed policy and the nodes that differ; tempest status warns about
// them.
func TestPolicyDisagreementIsShown(t *testing.T) {
	var out bytes.Buffer
	views := []placement.PolicyView{
		{Kind: "echo", Digest: "0123456789abcdef", Agree: []string{"n1", "n2", "n3"}},
		{Kind: "ledger", Digest: "aaaaaaaaaaaaaaaa", Agree: []string{"n1", "n2"}, Differ: map[string]string{"n3": "bbbbbbbbbbbbbbbb"}},
	}
	if err := printPolicies(&out, views); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"KIND", "echo", "0123456789ab", "n1,n2,n3", "ledger", "n3=bbbbbbbbbbbb (no shards until they agree)"} {
		if !strings.Contains(got, want) {
			t.Fatalf("placement output lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	b, _ := json.Marshal(httpapi.StatusBody{Kind: "ledger", Key: "a", State: "Valid", Node: "n1", PolicyDissenters: 1})
	if err := printStatus(&out, b, false); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "warning: 1 node(s) publish another policy for ledger") {
		t.Fatalf("status output:\n%s", got)
	}
}

// TestTokenWithAControlCharacterIsRefused: a token file holding two lines
// (or any byte an Authorization header cannot carry) is refused naming
// the flag, by the agent at start and by a client, instead of an agent
// that refuses every request and a client that cannot send one.
func TestTokenWithAControlCharacterIsRefused(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "two-lines.token")
	if err := os.WriteFile(tok, []byte("abcdefghijklmnop\nqrstuvwxyz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"agent", "--insecure-dev", "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0", "--http-token-file", tok},
		{"members", "--addr", "http://127.0.0.1:1", "--token-file", tok},
	} {
		_, err := runCLI(t, args...)
		if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "token-file") || !strings.Contains(err.Error(), "printable ASCII") {
			t.Errorf("%v: %v (exit %d), want a usage error naming the flag", args[0], err, exitCode(err))
		}
	}
	if got, err := parseToken([]byte("  abcdefghijklmnop\n")); err != nil || got != "abcdefghijklmnop" {
		t.Fatalf("a token with a final newline: %q, %v", got, err)
	}
	for _, bad := range []string{"abcdefghijklmnop\xff", "abcdefghijklmnopé", strings.Repeat("a", maxToken+1), "short", strings.Repeat("a", httpapi.MinTokenBytes-1)} {
		if _, err := parseToken([]byte(bad)); err == nil {
			t.Errorf("token %.40q...: accepted", bad)
		}
	}
	if _, err := parseToken([]byte(strings.Repeat("a", maxToken))); err != nil {
		t.Errorf("a token of %d bytes: %v", maxToken, err)
	}
	// A file far longer than a token is refused before it is read whole.
	big := filepath.Join(dir, "big.token")
	if err := os.WriteFile(big, []byte(strings.Repeat("a", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "members", "--addr", "http://127.0.0.1:1", "--token-file", big); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "not a token, key or certificate file") {
		t.Errorf("a 1 MiB token file: %v (exit %d), want a usage error", err, exitCode(err))
	}
}

// A --data-dir the agent cannot use (a file, under a file) is a usage
// error naming the flag, not exit 1 from deep in the start.
func TestAgentDataDirNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		_, err := runCLI(t, "agent", "--insecure-dev", "--data-dir", dir, "--http-addr", "127.0.0.1:0")
		if exitCode(err) != exitUsage || !strings.HasPrefix(err.Error(), "--data-dir:") {
			t.Errorf("--data-dir %s: %v (exit %d), want a usage error naming the flag", dir, err, exitCode(err))
		}
	}
}
