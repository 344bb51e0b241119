package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

func init() { addCommand(newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var messages int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a single-node actor demo and print what happened",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if messages < 1 {
				return withCode(2, fmt.Errorf("--messages must be positive"))
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), messages)
		},
	}
	cmd.Flags().IntVar(&messages, "messages", 2_000_000, "messages in the throughput run")
	return cmd
}

// counter is a virtual actor: it adds what it is told and answers "get".
type counter struct{ n int }

func (c *counter) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case int:
		c.n += m
	case string:
		if m == "get" {
			ctx.Reply(c.n)
		}
	}
}

// greeter asks a counter for its value (without blocking its worker) and
// answers with a sentence.
type greeter struct{}

func (greeter) Receive(ctx actor.Context, msg any) {
	if name, ok := msg.(string); ok {
		ctx.Ask(actor.Virtual("counter", "visits"), "get", func(ctx actor.Context, reply any, err error) {
			if err != nil {
				return
			}
			_ = ctx.Tell(actor.Virtual("log", "main"), fmt.Sprintf("hello %s, the counter says %v", name, reply))
		})
	}
}

type logLine struct {
	out  io.Writer
	seen chan struct{}
}

func (l *logLine) Receive(_ actor.Context, msg any) {
	if s, ok := msg.(string); ok {
		fmt.Fprintln(l.out, "  log:", s)
		l.seen <- struct{}{}
	}
}

type tick struct{}

// runDemo starts a scheduler, shows tells, asks, an in-turn ask with a
// continuation, a fan-out, an admission refusal, and a throughput figure.
func runDemo(ctx context.Context, out io.Writer, messages int) error {
	s, err := ariel.New(ariel.Config{})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	cfg := s.Config()
	fmt.Fprintf(out, "tempest demo: one node, %d workers, mailbox %d, fairness %d msgs / %v, turn budget %v\n",
		cfg.Workers, cfg.MailboxCapacity, cfg.FairnessMessages, cfg.FairnessTime, cfg.TurnBudget)

	seen := make(chan struct{}, 16)
	if err := s.Register("counter", func(string) actor.Actor { return &counter{} }, 0); err != nil {
		return err
	}
	if err := s.Register("log", func(string) actor.Actor { return &logLine{out: out, seen: seen} }, 0); err != nil {
		return err
	}

	fmt.Fprintln(out, "1. tells and an ask to the virtual actor counter/visits (activated by its first message)")
	visits := actor.Virtual("counter", "visits")
	for i := 1; i <= 10; i++ {
		if err := s.Tell(visits, i); err != nil {
			return err
		}
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	v, err := s.Ask(actx, visits, "get")
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  counter/visits = %v (1+2+...+10)\n", v)

	fmt.Fprintln(out, "2. an actor asks another inside its turn; the reply runs as a continuation")
	g, err := s.Spawn(greeter{})
	if err != nil {
		return err
	}
	if err := s.Tell(g, "ariel"); err != nil {
		return err
	}
	select {
	case <-seen:
	case <-ctx.Done():
		return ctx.Err()
	}

	fmt.Fprintln(out, "3. fan-out: one actor tells 1,000 children in one turn (one wake per child)")
	const children = 1000
	done := make(chan struct{})
	var got int
	sum, err := s.Spawn(actor.Func(func(_ actor.Context, msg any) {
		if _, ok := msg.(tick); ok {
			if got++; got == children {
				close(done)
			}
		}
	}))
	if err != nil {
		return err
	}
	kids := make([]actor.Ref, children)
	for i := range kids {
		kids[i], _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(tick); ok {
				_ = ctx.Tell(sum, tick{})
			}
		}))
	}
	src, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(tick); ok {
			for _, k := range kids {
				_ = ctx.Tell(k, tick{})
			}
		}
	}))
	_ = s.Tell(src, tick{})
	<-done
	fmt.Fprintf(out, "  %d children answered\n", children)

	fmt.Fprintln(out, "4. admission: a full mailbox refuses, observably")
	block := make(chan struct{})
	entered := make(chan struct{})
	slow, _ := s.Spawn(actor.Func(func(_ actor.Context, msg any) {
		if msg == "block" {
			close(entered)
			<-block
		}
	}), actor.WithMailbox(2))
	_ = s.Tell(slow, "block")
	<-entered
	var refused int
	for i := 0; i < 5; i++ {
		if err := s.Tell(slow, i); err != nil {
			refused++
			if i == 4 {
				fmt.Fprintf(out, "  5 tells to a 2-slot mailbox: %d accepted, %d refused (%v)\n", 5-refused, refused, err)
			}
		}
	}
	close(block)

	fmt.Fprintf(out, "5. throughput: %d messages between two actors (ping-pong, one in flight)\n", messages)
	finish := make(chan time.Time, 1)
	left := messages
	var pong actor.Ref
	ping, _ := s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(tick); ok {
			if left--; left <= 0 {
				finish <- time.Now()
				return
			}
			_ = ctx.Tell(pong, msg)
		}
	}))
	pong, _ = s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(tick); ok {
			_ = ctx.Tell(ctx.Sender(), msg)
		}
	}))
	start := time.Now()
	_ = s.Tell(ping, tick{})
	var end time.Time
	select {
	case end = <-finish:
	case <-ctx.Done():
		return ctx.Err()
	}
	el := end.Sub(start)
	fmt.Fprintf(out, "  %d messages in %v: %.2f M msg/s, %v per hop\n", messages, el.Round(time.Millisecond),
		float64(messages)/el.Seconds()/1e6, (el / time.Duration(messages)).Round(time.Nanosecond))

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.WaitIdle(wctx); err != nil {
		return err
	}
	st := s.Stats()
	fmt.Fprintf(out, "stats: turns=%d messages=%d refused=%d undelivered=%d budget-yields=%d steals=%d parks=%d panics=%d\n",
		st.Turns, st.Messages, st.Refused, st.Undelivered, st.BudgetYields, st.Steals, st.Parks, st.Panics)
	return nil
}
