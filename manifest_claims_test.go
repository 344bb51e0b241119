package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/prospero"
)

// The manifest is load-bearing: every clause a node reports as Discharged
// must hold on that node. These tests read the claims from the running
// node's Manifest and demonstrate each one on it, so a manifest that
// claimed more than the node does would fail here.

// gate is an actor whose turns block until released, to saturate workers
// and fill mailboxes on purpose.
type gate struct{ release <-chan struct{} }

func (g gate) Receive(ctx actor.Context, msg any) {
	switch msg.(type) {
	case string:
		<-g.release
		ctx.Reply("done")
	case int:
		ctx.Reply("quick")
	}
}

type claimNode struct {
	n       *tempest.Node
	release chan struct{}
	once    sync.Once
	spin    atomic.Bool // spinning turns run while it is false
	mu      sync.Mutex
	events  []prospero.Event
	warns   atomic.Int64 // warnings logged about a degraded scheduler
}

func (c *claimNode) seen(typ prospero.EventType, cause prospero.FaultCause) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if e.Type == typ && (typ != prospero.EventFault || e.Cause == cause) {
			return true
		}
	}
	return false
}

// unblock ends the turns blocked in gate's "block".
func (c *claimNode) unblock() { c.once.Do(func() { close(c.release) }) }

// seenFor reports whether an event of typ was emitted for kind/key.
func (c *claimNode) seenFor(typ prospero.EventType, kind, key string) (prospero.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if e.Type == typ && e.ID.Kind == kind && e.ID.Key == key {
			return e, true
		}
	}
	return prospero.Event{}, false
}

// claimOptions shape a claim node: its workers, replacement cap, the
// "gate" kind's mailbox depth and turn budget, the scheduler's budget.
type claimOptions struct {
	workers, depth, maxReplacements int
	kindBudget, schedulerBudget     time.Duration
}

// startClaimNode runs a node with workers workers and a "gate" kind whose
// mailboxes hold depth messages and whose turns have the given budget.
func startClaimNode(t *testing.T, workers, depth int, budget time.Duration) *claimNode {
	return startClaimNodeWith(t, claimOptions{workers: workers, depth: depth, kindBudget: budget, schedulerBudget: budget})
}

// degradedLog counts warnings the scheduler logs about running degraded.
type degradedLog struct{ c *claimNode }

func (h degradedLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h degradedLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "degraded") {
		h.c.warns.Add(1)
	}
	return nil
}
func (h degradedLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h degradedLog) WithGroup(string) slog.Handler      { return h }

// startClaimNodeWith runs a node with the "gate" kind of o, a "spin" kind
// whose "spin" turn spins on the CPU until the test ends (budget
// o.kindBudget), and a "nap" kind whose "nap" turn sleeps 400 ms under
// the scheduler's budget.
func startClaimNodeWith(t *testing.T, o claimOptions) *claimNode {
	t.Helper()
	c := &claimNode{release: make(chan struct{})}
	cfg := tempest.Config{Name: "claims", DataDir: t.TempDir(), Logger: slog.New(degradedLog{c})}
	cfg.Scheduler.Workers = o.workers
	cfg.Scheduler.TurnBudget = o.schedulerBudget
	cfg.Scheduler.MaxReplacements = o.maxReplacements
	cfg.Events = func(e prospero.Event) {
		c.mu.Lock()
		c.events = append(c.events, e)
		c.mu.Unlock()
	}
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kind := func(budget time.Duration) tempest.KindOptions {
		return tempest.KindOptions{KindOptions: prospero.KindOptions{MailboxDepth: o.depth, TurnBudget: budget, IdleTimeout: prospero.NeverIdle}}
	}
	if err := n.Register("gate", func(string) actor.Actor { return gate{release: c.release} }, kind(o.kindBudget)); err != nil {
		t.Fatal(err)
	}
	spin := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if msg == "spin" {
				for !c.spin.Load() { // never returns, as far as the node can tell
				}
			}
		})
	}
	if err := n.Register("spin", spin, kind(o.kindBudget)); err != nil {
		t.Fatal(err)
	}
	nap := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if msg == "nap" {
				time.Sleep(400 * time.Millisecond) // a long turn, not synchronization
				ctx.Reply("rested")
			}
		})
	}
	if err := n.Register("nap", nap, kind(0)); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.n = n
	t.Cleanup(func() {
		c.unblock() // let blocked turns end so Close can finish
		c.spin.Store(true)
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		waitFor(t, 20*time.Second, "abandoned turns to return", func() bool { return n.Stats().Scheduler.Stuck == 0 })
	})
	return c
}

func requireDischarged(t *testing.T, n *tempest.Node, clause manifest.ClauseID) {
	t.Helper()
	if d := n.Manifest().Clause(clause); !d.IsDischarged() {
		t.Fatalf("manifest reports %s as %v; this test demonstrates a Discharged claim", clause, d)
	}
}

// Admission: accept or refuse, and refusal is observable. With one
// message running and the mailbox full, the next send is refused at once
// with ErrRefused (never queued without bound, never dropped silently).
func TestClaimAdmission(t *testing.T) {
	const depth = 4
	c := startClaimNode(t, 2, depth, 5*time.Second)
	requireDischarged(t, c.n, manifest.Admission)
	ref := c.n.Ref("gate", "a")
	if err := c.n.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	var refused int
	for range 10 * depth {
		err := c.n.Tell(ref, 1)
		switch {
		case errors.Is(err, actor.ErrRefused):
			refused++
		case err != nil:
			t.Fatalf("tell: %v", err)
		}
	}
	// The bound holds: at most depth messages wait in the mailbox, plus the
	// batch the worker took with the running one (a drain cycle takes up to
	// 8 messages and frees their slots as it takes them); every other send
	// was refused, observably.
	const batch = 8
	if accepted := 10*depth - refused; accepted > depth+batch || refused == 0 {
		t.Fatalf("accepted %d of %d with a mailbox of %d (refused %d)", accepted, 10*depth, depth, refused)
	}
}

// TurnDiscipline: turns run to completion, and a turn past its kind's
// budget is a fault remedied at once, also when the turn never returns:
// the turn is abandoned (its ask fails with ErrActorTerminated without
// waiting for it), the supervisor restarts the identity under a new
// incarnation that answers, and a stale reference reads ActorTerminated.
// The budget is the kind's, shown per kind in the manifest: a kind
// without one gets the scheduler's, so its long turn stands.
func TestClaimTurnDiscipline(t *testing.T) {
	const budget = 300 * time.Millisecond
	c := startClaimNodeWith(t, claimOptions{workers: 2, depth: 16, kindBudget: budget, schedulerBudget: 5 * time.Second})
	requireDischarged(t, c.n, manifest.TurnDiscipline)
	caps := c.n.Manifest().Capacities
	if caps.TurnBudget != 5*time.Second || len(caps.Kinds) != 3 {
		t.Fatalf("manifest capacities %+v", caps)
	}
	for _, k := range caps.Kinds {
		want := budget
		if k.Kind == "nap" {
			want = 5 * time.Second
		}
		if k.TurnBudget != want || k.MailboxDepth != 16 {
			t.Fatalf("manifest reports kind %+v, want turn budget %v", k, want)
		}
	}
	ref := c.n.Ref("gate", "slow")
	if _, err := c.n.Ask(ctxT(t), ref, "block"); !errors.Is(err, actor.ErrActorTerminated) {
		t.Fatalf("ask of a turn that never returns: %v, want ErrActorTerminated", err)
	}
	waitFor(t, 10*time.Second, "the restart", func() bool {
		_, ok := c.seenFor(prospero.EventRestarted, "gate", "slow")
		return ok
	})
	if _, ok := c.seenFor(prospero.EventTurnAbandoned, "gate", "slow"); !ok || !c.seen(prospero.EventFault, prospero.FaultBudgetExhausted) {
		t.Fatal("no TurnAbandoned and BudgetExhausted fault events")
	}
	if reply, err := c.n.Ask(ctxT(t), ref, 1); err != nil || reply != "quick" {
		t.Fatalf("the new incarnation: %v, %v", reply, err)
	}
	if st, err := c.n.Status(ctxT(t), ref.WithIncarnation(1)); err != nil || st.State != actor.ActorTerminated || st.Incarnation != 2 {
		t.Fatalf("stale reference: %+v, %v", st, err)
	}
	if st := c.n.Stats().Scheduler; st.Stuck != 1 || st.Exhausted != 1 {
		t.Fatalf("scheduler stats %+v, want one turn abandoned and still stuck", st)
	}
	// A kind without a budget of its own has the scheduler's 5 s: a turn
	// longer than gate's budget stands.
	if reply, err := c.n.Ask(ctxT(t), c.n.Ref("nap", "a"), "nap"); err != nil || reply != "rested" {
		t.Fatalf("a 400 ms turn under a 5 s budget: %v, %v", reply, err)
	}
}

// ControlPlaneImmunity at its limit: with every worker inside a turn that
// never returns (one spinning on the CPU, one blocked on a channel),
// supervision still runs its remedies (both are abandoned and restarted
// while their goroutines stay stuck), other actors answer asks,
// passivation works, and the HTTP API and readiness probe answer.
func TestClaimControlPlaneImmunity(t *testing.T) {
	const workers = 2
	c := startClaimNodeWith(t, claimOptions{workers: workers, depth: 16, kindBudget: 300 * time.Millisecond, schedulerBudget: 5 * time.Second})
	requireDischarged(t, c.n, manifest.ControlPlaneImmunity)
	met := httpapi.NewMetrics("test")
	met.Attach(c.n)
	api, err := httpapi.New(httpapi.Config{Node: c.n, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	if err := c.n.Tell(c.n.Ref("spin", "hot"), "spin"); err != nil {
		t.Fatal(err)
	}
	if err := c.n.Tell(c.n.Ref("gate", "cold"), "block"); err != nil {
		t.Fatal(err)
	}
	// Both workers are taken; the probes do not need them.
	for _, path := range []string{"/readyz", "/healthz"} {
		if code, body := httpGet(t, srv.URL+path); code != 200 {
			t.Fatalf("%s with every worker stuck: %d %s", path, code, body)
		}
	}
	for _, key := range []string{"hot", "cold"} {
		kind := map[string]string{"hot": "spin", "cold": "gate"}[key]
		waitFor(t, 10*time.Second, "the restart of "+kind+"/"+key, func() bool {
			_, ok := c.seenFor(prospero.EventRestarted, kind, key)
			return ok
		})
	}
	if st := c.n.Stats().Scheduler; st.Stuck != workers || st.Workers != workers || st.Degraded {
		t.Fatalf("scheduler stats %+v: want both original workers stuck and replaced", st)
	}
	// Other actors answer, and passivation works.
	other := c.n.Ref("gate", "other")
	if reply, err := c.n.Ask(ctxT(t), other, 1); err != nil || reply != "quick" {
		t.Fatalf("ask with every original worker stuck: %v, %v", reply, err)
	}
	if err := c.n.Passivate(ctxT(t), other); err != nil {
		t.Fatalf("passivate: %v", err)
	}
	if _, ok := c.seenFor(prospero.EventPassivated, "gate", "other"); !ok {
		t.Fatal("no Passivated event")
	}
	// The HTTP API answers too, and its metrics show the stuck turns.
	if code, body := httpGet(t, srv.URL+"/v1/actors/gate/other"); code != 200 || !strings.Contains(body, "Dormant") {
		t.Fatalf("status through the HTTP API: %d %s", code, body)
	}
	_, metrics := httpGet(t, srv.URL+"/metrics")
	for _, want := range []string{"tempest_turns_stuck 2", "tempest_turn_budget_exhausted_total 2", "tempest_scheduler_degraded 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Bounded capacity: a hundred actors stuck in turns that never return
// cost the stuck goroutines plus at most the replacement cap; past the
// cap the node reports itself degraded (manifest capacity, readiness
// detail, metric, log) instead of growing, and it recovers when the
// turns return.
func TestClaimBoundedReplacements(t *testing.T) {
	const workers, limit, actors = 2, 4, 100
	c := startClaimNodeWith(t, claimOptions{workers: workers, depth: 16, maxReplacements: limit,
		kindBudget: 200 * time.Millisecond, schedulerBudget: 5 * time.Second})
	if got := c.n.Manifest().Capacities.ReplacementWorkers; got != limit {
		t.Fatalf("manifest replacement workers %d, want %d", got, limit)
	}
	met := httpapi.NewMetrics("test")
	met.Attach(c.n)
	api, err := httpapi.New(httpapi.Config{Node: c.n, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	if reply, err := c.n.Ask(ctxT(t), c.n.Ref("gate", "warm"), 1); err != nil || reply != "quick" {
		t.Fatalf("warm-up: %v, %v", reply, err)
	}
	before := runtime.NumGoroutine()
	for i := range actors {
		if err := c.n.Tell(c.n.Ref("gate", fmt.Sprintf("stuck-%d", i)), "block"); err != nil {
			t.Fatal(err)
		}
	}
	// Two workers and four replacements get stuck; then no worker is left.
	waitFor(t, 20*time.Second, "a pool with no live worker", func() bool {
		st := c.n.Stats().Scheduler
		return st.Stuck == workers+limit && st.Workers == 0
	})
	// The original workers were counted before: the cap's replacements
	// are all that was added (timer callbacks come and go, so wait for
	// the count to settle).
	waitFor(t, 10*time.Second, fmt.Sprintf("at most %d goroutines beyond the pool", limit), func() bool {
		return runtime.NumGoroutine()-before <= limit
	})
	why := c.n.Degraded()
	if why == "" {
		t.Fatal("the node does not report itself degraded")
	}
	if code, body := httpGet(t, srv.URL+"/readyz"); code != 200 || !strings.Contains(body, `"degraded"`) {
		t.Fatalf("readiness of a degraded node: %d %s", code, body)
	}
	if _, metrics := httpGet(t, srv.URL+"/metrics"); !strings.Contains(metrics, "tempest_scheduler_degraded 1") {
		t.Fatal("/metrics does not show the degraded pool")
	}
	if c.warns.Load() == 0 {
		t.Fatal("nothing logged about the degraded pool")
	}
	// The turns return: the pool gets its workers back, and the mail that
	// waited runs.
	c.unblock()
	waitFor(t, 20*time.Second, "the pool back to its size", func() bool {
		st := c.n.Stats().Scheduler
		return st.Stuck == 0 && st.Workers == workers && !st.Degraded
	})
	if why := c.n.Degraded(); why != "" {
		t.Fatalf("still degraded: %s", why)
	}
	if reply, err := c.n.Ask(ctxT(t), c.n.Ref("gate", fmt.Sprintf("stuck-%d", actors-1)), 1); err != nil || reply != "quick" {
		t.Fatalf("an actor that waited for a worker: %v, %v", reply, err)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
