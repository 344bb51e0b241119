package route

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/wire"
)

// heldDoorbell is a node's doorbell for these tests: the rings of one
// kind wait until release, and then, as a cluster node's doorbell does
// (arielhost.FencedActivator over Router.FenceActivation), the activation fence
// decides: refused, the waiting mail is rejected with its error;
// passed, the kind's factory attaches at once. Holding the ring lets a
// test admit mail for an identity on the node that owns it and then
// apply a move before the activation, the race the fence is for.
type heldDoorbell struct {
	kind  string
	mu    sync.Mutex
	s     *ariel.Scheduler
	fence func(actor.Ref) error
	hold  bool
	held  []actor.Ref
}

func (h *heldDoorbell) Ring(ref actor.Ref) {
	h.mu.Lock()
	if h.hold && ref.Kind() == h.kind {
		h.held = append(h.held, ref)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.ring(ref)
}

func (h *heldDoorbell) ring(ref actor.Ref) {
	h.mu.Lock()
	s, fence := h.s, h.fence
	h.mu.Unlock()
	if err := fence(ref); err != nil {
		_ = s.Reject(ref.Unpinned(), err)
		return
	}
	ariel.FactoryActivator{S: s}.Ring(ref)
}

// holding makes the rings of the kind wait.
func (h *heldDoorbell) holding() {
	h.mu.Lock()
	h.hold = true
	h.mu.Unlock()
}

// rung reports how many rings wait.
func (h *heldDoorbell) rung() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// release lets the waiting rings through the fence, and later ones at once.
func (h *heldDoorbell) release() {
	h.mu.Lock()
	held := h.held
	h.held, h.hold = nil, false
	h.mu.Unlock()
	for _, ref := range held {
		h.ring(ref)
	}
}

// fencePair is two nodes whose doorbells hold log's rings on demand;
// asker and pump run on a, log/up on b answers once the link is up, and
// log is then placed on logAt.
func fencePair(t *testing.T, logAt string) (c *rtCluster, a, b *rtNode, bells map[string]*heldDoorbell, pump *bufPump) {
	c = newRTCluster(t)
	bells = map[string]*heldDoorbell{}
	pump = &bufPump{}
	nodes := map[string]*rtNode{}
	for _, name := range []string{"a", "b"} {
		bell := &heldDoorbell{kind: "log"}
		n := c.start(name, rtRegistry(t, false), func(cfg *ariel.Config) { cfg.Activator = bell })
		bell.mu.Lock()
		bell.s, bell.fence = n.s, n.r.FenceActivation
		bell.mu.Unlock()
		for kind, f := range map[string]func(string) actor.Actor{"log": bufLog, "pump": pump.factory, "asker": inTurnAsker} {
			if err := n.s.Register(kind, f, 0); err != nil {
				t.Fatal(err)
			}
		}
		bells[name], nodes[name] = bell, n
	}
	a, b = nodes["a"], nodes["b"]
	c.place("pump", "a")
	c.place("asker", "a")
	c.place("log", "b")
	askRetry(t, a.s, actor.Virtual("log", "up"), rtSeq{Kind: "get"}) // the link is up
	c.place("log", logAt)
	return c, a, b, bells, pump
}

// handingTo makes node's table show log's shard handed off to target.
func (c *rtCluster) handingTo(node, target string) {
	c.setFail(node, "log", &Hint{Err: fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff),
		Owner: target, Shard: "log-shard"})
}

// fenceRefusedMail admits four messages for log/x on its owner, owner,
// while its doorbell holds the ring: an ask from a turn of asker/q, a
// tell from a turn of pump/p, a tell and an ask (answered on the
// returned channel) from program code, all sent from a; then owner's
// table shows the shard handed to the other node and the ring is let
// through the fence, which refuses the activation. The program's ask's
// outcome comes on the channel: what it was answered, or its error.
func fenceRefusedMail(t *testing.T, c *rtCluster, a *rtNode, owner *rtNode, bell *heldDoorbell, other string) <-chan askOutcome {
	t.Helper()
	log := actor.Virtual("log", "x")
	bell.holding()
	queued := func(n int) func() bool { return func() bool { return owner.s.Queued(log) == n } }
	if err := a.s.Tell(actor.Virtual("asker", "q"), rtSeq{Kind: "go"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the in-turn ask queued at the owner", queued(1))
	if err := a.s.Tell(actor.Virtual("pump", "p"), rtSeq{Kind: "go", DefaultDeadlineNs: 1, TurnBudgetNs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the in-turn tell queued", queued(2))
	if err := a.s.Tell(log, rtSeq{Kind: "seq", DefaultDeadlineNs: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the program's tell queued", queued(3))
	asked := make(chan askOutcome, 1)
	go func() {
		v, err := a.s.Ask(rtCtx(t, rtWait), log, rtSeq{Kind: "get"})
		var got string
		if p, ok := v.(rtPayload); ok {
			got = string(p.State)
		}
		asked <- askOutcome{got, err}
	}()
	waitFor(t, "the program's ask queued", queued(4))
	if bell.rung() != 1 {
		t.Fatalf("%d rings held, want log/x's one", bell.rung())
	}
	c.handingTo(owner.name, other)
	bell.release()
	return asked
}

type askOutcome struct {
	got string
	err error
}

// settle completes the move of log to node: every table places it there,
// at once (no table shows the old owner again in between).
func (c *rtCluster) settle(node string) {
	c.mu.Lock()
	delete(c.fail, "a/log")
	delete(c.fail, "b/log")
	c.owner["log"] = node
	c.mu.Unlock()
	c.changed()
}

// TestFenceRefusedLocalMailResent: mail this node admitted for an
// identity it owned, and whose activation its fence then refused (the
// shard was handed off in between), was certainly not run: every
// sender's mail (an ask and a tell from actors' turns, a tell and an ask
// from program code) waits under the retry policy and arrives, in order,
// where the move puts the shard once it settles.
func TestFenceRefusedLocalMailResent(t *testing.T) {
	c, a, b, bells, pump := fencePair(t, "a")
	asked := fenceRefusedMail(t, c, a, a, bells["a"], "b")
	waitFor(t, "the refused mail waiting", func() bool { return a.r.buf.Waiting() == 4 })
	c.settle("b")
	if o := <-asked; o.err != nil || o.got != "[1 2]" {
		t.Fatalf("program code's ask = %q, %v; want the new owner's [1 2]", o.got, o.err)
	}
	if got := logOf(t, b); got != "[1 2]" {
		t.Fatalf("log/x at its new owner = %s, want [1 2]", got)
	}
	if got := inTurnResult(t, a); got != "[]" {
		t.Fatalf("the in-turn ask got %q, want the new owner's answer []", got)
	}
	if n := pump.unavail.Load() + pump.refused.Load(); n != 0 {
		t.Fatalf("the pump got %d Undelivered notices for a tell that arrived", n)
	}
	if got := a.s.Queued(actor.Virtual("log", "x")); got != 0 {
		t.Fatalf("%d messages still queued at the old owner", got)
	}
}

// TestFenceRefusedRemoteMailResent: the same race at a remote owner.
// An ask it admitted from another node and then fenced off reaches its
// sender as a resendable refusal (NOT_OWNER, naming the handoff's
// target), which the sender's node sends again once its table moves the
// shard, whether a turn or program code asked, in its own retry queue and
// so in order with that sender's later mail. A tell from another node is
// not sent on by the owner, which could not order it against the
// sender's later tells to the new owner: it is lost to its sender, as a
// tell the owner refused unrun after admitting it (federation.md, Retries).
func TestFenceRefusedRemoteMailResent(t *testing.T) {
	c, a, b, bells, _ := fencePair(t, "b")
	notOwner := b.r.MailStats().RefusedOut.NotOwner()
	asked := fenceRefusedMail(t, c, a, b, bells["b"], "a")
	waitFor(t, "both asks refused NOT_OWNER", func() bool { return b.r.MailStats().RefusedOut.NotOwner()-notOwner == 2 })
	waitFor(t, "the refused asks waiting at their node", func() bool { return a.r.buf.Waiting() == 2 })
	waitFor(t, "the owner's mailbox empty", func() bool { return b.s.Queued(actor.Virtual("log", "x")) == 0 })
	if n := b.r.buf.Waiting(); n != 0 {
		t.Fatalf("the owner holds %d fenced-off messages to send on, want none", n)
	}
	c.settle("a")
	if got := inTurnResult(t, a); got != "[]" {
		t.Fatalf("the in-turn ask got %q, want the new owner's answer []", got)
	}
	if o := <-asked; o.err != nil || o.got != "[]" {
		t.Fatalf("program code's ask = %q, %v; want the new owner's answer []", o.got, o.err)
	}
	if got := logOf(t, a); got != "[]" {
		t.Fatalf("log/x at its new owner = %s, want [] (the tells were fenced off at b)", got)
	}
}

// TestFenceRefusedAskFailsAtItsDeadline: a fenced-off ask whose shard
// never settles fails at its deadline, as a deadline, whether its owner
// was the asker's node or another: the same error either way, not the
// fence's refusal at once.
func TestFenceRefusedAskFailsAtItsDeadline(t *testing.T) {
	for _, owner := range []string{"a", "b"} {
		t.Run("owner "+owner, func(t *testing.T) {
			c, a, b, bells, _ := fencePair(t, owner)
			on, other := a, "b"
			if owner == "b" {
				on, other = b, "a"
			}
			log := actor.Virtual("log", "x")
			bells[owner].holding()
			start := time.Now()
			asked := make(chan error, 1)
			go func() {
				_, err := a.s.Ask(rtCtx(t, 300*time.Millisecond), log, rtSeq{Kind: "get"})
				asked <- err
			}()
			waitFor(t, "the ask queued at the owner", func() bool { return on.s.Queued(log) == 1 })
			c.handingTo(on.name, other)
			if owner == "b" {
				c.handingTo("a", "a") // a's table shows the move too, and it never ends
			}
			bells[owner].release()
			err := <-asked
			if !errors.Is(err, actor.ErrDeadlineExceeded) || errors.Is(err, actor.ErrProcessUnavailable) {
				t.Fatalf("ask = %v after %v, want its deadline", err, time.Since(start))
			}
			waitFor(t, "the retry queues empty", func() bool { return a.r.buf.Waiting() == 0 && b.r.buf.Waiting() == 0 })
		})
	}
}

// inTurnResult is what asker/q's last in-turn ask got, once it got
// something.
func inTurnResult(t *testing.T, a *rtNode) string {
	t.Helper()
	var got string
	waitFor(t, "the in-turn ask answered", func() bool {
		got = string(askRetry(t, a.s, actor.Virtual("asker", "q"), rtSeq{Kind: "result"}).(rtPayload).State)
		return got != ""
	})
	return got
}

// TestFenceRefusedAgainAfterResend: a fenced-off ask sent again to this
// node (the move was undone) and fenced off once more (it began again)
// waits once more, and is answered where the shard finally settles.
func TestFenceRefusedAgainAfterResend(t *testing.T) {
	c, a, _, bells, _ := fencePair(t, "a")
	log := actor.Virtual("log", "x")
	bell := bells["a"]
	asked := make(chan askOutcome, 1)
	fenceOff := func() {
		t.Helper()
		waitFor(t, "the ask queued at a", func() bool { return a.s.Queued(log) == 1 })
		c.handingTo("a", "b")
		bell.release()
		waitFor(t, "the ask waiting", func() bool { return a.r.buf.Waiting() == 1 })
	}
	bell.holding()
	go func() {
		v, err := a.s.Ask(rtCtx(t, rtWait), log, rtSeq{Kind: "get"})
		var got string
		if p, ok := v.(rtPayload); ok {
			got = string(p.State)
		}
		asked <- askOutcome{got, err}
	}()
	fenceOff()
	bell.holding()
	c.settle("a") // the move is undone: the ask goes to a again
	fenceOff()
	c.settle("b")
	if o := <-asked; o.err != nil || o.got != "[]" {
		t.Fatalf("ask = %q, %v; want the answer of b, where the shard settled", o.got, o.err)
	}
}

// TestFenceRefusedMailKeepsSenderOrder: a tell admitted before a move and
// fenced off after it goes ahead of the same sender's later tell, which
// its node buffered for the moving shard meanwhile, so the new owner
// gets them in the order they were sent. Queued behind it, the fenced-off
// tell arrived second.
func TestFenceRefusedMailKeepsSenderOrder(t *testing.T) {
	c, a, b, bells, _ := fencePair(t, "a")
	log := actor.Virtual("log", "x")
	bells["a"].holding()
	if err := a.s.Tell(actor.Virtual("pump", "p"), rtSeq{Kind: "go", DefaultDeadlineNs: 1, TurnBudgetNs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "seq 1 queued at the owner", func() bool { return a.s.Queued(log) == 1 })
	c.handingTo("a", "b")
	if err := a.s.Tell(actor.Virtual("pump", "p"), rtSeq{Kind: "go", DefaultDeadlineNs: 2, TurnBudgetNs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "seq 2 buffered", func() bool { return a.r.buf.Waiting() == 1 })
	bells["a"].release()
	waitFor(t, "seq 1 fenced off and waiting", func() bool { return a.r.buf.Waiting() == 2 })
	c.settle("b")
	waitFor(t, "both tells at b", func() bool { return strings.Count(logOf(t, b), " ") == 1 })
	if got := logOf(t, b); got != "[1 2]" {
		t.Fatalf("log/x at its new owner = %s, want [1 2]", got)
	}
}

// TestFenceRefusalRelayedIsAReply: an actor that replies, to an ask from
// another node, the error its own in-turn ask got from a fenced-off
// activation whose mail its node did not send again (the refusal is not
// resendable) replies an error: the caller gets a reply error, not the
// refusal that would tell its node the ask never ran.
func TestFenceRefusalRelayedIsAReply(t *testing.T) {
	c, a, b, bells, _ := fencePair(t, "b")
	relay := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if m, ok := msg.(rtSeq); !ok || m.Kind != "relay" {
				return
			}
			r := ctx.ReplyLater()
			ctx.Ask(actor.Virtual("log", "x"), rtSeq{Kind: "get"}, func(ctx actor.Context, _ any, err error) {
				if err == nil {
					err = errors.New("answered")
				}
				_ = r.ReplyError(ctx, err)
			})
		})
	}
	for _, n := range []*rtNode{a, b} {
		if err := n.s.Register("relay", relay, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.place("relay", "b")
	bells["b"].holding()
	asked := make(chan error, 1)
	go func() {
		_, err := a.s.Ask(rtCtx(t, rtWait), actor.Virtual("relay", "r"), rtSeq{Kind: "relay"})
		asked <- err
	}()
	waitFor(t, "the relay's ask queued at log/x", func() bool { return b.s.Queued(actor.Virtual("log", "x")) == 1 })
	c.setFail("b", "log", fmt.Errorf("%w: no node hosts log now", actor.ErrNoEligibleNode))
	bells["b"].release()
	err := <-asked
	var re *wire.RefusedError
	var rem *wire.RemoteError
	if errors.As(err, &re) || !errors.As(err, &rem) {
		t.Fatalf("relayed fence refusal = %v (%T), want a reply error", err, err)
	}
}
