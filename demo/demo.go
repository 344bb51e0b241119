// Package demo holds three small kinds of virtual actors for trying a Tempest
// node or cluster from the command line, the HTTP gateway and tests:
//
//   - echo answers every EchoIn with the same value (an EchoIn).
//   - counter keeps an int64 at rest: its input is Add{n} or Get (the
//     union CounterIn in JSON), and the reply is the CounterValue after the
//     operation. An Add that would leave the int64 range is answered
//     ErrOverflow and changes nothing.
//   - ticker counts the ticks of a durable reminder: Start{periodMs}
//     registers it (catch-up policy optional), Stop unregisters it, Get
//     reads it (the union TickerIn in JSON); every reply is a
//     TickerStatus. The reminder belongs to the identity: it wakes a
//     dormant ticker, and survives passivation, restarts and the loss of
//     the owner node (its ticks and state are replicated with the shard).
//
// Messages may be sent as values or pointers; replies are values.
//
// Their messages are declared in demo.bare and generated with baregen:
//
//	n, _ := tempest.New(cfg)
//	_ = demo.Register(n, demo.Options{})
//	_ = n.Start(ctx)
//	reply, _ := n.AskJSON(ctx, demo.Counter, "a", []byte(`{"Add":{"n":5}}`)) // {"n":5}
package demo

//go:generate go run github.com/tempest-actors/tempest/wire/bare/cmd/baregen -schema demo.bare -package demo -out demo_bare.go

import (
	_ "embed"
	"fmt"
	"math"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
)

// Schema is the BARE schema of the demo kinds' messages and state.
//
//go:embed demo.bare
var Schema string

// Kind names.
const (
	Echo    = "echo"
	Counter = "counter"
	Ticker  = "ticker"
)

// Message tags on the wire, as demo.bare declares them ("# @tag N").
const (
	TagEchoIn       = EchoInMessageTag
	TagAdd          = AddMessageTag
	TagGet          = GetMessageTag
	TagCounterValue = CounterValueMessageTag
	TagStart        = StartMessageTag
	TagStop         = StopMessageTag
	TagTickerStatus = TickerStatusMessageTag
)

// Options tune the demo kinds.
type Options struct {
	// IdleTimeout passivates idle actors (default: the supervisor's, 10 min).
	IdleTimeout time.Duration
	// CounterPersistence is when a counter writes its value at rest.
	// nil means every turn with reply after commit
	// (prospero.PersistEveryTurn): an Add is answered only once its new
	// value is on disk, so no acknowledged Add is lost to a crash.
	CounterPersistence *prospero.Persistence
}

// ParsePersistence parses the name of a persistence mode for the demo
// counter: "every-turn" (durable: reply after commit), "passivation"
// (written on passivation and graceful shutdown only) or "none".
func ParsePersistence(s string) (prospero.Persistence, error) {
	switch s {
	case "every-turn":
		return prospero.Persistence{Mode: prospero.PersistEveryTurn}, nil
	case "passivation":
		return prospero.Persistence{Mode: prospero.PersistOnPassivation}, nil
	case "none":
		return prospero.Persistence{Mode: prospero.PersistNone}, nil
	}
	return prospero.Persistence{}, fmt.Errorf("demo: persistence %q: want every-turn, passivation or none", s)
}

// Register registers echo, counter and ticker on n (before n.Start).
func Register(n *tempest.Node, o Options) error {
	echo := tempest.KindOptions{
		KindOptions: prospero.KindOptions{IdleTimeout: o.IdleTimeout},
		Messages:    []tempest.Message{tempest.SchemaMessage[EchoIn]()},
		Gateway:     &tempest.Gateway{Schema: Schema, Input: "EchoIn", Reply: "EchoIn"},
	}
	if err := n.Register(Echo, func(string) actor.Actor { return actor.Func(echoReceive) }, echo); err != nil {
		return err
	}
	p := prospero.Persistence{Mode: prospero.PersistEveryTurn}
	if o.CounterPersistence != nil {
		p = *o.CounterPersistence
	}
	copts := tempest.KindOptions{
		KindOptions: prospero.KindOptions{IdleTimeout: o.IdleTimeout, Persistence: p},
		Messages: []tempest.Message{
			tempest.SchemaMessage[Add](),
			tempest.SchemaMessage[Get](),
			tempest.SchemaMessage[CounterValue](),
		},
		// The overflow error keeps its identity (and so its HTTP answer)
		// when the counter lives on another node.
		Errors:  map[string]error{"demo.overflow": ErrOverflow},
		Gateway: &tempest.Gateway{Schema: Schema, Input: "CounterIn", Reply: "CounterValue"},
	}
	if err := n.Register(Counter, func(string) actor.Actor { return &counter{} }, copts); err != nil {
		return err
	}
	return registerTicker(n, o)
}

func echoReceive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case EchoIn:
		ctx.Reply(m)
	case *EchoIn:
		ctx.Reply(EchoIn{Text: m.Text})
	}
}

// counter is the counter kind's actor. Its state at rest is a
// CounterValue in BARE.
type counter struct{ n int64 }

var _ prospero.Persistent = (*counter)(nil)

func (c *counter) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case Add:
		c.add(ctx, m.N)
	case *Add:
		c.add(ctx, m.N)
	case Get, *Get:
		ctx.Reply(CounterValue{N: c.n})
	}
}

// add adds n unless the sum leaves the int64 range: then the counter
// keeps its value and an ask is answered ErrOverflow.
func (c *counter) add(ctx actor.Context, n int64) {
	if (n > 0 && c.n > math.MaxInt64-n) || (n < 0 && c.n < math.MinInt64-n) {
		ctx.ReplyError(ErrOverflow)
		return
	}
	c.n += n
	ctx.Reply(CounterValue{N: c.n})
}

// ErrOverflow answers an Add that would take a counter beyond the int64
// range; the counter keeps its value. It keeps its identity across nodes
// (error code "demo.overflow"); through the HTTP API it is a 422 with the
// code "overflow".
var ErrOverflow error = overflowError{}

type overflowError struct{}

func (overflowError) Error() string {
	return "demo: counter overflow: the sum is beyond the int64 range"
}

// HTTPStatus and ErrorCode make the HTTP API answer 422 overflow (see
// httpapi.StatusError).
func (overflowError) HTTPStatus() int   { return 422 }
func (overflowError) ErrorCode() string { return "overflow" }

func (c *counter) MarshalState() ([]byte, error) { return (&CounterValue{N: c.n}).MarshalBARE() }

func (c *counter) UnmarshalState(b []byte) error {
	var v CounterValue
	if err := v.UnmarshalBARE(b); err != nil {
		return err
	}
	c.n = v.N
	return nil
}
