package tempest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
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
	mu      sync.Mutex
	events  []prospero.Event
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

// startClaimNode runs a node with workers workers and a "gate" kind whose
// mailboxes hold depth messages and whose turns have the given budget.
func startClaimNode(t *testing.T, workers, depth int, budget time.Duration) *claimNode {
	t.Helper()
	c := &claimNode{release: make(chan struct{})}
	cfg := tempest.Config{Name: "claims", DataDir: t.TempDir()}
	cfg.Scheduler.Workers = workers
	cfg.Scheduler.TurnBudget = budget
	cfg.Events = func(e prospero.Event) {
		c.mu.Lock()
		c.events = append(c.events, e)
		c.mu.Unlock()
	}
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = n.Register("gate", func(string) actor.Actor { return gate{release: c.release} }, tempest.KindOptions{
		KindOptions: prospero.KindOptions{MailboxDepth: depth, TurnBudget: budget, IdleTimeout: prospero.NeverIdle},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.n = n
	t.Cleanup(func() {
		close(c.release) // let blocked turns end so Close can finish
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
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

// TurnDiscipline: turns run to completion, and a turn past the budget is
// a fault, reported to the supervisor, which applies the kind's remedy
// (Restart: the incarnation is re-minted).
func TestClaimTurnDiscipline(t *testing.T) {
	const budget = 50 * time.Millisecond
	c := startClaimNode(t, 2, 16, budget)
	requireDischarged(t, c.n, manifest.TurnDiscipline)
	if got := c.n.Manifest().Capacities.TurnBudget; got != budget {
		t.Fatalf("manifest turn budget %v, configured %v", got, budget)
	}
	ref := c.n.Ref("gate", "slow")
	if err := c.n.Tell(ref, "block"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a BudgetExhausted fault and a restart", func() bool {
		return c.seen(prospero.EventFault, prospero.FaultBudgetExhausted) && c.seen(prospero.EventRestarted, 0)
	})
}

// ControlPlaneImmunity: supervision stays executable at saturation. With
// every worker stuck in a long turn, the supervisor still sees the
// over-budget turns and restarts them, replacement workers keep the pool's
// capacity (other actors are served), and an ask queued behind a stuck turn
// fails at its deadline rather than waiting for that turn.
func TestClaimControlPlaneImmunity(t *testing.T) {
	const workers = 2
	c := startClaimNode(t, workers, 16, 50*time.Millisecond)
	requireDischarged(t, c.n, manifest.ControlPlaneImmunity)
	for i := range workers {
		if err := c.n.Tell(c.n.Ref("gate", "busy-"+string(rune('a'+i))), "block"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "restarts while every worker is blocked", func() bool {
		return c.seen(prospero.EventRestarted, 0)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.n.Ask(ctx, c.n.Ref("gate", "busy-a"), 1)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, actor.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ask behind saturated workers: %v, want a deadline error", err)
		}
	case <-time.After(30 * time.Second): // a generous bound, not a speed assertion
		t.Fatal("an ask queued behind a stuck turn did not fail at its deadline")
	}
	// The pool kept its capacity: another actor still answers.
	reply, err := c.n.Ask(ctxT(t), c.n.Ref("gate", "other"), 1)
	if err != nil || reply != "quick" {
		t.Fatalf("ask to an idle actor with every original worker stuck: %v, %v", reply, err)
	}
}
