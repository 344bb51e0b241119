package tempest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/wire"
)

// The retry policy during a failover (docs/federation.md, "Retries"):
// mail that never left its node because the owner's link is down waits,
// within the ask's deadline, until placement moves the shard to a live
// node, and is answered there; an ask that had reached the owner is never
// sent again.

// failoverAskTimeout is the deadline of the asks sent during a failover:
// longer than gossip's detection and the move that follows it.
const failoverAskTimeout = 10 * time.Second

// failoverAsks sends an Add of 1 to ref through via at each of the
// offsets from now, each with failoverAskTimeout, and returns a function
// that waits for them and returns their errors.
func failoverAsks(via *tempest.Node, ref actor.Ref, offsets ...time.Duration) func() []error {
	errs := make([]error, len(offsets))
	var wg sync.WaitGroup
	for i, d := range offsets {
		wg.Go(func() {
			time.Sleep(d)
			ctx, cancel := context.WithTimeout(context.Background(), failoverAskTimeout)
			defer cancel()
			_, errs[i] = via.Ask(ctx, ref, demo.Add{N: 1})
		})
	}
	return func() []error { wg.Wait(); return errs }
}

// failoverSetup returns the owner of ref's shard and another node to ask
// through, once ref is active on its owner.
func failoverSetup(s *sim, ref actor.Ref) (owner string, via *tempest.Node) {
	s.t.Helper()
	nodes := s.running()
	owner, _, err := nodes[0].Locate(ref)
	if err != nil {
		s.t.Fatalf("locate %v: %v", ref, err)
	}
	for _, n := range nodes {
		if n.Name() != owner {
			via = n
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), failoverAskTimeout)
	defer cancel()
	if _, err := via.Ask(ctx, ref, demo.Get{}); err != nil {
		s.t.Fatalf("first ask of %v: %v", ref, err)
	}
	return owner, via
}

// failoverCount reads ref's counter through via once the cluster settled.
func failoverCount(s *sim, via *tempest.Node, ref actor.Ref) int64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverAskTimeout)
	defer cancel()
	v, err := via.Ask(ctx, ref, demo.Get{})
	if err != nil {
		s.t.Fatalf("read %v: %v", ref, err)
	}
	return v.(demo.CounterValue).N
}

// TestSimulationFailoverCrashAsksWait: asks sent to a key whose owner
// crashed, before gossip declared it failed, are answered by the node
// its shard moves to, within their deadline, not failed at once because
// the old owner's link is down; each is applied once. So is a tell from
// program code.
func TestSimulationFailoverCrashAsksWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runSimulation(t, 7, simOptions{schedule: func(s *sim) {
			time.Sleep(time.Second)
			ref := actor.Virtual(demo.Counter, "failover")
			owner, via := failoverSetup(s, ref)
			wait := failoverAsks(via, ref, 50*time.Millisecond, 500*time.Millisecond, time.Second, 1500*time.Millisecond)
			// And a tell from program code, which waits in Node.Tell
			// (within its context's deadline) until it can be sent.
			told := make(chan error, 1)
			go func() {
				time.Sleep(200 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), failoverAskTimeout)
				defer cancel()
				told <- via.TellContext(ctx, ref, demo.Add{N: 100})
			}()
			s.step("kill %s, the owner of %v; asks and a tell through %s meanwhile", owner, ref, via.Name())
			s.kill(owner, true)
			for i, err := range wait() {
				if err != nil {
					t.Errorf("ask %d during the failover: %v", i, err)
				}
			}
			if err := <-told; err != nil {
				t.Errorf("tell during the failover: %v", err)
			}
			s.start(owner)
			s.settle()
			if got := failoverCount(s, via, ref); got != 104 {
				t.Errorf("counter after 4 acknowledged Adds of 1 and a tell of 100 sent: %d", got)
			}
		}})
	})
}

// TestSimulationFailoverPartitionAsksWait is the same for an owner cut
// off the others: asks from the majority's side wait until the shard
// moves to it.
func TestSimulationFailoverPartitionAsksWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runSimulation(t, 8, simOptions{schedule: func(s *sim) {
			time.Sleep(time.Second)
			ref := actor.Virtual(demo.Counter, "failover")
			owner, via := failoverSetup(s, ref)
			wait := failoverAsks(via, ref, 50*time.Millisecond, 500*time.Millisecond, time.Second, 1500*time.Millisecond)
			s.step("partition %s, the owner of %v; asks through %s meanwhile", owner, ref, via.Name())
			s.partition(owner, 3*simDetect)
			for i, err := range wait() {
				if err != nil {
					t.Errorf("ask %d during the failover: %v", i, err)
				}
			}
			s.settle()
			if got := failoverCount(s, via, ref); got != 4 {
				t.Errorf("counter after 4 acknowledged Adds: %d", got)
			}
		}})
	})
}

// probe is a kind whose turns count how often each message ran, on any
// node, and can be held while they run.
type probe struct {
	mu      sync.Mutex
	runs    map[string]int
	started chan string   // told each run's text
	release chan struct{} // closed to let held turns reply
}

func newProbe() *probe {
	return &probe{runs: map[string]int{}, started: make(chan string, 16), release: make(chan struct{})}
}

func (p *probe) register(n *tempest.Node) error {
	return n.Register("probe", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			var text string
			switch m := msg.(type) {
			case demo.EchoIn:
				text = m.Text
			case *demo.EchoIn:
				text = m.Text
			default:
				return
			}
			p.mu.Lock()
			p.runs[text]++
			p.mu.Unlock()
			p.started <- text
			<-p.release
			ctx.Reply(demo.EchoIn{Text: text})
		})
	}, tempest.KindOptions{Messages: []tempest.Message{tempest.SchemaMessage[demo.EchoIn]()}})
}

func (p *probe) count(text string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[text]
}

// TestSimulationFailoverSentAskRunsOnce: an ask that reached its owner,
// whose link then went down before the reply came, is not sent again to
// the node the shard moves to (it ran already: at most once per ask), and
// its caller gets an error that says its outcome is unknown
// (wire.ErrLinkLost), not one that says it did not run.
func TestSimulationFailoverSentAskRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe() // its channels in the bubble, so that waiting on them lets fake time pass
		runSimulation(t, 9, simOptions{register: p.register, schedule: func(s *sim) {
			time.Sleep(time.Second)
			ref := actor.Virtual("probe", "once")
			nodes := s.running()
			owner, _, err := nodes[0].Locate(ref)
			if err != nil {
				t.Fatalf("locate %v: %v", ref, err)
			}
			var via *tempest.Node
			for _, n := range nodes {
				if n.Name() != owner {
					via = n
					break
				}
			}
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), failoverAskTimeout)
				defer cancel()
				_, err := via.Ask(ctx, ref, demo.EchoIn{Text: "sent"})
				done <- err
			}()
			if got := <-p.started; got != "sent" {
				t.Fatalf("the probe ran %q", got)
			}
			s.step("partition %s while its turn of %v runs", owner, ref)
			go func() {
				// In fake time: after the partition below is in place.
				time.Sleep(10 * time.Millisecond)
				close(p.release)
			}()
			s.partition(owner, 3*simDetect)
			switch err = <-done; {
			case err == nil:
				t.Errorf("the ask whose reply the partition dropped was answered: it was sent again")
			case !errors.Is(err, wire.ErrLinkLost) || !errors.Is(err, actor.ErrProcessUnavailable):
				t.Errorf("ask cut off after it ran: %v, want wire.ErrLinkLost (outcome unknown)", err)
			}
			s.settle()
			// The shard moved while the owner was cut off: a new ask runs
			// on the new owner, and the first one has still run once.
			ctx, cancel := context.WithTimeout(context.Background(), failoverAskTimeout)
			defer cancel()
			if _, err := via.Ask(ctx, ref, demo.EchoIn{Text: "after"}); err != nil {
				t.Errorf("ask after the move: %v", err)
			}
			if n := p.count("sent"); n != 1 {
				t.Errorf("the ask cut off after it ran ran %d times, want once", n)
			}
			if n := p.count("after"); n != 1 {
				t.Errorf("the ask after the move ran %d times, want once", n)
			}
		}})
	})
}

// TestSimulationLostRequestFailsTheCall: a request on the control lane
// whose frames are all lost (here every frame of the network is dropped)
// fails its call once the budget it granted the peer ran out, even when
// the caller's context has no deadline, instead of waiting forever: a
// catch-up's join, proposed through the leader this way, once hung for
// good on one lost frame and left a node's shards a follower short.
func TestSimulationLostRequestFailsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		runSimulation(t, 9, simOptions{schedule: func(s *sim) {
			time.Sleep(time.Second)
			ref := actor.Virtual(demo.Counter, "lost")
			_, via := failoverSetup(s, ref)
			s.step("drop every frame; passivate %v through %s without a deadline", ref, via.Name())
			s.net.SetDropRate(1)
			errStillWaiting := errors.New("still waiting")
			// ends runs call and returns its error; it reports a call that
			// ends later than budget (and a second), or not within a
			// minute (and returns errStillWaiting).
			ends := func(what string, budget time.Duration, call func() error) error {
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- call() }()
				select {
				case err := <-done:
					if d := time.Since(start); d > budget+time.Second {
						t.Errorf("the %s ended after %v, more than its %v budget", what, d, budget)
					}
					return err
				case <-time.After(time.Minute):
					t.Errorf("a %s whose request was lost still waits after a minute", what)
					return errStillWaiting
				}
			}
			if err := ends("passivation", 30*time.Second, func() error { return via.Passivate(context.Background(), ref) }); err == nil {
				t.Errorf("a passivation whose request was lost returned nil")
			}
			// A request without a budget of its own (a status) is bounded
			// by the default budget, 10 s.
			ends("status", 10*time.Second, func() error { _, err := via.Status(context.Background(), ref); return err })
			s.net.SetDropRate(0)
			s.settle()
		}})
	})
}
