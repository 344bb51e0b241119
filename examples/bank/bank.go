// Package bank is an example application on Tempest: bank accounts as
// virtual actors of the kind "account", addressed by account number.
//
// An account takes Deposit, Withdraw and GetBalance (the union AccountIn
// in JSON) and answers with its Balance after the operation. A Withdraw
// beyond the balance is answered with an *Overdraft error, which matches
// ErrInsufficientFunds; an amount that is not positive with an error
// matching ErrInvalidAmount. Both keep their identity when the account
// lives on another node: errors.Is and errors.As give the same answer
// wherever the owner is. The balance is written at rest after every turn,
// so an acknowledged deposit survives a crash of its node.
//
// Transfer moves money between two accounts from program code (outside
// any actor): it withdraws from one account and deposits into the other
// with two asks, and puts the money back if the deposit fails. It is not
// atomic: a crash between the two asks loses the transfer's money in
// flight (see Transfer). TransferVia does the same in a teller actor (the
// kind "teller"), which asks both accounts in its own turns and answers
// its caller from the last continuation through Context.ReplyLater.
//
// Messages and state are declared in bank.bare and generated with
// baregen:
//
//	n, _ := tempest.New(cfg)
//	_ = bank.Register(n)
//	_ = n.Start(ctx)
//	balance, err := bank.DepositTo(ctx, n, "alice", 100_00)
package bank

//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema bank.bare -package bank -out bank_bare.go

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// Schema is the BARE schema of the account kind's messages and state.
//
//go:embed bank.bare
var Schema string

// Account is the kind name of accounts.
const Account = "account"

// Message tags on the wire, declared once in bank.bare ("# @tag N").
const (
	TagDeposit    = DepositMessageTag
	TagWithdraw   = WithdrawMessageTag
	TagGetBalance = GetBalanceMessageTag
	TagBalance    = BalanceMessageTag
	TagOverdraft  = OverdraftMessageTag
)

// Application errors. They are registered with the kind, so they keep
// their identity across nodes.
var (
	// ErrInsufficientFunds: a withdrawal beyond the balance. The error is
	// an *Overdraft with the numbers.
	ErrInsufficientFunds = errors.New("bank: insufficient funds")
	// ErrInvalidAmount: an amount that is zero or negative.
	ErrInvalidAmount = errors.New("bank: amount must be positive")
)

// Error makes an Overdraft an error.
func (e *Overdraft) Error() string {
	return fmt.Sprintf("bank: insufficient funds: balance %d, withdrawal %d", e.Balance, e.Amount)
}

// Is reports ErrInsufficientFunds.
func (e *Overdraft) Is(target error) bool { return target == ErrInsufficientFunds }

// KindOptions are the account kind's options: its messages, its errors,
// its JSON gateway, and state written at rest after every turn.
func KindOptions() tempest.KindOptions {
	return tempest.KindOptions{
		KindOptions: prospero.KindOptions{Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}},
		Messages: []tempest.Message{
			tempest.SchemaMessage[Deposit](),
			tempest.SchemaMessage[Withdraw](),
			tempest.SchemaMessage[GetBalance](),
			tempest.SchemaMessage[Balance](),
			tempest.SchemaMessage[Overdraft](),
		},
		Errors: map[string]error{
			"bank.insufficient_funds": ErrInsufficientFunds,
			"bank.invalid_amount":     ErrInvalidAmount,
		},
		Gateway: &tempest.Gateway{Schema: Schema, Input: "AccountIn", Reply: "Balance"},
	}
}

// Register registers the account kind on n (before n.Start).
func Register(n *tempest.Node) error {
	return n.Register(Account, func(string) actor.Actor { return &account{} }, KindOptions())
}

// account is the account kind's actor. Its state at rest is a Balance,
// kept in the embedded tempest.State (which writes it as BARE).
type account struct {
	tempest.State[Balance, *Balance]
}

var _ prospero.Persistent = (*account)(nil)

func (a *account) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case Deposit:
		if m.Amount <= 0 {
			ctx.ReplyError(fmt.Errorf("%w: deposit of %d", ErrInvalidAmount, m.Amount))
			return
		}
		a.V.Cents += m.Amount
		ctx.Reply(Balance{Cents: a.V.Cents})
	case Withdraw:
		switch {
		case m.Amount <= 0:
			ctx.ReplyError(fmt.Errorf("%w: withdrawal of %d", ErrInvalidAmount, m.Amount))
		case m.Amount > a.V.Cents:
			ctx.ReplyError(&Overdraft{Balance: a.V.Cents, Amount: m.Amount})
		default:
			a.V.Cents -= m.Amount
			ctx.Reply(Balance{Cents: a.V.Cents})
		}
	case GetBalance:
		ctx.Reply(Balance{Cents: a.V.Cents})
	}
}

// DepositTo adds cents to the account and returns its balance.
func DepositTo(ctx context.Context, c actor.Client, account string, cents int64) (int64, error) {
	return ask(ctx, c, account, Deposit{Amount: cents})
}

// WithdrawFrom takes cents from the account and returns its balance. It fails
// with an *Overdraft (matching ErrInsufficientFunds) when the balance is
// smaller.
func WithdrawFrom(ctx context.Context, c actor.Client, account string, cents int64) (int64, error) {
	return ask(ctx, c, account, Withdraw{Amount: cents})
}

// BalanceOf returns the account's balance.
func BalanceOf(ctx context.Context, c actor.Client, account string) (int64, error) {
	return ask(ctx, c, account, GetBalance{})
}

func ask(ctx context.Context, c actor.Client, account string, msg any) (int64, error) {
	b, err := tempest.AskAs[Balance](ctx, c, actor.Virtual(Account, account), msg)
	return b.Cents, err
}

// ErrTransferStuck: a transfer withdrew from its source, the deposit
// failed, and putting the money back failed too: the amount is in
// neither account. The error wraps both failures.
var ErrTransferStuck = errors.New("bank: transfer stuck: money withdrawn and not deposited")

// Transfer moves cents from one account to another from program code:
// it asks the source to withdraw, then the destination to deposit. If
// the withdrawal fails nothing changed (its error is returned: an
// *Overdraft when the balance is short). If the deposit fails, the money
// is deposited back into the source and the deposit's error is returned;
// if that fails too, the error matches ErrTransferStuck.
//
// It is not atomic and not idempotent: a caller that dies between the two
// asks, or an ask whose outcome is unknown (actor.ErrProcessUnavailable,
// actor.ErrDeadlineExceeded after the owner received it), can leave the
// amount withdrawn and not deposited. A transfer actor could ask both
// accounts in its turns and answer its caller later through
// Context.ReplyLater, recording its progress at rest; resuming it safely
// after a crash would also need accounts that recognise a repeated
// deposit, which this example's accounts do not.
func Transfer(ctx context.Context, c actor.Client, from, to string, cents int64) error {
	if from == to {
		return fmt.Errorf("%w: transfer from %q to itself", ErrInvalidAmount, from)
	}
	if _, err := WithdrawFrom(ctx, c, from, cents); err != nil {
		return err
	}
	_, err := DepositTo(ctx, c, to, cents)
	if err == nil {
		return nil
	}
	if _, berr := DepositTo(context.WithoutCancel(ctx), c, from, cents); berr != nil {
		return fmt.Errorf("%w: deposit to %q: %w; refund to %q: %w", ErrTransferStuck, to, err, from, berr)
	}
	return err
}
