package bank_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/examples/bank"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/tempesttest"
)

func TestAccountOnOneNode(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	start := func() *tempest.Node {
		n, err := tempest.New(tempest.Config{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := bank.Register(n); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := start()
	if b, err := bank.DepositTo(ctx, n, "alice", 100); err != nil || b != 100 {
		t.Fatalf("deposit: %d, %v", b, err)
	}
	if b, err := bank.WithdrawFrom(ctx, n, "alice", 30); err != nil || b != 70 {
		t.Fatalf("withdraw: %d, %v", b, err)
	}
	_, err := bank.WithdrawFrom(ctx, n, "alice", 71)
	var od *bank.Overdraft
	if !errors.Is(err, bank.ErrInsufficientFunds) || !errors.As(err, &od) || *od != (bank.Overdraft{Balance: 70, Amount: 71}) {
		t.Fatalf("overdraft: %v", err)
	}
	if _, err := bank.DepositTo(ctx, n, "alice", 0); !errors.Is(err, bank.ErrInvalidAmount) {
		t.Fatalf("zero deposit: %v", err)
	}
	// Pointers and values are the same message.
	if b, err := tempest.AskAs[bank.Balance](ctx, n, n.Ref(bank.Account, "alice"), &bank.Deposit{Amount: 1}); err != nil || b.Cents != 71 {
		t.Fatalf("pointer deposit: %+v, %v", b, err)
	}
	// Every turn is written at rest: the balance survives a restart.
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n = start()
	defer n.Close(context.WithoutCancel(ctx))
	if b, err := bank.BalanceOf(ctx, n, "alice"); err != nil || b != 71 {
		t.Fatalf("after restart: %d, %v", b, err)
	}
}

func TestBankClusterOfThree(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: bank.Register})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nodes := c.Nodes()

	// Every node reaches every account; transfers run from any node.
	for i, acct := range []string{"alice", "bob", "carol"} {
		if _, err := bank.DepositTo(ctx, nodes[i], acct, 100); err != nil {
			t.Fatal(err)
		}
	}
	if err := bank.Transfer(ctx, nodes[0], "alice", "bob", 60); err != nil {
		t.Fatal(err)
	}
	err := bank.Transfer(ctx, nodes[1], "alice", "carol", 60)
	var od *bank.Overdraft
	if !errors.As(err, &od) || od.Balance != 40 {
		t.Fatalf("overdrawn transfer: %v", err)
	}
	want := map[string]int64{"alice": 40, "bob": 160, "carol": 100}
	for _, n := range nodes {
		for acct, cents := range want {
			if b, err := bank.BalanceOf(ctx, n, acct); err != nil || b != cents {
				t.Fatalf("%s sees %s at %d, %v; want %d", n.Name(), acct, b, err, cents)
			}
		}
	}

	// The HTTP API of any node serves the account kind, application
	// errors included.
	api, err := httpapi.New(httpapi.Config{Node: nodes[2]})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	post := func(acct, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/actors/account/"+acct+"/ask", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if code, body := post("alice", `{"Deposit":{"amount":2}}`); code != http.StatusOK || body != `{"cents":42}` {
		t.Fatalf("deposit over HTTP: %d %s", code, body)
	}
	// An application error is a 422 with the code its kind registered,
	// whichever node owns the account.
	for _, n := range nodes {
		api, err := httpapi.New(httpapi.Config{Node: n})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		api.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/actors/account/alice/ask", strings.NewReader(`{"Withdraw":{"amount":100}}`)))
		if body := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusUnprocessableEntity ||
			body != `{"error":"bank: insufficient funds: balance 42, withdrawal 100","code":"bank.insufficient_funds"}` {
			t.Fatalf("overdraft over HTTP on %s: %d %s", n.Name(), rec.Code, body)
		}
	}
	if code, _ := post("alice", `{"Withdraw":{"amount":"x"}}`); code != http.StatusBadRequest {
		t.Fatalf("bad JSON over HTTP: %d", code)
	}
	ref := actor.Virtual(bank.Account, "alice")
	if b, err := bank.BalanceOf(ctx, c.NotOwner(ref), "alice"); err != nil || b != 42 {
		t.Fatalf("after HTTP: %d, %v", b, err)
	}
}
