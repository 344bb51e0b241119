package bank

import (
	"context"
	"fmt"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// Teller is the kind name of tellers: actors that carry out a transfer in
// their own turns, asking both accounts and answering their caller once
// both answered.
const Teller = "teller"

// TagTransferOrder is TransferOrder's wire tag, declared in bank.bare.
const TagTransferOrder = TransferOrderMessageTag

// TellerOptions are the teller kind's options. A teller is
// CallChainReentrant: while one transfer waits for an account, the next
// order for the same teller waits in its mailbox, so a teller runs one
// transfer at a time (the accounts it asks may still call it back).
func TellerOptions() tempest.KindOptions {
	return tempest.KindOptions{
		KindOptions: prospero.KindOptions{Reentrancy: actor.CallChainReentrant},
		Messages:    []tempest.Message{tempest.SchemaMessage[TransferOrder]()},
	}
}

// RegisterTeller registers the teller kind on n (before n.Start); the
// accounts it asks need Register, on this node or others.
func RegisterTeller(n *tempest.Node) error {
	return n.Register(Teller, func(string) actor.Actor { return teller{} }, TellerOptions())
}

// teller carries out TransferOrders. It keeps no state: the order lives in
// its continuations. Like Transfer it is not atomic across a crash of the
// teller's node between the two asks.
type teller struct{}

func (teller) Receive(ctx actor.Context, msg any) {
	o, ok := msg.(TransferOrder)
	if !ok {
		return
	}
	r := ctx.ReplyLater() // answered from a continuation below
	if o.From == o.To {
		_ = r.ReplyError(ctx, fmt.Errorf("%w: transfer from %q to itself", ErrInvalidAmount, o.From))
		return
	}
	ctx.Ask(actor.Virtual(Account, o.From), Withdraw{Amount: o.Amount}, func(ctx actor.Context, v any, err error) {
		if err != nil {
			_ = r.ReplyError(ctx, err) // an *Overdraft keeps its identity
			return
		}
		left := v.(Balance)
		ctx.Ask(actor.Virtual(Account, o.To), Deposit{Amount: o.Amount}, func(ctx actor.Context, _ any, err error) {
			if err == nil {
				_ = r.Reply(ctx, left)
				return
			}
			// Put the money back, then report the deposit's failure.
			ctx.Ask(actor.Virtual(Account, o.From), Deposit{Amount: o.Amount}, func(ctx actor.Context, _ any, berr error) {
				if berr != nil {
					err = fmt.Errorf("%w: deposit to %q: %w; refund to %q: %w", ErrTransferStuck, o.To, err, o.From, berr)
				}
				_ = r.ReplyError(ctx, err)
			})
		})
	})
}

// TransferVia has the teller named teller move cents from one account to
// another and returns the source's balance after the withdrawal. Unlike
// Transfer, the program makes one ask: the teller asks the accounts in its
// own turns, on whichever node owns it, and errors (an *Overdraft, an
// ErrInvalidAmount) keep their identity on every node.
func TransferVia(ctx context.Context, c actor.Client, teller, from, to string, cents int64) (int64, error) {
	b, err := tempest.AskAs[Balance](ctx, c, actor.Virtual(Teller, teller), TransferOrder{From: from, To: to, Amount: cents})
	return b.Cents, err
}
