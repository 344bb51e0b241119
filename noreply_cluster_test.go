package tempest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/tempesttest"
)

type quietMsg string

// An ask whose turn ends without an answer fails with ErrNoReply at the
// turn's end, and one whose turn panics with ErrPanicked naming the
// panic, whether its owner is the caller's node or another; an answered
// one is answered.
func TestUnansweredAndPanickedAsksFailAlikeOnEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	register := func(n *tempest.Node) error {
		return n.Register("quiet", func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				switch msg {
				case quietMsg("answer"):
					ctx.Reply(quietMsg("yes"))
				case quietMsg("panic"):
					panic("boom")
				}
			})
		}, tempest.KindOptions{Messages: []tempest.Message{hopCodec[quietMsg](904)}})
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: register})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	for _, owner := range []string{"n1", "n2"} {
		ref := actor.Virtual("quiet", keyOn(t, c, "quiet", owner))
		askCtx, cancelAsk := context.WithTimeout(ctx, 20*time.Second)
		_, err := n1.Ask(askCtx, ref, quietMsg("ignore"))
		if !errors.Is(err, actor.ErrNoReply) {
			t.Fatalf("owner %s: unanswered ask: %v, want ErrNoReply", owner, err)
		}
		if askCtx.Err() != nil {
			t.Fatalf("owner %s: the unanswered ask waited for its deadline", owner)
		}
		cancelAsk()
		_, err = n1.Ask(ctx, ref, quietMsg("panic"))
		if !errors.Is(err, actor.ErrPanicked) || err.Error() != "tempest: actor panicked: boom" {
			t.Fatalf("owner %s: ask of a panicking turn: %v, want ErrPanicked naming the panic", owner, err)
		}
		if v, err := n1.Ask(ctx, ref, quietMsg("answer")); err != nil || v != quietMsg("yes") {
			t.Fatalf("owner %s: answered ask: %v, %v", owner, v, err)
		}
	}
}
