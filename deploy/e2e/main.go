// Command e2e runs fault tests against a three-node Tempest cluster in
// containers: it starts the compose cluster of deploy/compose under a
// project of its own, drives it from outside the containers through the
// nodes' HTTP APIs (published on loopback only) and docker, prints each
// step's figures in a summary table, tears the project down (volumes
// included) whatever happens, and exits non-zero if a check failed.
//
// Steps: cross-node asks and tells to many keys; hydration (passivate,
// ask again, the counter kept its value); docker kill of a node under
// continuous asks; docker network disconnect of a node under load (it
// stops serving within its lease, the others take over, reconnect
// heals); docker pause of the raft leader for longer than its lease and
// the fence delay (the others take over, the thawed node rejoins); a
// rolling restart of every node under continuous asks. After every fault
// and again once it healed, every counter is read: no acknowledged
// update may be missing, and no reply may have gone back. Finally the
// nodes' activation logs are checked: no actor was active on two nodes
// at once (a frozen container runs nothing: see stepPause).
//
// Run it with `make e2e`, which builds the image first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

var nodes = []string{"node1", "node2", "node3"}

type options struct {
	compose  string
	image    string
	timeout  time.Duration
	project  string
	subnet   string
	keys     int
	loadKeys int
	workers  int
	pace     time.Duration
	lease    time.Duration
	pauseFor time.Duration
	keep     bool
}

func main() {
	var o options
	flag.StringVar(&o.compose, "compose", "docker compose", "the compose command")
	flag.StringVar(&o.image, "image", "tempest:latest", "the tempest image to run")
	flag.DurationVar(&o.timeout, "timeout", 9*time.Minute, "bound on the whole run, teardown excluded")
	flag.StringVar(&o.project, "project", "tempest-e2e", "compose project name")
	flag.StringVar(&o.subnet, "subnet", "10.213.77", "first three octets of the project network's /24")
	flag.IntVar(&o.keys, "keys", 240, "keys for the cross-node asks and tells")
	flag.IntVar(&o.loadKeys, "load-keys", 60, "keys under continuous asks during faults")
	flag.IntVar(&o.workers, "workers", 6, "concurrent askers during faults")
	flag.DurationVar(&o.pace, "pace", 15*time.Millisecond, "pause between one asker's requests")
	flag.DurationVar(&o.lease, "lease", 1500*time.Millisecond, "the nodes' placement lease (a partitioned node must stop serving within it)")
	flag.DurationVar(&o.pauseFor, "pause", 15*time.Second, "how long the pause step keeps the raft leader's container frozen")
	flag.BoolVar(&o.keep, "keep", false, "leave the cluster running at the end (for debugging)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, o, os.Stdout))
}

// report collects each step's figures and failed checks.
type report struct {
	out    io.Writer
	rows   [][3]string // step, figure, value
	failed []string
}

func (r *report) add(step, figure string, format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	r.rows = append(r.rows, [3]string{step, figure, v})
	fmt.Fprintf(r.out, "    %-28s %s\n", figure, v)
}

func (r *report) check(step string, ok bool, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		r.failed = append(r.failed, step+": "+msg)
	}
	r.rows = append(r.rows, [3]string{step, "check", mark + " " + msg})
	fmt.Fprintf(r.out, "    [%s] %s\n", mark, msg)
}

func (r *report) table() {
	fmt.Fprintln(r.out, "\n== summary")
	tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tFIGURE\tVALUE")
	last := ""
	for _, row := range r.rows {
		step := row[0]
		if step == last {
			step = ""
		}
		last = row[0]
		fmt.Fprintf(tw, "%s\t%s\t%s\n", step, row[1], row[2])
	}
	tw.Flush()
}

func run(ctx context.Context, o options, out io.Writer) int {
	rep := &report{out: out}
	start := time.Now()
	e, err := setup(o, out)
	if err != nil {
		fmt.Fprintln(out, "e2e:", err)
		return 1
	}
	defer e.teardown(o.keep)

	runCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	err = e.steps(runCtx, rep)
	if err != nil {
		rep.failed = append(rep.failed, err.Error())
		fmt.Fprintln(out, "e2e: aborted:", err)
		e.dumpLogs()
	}
	rep.table()
	fmt.Fprintf(out, "\ntotal time %s\n", time.Since(start).Round(time.Second))
	if len(rep.failed) > 0 {
		fmt.Fprintf(out, "\n%d check(s) failed:\n", len(rep.failed))
		for _, f := range rep.failed {
			fmt.Fprintln(out, "  -", f)
		}
		fmt.Fprintf(out, "e2e: %d passed, %d failed\n", rep.passed(), len(rep.failed))
		return 1
	}
	fmt.Fprintf(out, "e2e: %d passed, 0 failed\n", rep.passed())
	return 0
}

func (r *report) passed() int {
	n := 0
	for _, row := range r.rows {
		if row[1] == "check" && strings.HasPrefix(row[2], "ok") {
			n++
		}
	}
	return n
}

// env is the running test environment.
type env struct {
	o       options
	out     io.Writer
	c       *cluster
	api     *api
	tmp     string
	crashes map[string][]time.Time
	pauses  map[string][]frozen
	// regressions is how many replies had gone back at the last
	// checkKept.
	regressions int
}

func setup(o options, out io.Writer) (*env, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "tempest-e2e-")
	if err != nil {
		return nil, err
	}
	ports := map[string]int{}
	for _, n := range nodes {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[n] = p
	}
	// Publish every node's HTTP API on loopback (the shipped file
	// publishes node1's), so that asks can go to any live node.
	override := fmt.Sprintf(`services:
  node2:
    ports: ["127.0.0.1:%d:7948"]
  node3:
    ports: ["127.0.0.1:%d:7948"]
`, ports["node2"], ports["node3"])
	overrideFile := filepath.Join(tmp, "e2e.override.yml")
	if err := os.WriteFile(overrideFile, []byte(override), 0o600); err != nil {
		return nil, err
	}
	composeFile := filepath.Join(root, "deploy", "compose", "docker-compose.yml")
	c := &cluster{
		compose: strings.Fields(o.compose),
		files:   []string{composeFile, overrideFile},
		project: o.project,
		subnet:  o.subnet,
		env: append(os.Environ(),
			"TEMPEST_IMAGE="+o.image,
			"TEMPEST_RESTART=no",
			"TEMPEST_SUBNET_PREFIX="+o.subnet,
			fmt.Sprintf("TEMPEST_HTTP_PORT=%d", ports["node1"]),
		),
	}
	a := &api{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}, base: map[string]string{}}
	for n, p := range ports {
		a.base[n] = fmt.Sprintf("http://127.0.0.1:%d", p)
	}
	return &env{o: o, out: out, c: c, api: a, tmp: tmp, crashes: map[string][]time.Time{}, pauses: map[string][]frozen{}}, nil
}

func (e *env) teardown(keep bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if keep {
		fmt.Fprintf(e.out, "\nleaving project %s running (-keep); remove it with: %s -p %s down -v\n", e.o.project, e.o.compose, e.o.project)
	} else {
		fmt.Fprintf(e.out, "\n== teardown\n")
		if _, err := e.c.composeCmd(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			fmt.Fprintln(e.out, "e2e: teardown:", err)
		}
	}
	os.RemoveAll(e.tmp)
}

func (e *env) dumpLogs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		if e.c.ids[n] == "" {
			continue
		}
		state, _ := e.c.docker(ctx, "inspect", "-f", "{{.State.Status}} exit={{.State.ExitCode}} oom={{.State.OOMKilled}} restarts={{.RestartCount}} finished={{.State.FinishedAt}} {{.State.Error}}", e.c.ids[n])
		l, _ := e.c.logs(ctx, n)
		fmt.Fprintf(e.out, "\n-- %s: %s\n", n, strings.TrimSpace(state))
		// A crash prints the failing goroutine first and every other one
		// after it: the tail alone would miss the cause.
		if i := crashStart(l); i >= 0 {
			fmt.Fprintf(e.out, "-- crash of %s\n%s\n", n, head(l[i:], 6000))
		}
		fmt.Fprintf(e.out, "-- last log lines of %s\n%s\n", n, tail(l, 3000))
	}
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.out, "  %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func (e *env) steps(ctx context.Context, rep *report) error {
	fmt.Fprintf(e.out, "== cluster up (project %s, image %s)\n", e.o.project, e.o.image)
	// A stale project of a previous, interrupted run.
	_, _ = e.c.composeCmd(ctx, "down", "-v", "--remove-orphans", "-t", "1")
	t0 := time.Now()
	if _, err := e.c.composeCmd(ctx, "up", "-d"); err != nil {
		return err
	}
	if err := e.c.resolveIDs(ctx, nodes); err != nil {
		return err
	}
	tok := filepath.Join(e.tmp, "http.token")
	if _, err := e.c.docker(ctx, "cp", e.c.ids["node1"]+":/etc/tempest/http.token", tok); err != nil {
		return err
	}
	b, err := os.ReadFile(tok)
	if err != nil {
		return err
	}
	e.api.token = strings.TrimSpace(string(b))
	if err := e.awaitCluster(ctx, nodes, 3*time.Minute); err != nil {
		return err
	}
	rep.add("startup", "time to ready", "%s", since(t0))
	members, err := e.c.exec(ctx, "node1", "members")
	if err != nil {
		return err
	}
	fmt.Fprint(e.out, indent(members))
	rep.check("startup", strings.Count(members, "alive") == 3, "3 members alive (tempest members in node1)")

	if err := e.stepAsks(ctx, rep); err != nil {
		return err
	}
	if err := e.stepHydration(ctx, rep); err != nil {
		return err
	}
	l := newLoad(e.api, "load", e.o.loadKeys, e.o.pace)
	l.setGateways(nodes...)
	l.start(e.o.workers, 1)
	defer l.stop()
	if err := e.stepKill(ctx, rep, l); err != nil {
		return err
	}
	if err := e.stepPartition(ctx, rep, l); err != nil {
		return err
	}
	if err := e.stepPause(ctx, rep, l); err != nil {
		return err
	}
	if err := e.stepRolling(ctx, rep, l); err != nil {
		return err
	}
	l.stop()
	return e.stepLogs(ctx, rep)
}

// awaitCluster waits until the given nodes are healthy containers and
// ready, and placement sees exactly them up with every shard assigned.
func (e *env) awaitCluster(ctx context.Context, up []string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		last = e.clusterState(ctx, up)
		if last == "" {
			return nil
		}
		if strings.HasSuffix(last, " is exited") || strings.HasSuffix(last, " is dead") {
			// Containers run without a restart policy: it stays down.
			return fmt.Errorf("cluster not ready: %s", last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready within %s: %s", within, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// clusterState is "" when the cluster is as wanted, else what is not.
func (e *env) clusterState(ctx context.Context, up []string) string {
	for _, n := range up {
		if h := e.c.health(ctx, n); h != "healthy" {
			return n + " is " + h
		}
		if !e.api.ready(ctx, n) {
			return n + " is not ready"
		}
	}
	p, err := e.api.placement(ctx, up[0])
	if err != nil {
		return "placement: " + err.Error()
	}
	// Under-replicated shards too: the next step's fault must find every
	// shard with its full in-sync set, as the cluster survives one fault
	// at a time.
	if p.Leader == "" || p.Unassigned > 0 || p.Moving > 0 || p.UnderReplicated > 0 {
		return fmt.Sprintf("placement: leader %q, %d unassigned, %d moving, %d under-replicated", p.Leader, p.Unassigned, p.Moving, p.UnderReplicated)
	}
	var names []string
	for _, n := range p.Nodes {
		if n.Status == "up" && n.Shards > 0 {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, up) {
		return fmt.Sprintf("placement: serving %v, want %v", names, up)
	}
	return ""
}

func (e *env) stepAsks(ctx context.Context, rep *report) error {
	const step = "1 asks+tells"
	fmt.Fprintf(e.out, "\n== %s: cross-node asks and tells to %d keys from outside\n", step, e.o.keys)
	owners := map[string]int{}
	var lat []time.Duration
	errs, cross, wrong := 0, 0, 0
	t0 := time.Now()
	for i := range e.o.keys {
		key := fmt.Sprintf("k-%04d", i)
		gw := nodes[i%3]
		v, r := e.api.add(ctx, gw, key, 1)
		if r.outcome != okOutcome {
			errs++
			e.logf("ask %s via %s: %v", key, gw, r.err)
			continue
		}
		lat = append(lat, r.latency)
		if v != 1 {
			wrong++
		}
		if r := e.api.tell(ctx, nodes[(i+1)%3], key, 2); r.outcome != okOutcome {
			errs++
			e.logf("tell %s: %v", key, r.err)
		}
	}
	asksTime := since(t0)
	// The tells are asynchronous: read every counter back through yet
	// another node until it shows 1+2.
	for i := range e.o.keys {
		key := fmt.Sprintf("k-%04d", i)
		gw := nodes[(i+2)%3]
		deadline := time.Now().Add(10 * time.Second)
		for {
			v, r := e.api.get(ctx, gw, key)
			if r.outcome == okOutcome && v == 3 {
				break
			}
			if time.Now().After(deadline) {
				wrong++
				e.logf("%s via %s: %d (%v), want 3", key, gw, v, r.err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		st, err := e.api.status(ctx, gw, "counter", key)
		if err != nil {
			errs++
			continue
		}
		owners[st.Node]++
		if st.Node != nodes[i%3] {
			cross++
		}
	}
	echo := e.api.do(ctx, "node2", http.MethodPost, "/v1/actors/echo/hello/ask", `{"text":"hi"}`, 3*time.Second)
	rep.add(step, "keys", "%d (1 ask + 1 tell + reads each)", e.o.keys)
	rep.add(step, "ask latency p50/p99", "%s / %s", percentile(lat, .5), percentile(lat, .99))
	rep.add(step, "keys per owner", "node1 %d, node2 %d, node3 %d", owners["node1"], owners["node2"], owners["node3"])
	rep.add(step, "asks served across nodes", "%d of %d", cross, e.o.keys)
	rep.add(step, "time", "%s", asksTime)
	rep.check(step, errs == 0, "no errors (%d)", errs)
	rep.check(step, wrong == 0, "every counter is 1 after the ask and 3 after the tell (%d wrong)", wrong)
	rep.check(step, owners["node1"] > 0 && owners["node2"] > 0 && owners["node3"] > 0, "keys live on all three nodes")
	rep.check(step, echo.outcome == okOutcome && strings.Contains(string(echo.body), `"hi"`), "echo replies with its input (%s)", strings.TrimSpace(string(echo.body)))
	return nil
}

func (e *env) stepHydration(ctx context.Context, rep *report) error {
	const step = "2 hydration"
	const n = 30
	fmt.Fprintf(e.out, "\n== %s: passivate %d counters, ask again\n", step, n)
	dormant, kept, reactivated := 0, 0, 0
	var lat []time.Duration
	for i := range n {
		key := fmt.Sprintf("k-%04d", i)
		gw := nodes[(i+1)%3]
		if err := e.api.passivate(ctx, gw, "counter", key); err != nil {
			e.logf("passivate %s: %v", key, err)
			continue
		}
		if st, err := e.api.status(ctx, gw, "counter", key); err == nil && st.State == "Dormant" && !st.Active {
			dormant++
		} else {
			e.logf("%s after passivate: %+v %v", key, st, err)
		}
		v, r := e.api.add(ctx, nodes[i%3], key, 10)
		if r.outcome == okOutcome {
			lat = append(lat, r.latency)
		}
		if r.outcome == okOutcome && v == 13 {
			kept++
		} else {
			e.logf("%s after hydration: %d %v, want 13", key, v, r.err)
		}
		if st, err := e.api.status(ctx, gw, "counter", key); err == nil && st.Active && st.State == "Valid" {
			reactivated++
		}
	}
	rep.add(step, "passivated -> Dormant", "%d of %d", dormant, n)
	rep.add(step, "hydrated, value kept", "%d of %d", kept, n)
	rep.add(step, "hydrating ask p50/p99", "%s / %s", percentile(lat, .5), percentile(lat, .99))
	rep.check(step, dormant == n, "passivate leaves every counter Dormant")
	rep.check(step, kept == n, "every counter kept its value across passivation (3 + 10 = 13)")
	rep.check(step, reactivated == n, "asked counters are Valid and active again")
	return nil
}

// checkKept reads every load counter through via, under the load, and
// checks that none is below its last acknowledged value and that no
// reply went back (since the load began: nothing acknowledged may be
// lost to any fault, the model is never reset).
func (e *env) checkKept(ctx context.Context, rep *report, l *load, step, via, when string) error {
	lost, all, checked, err := l.verify(ctx, via)
	if err != nil {
		return fmt.Errorf("%s: verify %s: %w", step, when, err)
	}
	regr := all - e.regressions // those since the last check
	e.regressions = all
	for _, r := range l.regressions() {
		e.logf("regression: %s", r)
	}
	rep.add(step, "acked updates lost "+when, "%d (%d regressions)", lost, regr)
	rep.check(step, lost == 0 && regr == 0, "no acknowledged update lost %s (%d counters checked, %d lost, %d regressions)", when, checked, lost, regr)
	return nil
}

// awaitSettled waits until every load key answers again after t0 and
// no error happened for quiet, or until within passes. It watches for
// at least minimum: errors of a fault can take a while to show.
func (e *env) awaitSettled(ctx context.Context, l *load, t0 time.Time, quiet, minimum, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if time.Since(t0) < minimum {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		if l.settled(t0, quiet) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
	return false
}

// leader returns the raft leader (as node1 sees it) and the other
// nodes.
func (e *env) leader(ctx context.Context) (string, []string, error) {
	p, err := e.api.placement(ctx, "node1")
	if err != nil || !slices.Contains(nodes, p.Leader) {
		return "", nil, fmt.Errorf("no raft leader (%q): %v", p.Leader, err)
	}
	var others []string
	for _, n := range nodes {
		if n != p.Leader {
			others = append(others, n)
		}
	}
	return p.Leader, others, nil
}

// ownedBy returns the load keys (indices) that node owns, asked through
// via.
func (e *env) ownedBy(ctx context.Context, l *load, via, node string) []int {
	var owned []int
	for i, key := range l.keys {
		if st, err := e.api.status(ctx, via, "counter", key); err == nil && st.Node == node {
			owned = append(owned, i)
		}
	}
	return owned
}

// stepKill kills the raft leader, the slower failover: its keys wait for
// an election as well as the fence (a follower's crash is killed with
// SIGKILL in package cli's end-to-end test).
func (e *env) stepKill(ctx context.Context, rep *report, l *load) error {
	const step = "3 kill"
	victim, survivors, err := e.leader(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	via := survivors[0]
	fmt.Fprintf(e.out, "\n== %s: docker kill %s (the raft leader) under continuous asks (%d keys, %d askers)\n", step, victim, e.o.loadKeys, e.o.workers)
	time.Sleep(3 * time.Second) // a baseline of load before the fault
	base := l.window(time.Now().Add(-3 * time.Second))
	rep.add(step, "baseline rate", "%.0f asks/s, %d errors", float64(base.requests)/3, base.errorCount())
	// The keys the victim owns: their failover time is the figure.
	owned := e.ownedBy(ctx, l, via, victim)
	tickers, err := e.startTickers(ctx, via, victim, 3)
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	l.setGateways(survivors...)
	time.Sleep(500 * time.Millisecond) // in-flight requests to the victim's gateway finish
	t0 := time.Now()
	if _, err := e.c.docker(ctx, "kill", e.c.ids[victim]); err != nil {
		return err
	}
	e.crashes[victim] = append(e.crashes[victim], time.Now())
	// The tickers count from the victim's death: a tick scheduled after
	// it can only have been fired by a new owner.
	if _, err := e.c.docker(ctx, "wait", e.c.ids[victim]); err != nil {
		return err
	}
	dead := time.Now()
	recovered := make(chan []tickerRecovery, 1)
	go func() { recovered <- e.watchTickers(ctx, tickers, survivors, dead) }()
	e.logf("killed %s", victim)
	settled := e.awaitSettled(ctx, l, t0, 3*time.Second, 2*e.o.lease+5*time.Second, 90*time.Second)
	w := l.window(t0)
	failover, answered := l.answeredAgain(owned, t0, dead)
	rep.add(step, "asks during the fault", "%d", w.requests)
	rep.add(step, "errors", "%d %s", w.errorCount(), fmtErrors(w.errors))
	rep.add(step, "keys that failed", "%d of %d", w.failedKeys, len(l.keys))
	rep.add(step, "failover time", "%s (kill -> every one of the %d keys %s, the raft leader, owned answered again; goal 5s)", failover.Round(time.Millisecond), len(owned), victim)
	rep.add(step, "until all keys answer", "%s", w.recovery.Round(time.Millisecond))
	rep.check(step, settled && w.unrecovered == 0 && answered, "every key answers again on the survivors (%d still failing)", w.unrecovered)
	checkTickers(rep, step, <-recovered)
	// Every acknowledged Add is committed on the shard's replica set, so
	// the survivor that took a key over has it.
	if err := e.checkKept(ctx, rep, l, step, via, "to the kill"); err != nil {
		return err
	}

	t1 := time.Now()
	if _, err := e.c.docker(ctx, "start", e.c.ids[victim]); err != nil {
		return err
	}
	if err := e.awaitCluster(ctx, nodes, 2*time.Minute); err != nil {
		return fmt.Errorf("%s: after restart: %w", step, err)
	}
	rep.add(step, "restart to rejoined", "%s", since(t1))
	l.setGateways(nodes...)
	return e.checkKept(ctx, rep, l, step, "node1", "once the killed node rejoined")
}

func (e *env) stepPartition(ctx context.Context, rep *report, l *load) error {
	const step = "4 partition"
	victim := "node2"
	fmt.Fprintf(e.out, "\n== %s: docker network disconnect %s under load\n", step, victim)
	l.setGateways("node1", "node3")
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	if _, err := e.c.docker(ctx, "network", "disconnect", e.c.network, e.c.ids[victim]); err != nil {
		return err
	}
	e.logf("disconnected %s from %s", victim, e.c.network)
	// The cut-off node must stop serving (readiness false, its
	// activations passivated) within its lease.
	var stopped time.Duration
	for time.Since(t0) < 2*e.o.lease+10*time.Second {
		if _, err := e.c.exec(ctx, victim, "health"); err != nil {
			stopped = time.Since(t0)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	settled := e.awaitSettled(ctx, l, t0, 3*time.Second, 2*e.o.lease+5*time.Second, 90*time.Second)
	w := l.window(t0)
	if stopped > 0 {
		rep.add(step, "cut-off node not ready after", "%s (lease %s)", stopped.Round(time.Millisecond), e.o.lease)
	} else {
		rep.add(step, "cut-off node not ready after", "never")
	}
	rep.add(step, "asks during the fault", "%d", w.requests)
	rep.add(step, "errors", "%d %s", w.errorCount(), fmtErrors(w.errors))
	rep.add(step, "until all keys answer", "%s", w.recovery.Round(time.Millisecond))
	// docker exec and the probe's own period add to the lease.
	rep.check(step, stopped > 0 && stopped <= e.o.lease+3*time.Second, "the cut-off node stops serving within its lease (+3s probe slack)")
	rep.check(step, settled && w.unrecovered == 0, "the other nodes take over every key (%d still failing)", w.unrecovered)
	// Every acknowledged Add is on the shard's in-sync replicas, so the
	// node that took a key over has it while its old owner is cut off.
	if err := e.checkKept(ctx, rep, l, step, "node1", "while the node is cut off"); err != nil {
		return err
	}

	t1 := time.Now()
	ip := e.c.subnet + ".12"
	if _, err := e.c.docker(ctx, "network", "connect", "--ip", ip, e.c.network, e.c.ids[victim]); err != nil {
		return err
	}
	err := e.awaitCluster(ctx, nodes, 2*time.Minute)
	rep.check(step, err == nil, "reconnect heals: three nodes ready and serving again")
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	rep.add(step, "reconnect to healed", "%s", since(t1))
	l.setGateways(nodes...)
	return e.checkKept(ctx, rep, l, step, "node1", "once the partition healed")
}

// metric returns the value of the series name on node's /metrics, or
// why it could not be read.
func (e *env) metric(ctx context.Context, node, name string) string {
	r := e.api.do(ctx, node, http.MethodGet, "/metrics", "", 5*time.Second)
	if r.err != nil || r.status != http.StatusOK {
		return fmt.Sprintf("not read (%d %v)", r.status, r.err)
	}
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return "not exported"
}

// stepPause freezes the raft leader's container (docker pause: the
// cgroup freezer, as a stalled VM or a stop-the-world stall would) for
// longer than its lease and the fence delay under continuous asks
// through the others, then thaws it. The others must take over every
// key and lose nothing; the thawed node, whose lease lapsed while it was
// frozen, must give up what it held and rejoin.
func (e *env) stepPause(ctx context.Context, rep *report, l *load) error {
	const step = "5 pause"
	victim, survivors, err := e.leader(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	via := survivors[0]
	fmt.Fprintf(e.out, "\n== %s: docker pause %s (the raft leader) for %s under continuous asks\n", step, victim, e.o.pauseFor)
	owned := e.ownedBy(ctx, l, via, victim)
	l.setGateways(survivors...)
	time.Sleep(500 * time.Millisecond) // in-flight requests to the victim's gateway finish
	t0 := time.Now()
	if _, err := e.c.docker(ctx, "pause", e.c.ids[victim]); err != nil {
		return err
	}
	paused := time.Now() // frozen: it answers nothing from here
	e.logf("paused %s", victim)
	settled := e.awaitSettled(ctx, l, t0, 3*time.Second, 2*e.o.lease+5*time.Second, e.o.pauseFor-time.Second)
	w := l.window(t0)
	failover, answered := l.answeredAgain(owned, t0, paused)
	rep.add(step, "asks during the pause", "%d", w.requests)
	rep.add(step, "errors", "%d %s", w.errorCount(), fmtErrors(w.errors))
	rep.add(step, "failover time", "%s (pause -> every one of the %d keys %s owned answered again)", failover.Round(time.Millisecond), len(owned), victim)
	rep.check(step, settled && w.unrecovered == 0 && answered, "the others take over every key while %s is frozen (%d still failing)", victim, w.unrecovered)
	if err := e.checkKept(ctx, rep, l, step, via, "while the node is frozen"); err != nil {
		return err
	}
	if d := time.Until(t0.Add(e.o.pauseFor)); d > 0 {
		time.Sleep(d)
	}
	if _, err := e.c.docker(ctx, "unpause", e.c.ids[victim]); err != nil {
		return err
	}
	thawed := time.Now()
	e.pauses[victim] = append(e.pauses[victim], frozen{from: t0, to: thawed})
	e.logf("unpaused %s", victim)
	err = e.awaitCluster(ctx, nodes, 2*time.Minute)
	rep.check(step, err == nil, "the thawed node rejoins: three nodes ready and serving again")
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	rep.add(step, "thaw to rejoined", "%s", since(thawed))
	rep.add(step, "mail held back after the thaw", "%s (times the thawed node's workers found its lease run out with mail due: tempest_mail_lapsed_total)",
		e.metric(ctx, victim, "tempest_mail_lapsed_total"))
	l.setGateways(nodes...)
	return e.checkKept(ctx, rep, l, step, "node1", "once the node thawed")
}

func (e *env) stepRolling(ctx context.Context, rep *report, l *load) error {
	const step = "6 rolling restart"
	fmt.Fprintf(e.out, "\n== %s: restart node1, node2, node3 one by one under continuous asks\n", step)
	t0 := time.Now()
	for _, n := range nodes {
		var others []string
		for _, m := range nodes {
			if m != n {
				others = append(others, m)
			}
		}
		l.setGateways(others...)
		time.Sleep(500 * time.Millisecond)
		t := time.Now()
		if _, err := e.c.composeCmd(ctx, "restart", "-t", "45", n); err != nil {
			return err
		}
		stopped := since(t)
		if err := e.awaitCluster(ctx, nodes, 2*time.Minute); err != nil {
			return fmt.Errorf("%s: after restarting %s: %w", step, n, err)
		}
		e.logf("restarted %s: stop+start %s, back in %s", n, stopped, since(t))
		rep.add(step, n+" restart to ready", "%s", since(t))
		l.setGateways(nodes...)
	}
	e.awaitSettled(ctx, l, t0, 2*time.Second, 0, 30*time.Second)
	w := l.window(t0)
	rep.add(step, "asks during the restarts", "%d", w.requests)
	rep.add(step, "errors", "%d %s", w.errorCount(), fmtErrors(w.errors))
	rep.add(step, "ask latency p50/p99", "%s / %s", percentile(w.latencies, .5), percentile(w.latencies, .99))
	rep.check(step, w.unrecovered == 0, "every key answers after the restarts (%d failing)", w.unrecovered)
	return e.checkKept(ctx, rep, l, step, "node1", "after the restarts")
}

func (e *env) stepLogs(ctx context.Context, rep *report) error {
	const step = "7 activation logs"
	fmt.Fprintf(e.out, "\n== %s: no actor active on two nodes at once\n", step)
	end := time.Now()
	var spans []span
	for _, n := range nodes {
		log, err := e.c.logs(ctx, n)
		if err != nil {
			return err
		}
		spans = append(spans, activationSpans(n, log, e.crashes[n], end)...)
	}
	actors := map[string]bool{}
	for _, s := range spans {
		actors[s.actor] = true
	}
	var ov []overlap
	var frozenOv int
	var afterThaw time.Duration
	for _, o := range overlaps(spans) {
		if ok, after := whileFrozen(o, e.pauses, e.o.lease); ok {
			frozenOv++
			afterThaw = max(afterThaw, after)
			continue
		}
		ov = append(ov, o)
	}
	for i, o := range ov {
		if i == 10 {
			e.logf("... %d more", len(ov)-10)
			break
		}
		e.logf("overlap: %s", o)
	}
	rep.add(step, "activations", "%d of %d actors", len(spans), len(actors))
	rep.add(step, "held by a frozen node", "%d activations, let go at most %s after the thaw (allowed: the lease, %s)",
		frozenOv, afterThaw.Round(time.Millisecond), e.o.lease)
	rep.check(step, len(spans) > e.o.keys, "the nodes logged activations (%d)", len(spans))
	rep.check(step, len(ov) == 0, "no actor active on two nodes at once (%d overlaps)", len(ov))
	return nil
}

func fmtErrors(m map[outcome]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(parts)
	return "(" + strings.Join(parts, ", ") + ")"
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// repoRoot is the directory above deploy/ (the e2e program runs from
// deploy/e2e).
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "deploy", "compose", "docker-compose.yml")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("deploy/compose/docker-compose.yml not found above the working directory")
		}
	}
}
