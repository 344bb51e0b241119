package tempest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/clock"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
)

// jumpClock is the real clock read ahead by an offset the test moves: a
// process that was frozen sees its clock jump when it thaws.
type jumpClock struct {
	clock.Real
	off atomic.Int64
}

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// thawLog records which activation of the actor "thaw" handled which
// message.
type thawLog struct {
	mu   sync.Mutex
	acts atomic.Int32
	ran  map[string][]int32 // message -> activations that handled it
	hold chan struct{}      // the message "hold" waits for it to close
	held chan struct{}      // closed once "hold" runs
	once sync.Once
}

type thawActor struct {
	l   *thawLog
	act int32
}

func (a *thawActor) Receive(_ actor.Context, msg any) {
	in, ok := msg.(demo.EchoIn)
	if !ok {
		return
	}
	s := in.Text
	a.l.mu.Lock()
	a.l.ran[s] = append(a.l.ran[s], a.act)
	a.l.mu.Unlock()
	if s == "hold" {
		a.l.once.Do(func() { close(a.l.held) })
		<-a.l.hold
	}
}

func (l *thawLog) snapshot() map[string][]int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]int32, len(l.ran))
	for k, v := range l.ran {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestThawedOwnerRunsNoMailItAdmittedBeforeTheFreeze is a process that
// thaws after a freeze longer than its lease with mail waiting behind a
// turn: its clock jumps, its lease is long gone, and its fence loop has
// not looked yet. The workers resume first. No message that waited
// behind the turn (in a batch of its own) may run on the activation the
// freeze left behind (another node may have activated the identity
// meanwhile); each runs later, once, on an activation the node may
// serve. (The clock goes back once the passivation is seen, since raft's
// own contact times cannot be moved; work timed on the clock while it
// was ahead waits for it to catch up, which is why the mail runs about
// the jump later.)
func TestThawedOwnerRunsNoMailItAdmittedBeforeTheFreeze(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	l := &thawLog{ran: map[string][]int32{}, hold: make(chan struct{}), held: make(chan struct{})}
	clocks := map[string]*jumpClock{}
	c := tempesttest.New(t, tempesttest.Options{
		Nodes: 3,
		Configure: func(name string, cfg *tempest.Config) {
			clocks[name] = &jumpClock{}
			cfg.Clock = clocks[name]
		},
		Register: func(n *tempest.Node) error {
			return n.Register("thaw", func(string) actor.Actor {
				return &thawActor{l: l, act: l.acts.Add(1)}
			}, tempest.KindOptions{Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")}})
		},
	})
	// A follower: a leader's lease is measured on its own clock, which
	// this test moves back again.
	var victim *tempest.Node
	for victim == nil {
		for _, n := range c.Nodes() {
			if leader := n.Leader(); leader != "" && leader != n.Name() {
				victim = n
				break
			}
		}
		if victim == nil {
			time.Sleep(10 * time.Millisecond) // a leader is being elected
		}
	}
	var ref actor.Ref
	for k := 0; k < 1000; k++ {
		r := victim.Ref("thaw", fmt.Sprintf("k%d", k))
		if owner, _, _ := victim.Locate(r); owner == victim.Name() {
			ref = r
			break
		}
	}
	if ref.IsZero() {
		t.Fatalf("%s owns none of 1000 keys", victim.Name())
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := victim.Tell(ref, demo.EchoIn{Text: "hold"}); err != nil {
		t.Fatal(err)
	}
	<-l.held
	const waiting = 20
	for i := range waiting {
		if err := victim.Tell(ref, demo.EchoIn{Text: fmt.Sprintf("m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	frozen := l.snapshot()["hold"][0]

	// The thaw: the clock jumps past the lease, and the
	// turn that was running goes on.
	jc := clocks[victim.Name()]
	jc.off.Store(int64(3 * time.Second)) // twice the lease of the test cluster
	close(l.hold)
	passivated := func() bool {
		for _, e := range c.Events() {
			if e.Node == victim.Name() && e.Type == prospero.EventPassivated && e.ID == prospero.IdentityOf(ref) {
				return true
			}
		}
		return false
	}
	for !passivated() {
		for m, acts := range l.snapshot() {
			if m != "hold" && slices.Contains(acts, frozen) {
				t.Fatalf("%s ran on the activation the freeze left behind (%d)", m, frozen)
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the thawed node never passivated the activation")
		}
		time.Sleep(time.Millisecond)
	}
	if victim.Stats().Scheduler.Lapsed == 0 {
		// Its tick (every lease/8) fell between the jump and the
		// worker's next take: nothing was left to hold back.
		t.Skip("the fence loop passivated the actor before a worker looked; nothing to check")
	}
	// The node catches up with the cluster (its clock agrees again: the
	// test cannot move raft's), and the mail runs once, elsewhere or on
	// a new activation.
	jc.off.Store(0)
	thawed := time.Now()
	for {
		ran := l.snapshot()
		done := true
		for i := range waiting {
			m := fmt.Sprintf("m%d", i)
			switch acts := ran[m]; {
			case slices.Contains(acts, frozen):
				t.Fatalf("%s ran on the activation the freeze left behind (%d): %v", m, frozen, ran)
			case len(acts) > 1:
				t.Fatalf("%s ran %d times: %v", m, len(acts), ran)
			case len(acts) == 0:
				done = false
			}
		}
		if done {
			t.Logf("every message ran %v after the clock agreed again", time.Since(thawed).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not every message ran after the thaw: %v", ran)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.SingleActivation(); err != nil {
		t.Fatal(err)
	}
}
