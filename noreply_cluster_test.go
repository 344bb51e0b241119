package tempest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire"
)

type quietMsg string

// unsaved is a durable actor whose state cannot be marshalled once it
// was told to break: the commit of that turn fails.
type unsaved struct{ broken bool }

var errUnsaved = errors.New("state cannot be marshalled")

func (u *unsaved) Receive(ctx actor.Context, msg any) {
	if msg == quietMsg("break") {
		u.broken = true
		ctx.Reply(quietMsg("broken"))
	}
}

func (u *unsaved) MarshalState() ([]byte, error) {
	if u.broken {
		return nil, errUnsaved
	}
	return []byte{0}, nil
}

func (u *unsaved) UnmarshalState([]byte) error { return nil }

// An ask whose turn ends without an answer fails with ErrNoReply at the
// turn's end, one whose turn panics with ErrPanicked naming the panic,
// and one whose turn's state could not be committed with ErrNotCommitted
// naming the cause, in the same form, whether its owner is the caller's
// node or another; an answered one is answered.
func TestUnansweredAndPanickedAsksFailAlikeOnEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	register := func(n *tempest.Node) error {
		err := n.Register("quiet", func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				switch msg {
				case quietMsg("answer"):
					ctx.Reply(quietMsg("yes"))
				case quietMsg("panic"):
					panic("boom")
				}
			})
		}, tempest.KindOptions{Messages: []tempest.Message{hopCodec[quietMsg](904)}})
		if err != nil {
			return err
		}
		return n.Register("unsaved", func(string) actor.Actor { return &unsaved{} }, tempest.KindOptions{
			KindOptions: prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}},
			Messages:    []tempest.Message{hopCodec[quietMsg](904)},
		})
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: register})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	var notCommitted []string
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
		key := keyOn(t, c, "unsaved", owner)
		_, err = n1.Ask(ctx, actor.Virtual("unsaved", key), quietMsg("break"))
		var ce *prospero.CommitError
		var re *wire.RemoteError
		if !errors.Is(err, actor.ErrNotCommitted) || errors.As(err, &ce) || !errors.As(err, &re) {
			t.Fatalf("owner %s: ask whose state was not committed: %v (%T), want ErrNotCommitted as it crosses the wire", owner, err, err)
		}
		notCommitted = append(notCommitted, strings.Replace(err.Error(), "unsaved/"+key, "unsaved/KEY", 1))
	}
	if notCommitted[0] != notCommitted[1] || !strings.Contains(notCommitted[0], errUnsaved.Error()) {
		t.Fatalf("not committed, owner n1: %q; owner n2: %q; want the same, naming the cause", notCommitted[0], notCommitted[1])
	}
}
