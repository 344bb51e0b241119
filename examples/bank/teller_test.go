package bank_test

import (
	"context"
	"errors"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/examples/bank"
	"github.com/tempest-actors/tempest/tempesttest"
)

// A teller on one node transfers between accounts on the others and
// answers its caller from a continuation, through every node: the
// overdraft error keeps its identity (errors.Is and errors.As) whether
// the caller, the teller and the accounts share a node or not.
func TestTellerTransfersThroughAnyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		if err := bank.Register(n); err != nil {
			return err
		}
		return bank.RegisterTeller(n)
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nodes := c.Nodes()
	if _, err := bank.DepositTo(ctx, nodes[0], "alice", 100); err != nil {
		t.Fatal(err)
	}
	tellerOwner := c.Owner(actor.Virtual(bank.Teller, "t1")).Name()
	for i, n := range nodes {
		left, err := bank.TransferVia(ctx, n, "t1", "alice", "bob", 10)
		if err != nil || left != int64(90-10*i) {
			t.Fatalf("transfer %d through %s (teller on %s): %d, %v", i, n.Name(), tellerOwner, left, err)
		}
	}
	for _, n := range nodes {
		_, err := bank.TransferVia(ctx, n, "t1", "alice", "bob", 1000)
		var od *bank.Overdraft
		if !errors.Is(err, bank.ErrInsufficientFunds) || !errors.As(err, &od) || od.Balance != 70 || od.Amount != 1000 {
			t.Fatalf("overdraft through %s: %v", n.Name(), err)
		}
		if _, err := bank.TransferVia(ctx, n, "t1", "bob", "bob", 1); !errors.Is(err, bank.ErrInvalidAmount) {
			t.Fatalf("self-transfer through %s: %v", n.Name(), err)
		}
	}
	for acct, want := range map[string]int64{"alice": 70, "bob": 30} {
		if got, err := bank.BalanceOf(ctx, nodes[2], acct); err != nil || got != want {
			t.Fatalf("%s: %d, %v; want %d", acct, got, err, want)
		}
	}
}
