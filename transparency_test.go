package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/examples/bank"
	"github.com/tempest-actors/tempest/tempesttest"
)

// outcome is what a caller can observe of one call: the reply and every
// identity test a caller might branch on.
type outcome struct {
	Reply     any
	Err       string
	Is        map[string]bool
	Overdraft *bank.Overdraft // errors.As target
}

var identities = map[string]error{
	"ErrInsufficientFunds":   bank.ErrInsufficientFunds,
	"ErrInvalidAmount":       bank.ErrInvalidAmount,
	"ErrUnregisteredMessage": tempest.ErrUnregisteredMessage,
	"ErrUnknownKind":         actor.ErrUnknownKind,
	"ErrRefused":             actor.ErrRefused,
	"ErrDeadlineExceeded":    actor.ErrDeadlineExceeded,
	"ErrActorTerminated":     actor.ErrActorTerminated,
	"ErrProcessUnavailable":  actor.ErrProcessUnavailable,
	"ErrUnexpectedReply":     tempest.ErrUnexpectedReply,
	"demo.ErrOverflow":       demo.ErrOverflow,
}

func observe(reply any, err error) outcome {
	o := outcome{Reply: reply, Is: map[string]bool{}}
	if err != nil {
		o.Err = err.Error()
	}
	for name, target := range identities {
		if errors.Is(err, target) {
			o.Is[name] = true
		}
	}
	var od *bank.Overdraft
	if errors.As(err, &od) {
		o.Overdraft = od
	}
	return o
}

// TestLocationTransparency runs each call once from the node that owns the
// key and once from a node that does not, on an account in the same
// state, and asserts that the callers observe the same thing: reply,
// error text, errors.Is for every sentinel and errors.As for the typed
// error.
func TestLocationTransparency(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: func(n *tempest.Node) error {
		if err := demo.Register(n, demo.Options{}); err != nil {
			return err
		}
		return bank.Register(n)
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// Each case gets fresh accounts holding 100, one per caller, chosen
	// so that one caller is the owner and the other is not.
	type call func(ctx context.Context, n *tempest.Node, acct string) (any, error)
	ask := func(msg any) call {
		return func(ctx context.Context, n *tempest.Node, acct string) (any, error) {
			return n.Ask(ctx, n.Ref(bank.Account, acct), msg)
		}
	}
	cases := []struct {
		name string
		kind string // the kind the call addresses, whose owner decides local or remote (default account)
		do   call
		want func(o outcome) bool // a sanity check that the case tests what it says
	}{
		{"reply", "", ask(bank.Deposit{Amount: 5}), func(o outcome) bool { return o.Reply == bank.Balance{Cents: 105} }},
		{"pointer message", "", ask(&bank.Deposit{Amount: 5}), func(o outcome) bool { return o.Reply == bank.Balance{Cents: 105} }},
		{"typed error", "", ask(bank.Withdraw{Amount: 500}), func(o outcome) bool {
			return o.Is["ErrInsufficientFunds"] && o.Overdraft != nil && *o.Overdraft == bank.Overdraft{Balance: 100, Amount: 500}
		}},
		{"wrapped sentinel", "", ask(bank.Withdraw{Amount: -1}), func(o outcome) bool {
			return o.Is["ErrInvalidAmount"] && o.Err == "bank: amount must be positive: withdrawal of -1"
		}},
		{"unregistered type", "", ask("withdraw everything"), func(o outcome) bool { return o.Is["ErrUnregisteredMessage"] }},
		{"unregistered type told", "", func(_ context.Context, n *tempest.Node, acct string) (any, error) {
			return nil, n.Tell(n.Ref(bank.Account, acct), 42)
		}, func(o outcome) bool { return o.Is["ErrUnregisteredMessage"] }},
		{"unknown kind", "no-such-kind", func(ctx context.Context, n *tempest.Node, acct string) (any, error) {
			return n.Ask(ctx, n.Ref("no-such-kind", acct), bank.GetBalance{})
		}, func(o outcome) bool { return o.Is["ErrUnknownKind"] }},
		{"unknown kind told", "no-such-kind", func(_ context.Context, n *tempest.Node, acct string) (any, error) {
			return nil, n.Tell(n.Ref("no-such-kind", acct), bank.GetBalance{})
		}, func(o outcome) bool {
			return o.Is["ErrUnknownKind"] && o.Err == `tempest: unknown kind: "no-such-kind"`
		}},
		{"typed reply", "", func(ctx context.Context, n *tempest.Node, acct string) (any, error) {
			return tempest.AskAs[*bank.Balance](ctx, n, n.Ref(bank.Account, acct), bank.GetBalance{})
		}, func(o outcome) bool { return reflect.DeepEqual(o.Reply, &bank.Balance{Cents: 100}) }},
		{"wrong reply type", "", func(ctx context.Context, n *tempest.Node, acct string) (any, error) {
			return tempest.AskAs[bank.Overdraft](ctx, n, n.Ref(bank.Account, acct), bank.GetBalance{})
		}, func(o outcome) bool { return o.Is["ErrUnexpectedReply"] }},
		{"sentinel with an HTTP status", demo.Counter, func(ctx context.Context, n *tempest.Node, acct string) (any, error) {
			ref := n.Ref(demo.Counter, acct)
			if _, err := n.Ask(ctx, ref, demo.Add{N: math.MaxInt64}); err != nil {
				return nil, err
			}
			return n.Ask(ctx, ref, demo.Add{N: 1})
		}, func(o outcome) bool { return o.Is["demo.ErrOverflow"] }},
		{"transfer overdraft", "", func(ctx context.Context, n *tempest.Node, acct string) (any, error) {
			return nil, bank.Transfer(ctx, n, acct, acct+"-to", 1000)
		}, func(o outcome) bool { return o.Is["ErrInsufficientFunds"] && o.Overdraft != nil }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]outcome
			for j, local := range []bool{true, false} {
				acct := fmt.Sprintf("case%d-%v", i, local)
				kind := tc.kind
				if kind == "" {
					kind = bank.Account
				}
				ref := actor.Virtual(kind, acct)
				owner := c.Owner(ref)
				caller := owner
				if !local {
					caller = c.NotOwner(ref)
				}
				if _, err := bank.DepositTo(ctx, owner, acct, 100); err != nil {
					t.Fatal(err)
				}
				got[j] = observe(tc.do(ctx, caller, acct))
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Fatalf("owner local:  %+v\nowner remote: %+v", got[0], got[1])
			}
			if !tc.want(got[0]) {
				t.Fatalf("both callers saw %+v", got[0])
			}
		})
	}
}
