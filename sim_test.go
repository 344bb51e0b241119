package tempest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/internal/lincheck"
	"github.com/tempest-actors/tempest/internal/testhooks"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire"
)

// The simulation runs a whole cluster in this process under the fake
// time of a testing/synctest bubble: its nodes on a wire.MemNetwork, their
// gossip scripted by the simulation, everything else (raft placement,
// the bbolt stores, the scheduler, the supervisors, replication,
// handoffs) the production code. A seed fixes the fault schedule, the
// workload and the network's randomness; see "Simulation" in
// docs/federation.md.

var (
	simSeed  = flag.Uint64("sim.seed", 0, "run the simulation with this seed only")
	simSeeds = flag.Int("sim.seeds", 0, "run the simulation with seeds from..from+n-1 (default 3; 1 with -short, 40 with TEMPEST_SOAK)")
	simFrom  = flag.Uint64("sim.from", 1, "the first seed -sim.seeds runs")
	simLog   = flag.Bool("sim.log", false, "write the simulated cluster's logs to the test log")
	simCheck = flag.Duration("sim.checktime", time.Minute, "how long the linearizability checker may search a run's history")
	simHang  = flag.Duration("sim.hang", 3*time.Minute, "real time after which a seed still running is taken to hang: its stacks go to a file and the run panics naming it (0: never)")
)

// TestSimulation runs the simulation for each seed.
func TestSimulation(t *testing.T) {
	var seeds []uint64
	switch n := *simSeeds; {
	case *simSeed != 0:
		seeds = []uint64{*simSeed}
	case n > 0:
		for s := range n {
			seeds = append(seeds, *simFrom+uint64(s))
		}
	default:
		n = 3
		if testing.Short() {
			n = 1
		}
		if os.Getenv("TEMPEST_SOAK") != "" {
			n = 40
		}
		for s := range n {
			seeds = append(seeds, uint64(s+1))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel() // each seed is a cluster of its own in a bubble of its own
			defer func() {
				if t.Failed() {
					t.Logf("replay: go test -run 'TestSimulation' -sim.seed=%d -v .", seed)
				}
			}()
			var out simOutcome
			// A bubble whose clock stopped for good (a goroutine waiting for
			// a mutex held across a wait for time) hangs idle, and synctest
			// cannot tell: name the seed rather than wait for the test
			// binary's timeout.
			stop := func() bool { return false }
			if *simHang > 0 {
				stop = time.AfterFunc(*simHang, func() { simHung(seed, *simHang) }).Stop
			}
			synctest.Test(t, func(t *testing.T) { out = runSimulation(t, seed, simOptions{}) })
			stop()
			// Outside the bubble: the checker's search is CPU, and its
			// timeout must be real time.
			if out.h != nil {
				found := out.check(t, seed)
				for _, f := range found {
					t.Error(f)
				}
				if len(found) > 0 {
					out.write(t, seed)
				}
			}
		})
	}
}

// simHung ends a run whose seed did not finish within d of real time,
// with every goroutine's stack in a file and in the panic's output.
func simHung(seed uint64, d time.Duration) {
	debug.SetTraceback("all")
	where := "(stacks not written)"
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	if f, err := os.CreateTemp("", "tempest-sim-hang-*.txt"); err == nil {
		_, _ = f.Write(buf)
		_ = f.Close()
		where = f.Name()
	}
	panic(fmt.Sprintf("simulation seed %d still running after %v of real time: it hangs (docs/federation.md, Simulation); goroutines: %s; replay: go test -run 'TestSimulation' -sim.seed=%d -v .", seed, d, where, seed))
}

// TestSimulationFindsLostState shows that the checks see what they are
// for: with counters that keep no state at rest (PersistNone), a crash of
// the node that owns a busy counter loses every Add it acknowledged, and
// the run must report them lost.
func TestSimulationFindsLostState(t *testing.T) {
	var out simOutcome
	synctest.Test(t, func(t *testing.T) {
		out = runSimulation(t, 1, simOptions{
			persistence: &prospero.Persistence{Mode: prospero.PersistNone},
			schedule: func(s *sim) {
				time.Sleep(2 * time.Second)
				nodes := s.running()
				owner, _, err := nodes[0].Locate(nodes[0].Ref(demo.Counter, "c0"))
				if err != nil {
					s.t.Fatalf("locate c0: %v", err)
				}
				s.step("kill %s, the owner of c0", owner)
				s.kill(owner, true)
				s.start(owner)
				s.settle()
			},
		})
	})
	if out.h == nil {
		return
	}
	findings := out.check(t, 1)
	if !slices.ContainsFunc(findings, func(f string) bool { return strings.HasPrefix(f, "lost: c0:") }) {
		t.Fatalf("a crash lost c0's state at rest, but the checks found %q", findings)
	}
	// What a failed seed leaves to read includes the nodes' logs.
	name := out.write(t, 1)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(name)
	if _, logs, _ := strings.Cut(string(b), "the nodes' logs:\n"); !strings.Contains(logs, "msg=") {
		t.Fatalf("the run's file holds no logs of the nodes:\n%s", logs)
	}
}

// simOptions vary a run for the tests of the simulation itself.
type simOptions struct {
	// persistence replaces the counter's (every turn, reply after commit).
	persistence *prospero.Persistence
	// schedule replaces the seeded faults.
	schedule func(s *sim)
	// register, when set, registers more kinds on every node (after the
	// demo's).
	register func(n *tempest.Node) error
}

// Simulation parameters.
const (
	simNodes   = 3
	simKeys    = 8
	simClients = 4
	simFaults  = 4
	// simBeepers identities hold a durable reminder each, ticking every
	// simBeepPeriod; the last one's is cancelled half-way.
	simBeepers    = 4
	simBeepPeriod = time.Second
	// simAskTimeout is each client ask's deadline.
	simAskTimeout = 2 * time.Second
	// simDetect is how long gossip takes to declare an unreachable node
	// failed (FastTiming's probes find it in about this time).
	simDetect = 2 * time.Second
	// simSettleTimeout bounds each wait for the cluster to settle.
	simSettleTimeout = 2 * time.Minute
)

// sim is one simulated cluster.
type sim struct {
	t    *testing.T
	opts simOptions
	rng  *rand.Rand // the fault schedule; only the driving goroutine draws
	net  *wire.MemNetwork
	ca   *wire.CA
	pool *x509.CertPool
	logs *simLogs
	log  *slog.Logger
	dirs map[string]string

	mu     sync.Mutex
	nodes  map[string]*tempest.Node     // running
	views  map[string]*membership.Fake  // running nodes' gossip views
	selves map[string]membership.Member // what each running node announced
	cut    map[string]bool              // partitioned off the others
	events []tempesttest.Event          // every node's lifecycle events, in order
	boot   uint64                       // the last BootID given
	late   []string                     // asks that returned after their deadline
	ops    []string                     // every client operation, for a failure's report
	steps  []string                     // what the driver did, for the failure report
	ticks  []simTick                    // every reminder tick handled, in order
}

// simTick is one reminder tick a beeper handled.
type simTick struct {
	key, node string
	seq       uint64
	at        time.Time // when its turn ran
}

func runSimulation(t *testing.T, seed uint64, opts simOptions) simOutcome {
	s := &sim{t: t, opts: opts, rng: rand.New(rand.NewPCG(seed, 0x73696d)),
		logs: &simLogs{}, dirs: map[string]string{},
		nodes: map[string]*tempest.Node{}, views: map[string]*membership.Fake{},
		selves: map[string]membership.Member{}, cut: map[string]bool{}}
	s.net = wire.NewMemNetwork(seed, nil)
	s.log = slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// A run that fails half-way stops its nodes all the same: the bubble
	// ends only once every goroutine in it has.
	t.Cleanup(s.stopAll)
	t.Cleanup(func() {
		if t.Failed() || *simLog {
			t.Logf("steps:\n%s", strings.Join(s.steps, "\n"))
			t.Logf("logs:\n%s", s.logs.String())
		}
	})
	ca, err := wire.NewCA("simulation CA", time.Now().Add(-time.Minute), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.ca = ca
	s.pool = x509.NewCertPool()
	s.pool.AddCert(ca.Cert)
	for i := range simNodes {
		s.start(fmt.Sprintf("n%d", i+1))
	}
	s.settle()

	h := lincheck.NewHistory()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for cl := range simClients {
		rng := rand.New(rand.NewPCG(seed, uint64(cl)))
		wg.Go(func() { s.client(ctx, h, cl, rng) })
	}

	for b := range simBeepers {
		s.remind(fmt.Sprintf("b%d", b))
	}
	var cancelled time.Time // when the cancellation of the last beeper's reminder returned
	if opts.schedule != nil {
		opts.schedule(s)
	} else {
		for i := range simFaults {
			s.idle(time.Duration(500+s.rng.IntN(1500)) * time.Millisecond)
			s.fault()
			s.settle()
			if i == simFaults/2-1 {
				cancelled = s.cancelReminder(fmt.Sprintf("b%d", simBeepers-1))
			}
		}
	}
	settled := time.Now()
	// Long enough for every reminder to tick again after the last fault:
	// a period, a refused tick's retry and a hydration.
	s.idle(3*simBeepPeriod + time.Second)
	stop()
	wg.Wait()
	// Fake time moves only when every goroutine waits: without this the
	// final reads could begin at the instant the last Adds returned or
	// were sent, and overlap them, which keeps the checker from leaving
	// out the unanswered Adds that never took effect (lincheck).
	s.idle(time.Millisecond)

	// A final read of every counter through every node, nothing else going
	// on: every acknowledged Add must be in it, and the nodes must agree.
	final := map[string]int64{}
	for k := range simKeys {
		for _, n := range s.running() {
			key := fmt.Sprintf("c%d", k)
			done := h.Call(simClients, lincheck.Op{Key: key})
			v, err := s.ask(context.Background(), n, lincheck.Op{Key: key})
			done(v, err == nil)
			if err != nil {
				t.Errorf("final read of %s through %s: %v", key, n.Name(), err)
				continue
			}
			if got, ok := final[key]; ok && got != v {
				t.Errorf("final reads of %s disagree: %d, then %d through %s", key, got, v, n.Name())
			}
			final[key] = v
		}
	}
	s.stopAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	return simOutcome{h: h, events: slices.Clone(s.events), late: slices.Clone(s.late), ops: slices.Clone(s.ops), steps: slices.Clone(s.steps),
		ticks: slices.Clone(s.ticks), settled: settled, cancelled: cancelled, logs: s.logs.String()}
}

// simOutcome is what a run recorded, for the checks.
type simOutcome struct {
	h      *lincheck.History
	events []tempesttest.Event
	late   []string
	ops    []string // the clients' operations
	steps  []string // the driver's
	// The beepers' reminder ticks, when the last fault had settled, and
	// when the cancellation of the last beeper's reminder returned (zero:
	// none was made).
	ticks              []simTick
	settled, cancelled time.Time
	// logs is the nodes' logs (info and above): a check that fails
	// outside the bubble writes them with the rest (write), the
	// bubble's own cleanup having seen no failure.
	logs string
}

// check checks the invariants on what the run recorded and returns what
// it found broken: the counters' history linearizable with no
// acknowledged Add lost, no identity active on two nodes at once, and
// every ask returned by its deadline.
func (o simOutcome) check(t *testing.T, seed uint64) []string {
	var found []string
	res := o.h.Check(*simCheck)
	t.Logf("seed %d: %s", seed, res)
	for _, k := range slices.Sorted(maps.Keys(res.LostByKey)) {
		found = append(found, fmt.Sprintf("lost: %s: %d acknowledged", k, res.LostByKey[k]))
	}
	for _, r := range res.Regressions {
		found = append(found, "went back: "+r)
	}
	for _, b := range res.Bounds {
		found = append(found, "out of bounds: "+b)
	}
	switch {
	case res.Verdict == porcupine.Unknown:
		// The search ran out of time: each Add whose outcome is unknown
		// multiplies it. Not a finding either way; the other checks stand.
		t.Logf("seed %d: the linearizability check was inconclusive after %v (-sim.checktime)", seed, *simCheck)
	case !res.Linearizable:
		found = append(found, fmt.Sprintf("history not linearizable: %s (visualization: %s)", res, res.Visualization))
	}
	if res.Ops-res.Unanswered < 100 {
		found = append(found, fmt.Sprintf("only %d operations answered: too little load to check anything", res.Ops-res.Unanswered))
	}
	if err := tempesttest.SingleActivation(o.events); err != nil {
		found = append(found, err.Error())
	}
	for _, l := range o.late {
		found = append(found, "an ask outlived its deadline: "+l)
	}
	return append(found, o.checkTicks()...)
}

// checkTicks checks the beepers' reminders: each one still registered
// ticked again once the last fault had settled (none was lost or left
// stuck by a crash, a move or a refused activation); no tick of the
// cancelled one ran after its cancellation returned; and a reminder's
// sequence numbers never went back by more than what a crash may redo
// (delivered progress is written every second, so about one period).
func (o simOutcome) checkTicks() []string {
	var found []string
	after := map[string]bool{}
	top := map[string]uint64{}
	for _, tk := range o.ticks {
		if tk.at.After(o.settled) {
			after[tk.key] = true
		}
		if tk.key == fmt.Sprintf("b%d", simBeepers-1) && !o.cancelled.IsZero() && tk.at.After(o.cancelled) {
			found = append(found, fmt.Sprintf("reminder of %s ticked (seq %d on %s at %s) after its cancellation returned at %s",
				tk.key, tk.seq, tk.node, tk.at.UTC().Format("15:04:05.000"), o.cancelled.UTC().Format("15:04:05.000")))
		}
		if m := top[tk.key]; tk.seq+2 < m {
			found = append(found, fmt.Sprintf("reminder of %s went back from seq %d to %d (on %s at %s)",
				tk.key, m, tk.seq, tk.node, tk.at.UTC().Format("15:04:05.000")))
		}
		top[tk.key] = max(top[tk.key], tk.seq)
	}
	for b := range simBeepers {
		key := fmt.Sprintf("b%d", b)
		if (b < simBeepers-1 || o.cancelled.IsZero()) && !after[key] {
			found = append(found, fmt.Sprintf("reminder of %s did not tick after the last fault settled (last seq %d)", key, top[key]))
		}
	}
	return found
}

// write writes the run's steps and operations to a file in the
// temporary directory, for a failure's reader.
func (o simOutcome) write(t *testing.T, seed uint64) string {
	f, err := os.CreateTemp("", fmt.Sprintf("tempest-sim-%d-*.txt", seed))
	if err != nil {
		t.Log(err)
		return ""
	}
	defer f.Close()
	fmt.Fprintf(f, "steps:\n%s\n\noperations (call, return, client, node, amount, key, answer):\n%s\n",
		strings.Join(o.steps, "\n"), strings.Join(o.ops, "\n"))
	fmt.Fprintf(f, "\nlifecycle events of the counters and beepers (node, event):\n")
	for _, e := range o.events {
		fmt.Fprintf(f, "%s %s %s\n", e.At.UTC().Format("15:04:05.000000"), e.Node, e.Event)
	}
	fmt.Fprintf(f, "\nthe nodes' logs:\n%s", o.logs)
	t.Logf("the run's steps, operations, events and logs: %s", f.Name())
	return f.Name()
}

// step records what the driver does.
func (s *sim) step(format string, args ...any) {
	line := time.Now().UTC().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.steps = append(s.steps, line)
	s.mu.Unlock()
	s.log.Info("simulation: " + fmt.Sprintf(format, args...))
}

// idle lets the cluster run for d of fake time.
func (s *sim) idle(d time.Duration) { time.Sleep(d) }

// client sends Adds and Gets to counters through every running node
// until ctx ends, recording each in h.
func (s *sim) client(ctx context.Context, h *lincheck.History, id int, rng *rand.Rand) {
	for ctx.Err() == nil {
		op := lincheck.Op{Key: fmt.Sprintf("c%d", rng.IntN(simKeys))}
		if rng.IntN(10) < 7 {
			// Amounts from a wide range: almost every set of Adds has a
			// sum of its own, so a read tells the checker which Adds it
			// saw, and the search for a linearization stays short even
			// with Adds whose outcome is unknown.
			op.Add = 1 + rng.Int64N(1<<30)
		}
		nodes := s.running()
		if len(nodes) == 0 {
			return
		}
		via := nodes[rng.IntN(len(nodes))]
		done := h.Call(id, op)
		called := time.Now()
		v, err := s.ask(ctx, via, op)
		done(v, err == nil)
		res := fmt.Sprint(v)
		if err != nil {
			res = "? " + err.Error()
		}
		s.mu.Lock()
		s.ops = append(s.ops, fmt.Sprintf("%s %s client=%d via=%s add=%d -> %s", called.UTC().Format("15:04:05.000000"),
			time.Now().UTC().Format("15:04:05.000000"), id, via.Name(), op.Add, op.Key+" "+res))
		s.mu.Unlock()
		pause := time.Duration(20+rng.IntN(40)) * time.Millisecond
		if err != nil {
			// Every unanswered Add stays open in the history and widens
			// the checker's search.
			pause = time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// ask runs op through n with the simulation's deadline and records an
// ask that returned after it.
func (s *sim) ask(ctx context.Context, n *tempest.Node, op lincheck.Op) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, simAskTimeout)
	defer cancel()
	start := time.Now()
	deadline, _ := ctx.Deadline()
	var msg any = demo.Get{}
	if op.Add != 0 {
		msg = demo.Add{N: op.Add}
	}
	reply, err := n.Ask(ctx, n.Ref(demo.Counter, op.Key), msg)
	if now := time.Now(); now.After(deadline) {
		s.mu.Lock()
		s.late = append(s.late, fmt.Sprintf("%+v through %s, asked at %s, returned %v after its %v deadline (%v)",
			op, n.Name(), start.UTC().Format("15:04:05.000"), now.Sub(deadline), simAskTimeout, err))
		s.mu.Unlock()
	}
	if err != nil {
		return 0, err
	}
	v, ok := reply.(demo.CounterValue)
	if !ok {
		return 0, fmt.Errorf("reply %#v", reply)
	}
	return v.N, nil
}

// running returns the running nodes, sorted by name.
func (s *sim) running() []*tempest.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*tempest.Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *tempest.Node) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// reachable returns the running nodes that are not partitioned off.
func (s *sim) reachable() []*tempest.Node {
	nodes := s.running()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(nodes, func(n *tempest.Node) bool { return s.cut[n.Name()] })
}

// settle waits until the reachable nodes are settled
// (tempesttest.Unsettled): each shard owned by a reachable node, none
// moving, every in-sync replica set whole, so the next fault is a single
// fault.
func (s *sim) settle() {
	s.t.Helper()
	deadline := time.Now().Add(simSettleTimeout)
	for {
		why := tempesttest.Unsettled(s.reachable())
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("not settled after %v: %s%s", simSettleTimeout, why, s.stuck())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stuck describes, for a run that did not settle, what each running
// node replicates to whom, and writes every goroutine's stack (of this
// run's bubble and of any other running meanwhile) to a file it names.
func (s *sim) stuck() string {
	var b strings.Builder
	for _, n := range s.running() {
		if tb := n.Table(); tb != nil {
			fmt.Fprintf(&b, "\n%s's table (version %d, leader %q, readiness %v):", n.Name(), tb.Version, n.Leader(), n.Readiness())
			for _, name := range tb.NodeNames() {
				fmt.Fprintf(&b, " %s %s", name, tb.Nodes[name].Status)
			}
		}
		for _, l := range n.ReplicationLag() {
			fmt.Fprintf(&b, "\n%s → %s: %d shards, %+v", n.Name(), l.Follower, l.Shards, l.Lag)
		}
	}
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	if f, err := os.CreateTemp("", "tempest-sim-stacks-*.txt"); err == nil {
		_, _ = f.Write(buf)
		_ = f.Close()
		fmt.Fprintf(&b, "\ngoroutines: %s", f.Name())
	}
	return b.String()
}

// config is the configuration of node name.
func (s *sim) config(name string) tempest.Config {
	s.t.Helper()
	certPEM, keyPEM, err := s.ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: 24 * time.Hour})
	if err != nil {
		s.t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		s.t.Fatal(err)
	}
	dir, ok := s.dirs[name]
	if !ok {
		dir = simDataDir(s.t)
		s.dirs[name] = dir
	}
	gossip, place := tempesttest.FastTiming()
	cfg := tempest.Config{Name: name, DataDir: dir, Logger: s.log, Cluster: &tempest.ClusterConfig{
		BootstrapExpect: simNodes, Certificate: cert, CAs: s.pool, Version: "simulation",
		GossipTiming: gossip, Placement: place, LeaveTimeout: 20 * time.Second,
	}}
	cfg.Scheduler.Workers = 2
	cfg.Events = func(e prospero.Event) {
		s.mu.Lock()
		s.events = append(s.events, tempesttest.Event{Node: name, Event: e})
		s.mu.Unlock()
	}
	return cfg
}

// start starts node name on its data directory (a new one the first
// time).
func (s *sim) start(name string) {
	s.t.Helper()
	s.step("start %s", name)
	n, err := tempest.New(s.config(name))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{CounterPersistence: s.opts.persistence}); err != nil {
		s.t.Fatal(err)
	}
	if err := n.Register(simBeeper, func(key string) actor.Actor {
		return actor.Func(func(_ actor.Context, msg any) {
			if tk, ok := msg.(reminders.Tick); ok {
				s.mu.Lock()
				s.ticks = append(s.ticks, simTick{key: key, node: name, seq: tk.Seq, at: time.Now()})
				s.mu.Unlock()
			}
		})
	}, tempest.KindOptions{Reminders: true}); err != nil {
		s.t.Fatal(err)
	}
	if s.opts.register != nil {
		if err := s.opts.register(n); err != nil {
			s.t.Fatal(err)
		}
	}
	if err := testhooks.Simulate(n, s.net, s.view, func(graceful bool) { s.gone(name, graceful) }); err != nil {
		s.t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	s.mu.Lock()
	s.nodes[name] = n
	s.mu.Unlock()
}

// simBeeper is the kind whose identities hold the simulation's reminders.
const simBeeper = "beeper"

// remind registers the reminder of beeper key on its owner, asking again
// while the owner cannot take it (a shard settling after start).
func (s *sim) remind(key string) {
	s.t.Helper()
	r := reminders.Reminder{Name: "beep", Period: simBeepPeriod}
	s.onOwner("register the reminder of "+key, key, func(n *tempest.Node, ref actor.Ref) error {
		return tempest.RegisterReminderOn(context.Background(), n, ref, r)
	})
}

// cancelReminder cancels the reminder of beeper key and returns when the
// cancellation returned.
func (s *sim) cancelReminder(key string) time.Time {
	s.t.Helper()
	s.onOwner("cancel the reminder of "+key, key, func(n *tempest.Node, ref actor.Ref) error {
		err := n.Reminders().Cancel(context.Background(), ref, "beep")
		if errors.Is(err, reminders.ErrNotFound) {
			return nil // an earlier try was done, its answer lost
		}
		return err
	})
	return time.Now()
}

// onOwner runs op on the node that owns beeper key until it succeeds,
// for up to simSettleTimeout.
func (s *sim) onOwner(what, key string, op func(n *tempest.Node, ref actor.Ref) error) {
	s.t.Helper()
	s.step("%s", what)
	deadline := time.Now().Add(simSettleTimeout)
	for {
		var err error
		nodes := s.running()
		ref := nodes[0].Ref(simBeeper, key)
		var owner string
		if owner, _, err = nodes[0].Locate(ref); err == nil {
			s.mu.Lock()
			n := s.nodes[owner]
			s.mu.Unlock()
			if n == nil {
				err = fmt.Errorf("owner %s is not running", owner)
			} else if err = op(n, ref); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// view is gossip's answer to a starting node: its view lists the running
// nodes, and theirs list it.
func (s *sim) view(self membership.Member) *membership.Fake {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.boot++
	self.Meta.BootID = s.boot
	v := membership.NewFake(self)
	for name, m := range s.selves {
		v.Join(m)
		s.views[name].Join(self)
	}
	s.views[self.Name], s.selves[self.Name] = v, self
	return v
}

// gone is told that node name left gossip. A graceful leave is announced
// at once; a crash or a cut is noticed by the others after simDetect,
// which the driver waits out (see kill and partition).
func (s *sim) gone(name string, graceful bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.selves[name]; !ok {
		return
	}
	delete(s.selves, name)
	delete(s.views, name)
	for _, v := range s.views {
		if graceful {
			_ = v.Leave(name)
		}
	}
}

// fault injects one fault chosen by the schedule's generator.
func (s *sim) fault() {
	nodes := s.running()
	victim := nodes[s.rng.IntN(len(nodes))].Name()
	switch s.rng.IntN(4) {
	case 0:
		if s.rng.IntN(2) == 0 {
			// The raft leader, when one is known: its death also costs an
			// election.
			if l := nodes[0].Leader(); l != "" {
				victim = l
			}
		}
		if s.rng.IntN(2) == 0 {
			s.step("kill %s, restart it once gossip declared it failed (%v)", victim, simDetect)
			s.kill(victim, true)
		} else {
			d := time.Duration(s.rng.IntN(1000)) * time.Millisecond
			s.step("kill %s, restart it %v later, before gossip noticed", victim, d)
			s.kill(victim, false)
			time.Sleep(d)
		}
		s.start(victim)
	case 1:
		s.step("close %s gracefully, restart it", victim)
		s.close(victim)
		s.start(victim)
	case 2:
		d := time.Duration(1+s.rng.IntN(3)) * simDetect
		s.step("partition %s for %v", victim, d)
		s.partition(victim, d)
	case 3:
		// A lossy, slow network for everyone: mail and control frames
		// vanish or arrive late (raft's streams are reliable, as QUIC's).
		drop := float64(1+s.rng.IntN(10)) / 100
		delay := time.Duration(1+s.rng.IntN(30)) * time.Millisecond
		d := time.Duration(1+s.rng.IntN(4)) * time.Second
		s.step("drop %.0f%% of frames and delay each by %v for %v", drop*100, delay, d)
		s.net.SetDropRate(drop)
		s.net.SetDelay(delay)
		time.Sleep(d)
		s.net.SetDropRate(0)
		s.net.SetDelay(0)
		s.step("network whole again")
	}
}

// kill crashes node name; with detected, the others' gossip declares it
// failed after simDetect.
func (s *sim) kill(name string, detected bool) {
	s.mu.Lock()
	n := s.nodes[name]
	delete(s.nodes, name)
	s.mu.Unlock()
	if err := testhooks.Halt(context.Background(), n); err != nil {
		s.t.Logf("kill %s: %v", name, err)
	}
	if !detected {
		return // back before gossip notices: the others see it rejoin with a new BootID
	}
	time.Sleep(simDetect)
	s.mu.Lock()
	for _, v := range s.views {
		_ = v.Fail(name)
	}
	s.mu.Unlock()
}

// close stops node name gracefully.
func (s *sim) close(name string) {
	s.mu.Lock()
	n := s.nodes[name]
	delete(s.nodes, name)
	s.mu.Unlock()
	if err := n.Close(context.Background()); err != nil {
		s.t.Logf("close %s: %v", name, err)
	}
}

// partition cuts node name off the others for d: its links go down,
// and after simDetect each side's gossip declares the other failed; then
// the links heal and gossip sees everyone again.
func (s *sim) partition(name string, d time.Duration) {
	s.mu.Lock()
	s.cut[name] = true
	var others []string
	for o := range s.selves {
		if o != name {
			others = append(others, o)
		}
	}
	s.mu.Unlock()
	slices.Sort(others)
	for _, o := range others {
		s.net.Partition(name, o)
	}
	time.Sleep(simDetect)
	s.mu.Lock()
	for _, o := range others {
		if v := s.views[o]; v != nil {
			_ = v.Fail(name)
		}
		if v := s.views[name]; v != nil {
			_ = v.Fail(o)
		}
	}
	s.mu.Unlock()
	time.Sleep(d - simDetect)
	s.step("heal %s", name)
	for _, o := range others {
		s.net.Heal(name, o)
	}
	s.mu.Lock()
	delete(s.cut, name)
	for _, o := range others {
		if v, m := s.views[o], s.selves[name]; v != nil && m.Name != "" {
			v.Join(m)
		}
		if v, m := s.views[name], s.selves[o]; v != nil && m.Name != "" {
			v.Join(m)
		}
	}
	s.mu.Unlock()
}

// stopAll crashes every running node, all at once.
func (s *sim) stopAll() {
	nodes := s.running()
	s.mu.Lock()
	s.nodes = map[string]*tempest.Node{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { _ = testhooks.Halt(context.Background(), n) })
	}
	wg.Wait()
}

// simLogs keeps the simulated cluster's logs.
type simLogs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *simLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *simLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
