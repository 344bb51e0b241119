package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/prospero/federation"
	"github.com/tempest-actors/tempest/tempesttest"
)

// gateKind is a kind whose actors hold their turn on "block" until the
// test releases them, and record every other text they handle.
type gateKind struct {
	mu      sync.Mutex
	handled map[string]bool
	entered chan string   // the key of a turn that blocks
	release chan struct{} // closed: blocked turns go on
}

func newGateKind() *gateKind {
	return &gateKind{handled: map[string]bool{}, entered: make(chan string, 8), release: make(chan struct{})}
}

func (g *gateKind) register(n *tempest.Node, name string, opts tempest.KindOptions) error {
	opts.Messages = []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")}
	return n.Register(name, func(key string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			in, ok := msg.(demo.EchoIn)
			if !ok {
				return
			}
			if in.Text == "block" {
				g.entered <- key
				<-g.release
			} else {
				g.mu.Lock()
				g.handled[key+"/"+in.Text] = true
				g.mu.Unlock()
			}
			ctx.Reply(in)
		})
	}, opts)
}

func (g *gateKind) ran(key, text string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.handled[key+"/"+text]
}

// TestCancelledQueuedAskNeverRuns: an ask waiting in its actor's mailbox
// whose caller cancels its context is dropped there, and its turn never
// runs, whether the owner is the caller's node or another (CancelAsk on
// the control lane). The owner counts it (Stats.Scheduler.Cancelled; a
// remote owner also Mail.AsksWithdrawn and the CancelAsk's outcome), and
// the caller gets context.Canceled either way.
func TestCancelledQueuedAskNeverRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	g := newGateKind()
	// The blocking turn must outlast neither its budget nor the queued
	// ask's deadline however slow the machine: the ask would then be
	// dropped as expired (or its actor restarted), not as cancelled.
	opts := tempest.KindOptions{}
	opts.TurnBudget = 5 * time.Minute
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: func(n *tempest.Node) error {
		return g.register(n, "gate", opts)
	}})
	defer close(g.release)
	var errs [2]string
	for i, local := range []bool{true, false} {
		key := fmt.Sprintf("cancel-%v", local)
		ref := actor.Virtual("gate", key)
		owner := c.Owner(ref)
		caller := owner
		if !local {
			caller = c.NotOwner(ref)
		}
		before := owner.Stats()
		fedBefore := owner.FederationStats()

		blocked := make(chan error, 1)
		go func() {
			_, err := caller.Ask(t.Context(), ref, demo.EchoIn{Text: "block"})
			blocked <- err
		}()
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the blocking turn did not start")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		second := make(chan error, 1)
		go func() {
			_, err := caller.Ask(ctx, ref, demo.EchoIn{Text: "second"})
			second <- err
		}()
		waitFor(t, 30*time.Second, "the second ask queued on the owner", func() bool { return tempest.Queued(owner, ref) == 1 })
		cancel()
		err := <-second
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled ask: %v, want context.Canceled", err)
		}
		errs[i] = err.Error()
		if !local {
			// The withdrawal travels to the owner; the blocking turn goes
			// on only once it arrived, or the second turn could start first.
			waitFor(t, 30*time.Second, "the owner withdrew the ask", func() bool {
				return owner.Stats().Mail.AsksWithdrawn > before.Mail.AsksWithdrawn
			})
			if got := caller.Stats().Mail.AsksCancelled; got == 0 {
				t.Error("the caller's Mailer did not count the cancelled ask")
			}
		}
		g.release <- struct{}{}
		if err := <-blocked; err != nil {
			t.Fatalf("blocking ask: %v", err)
		}
		// A later ask from the same caller is handled after the dropped
		// one would have been: once it is answered, the dropped one had
		// its chance to run.
		if _, err := caller.Ask(t.Context(), ref, demo.EchoIn{Text: "third"}); err != nil {
			t.Fatal(err)
		}
		if g.ran(key, "second") {
			t.Fatalf("local=%v: the cancelled ask's turn ran", local)
		}
		if !g.ran(key, "third") {
			t.Fatal("the later ask did not run")
		}
		after := owner.Stats()
		if got := after.Scheduler.Cancelled - before.Scheduler.Cancelled; got != 1 {
			t.Errorf("local=%v: owner Scheduler.Cancelled grew by %d, want 1", local, got)
		}
		if !local {
			fedAfter := owner.FederationStats()
			if got := fedAfter.Noticed[federation.CodeOk] - fedBefore.Noticed[federation.CodeOk]; got != 1 {
				t.Errorf("owner counted %d CancelAsk withdrawals, want 1", got)
			}
		}
	}
	if errs[0] != errs[1] {
		t.Fatalf("owner local: %q, owner remote: %q", errs[0], errs[1])
	}
}

// TestAskDeadlinePolicy: a kind's default ask timeout applies to an ask
// whose context sets no deadline, and its maximum clamps a longer one,
// with the same error wherever the owner is and whether or not the
// caller's node hosts the kind: a node that does not learns the policy
// from the kind's hosts through the placement table.
func TestAskDeadlinePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// The kind's actors never answer: each ask waits for its deadline.
	// They hold the asks' Repliers, so none fails early with ErrNoReply.
	var mu sync.Mutex
	var held []actor.Replier
	opts := tempest.KindOptions{Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")}}
	opts.AskTimeout = 200 * time.Millisecond
	opts.MaxAskTimeout = 400 * time.Millisecond
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		if n.Name() == "n3" {
			// Hosts no "slow" (placement keeps its shards off n3), only
			// another kind that takes the same message.
			return n.Register("other", func(string) actor.Actor { return actor.Func(func(actor.Context, any) {}) },
				tempest.KindOptions{Messages: opts.Messages})
		}
		return n.Register("slow", func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				if _, ok := msg.(demo.EchoIn); ok {
					mu.Lock()
					held = append(held, ctx.ReplyLater())
					mu.Unlock()
				}
			})
		}, opts)
	}})
	ask := func(caller *tempest.Node, ctx context.Context, key string) error {
		_, err := caller.Ask(ctx, actor.Virtual("slow", key), demo.EchoIn{Text: "wait"})
		return err
	}
	for _, tc := range []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		wantErr string
	}{
		{"default", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			"tempest: ask of slow/KEY: deadline exceeded after 200ms"},
		{"clamped", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Minute)
		},
			"tempest: ask of slow/KEY: deadline exceeded after 400ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, caller := range []string{"owner", "another host", "n3, not a host"} {
				key := fmt.Sprintf("%s-%s", tc.name, caller)
				ref := actor.Virtual("slow", key)
				owner := c.Owner(ref)
				from := owner
				switch caller {
				case "another host":
					from = c.Node(map[string]string{"n1": "n2", "n2": "n1"}[owner.Name()])
				case "n3, not a host":
					from = c.Node("n3")
				}
				ctx, cancel := tc.ctx()
				err := ask(from, ctx, key)
				cancel()
				var de *tempest.DeadlineError
				if !errors.As(err, &de) || !errors.Is(err, actor.ErrDeadlineExceeded) {
					t.Fatalf("caller %s: %v, want a DeadlineError", caller, err)
				}
				if got := strings.ReplaceAll(de.Error(), key, "KEY"); got != tc.wantErr {
					t.Errorf("caller %s: %q, want %q", caller, got, tc.wantErr)
				}
			}
		})
	}
	mu.Lock()
	if len(held) < 6 {
		t.Errorf("%d asks reached their actor, want 6", len(held))
	}
	mu.Unlock()
}
