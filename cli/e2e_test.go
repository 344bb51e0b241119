package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/membership"
)

// The end-to-end test builds the tempest binary, runs three `tempest
// agent` processes on loopback with real certificates and a gossip key,
// and drives them only through the command line.

// e2eCluster holds the binary, the shared material and the processes.
type e2eCluster struct {
	t     *testing.T
	bin   string
	dir   string
	mu    sync.Mutex
	nodes map[string]*e2eNode
	seed  string // gossip address of n1
	// timing is the agents' --timing (default fast).
	timing string
}

type e2eNode struct {
	name               string
	gossip, quic, http int
	cmd                *exec.Cmd
	done               chan struct{} // closed when the process exited
	err                error         // its Wait result, after done
	log                *bytes.Buffer // stdout and stderr
	logMu              *sync.Mutex
}

func (n *e2eNode) addr() string { return fmt.Sprintf("http://127.0.0.1:%d", n.http) }

// lockedWriter serializes writes of a process's stdout and stderr.
type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Ports handed out by freePort in this process: agents bind them some
// time after they were picked, and a port picked for one must never be
// picked again for another.
var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// freePort returns a port free for TCP and UDP on 127.0.0.1, never one it
// returned before in this process, and below the kernel's range of
// ephemeral ports, so that no outgoing connection (a client's, a peer's)
// takes it between the pick and the bind, or while an agent that owns it
// is down for a restart.
func freePort(t *testing.T) int {
	t.Helper()
	lo, hi := 20000, 32000
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var elo, ehi int
		if _, err := fmt.Sscan(string(b), &elo, &ehi); err == nil && elo > 11000 {
			hi = min(hi, elo-1)
			lo = min(lo, hi-1000)
		}
	}
	for range 500 {
		port := lo + rand.IntN(hi-lo)
		portsMu.Lock()
		taken := portsUsed[port]
		portsMu.Unlock()
		if taken {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		portsMu.Lock()
		taken = portsUsed[port]
		portsUsed[port] = true
		portsMu.Unlock()
		if !taken {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// tempest runs the binary with args and returns stdout, the exit code
// and stderr.
func (c *e2eCluster) tempest(args ...string) (string, int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(os.Environ(), "TEMPEST_ADDR=", "TEMPEST_TOKEN=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		c.t.Fatalf("tempest %v: %v", args, err)
	}
	return out.String(), code, errOut.String()
}

// must runs the binary and fails the test unless it exits 0.
func (c *e2eCluster) must(args ...string) string {
	c.t.Helper()
	out, code, errOut := c.tempest(args...)
	if code != 0 {
		c.t.Fatalf("tempest %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// start runs `tempest agent` for name (on its old ports and data if it
// ran before).
func (c *e2eCluster) start(name string, prev *e2eNode) *e2eNode {
	t := c.t
	t.Helper()
	n := prev
	if n == nil {
		n = &e2eNode{name: name, gossip: freePort(t), quic: freePort(t), http: freePort(t)}
		c.must("certs", "node", "--ca", filepath.Join(c.dir, "ca"), "--name", name, "--out", filepath.Join(c.dir, name))
	}
	n.done, n.err = make(chan struct{}), nil
	if n.log == nil {
		n.log, n.logMu = &bytes.Buffer{}, &sync.Mutex{}
	} else {
		// The earlier process exited: its output stays, for a failure's
		// report, ahead of the new one's.
		n.logMu.Lock()
		fmt.Fprintf(n.log, "\n---- %s restarted\n", name)
		n.logMu.Unlock()
	}
	nd := filepath.Join(c.dir, name)
	args := []string{"agent", "--name", name, "--data-dir", filepath.Join(nd, "data"),
		"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", n.gossip),
		"--quic-addr", fmt.Sprintf("127.0.0.1:%d", n.quic),
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", n.http),
		"--bootstrap-expect", "3",
		"--gossip-key-file", filepath.Join(c.dir, "gossip.key"),
		"--tls-ca", filepath.Join(c.dir, "ca", "ca.pem"),
		"--tls-cert", filepath.Join(nd, "node.pem"),
		"--tls-key", filepath.Join(nd, "node-key.pem"),
		"--timing", cmp.Or(c.timing, "fast"), "--shards", "64", "--workers", "2", "--drain-timeout", "30s"}
	if c.seed != "" {
		args = append(args, "--join", c.seed)
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(os.Environ(), "TEMPEST_GOSSIP_KEY=")
	w := lockedWriter{mu: n.logMu, b: n.log}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd = cmd
	go func() {
		n.err = cmd.Wait()
		close(n.done)
	}()
	c.mu.Lock()
	c.nodes[name] = n
	if c.seed == "" {
		c.seed = fmt.Sprintf("127.0.0.1:%d", n.gossip)
	}
	c.mu.Unlock()
	return n
}

func (c *e2eCluster) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for name, n := range c.nodes {
		n.logMu.Lock()
		fmt.Fprintf(&b, "==== %s\n%s\n", name, n.log.String())
		n.logMu.Unlock()
	}
	return b.String()
}

// waitFor polls cond every 100 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronization
	}
}

// members returns name → member as node n sees them.
func (c *e2eCluster) members(n *e2eNode) map[string]httpapi.MemberBody {
	out, code, _ := c.tempest("members", "--json", "--addr", n.addr())
	if code != 0 {
		return nil
	}
	var mb httpapi.MembersBody
	if json.Unmarshal([]byte(out), &mb) != nil {
		return nil
	}
	m := map[string]httpapi.MemberBody{}
	for _, x := range mb.Members {
		m[x.Name] = x
	}
	return m
}

// unsettled says why the listed nodes are not settled ("" when they
// are): settled, every listed node is healthy and sees exactly the listed
// nodes alive, all of them in raft (leader or voter).
func (c *e2eCluster) unsettled(nodes ...*e2eNode) string {
	for _, n := range nodes {
		if why := exited(n); why != "" {
			return why
		}
		if out, code, _ := c.tempest("health", "--addr", n.addr()); code != 0 {
			return fmt.Sprintf("%s: health exit %d: %s", n.name, code, strings.TrimSpace(out))
		}
		ms := c.members(n)
		alive := 0
		for _, o := range nodes {
			m, ok := ms[o.name]
			if !ok || m.Status != "alive" || (m.Raft != "leader" && m.Raft != "voter") {
				return fmt.Sprintf("%s sees %s as %+v (listed %t)", n.name, o.name, m, ok)
			}
			alive++
		}
		for _, m := range ms {
			if m.Status == "alive" {
				alive--
			}
		}
		if alive != 0 {
			return fmt.Sprintf("%s sees other members alive: %+v", n.name, ms)
		}
	}
	return ""
}

// unreplicated says why the listed nodes' shards are not fully
// replicated ("" when every node's table shows every assigned shard with
// a full in-sync set): until then one more fault can take the only copy
// of an acknowledged update, which the cluster promises to survive only
// one fault at a time.
func (c *e2eCluster) unreplicated(nodes ...*e2eNode) string {
	for _, n := range nodes {
		out, code, errOut := c.tempest("placement", "--json", "--addr", n.addr())
		if code != 0 {
			return fmt.Sprintf("%s: placement exit %d: %s", n.name, code, strings.TrimSpace(errOut))
		}
		var pb httpapi.PlacementBody
		if err := json.Unmarshal([]byte(out), &pb); err != nil {
			return fmt.Sprintf("%s: placement: %v", n.name, err)
		}
		if pb.UnderReplicated != 0 || pb.Unassigned != 0 {
			return fmt.Sprintf("%s: %d shards under-replicated, %d unassigned", n.name, pb.UnderReplicated, pb.Unassigned)
		}
	}
	return ""
}

// waitHealed waits until the listed nodes are settled and their shards
// fully replicated again: the state a fault-tolerance test must reach
// before its next fault.
func (c *e2eCluster) waitHealed(t *testing.T, d time.Duration, what string, nodes ...*e2eNode) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for {
		why := c.unsettled(nodes...)
		if why == "" {
			why = c.unreplicated(nodes...)
		}
		if why == "" {
			t.Logf("%s: healed after %v", what, time.Since(start).Round(10*time.Millisecond))
			return
		}
		if time.Now().After(deadline) || strings.Contains(why, " exited: ") {
			t.Fatalf("gave up after %v waiting for %s: %s", time.Since(deadline.Add(-d)).Round(time.Millisecond), what, why)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronization
	}
}

// exited says how n's process ended ("" while it runs).
func exited(n *e2eNode) string {
	select {
	case <-n.done:
		return fmt.Sprintf("%s exited: %v", n.name, n.err)
	default:
		return ""
	}
}

// waitSettled waits until the listed nodes are settled, failing the
// test with the last reason they were not.
func (c *e2eCluster) waitSettled(t *testing.T, d time.Duration, what string, nodes ...*e2eNode) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := c.unsettled(nodes...)
		if why == "" {
			return
		}
		if time.Now().After(deadline) || strings.Contains(why, " exited: ") {
			t.Fatalf("gave up after %v waiting for %s: %s", time.Since(deadline.Add(-d)).Round(time.Millisecond), what, why)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronization
	}
}

// newE2ECluster builds the binary and the cluster's certificates and
// gossip key; processes started with start are killed when the test
// ends, and their logs printed if it failed.
func newE2ECluster(t *testing.T, timing string) *e2eCluster {
	t.Helper()
	dir := t.TempDir()
	bin := testBinary(t)
	c := &e2eCluster{t: t, bin: bin, dir: dir, nodes: map[string]*e2eNode{}, timing: timing}
	t.Cleanup(func() {
		c.mu.Lock()
		for _, n := range c.nodes {
			_ = n.cmd.Process.Signal(syscall.SIGCONT) // a paused one too
			_ = n.cmd.Process.Kill()
			<-n.done
		}
		c.mu.Unlock()
		if t.Failed() {
			t.Log(c.logs())
		}
	})
	c.must("certs", "ca", "--out", filepath.Join(dir, "ca"))
	c.must("keygen", "--out", filepath.Join(dir, "gossip.key"))
	return c
}

// testBinaryEnv names a tempest binary built already (by the test that
// started this one); testBinary builds one otherwise.
const testBinaryEnv = "TEMPEST_TEST_BINARY"

func testBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(testBinaryEnv); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "tempest")
	build := exec.Command("go", "build", "-o", bin, "../cmd/node")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestEndToEndThreeAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: builds the binary and runs three processes")
	}
	c := newE2ECluster(t, "fast")
	n1 := c.start("n1", nil)
	n2 := c.start("n2", nil)
	n3 := c.start("n3", nil)
	t0 := time.Now()
	c.waitSettled(t, 60*time.Second, "three ready agents", n1, n2, n3)
	t.Logf("cluster ready after %v", time.Since(t0))

	// The banner names the node, its addresses and the security settings.
	banner := ""
	waitFor(t, 10*time.Second, "n1's banner", func() bool {
		n1.logMu.Lock()
		defer n1.logMu.Unlock()
		banner = n1.log.String()
		return strings.Contains(banner, "Admission")
	})
	for _, want := range []string{`node "n1"`, "encryption on", "mTLS on", "profile"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}

	// The dashboard, in a real browser: three members, then (below) a
	// lookup and the change when a node leaves.
	ui := openDashboard(t, n1.addr()+"/ui/")
	if ui != nil {
		ui.waitJS("three alive members", rows("alive")+` === 3`)
	}

	// Asks to many keys, through every node; the keys spread over all
	// three nodes.
	nodes := []*e2eNode{n1, n2, n3}
	const keys = 30
	want := map[string]int64{}
	owners := map[string]int{}
	for k := range keys {
		key := fmt.Sprintf("counter/k%d", k)
		via := nodes[k%3]
		out := c.must("ask", key, fmt.Sprintf(`{"Add":{"n":%d}}`, k), "--addr", via.addr())
		if got := strings.TrimSpace(out); got != fmt.Sprintf(`{"n":%d}`, k) {
			t.Fatalf("ask %s: %q", key, got)
		}
		want[key] = int64(k)
		var st httpapi.StatusBody
		if err := json.Unmarshal([]byte(c.must("status", key, "--json", "--addr", nodes[(k+1)%3].addr())), &st); err != nil {
			t.Fatal(err)
		}
		if st.State != "Valid" || !st.Active {
			t.Fatalf("status of %s after an ask: %+v", key, st)
		}
		owners[st.Node]++
	}
	if len(owners) != 3 {
		t.Fatalf("keys spread over %v, want all three nodes", owners)
	}

	// A key with a slash, asked and looked up through every node (status
	// is forwarded to the owner).
	c.must("ask", "counter/x/y z", `{"Add":{"n":1}}`, "--addr", n1.addr())
	for _, via := range nodes {
		var st httpapi.StatusBody
		if err := json.Unmarshal([]byte(c.must("status", "counter/x/y z", "--json", "--addr", via.addr())), &st); err != nil || st.Key != "x/y z" || st.State != "Valid" {
			t.Fatalf("status of counter/x/y z through %s: %+v %v", via.name, st, err)
		}
	}

	// A tell (prints nothing), seen by a later ask.
	if out := c.must("tell", "counter/k1", `{"Add":{"n":100}}`, "--addr", n2.addr()); out != "" {
		t.Fatalf("tell printed %q", out)
	}
	want["counter/k1"] += 100
	waitFor(t, 10*time.Second, "the tell's effect", func() bool {
		out, code, _ := c.tempest("ask", "counter/k1", `{"Get":null}`, "--addr", n2.addr())
		return code == 0 && strings.TrimSpace(out) == `{"n":101}`
	})

	// Passivate, then an ask hydrates the counter with its value.
	c.must("passivate", "counter/k1", "--addr", n3.addr())
	var st httpapi.StatusBody
	if err := json.Unmarshal([]byte(c.must("status", "counter/k1", "--json", "--addr", n1.addr())), &st); err != nil {
		t.Fatal(err)
	}
	if st.State != "Dormant" || st.Active {
		t.Fatalf("status after passivate: %+v", st)
	}
	if out := c.must("ask", "counter/k1", `{"Get":null}`, "--addr", n1.addr()); strings.TrimSpace(out) != `{"n":101}` {
		t.Fatalf("after hydration: %q", out)
	}

	// The exposition after traffic, a passivation and a hydration.
	checkExposition(t, n1.addr(), n2.addr(), n3.addr())

	if ui != nil {
		// A lookup names the owner the CLI names, and per-kind numbers
		// and both charts are drawn from the node's metrics.
		var st httpapi.StatusBody
		if err := json.Unmarshal([]byte(c.must("status", "counter/k3", "--json", "--addr", n1.addr())), &st); err != nil {
			t.Fatal(err)
		}
		ui.do("look up counter/k3",
			chromedp.SetValue(chromedp.CSS("#lookup-kind"), "counter"),
			chromedp.SetValue(chromedp.CSS("#lookup-key"), "k3"),
			chromedp.Click(chromedp.CSS("#lookup button[type=submit]")))
		ui.waitJS("the lookup's answer", `document.getElementById('r-actor').textContent === 'counter/k3'`)
		if got := ui.text("#r-node"); got != st.Node {
			t.Errorf("dashboard lookup: owner %q, want %q", got, st.Node)
		}
		ui.do("passivate counter/k3", chromedp.Click(chromedp.CSS("#passivate")))
		ui.waitJS("counter/k3 dormant", `document.getElementById('r-state').textContent === 'Dormant'`)
		ui.waitJS("the counter kind's row", `(() => { const r = document.querySelector('#kinds tr[data-kind=counter]'); return r && r.children[2].textContent !== '0'; })()`)
		ui.waitJS("shards of three nodes", `document.querySelectorAll('#shards-chart rect.bar').length === 3`)
		ui.waitJS("the asks/s line", `document.querySelector('#asks-chart polyline') !== null`)
		checkDashboardPlacement(t, c, ui, n1)
		ui.screenshot("dashboard-three-nodes")
		checkDashboardUnproven(t, c, ui, n1)
	}

	// The inventory: every counter once, on the node that owns it; a
	// passivated one only with --dormant.
	c.must("passivate", "counter/k2", "--addr", n1.addr())
	passivated := []string{"k2"}
	if ui != nil {
		passivated = append(passivated, "k3") // from the dashboard
	}
	for _, tc := range []struct {
		dormant bool
		want    int
	}{{false, keys + 1 - len(passivated)}, {true, keys + 1}} {
		// Over plain HTTP the other members' addresses come from gossip
		// and are not verified: they are given, as trusted addresses.
		args := []string{"actors", "counter", "--json", "--addr", n2.addr(), "--target", n1.addr(), "--target", n3.addr()}
		if tc.dormant {
			args = append(args, "--dormant")
		}
		seen := map[string]string{}
		for line := range strings.Lines(c.must(args...)) {
			var ab httpapi.ActorsBody
			if err := json.Unmarshal([]byte(line), &ab); err != nil {
				t.Fatalf("actors --json: %q: %v", line, err)
			}
			for _, e := range ab.Actors {
				if prev, dup := seen[e.Key]; dup {
					t.Fatalf("%s listed by %s and %s", e.Key, prev, ab.Node)
				}
				seen[e.Key] = ab.Node + " " + e.State
			}
		}
		// k0..k29 and "x/y z", less the passivated ones unless dormant.
		if len(seen) != tc.want {
			t.Errorf("actors counter (dormant %v): %d identities, want %d: %v", tc.dormant, len(seen), tc.want, seen)
		}
		for _, k := range passivated {
			if tc.dormant && !strings.HasSuffix(seen[k], " dormant") {
				t.Errorf("actors counter --dormant lists %s as %q", k, seen[k])
			}
		}
	}

	// Client errors have distinct exit codes.
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"ask", "counter/k1", `{"Add":{"n":"x"}}`}, exitBadJSON},
		{[]string{"ask", "nokind/a", `{}`}, exitUnknownKind},
		{[]string{"ask", "counter/k1", `{}`, "--addr", "127.0.0.1:1"}, exitUnreachable},
	} {
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "--addr") {
			args = append(args, "--addr", n1.addr())
		}
		if _, code, errOut := c.tempest(args...); code != tc.code || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("tempest %v: exit %d, stderr %q; want exit %d and one line", tc.args, code, errOut, tc.code)
		}
	}

	checkAll := func(when string, via *e2eNode) {
		t.Helper()
		for key, v := range want {
			out := c.must("ask", key, `{"Get":null}`, "--timeout", "15s", "--addr", via.addr())
			if got := strings.TrimSpace(out); got != fmt.Sprintf(`{"n":%d}`, v) {
				t.Fatalf("%s: %s = %s, want %d", when, key, got, v)
			}
		}
	}

	// SIGTERM: n3 hands its shards off; the values survive.
	if err := n3.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n3.done:
	case <-time.After(45 * time.Second):
		t.Fatal("n3 did not exit within 45 s of SIGTERM")
	}
	if n3.err != nil {
		t.Fatalf("n3 exited with %v after SIGTERM", n3.err)
	}
	c.waitSettled(t, 30*time.Second, "two settled agents", n1, n2)
	if ui != nil {
		ui.waitJS("n3 gone from the alive members", rows("alive")+` === 2 && document.querySelector('#members tr[data-node=n3]')?.dataset.status !== 'alive'`)
		ui.waitJS("no shards on n3", `document.querySelectorAll('#shards-chart rect.bar').length === 2`)
		ui.screenshot("dashboard-after-n3-left")
	}
	checkAll("after n3 left", n1)

	// Restart with the same name: n3 rejoins and serves again.
	c.start("n3", n3)
	c.waitSettled(t, 60*time.Second, "n3 back", n1, n2, n3)
	checkAll("after n3 rejoined", n3)

	// kill -9 of n2: asks recover on the survivors, and the reminders of
	// tickers it owned tick on their new owners.
	tickers := victimTickers(t, c, n1, n2, 3)
	if err := n2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n2.done
	killed := time.Now()
	recovered := make(chan []tickerRecovery, 1)
	go func() { recovered <- watchTickers(tickers, []*e2eNode{n1, n3}, killed) }()
	waitFor(t, 45*time.Second, "every key answering on the survivors", func() bool {
		for key := range want {
			for _, via := range []*e2eNode{n1, n3} {
				if _, code, _ := c.tempest("ask", key, `{"Get":null}`, "--timeout", "2s", "--addr", via.addr()); code != 0 {
					return false
				}
			}
		}
		return true
	})
	t.Logf("asks recovered %v after kill -9", time.Since(killed).Round(time.Millisecond))
	checkTickerRecovery(t, c, <-recovered, n2.name, n1)

	// Restart n2 with the same name.
	c.start("n2", n2)
	c.waitSettled(t, 60*time.Second, "n2 back", n1, n2, n3)
	for k := range keys {
		key := fmt.Sprintf("counter/k%d", k)
		if _, code, errOut := c.tempest("ask", key, `{"Get":null}`, "--timeout", "10s", "--addr", n2.addr()); code != 0 {
			t.Fatalf("ask %s through the restarted n2: %s", key, errOut)
		}
	}
	out := c.must("placement", "--json", "--addr", n2.addr())
	var p httpapi.PlacementBody
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Leader == "" || len(p.Nodes) < 3 {
		t.Fatalf("placement: %s (%v)", out, err)
	}
	if _, code, _ := c.tempest("health", "--addr", n2.addr()); code != 0 {
		t.Fatal("n2 not healthy")
	}
}

// checkDashboardPlacement checks what the dashboard shows of placement
// against n1's API: each kind's agreed policy digest, this node agreeing,
// the replica sets and their under-replicated count, n1's followers with
// their lag, and the shards each member follows.
func checkDashboardPlacement(t *testing.T, c *e2eCluster, ui *browser, n1 *e2eNode) {
	t.Helper()
	var p httpapi.PlacementBody
	if err := json.Unmarshal([]byte(c.must("placement", "--json", "--addr", n1.addr())), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Policies) == 0 || p.Replicas != 3 {
		t.Fatalf("placement: %d policies, replicas %d; want the kinds' policies and replica sets of 3", len(p.Policies), p.Replicas)
	}
	for _, pv := range p.Policies {
		ui.waitJS(pv.Kind+"'s agreed digest", fmt.Sprintf(`(() => { const r = document.querySelector('#policies tr[data-kind=%q]');
			return r !== null && r.dataset.digest === %q && r.children[4].textContent.includes('agrees'); })()`, pv.Kind, pv.Digest))
	}
	ui.waitJS("the replica sets", `document.getElementById('replication-summary').textContent.includes('replica sets of 3') &&
		document.getElementById('under-replicated') !== null &&
		/^[0-9]+ below 3 copies$/.test(document.getElementById('below-replicas').textContent)`)
	// With three nodes and three replicas, n2 and n3 follow n1's shards.
	ui.waitJS("n1's two followers and their lag", `['n2', 'n3'].every((n) => {
		const r = document.querySelector('#replication tr[data-follower=' + n + ']');
		return r !== null && r.querySelector('td.lag').textContent !== ''; })`)
	ui.waitJS("the shards each member follows", `[...document.querySelectorAll('#members tbody tr')].every((r) => /^[0-9]+$/.test(r.children[7].textContent))`)
}

// checkDashboardUnproven announces a member over gossip that cannot prove
// its name (it has the gossip key, not a certificate: it advertises n1's
// QUIC address, whose certificate names n1): the dashboard shows it
// unproven, the three agents proven, and the member gone once it left.
func checkDashboardUnproven(t *testing.T, c *e2eCluster, ui *browser, n1 *e2eNode) {
	t.Helper()
	ui.waitJS("three proven members", `document.querySelectorAll('#members tr[data-proven=true]').length === 3 &&
		document.getElementById('unproven-count').hidden`)
	keys, err := membership.LoadKeyFile(filepath.Join(c.dir, "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	mc := membership.DefaultConfig()
	mc.Name, mc.Bind, mc.Seeds, mc.GossipKeys, mc.Timing = "rogue", "127.0.0.1:0", []string{c.seed}, keys, membership.FastTiming()
	mc.Meta = membership.Meta{Name: "rogue", QUICAddr: fmt.Sprintf("127.0.0.1:%d", n1.quic), HTTPAddr: "127.0.0.1:1", Version: "rogue"}
	rogue, err := membership.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer rogue.Halt()
	ui.waitJS("the rogue member shown unproven", `(() => { const r = document.querySelector('#members tr[data-node=rogue]');
		return r !== null && r.dataset.proven === 'false' && r.querySelector('td.identity').textContent === 'unproven' &&
			document.getElementById('unproven-count').textContent === '1 unproven'; })()`)
	ui.screenshot("dashboard-unproven-member")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := rogue.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ui.waitJS("the rogue member gone or not alive", `(() => { const r = document.querySelector('#members tr[data-node=rogue]');
		return r === null || r.dataset.status !== 'alive'; })()`)
}
