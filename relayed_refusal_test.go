package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire"
)

// An error an actor replies with is its turn's outcome, whatever it
// wraps: one that wraps a routing refusal (an actor relaying what its
// own ask got: NOT_OWNER, NOT_SERVING, BUSY, a shard in handoff) must not
// make the caller's node send the ask again, which would run the turn
// twice. From the owner's node and from another alike.
func TestRelayedRefusalIsNotSentAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	var turns atomic.Int64
	relays := []error{
		wire.NotOwner("elsewhere"),
		wire.NotServing(placement.ErrBehind),
		wire.Busy(time.Millisecond, "relayed"),
		placement.ErrHandoff,
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: func(n *tempest.Node) error {
		relay := func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				if in, ok := msg.(demo.EchoIn); ok {
					turns.Add(1)
					var i int
					fmt.Sscan(in.Text, &i)
					ctx.ReplyError(fmt.Errorf("relayed: %w", relays[i]))
				}
			})
		}
		return n.Register("relay", relay, tempest.KindOptions{
			Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")}})
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range relays {
		for _, local := range []bool{true, false} {
			ref := actor.Virtual("relay", fmt.Sprintf("r%d-%v", i, local))
			caller := c.Owner(ref)
			if !local {
				caller = c.NotOwner(ref)
			}
			before := turns.Load()
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := caller.Ask(actx, caller.Ref("relay", ref.Key()), demo.EchoIn{Text: fmt.Sprint(i)})
			acancel()
			if err == nil || errors.Is(err, actor.ErrDeadlineExceeded) {
				t.Errorf("%v (local %v): ask = %v, want the relayed error at once", relays[i], local, err)
			}
			if n := turns.Load() - before; n != 1 {
				t.Errorf("%v (local %v): the turn ran %d times, want once", relays[i], local, n)
			}
		}
	}
}
