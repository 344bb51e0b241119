package tempest_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/tempesttest"
)

// TestMessageTooLargeToCross: a message or a reply over the transport's
// frame limit cannot cross between nodes. The sender of such a message
// to a remote owner, and the asker whose reply cannot come back, get
// ErrMessageTooLarge at once: the asker does not wait for its deadline
// (it would get a *DeadlineError if it did). Between actors of one node
// nothing is encoded, so the same calls made on the owner's node work
// (docs of ErrMessageTooLarge).
func TestMessageTooLargeToCross(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	big := strings.Repeat("x", 5<<20) // over the 4 MiB default
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: func(n *tempest.Node) error {
		return n.Register("big", func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				if in, ok := msg.(demo.EchoIn); ok {
					if in.Text == "big reply" {
						ctx.Reply(demo.EchoIn{Text: big})
						return
					}
					ctx.Reply(demo.EchoIn{Text: "ok"})
				}
			})
		}, tempest.KindOptions{Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")}})
	}})
	ref := actor.Virtual("big", "k")
	owner, other := c.Owner(ref), c.NotOwner(ref)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	for _, tc := range []struct {
		name string
		msg  demo.EchoIn
	}{
		{"message", demo.EchoIn{Text: big}},
		{"reply", demo.EchoIn{Text: "big reply"}},
	} {
		if _, err := owner.Ask(ctx, ref, tc.msg); err != nil {
			t.Fatalf("%s on the owner's node: %v", tc.name, err)
		}
		_, err := other.Ask(ctx, ref, tc.msg)
		var de *tempest.DeadlineError
		if !errors.Is(err, tempest.ErrMessageTooLarge) || errors.As(err, &de) {
			t.Fatalf("%s from another node: %v, want ErrMessageTooLarge at once", tc.name, err)
		}
		t.Logf("%s from another node: %v", tc.name, err)
	}
	if err := other.Tell(ref, demo.EchoIn{Text: big}); !errors.Is(err, tempest.ErrMessageTooLarge) {
		t.Fatalf("tell from another node: %v, want ErrMessageTooLarge", err)
	}
	// The link still works.
	if _, err := other.Ask(ctx, ref, demo.EchoIn{Text: "small"}); err != nil {
		t.Fatal(err)
	}
}

// TestUndeclaredTellRefusedByTheOwner: a tell of a registered type its
// recipient's kind does not declare, from a node that does not host the
// kind, is refused by the owner's node (counted in Stats().Mail.Undeclared),
// not delivered; from the owner's node, Tell returns the error at once.
func TestUndeclaredTellRefusedByTheOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	echo := tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")
	add := tempest.MessageOf[demo.Add](demo.TagAdd, "Add")
	var delivered atomic.Int64
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: func(n *tempest.Node) error {
		if err := n.Register("other", func(string) actor.Actor { return actor.Func(func(actor.Context, any) {}) },
			tempest.KindOptions{Messages: []tempest.Message{add}}); err != nil {
			return err
		}
		if n.Name() != "n1" {
			return nil
		}
		return n.Register("only1", func(string) actor.Actor {
			return actor.Func(func(_ actor.Context, msg any) {
				if _, ok := msg.(demo.Add); ok {
					delivered.Add(1)
				}
			})
		}, tempest.KindOptions{Messages: []tempest.Message{echo}})
	}})
	ref := actor.Virtual("only1", "k")
	n1, n2 := c.Node("n1"), c.Node("n2")
	if err := n1.Tell(ref, demo.Add{N: 1}); !errors.Is(err, tempest.ErrUnregisteredMessage) {
		t.Fatalf("tell on the node hosting the kind: %v, want ErrUnregisteredMessage", err)
	}
	if err := n2.Tell(ref, demo.Add{N: 1}); err != nil {
		t.Fatalf("tell from a node that does not host the kind: %v (refused later by the owner)", err)
	}
	waitFor(t, 20*time.Second, "the owner refusing the undeclared tell", func() bool { return n1.Stats().Mail.Undeclared == 1 })
	if delivered.Load() != 0 {
		t.Fatal("an undeclared message reached the actor")
	}
}
