package route

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/clock"
	"github.com/tempest-actors/tempest/placement"
)

// laggingClock is the wall clock, behind by lag: a node whose clock lags
// sees an ask's deadline (carried as a duration) lag behind by as much.
type laggingClock struct {
	clock.Real
	lag time.Duration
}

func (c laggingClock) Now() time.Time { return time.Now().Add(-c.lag) }

// cancelLink delivers a's CancelAsk notices to b's Mailer, as the
// federation's control lane does, and records them.
type cancelLink struct {
	mu   sync.Mutex
	sent []uint64
}

func (l *cancelLink) wire(from, to *rtNode) {
	from.r.cancel = func(peer string, id uint64) {
		l.mu.Lock()
		l.sent = append(l.sent, id)
		l.mu.Unlock()
		if peer == to.name {
			to.r.mail.Withdraw(from.name, id)
		}
	}
}

func (l *cancelLink) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sent)
}

// TestRemoteCancelAskAtDeadline: an ask that reaches its deadline on the
// caller's side is withdrawn from the owner (CancelAsk), not only one
// whose context is cancelled: the owner's copy of the deadline is later
// by the transit time (here: by a clock that lags a second behind), and
// its turn could start in between. Exactly one notice goes, and the owner
// drops the ask before its turn, withdrawn, not expired.
func TestRemoteCancelAskAtDeadline(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), func(cfg *ariel.Config) { cfg.Clock = laggingClock{lag: time.Second} })
	c.place("blocker", "b")
	bl := newBlocker()
	if err := b.s.Register("blocker", bl.factory, 0); err != nil {
		t.Fatal(err)
	}
	var link cancelLink
	link.wire(a, b)
	ref := actor.Virtual("blocker", "1")
	askRetry(t, a.s, ref, rtSeq{Kind: "warm"})
	if err := a.s.Tell(ref, rtSeq{Kind: "block"}); err != nil {
		t.Fatal(err)
	}
	bl.waitEntered(t)
	_, err := a.s.Ask(rtCtx(t, 300*time.Millisecond), ref, rtSeq{Kind: "late"})
	if !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("ask to a blocked actor: %v, want ErrDeadlineExceeded", err)
	}
	waitFor(t, "the CancelAsk sent", func() bool { return link.count() == 1 })
	waitFor(t, "b withdrew the ask", func() bool { return b.r.MailStats().AsksWithdrawn == 1 })
	close(bl.release)
	askRetry(t, a.s, ref, rtSeq{Kind: "after"})
	if got := bl.ranKinds(); len(got) != 2 || got[0] != "warm" || got[1] != "after" {
		t.Fatalf("turns run: %v, want [warm after]", got)
	}
	if n := link.count(); n != 1 {
		t.Fatalf("%d CancelAsk sent, want 1", n)
	}
}

// TestRemoteCancelAskOvertakingItsAsk: a CancelAsk travels on the control
// lane and can arrive before its ask, which travels on a mail lane. The
// owner keeps it, and drops the ask unrun when it arrives (counted:
// CancelsKept, CancelsMatched, AsksWithdrawn); other asks run.
func TestRemoteCancelAskOvertakingItsAsk(t *testing.T) {
	_, a, b := counterPair(t)
	ref := actor.Virtual("counter", "x")
	askRetry(t, a.s, ref, rtSeq{Kind: "get"}) // the link is up
	const id = 1 << 40                        // not one of a's scheduler's ids
	if b.r.mail.Withdraw("a", id) {
		t.Fatal("withdrew an ask that never arrived")
	}
	if err := a.r.mail.Ask("b", id, ref, actor.Ref{}, rtSeq{Kind: "add", DefaultDeadlineNs: 5}, time.Now().Add(rtWait)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b dropped the overtaken ask", func() bool {
		st := b.r.MailStats()
		return st.CancelsMatched == 1 && st.AsksWithdrawn == 1
	})
	if st := b.r.MailStats(); st.CancelsKept != 1 || st.CancelsEvicted != 0 {
		t.Fatalf("b kept %d cancels, evicted %d; want 1, 0", st.CancelsKept, st.CancelsEvicted)
	}
	if got := askRetry(t, a.s, ref, rtSeq{Kind: "get"}); got != any(rtCount{Count: 0}) {
		t.Fatalf("counter = %#v after the withdrawn add, want 0: it ran", got)
	}
	// Another ask runs.
	if err := a.r.mail.Ask("b", id+1, ref, actor.Ref{}, rtSeq{Kind: "add", DefaultDeadlineNs: 5}, time.Now().Add(rtWait)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second add ran", func() bool {
		return askRetry(t, a.s, ref, rtSeq{Kind: "get"}) == any(rtCount{Count: 5})
	})
}

// TestAskGivenUpWhileResentIsNotSent: an ask waiting on its caller's node
// for placement is sent again by the retry loop, which first checks that
// the caller still waits. A caller that gives up after that check, before
// the Mailer registered the ask, found nothing to withdraw (no CancelAsk
// went), and the ask then ran on its owner. Now the Mailer checks again
// once the ask is registered and sends nothing.
func TestAskGivenUpWhileResentIsNotSent(t *testing.T) {
	c, a, b := counterPair(t)
	var link cancelLink
	link.wire(a, b)
	ref := actor.Virtual("counter", "x")
	askRetry(t, a.s, ref, rtSeq{Kind: "get"}) // the link is up
	c.setFail("a", "counter", &Hint{Err: fmt.Errorf("%w: %w", actor.ErrProcessUnavailable, placement.ErrHandoff), Owner: "b"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	asked := make(chan error, 1)
	go func() {
		_, err := a.s.Ask(ctx, ref, rtSeq{Kind: "add", DefaultDeadlineNs: 1})
		asked <- err
	}()
	waitFor(t, "the ask waiting on a", func() bool { return a.r.buf.Waiting() == 1 })

	// The move ends; the retry loop finds the ask pending, then its
	// lookup is held until the caller has given up.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.mu.Lock()
	c.hold = func(self string, to actor.Ref) {
		if self == "a" && to == ref {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	c.mu.Unlock()
	c.setFail("a", "counter", nil)
	c.changed()
	<-entered
	cancel()
	if err := <-asked; !errors.Is(err, context.Canceled) {
		t.Fatalf("the given-up ask: %v, want context.Canceled", err)
	}
	close(release)

	waitFor(t, "the retry queue empty", func() bool { return a.r.buf.Waiting() == 0 })
	if got := askRetry(t, a.s, ref, rtSeq{Kind: "get"}); got != any(rtCount{Count: 0}) {
		t.Fatalf("counter = %#v, want 0: the ask given up on ran", got)
	}
	if st := a.r.MailStats(); st.AsksSent != 2 {
		t.Fatalf("a sent %d asks, want 2 (the gets)", st.AsksSent)
	}
}
