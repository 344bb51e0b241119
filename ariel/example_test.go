package ariel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
)

type greeterActor struct{}

func (greeterActor) Receive(ctx actor.Context, msg any) {
	if name, ok := msg.(string); ok {
		ctx.Reply("hello " + name)
	}
}

type counterActor struct{ n int }

func (c *counterActor) Receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case int:
		c.n += m
	case string:
		ctx.Reply(c.n)
	}
}

func Example() {
	s, err := ariel.New(ariel.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// A spawned actor.
	g, _ := s.Spawn(greeterActor{})
	reply, _ := s.Ask(ctx, g, "ariel")
	fmt.Println(reply)

	// A virtual actor, activated by its first message.
	_ = s.Register("counter", func(string) actor.Actor { return &counterActor{} }, 0)
	c := actor.Virtual("counter", "a")
	for i := 1; i <= 3; i++ {
		_ = s.Tell(c, i)
	}
	n, _ := s.Ask(ctx, c, "get")
	fmt.Println(c, n)
	// Output:
	// hello ariel
	// counter/a 6
}
