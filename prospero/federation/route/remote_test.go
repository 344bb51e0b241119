package route

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/internal/testmsg"
	"github.com/tempest-actors/tempest/wire"
)

// Message types of these tests: generated BARE structs of the tests'
// own schema.
type (
	rtSeq     = testmsg.DeadlinePolicy // Kind: command or sender, DefaultDeadlineNs: sequence number
	rtCount   = testmsg.HandoffDone    // Count: an answer
	rtPayload = testmsg.StateTransfer  // State: bytes
	rtStray   = testmsg.HydrateRequest // registered on some nodes only
)

const rtWait = 20 * time.Second

func rtRegistry(t testing.TB, stray bool) *wire.Registry {
	t.Helper()
	reg := wire.NewRegistry()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(wire.Register[rtSeq](reg, 100))
	must(wire.Register[rtCount](reg, 101))
	must(wire.Register[rtPayload](reg, 102))
	if stray {
		must(wire.Register[rtStray](reg, 103))
	}
	return reg
}

// rtCluster is a set of real nodes on loopback: each an ariel scheduler,
// a QUIC transport with certificates from a CA written to a temp dir, and
// the remote router. owners places virtual kinds on nodes.
type rtCluster struct {
	t     testing.TB
	caDir string
	ca    *wire.CA
	mu    sync.Mutex
	addrs map[string]string
	owner map[string]string   // kind -> node
	stale map[string]string   // node -> the one node it wrongly believes owns everything
	epoch map[string]uint64   // node -> the epoch its table gives every shard (0: none)
	fail  map[string]error    // node (or node/kind) -> the error its locator returns for everything (that kind)
	seq   map[string][]string // node/kind -> owners its next locates answer, one each, before owner's
	// busy, when set, is every node's hydration admission (remote.busy).
	busy func(node string, to actor.Ref) (time.Duration, string, bool)
	// hold, when set, is called by every locate (outside the lock), with
	// the locating node and the recipient.
	hold func(self string, ref actor.Ref)
	// change is closed (and replaced) when a test changes placement
	// (place, changed): every node's retry loop wakes, as at a raft apply.
	change chan struct{}
}

type rtNode struct {
	name string
	s    *ariel.Scheduler
	r    *Router
	tr   *wire.QUIC
	down sync.Once
}

func newRTCluster(t testing.TB) *rtCluster {
	t.Helper()
	// Registered first, so it runs after every node's cleanup.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	ca, err := wire.NewCA("remote test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := wire.WriteCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	return &rtCluster{t: t, caDir: dir, ca: ca, addrs: map[string]string{}, owner: map[string]string{}, stale: map[string]string{},
		epoch: map[string]uint64{}, fail: map[string]error{}, seq: map[string][]string{}, change: make(chan struct{})}
}

func (c *rtCluster) place(kind, node string) {
	c.mu.Lock()
	c.owner[kind] = node
	c.mu.Unlock()
	c.changed()
}

// changed wakes the nodes' retry loops: placement changed.
func (c *rtCluster) changed() {
	c.mu.Lock()
	close(c.change)
	c.change = make(chan struct{})
	c.mu.Unlock()
}

// changes returns the channel closed at the next change.
func (c *rtCluster) changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.change
}

func (c *rtCluster) resolve(_ context.Context, name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.addrs[name]; ok {
		return a, nil
	}
	return "", fmt.Errorf("no node %q", name)
}

func (c *rtCluster) locator(self string) Locator {
	return func(ref actor.Ref) (string, uint64, bool, error) {
		c.mu.Lock()
		node, ok := c.owner[ref.Kind()]
		epoch := c.epoch[self]
		if s, isStale := c.stale[self]; isStale {
			node, ok = s, true
		}
		if q := c.seq[self+"/"+ref.Kind()]; len(q) > 0 {
			node, ok = q[0], true
			c.seq[self+"/"+ref.Kind()] = q[1:]
		}
		ferr := c.fail[self]
		if kerr, ok := c.fail[self+"/"+ref.Kind()]; ok {
			ferr = kerr
		}
		hold := c.hold
		c.mu.Unlock()
		if hold != nil {
			hold(self, ref)
		}
		if ferr != nil {
			return "", epoch, false, ferr
		}
		if !ok {
			return "", 0, false, actor.ErrNoEligibleNode
		}
		return node, epoch, node == self, nil
	}
}

// start runs a node; edit may change the scheduler config.
func (c *rtCluster) start(name string, reg *wire.Registry, edit func(*ariel.Config)) *rtNode {
	c.t.Helper()
	return c.startWith(name, reg, c.ca, edit)
}

// startWith runs a node whose certificate ca issued (it still trusts the
// cluster CA).
func (c *rtCluster) startWith(name string, reg *wire.Registry, ca *wire.CA, edit func(*ariel.Config)) *rtNode {
	t := c.t
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	certPEM, keyPEM, err := ca.Issue(wire.NodeCertRequest{Name: name, NotBefore: time.Now().Add(-time.Minute), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteNodeCert(dir, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	cert, err := wire.LoadNodeCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := wire.LoadCAPool(c.caDir)
	if err != nil {
		t.Fatal(err)
	}
	scfg := ariel.Config{Node: name, Workers: 2}
	if edit != nil {
		edit(&scfg)
	}
	s, err := ariel.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Scheduler: s, Registry: reg, Locate: c.locator(name),
		Mail: wire.MailConfig{SweepInterval: 20 * time.Millisecond},
		Busy: func(to actor.Ref) (time.Duration, string, bool) {
			c.mu.Lock()
			f := c.busy
			c.mu.Unlock()
			if f == nil {
				return 0, "", false
			}
			return f(name, to)
		}})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := wire.NewQUIC(wire.Config{
		Name: name, ListenAddr: "127.0.0.1:0",
		Certificate: cert, CAs: pool,
		Resolve: c.resolve,
		Handler: r.mail.Handle, Events: r.mail.LinkEvent,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Attach(tr, nil)
	c.mu.Lock()
	c.addrs[name] = tr.Addr().String()
	c.mu.Unlock()
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		r.RetryLoop(loopCtx, c.changes)
	}()
	n := &rtNode{name: name, s: s, r: r, tr: tr}
	t.Cleanup(func() {
		stopLoop()
		<-loopDone
		n.kill()
		ctx, cancel := context.WithTimeout(context.Background(), rtWait)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
	})
	return n
}

// kill takes the node off the network: transport and mail closed.
func (n *rtNode) kill() {
	n.down.Do(func() {
		n.tr.Close()
		n.r.Close()
	})
}

func rtCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// askRetry asks, retrying while the link is being set up (the first
// message to a peer can find it in its dial back-off on a busy machine).
func askRetry(t testing.TB, s *ariel.Scheduler, to actor.Ref, msg any) any {
	t.Helper()
	deadline := time.Now().Add(rtWait)
	for {
		v, err := s.Ask(rtCtx(t, rtWait), to, msg)
		if err == nil {
			return v
		}
		if !errors.Is(err, actor.ErrProcessUnavailable) || time.Now().After(deadline) {
			t.Fatalf("ask %v: %v", to, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counterActor answers "get" with the sum of the "add" tells.
func counterActor(string) actor.Actor {
	var sum uint64
	return actor.Func(func(ctx actor.Context, msg any) {
		m, ok := msg.(rtSeq)
		if !ok {
			return
		}
		switch m.Kind {
		case "add":
			sum += m.DefaultDeadlineNs
		case "get":
			ctx.Reply(rtCount{Count: sum})
		case "fail":
			ctx.ReplyError(fmt.Errorf("no such thing: %w", actor.ErrNoEligibleNode))
		case "plain":
			ctx.ReplyError(errors.New("plain failure"))
		case "echo":
			ctx.Reply(rtPayload{State: []byte(ctx.Sender().String())})
		}
	})
}

// counterPair runs nodes a and b, with the counter kind placed on b.
func counterPair(t *testing.T) (c *rtCluster, a, b *rtNode) {
	t.Helper()
	c = newRTCluster(t)
	a = c.start("a", rtRegistry(t, false), nil)
	b = c.start("b", rtRegistry(t, false), nil)
	c.place("counter", "b")
	if err := b.s.Register("counter", counterActor, 0); err != nil {
		t.Fatal(err)
	}
	return c, a, b
}

func TestRemoteTellAndAsk(t *testing.T) {
	_, a, _ := counterPair(t)
	ref := actor.Virtual("counter", "x")
	askRetry(t, a.s, ref, rtSeq{Kind: "get"})
	for i := 1; i <= 10; i++ {
		if err := a.s.Tell(ref, rtSeq{Kind: "add", DefaultDeadlineNs: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Same sender, same recipient: the ask comes after the tells.
	if got := askRetry(t, a.s, ref, rtSeq{Kind: "get"}); got != any(rtCount{Count: 55}) {
		t.Fatalf("sum = %#v, want 55", got)
	}
	// A sentinel error crosses the wire; a plain one keeps its message.
	_, err := a.s.Ask(rtCtx(t, rtWait), ref, rtSeq{Kind: "fail"})
	if !errors.Is(err, actor.ErrNoEligibleNode) {
		t.Fatalf("ReplyError across nodes: %v", err)
	}
	_, err = a.s.Ask(rtCtx(t, rtWait), ref, rtSeq{Kind: "plain"})
	if err == nil || err.Error() != "plain failure" {
		t.Fatalf("plain ReplyError across nodes: %v", err)
	}
	// An actor spawned on a asks in its turn; its spawned reference
	// crosses as the sender, and the reply comes back to its continuation.
	got := make(chan any, 1)
	asker, err := a.s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		if _, ok := msg.(rtSeq); ok {
			ctx.Ask(ref, rtSeq{Kind: "echo"}, func(_ actor.Context, reply any, err error) {
				if err != nil {
					got <- err
					return
				}
				got <- reply
			}, actor.WithTimeout(rtWait))
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.s.Tell(asker, rtSeq{}); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		p, ok := v.(rtPayload)
		if !ok || string(p.State) != asker.String() {
			t.Fatalf("in-turn ask got %#v, want the asker's reference %v", v, asker)
		}
	case <-time.After(rtWait):
		t.Fatal("no reply to the in-turn ask")
	}
	if st := a.r.MailStats(); st.AsksSent < 4 || st.TellsSent != 10 {
		t.Fatalf("a's mail stats: %+v", st)
	}
}

func TestRemoteFIFOUnderLoad(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), func(cfg *ariel.Config) { cfg.MailboxCapacity = 1 << 16 })
	c.place("seq", "b")
	const senders, recipients, perPair = 3, 2, 3000
	type key struct{ recipient, sender string }
	var mu sync.Mutex
	last := map[key]uint64{}
	var bad []string
	done := make(chan struct{})
	total := 0
	if err := b.s.Register("seq", func(k string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			m, ok := msg.(rtSeq)
			if !ok {
				ctx.Reply(rtCount{}) // the warm-up ask
				return
			}
			mu.Lock()
			defer mu.Unlock()
			kk := key{k, m.Kind}
			if m.DefaultDeadlineNs != last[kk]+1 {
				bad = append(bad, fmt.Sprintf("%v: got %d after %d", kk, m.DefaultDeadlineNs, last[kk]))
			}
			last[kk] = m.DefaultDeadlineNs
			if total++; total == senders*recipients*perPair {
				close(done)
			}
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	askRetry(t, a.s, actor.Virtual("seq", "warm"), rtCount{}) // warms the link; not an rtSeq
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("sender-", s)
			for i := 1; i <= perPair; i++ {
				for r := range recipients {
					msg := rtSeq{Kind: name, DefaultDeadlineNs: uint64(i)}
					to := actor.Virtual("seq", fmt.Sprint(r))
					for {
						err := a.s.Tell(to, msg)
						if err == nil {
							break
						}
						// A full link queue refuses; the message was not
						// sent, so sending it again keeps the order.
						if !errors.Is(err, actor.ErrRefused) {
							errs <- err
							return
						}
						runtime.Gosched()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(rtWait):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("received %d of %d messages", total, senders*recipients*perPair)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d order violations, first: %s", len(bad), bad[0])
	}
}

// blocker blocks its turn on "block" until release is closed, telling
// entered first; it records every other message it runs.
type blocker struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	ran     []string
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (bl *blocker) factory(string) actor.Actor {
	return actor.Func(func(ctx actor.Context, msg any) {
		m, ok := msg.(rtSeq)
		if !ok {
			return
		}
		if m.Kind == "block" {
			bl.entered <- struct{}{}
			<-bl.release
			return
		}
		bl.mu.Lock()
		bl.ran = append(bl.ran, m.Kind)
		bl.mu.Unlock()
		ctx.Reply(rtCount{Count: 1})
	})
}

func (bl *blocker) waitEntered(t testing.TB) {
	t.Helper()
	select {
	case <-bl.entered:
	case <-time.After(rtWait):
		t.Fatal("blocking turn did not start")
	}
}

func (bl *blocker) ranKinds() []string {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return append([]string(nil), bl.ran...)
}

func TestRemoteAskDeadlineWhenBlocked(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("blocker", "b")
	bl := newBlocker()
	if err := b.s.Register("blocker", bl.factory, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("blocker", "1")
	askRetry(t, a.s, ref, rtSeq{Kind: "warm"})
	if err := a.s.Tell(ref, rtSeq{Kind: "block"}); err != nil {
		t.Fatal(err)
	}
	bl.waitEntered(t)
	const d = 300 * time.Millisecond
	start := time.Now()
	_, err := a.s.Ask(rtCtx(t, d), ref, rtSeq{Kind: "late"})
	if !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("ask to a blocked actor: %v, want ErrDeadlineExceeded", err)
	}
	if el := time.Since(start); el < d {
		t.Fatalf("failed after %v, before its deadline %v", el, d)
	}
	// b's copy of the deadline is later by the transit time; let it pass.
	waitFor(t, "the ask to expire on b", func() bool { return b.s.Stats().Expired >= 1 })
	close(bl.release)
	// The expired ask is dropped before its turn: the next ask runs, the
	// expired one never did.
	askRetry(t, a.s, ref, rtSeq{Kind: "after"})
	if got := bl.ranKinds(); len(got) != 2 || got[0] != "warm" || got[1] != "after" {
		t.Fatalf("turns run: %v, want [warm after]", got)
	}
}

func TestRemoteNodeKilledFailsAsksAtOnce(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("blocker", "b")
	bl := newBlocker()
	t.Cleanup(func() { close(bl.release) })
	if err := b.s.Register("blocker", bl.factory, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("blocker", "1")
	askRetry(t, a.s, ref, rtSeq{Kind: "warm"})
	if err := a.s.Tell(ref, rtSeq{Kind: "block"}); err != nil {
		t.Fatal(err)
	}
	bl.waitEntered(t)
	res := make(chan error, 1)
	go func() {
		_, err := a.s.Ask(rtCtx(t, time.Hour), ref, rtSeq{Kind: "pending"})
		res <- err
	}()
	waitFor(t, "the ask to be pending", func() bool { return a.r.mail.Pending() == 1 })
	b.kill()
	select {
	case err := <-res:
		// It was pending on the link: whether b ran it is unknown, which
		// the error says, and it is not sent again.
		if !errors.Is(err, wire.ErrLinkLost) || !errors.Is(err, actor.ErrProcessUnavailable) {
			t.Fatalf("ask to a killed node: %v, want wire.ErrLinkLost (ErrProcessUnavailable)", err)
		}
	case <-time.After(rtWait): // far below the hour of the deadline
		t.Fatal("ask to a killed node still pending")
	}
	if st := a.r.MailStats(); st.AsksLinkDown != 1 {
		t.Fatalf("AsksLinkDown = %d", st.AsksLinkDown)
	}
}

// waitFor polls cond up to rtWait.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(rtWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestRemoteMailboxFullRefuses(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("tiny", "b")
	bl := newBlocker()
	if err := b.s.Register("tiny", bl.factory, 1); err != nil { // mailbox of one
		t.Fatal(err)
	}
	ref := actor.Virtual("tiny", "1")
	askRetry(t, a.s, ref, rtSeq{Kind: "warm"})
	if err := a.s.Tell(ref, rtSeq{Kind: "block"}); err != nil {
		t.Fatal(err)
	}
	bl.waitEntered(t)
	if err := a.s.Tell(ref, rtSeq{Kind: "fills"}); err != nil {
		t.Fatal(err)
	}
	// Same lane as the tell, so it arrives after it and finds the mailbox full.
	_, err := a.s.Ask(rtCtx(t, rtWait), ref, rtSeq{Kind: "refused"})
	var re *wire.RefusedError
	if !errors.Is(err, actor.ErrRefused) || !errors.As(err, &re) || re.Reason != wire.RefusedReasonMailboxFull {
		t.Fatalf("ask to a full mailbox: %v, want ErrRefused (MAILBOX_FULL)", err)
	}
	// A tell from an actor comes back to it as Undelivered.
	notice := make(chan actor.Undelivered, 1)
	sender, err := a.s.Spawn(actor.Func(func(ctx actor.Context, msg any) {
		switch m := msg.(type) {
		case rtSeq:
			_ = ctx.Tell(ref, m)
		case actor.Undelivered:
			notice <- m
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.s.Tell(sender, rtSeq{Kind: "lost"}); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-notice:
		if u.To != ref || !errors.Is(u.Err, actor.ErrRefused) || u.Message != any(rtSeq{Kind: "lost"}) {
			t.Fatalf("undelivered = %+v", u)
		}
	case <-time.After(rtWait):
		t.Fatal("no Undelivered notice for the refused tell")
	}
	close(bl.release)
	// The mailbox of one holds "fills" until its turn takes it: an ask
	// sent before then is refused MAILBOX_FULL like the one above.
	waitFor(t, "the queued tell to run", func() bool { return len(bl.ranKinds()) == 2 })
	askRetry(t, a.s, ref, rtSeq{Kind: "after"})
	if got := bl.ranKinds(); len(got) != 3 || got[1] != "fills" || got[2] != "after" {
		t.Fatalf("turns run: %v, want [warm fills after]", got)
	}
	if st := b.r.MailStats(); st.RefusedOut[wire.RefusedReasonMailboxFull] != 2 {
		t.Fatalf("b refused %v, want 2 MAILBOX_FULL", st.RefusedOut)
	}
}

func TestRemoteUnknownTagAndKind(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, true), nil)
	b := c.start("b", rtRegistry(t, false), nil) // does not know rtStray
	c.place("counter", "b")
	c.place("ghost", "b") // placed on b, but no kind registered there
	if err := b.s.Register("counter", counterActor, 0); err != nil {
		t.Fatal(err)
	}
	ref := actor.Virtual("counter", "x")
	askRetry(t, a.s, ref, rtSeq{Kind: "get"})
	if _, err := a.s.Ask(rtCtx(t, rtWait), ref, rtStray{}); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("ask with a tag b does not know: %v, want ErrUnknownKind", err)
	}
	if _, err := a.s.Ask(rtCtx(t, rtWait), actor.Virtual("ghost", "1"), rtSeq{}); !errors.Is(err, actor.ErrUnknownKind) {
		t.Fatalf("ask for a kind b does not host: %v, want ErrUnknownKind", err)
	}
	// A type with no tag never leaves the node.
	if err := a.s.Tell(ref, "not registered"); !errors.Is(err, wire.ErrUnregistered) {
		t.Fatalf("tell of an unregistered type: %v", err)
	}
	if st := b.r.MailStats(); st.UnknownTags != 1 {
		t.Fatalf("b counted %d unknown tags", st.UnknownTags)
	}
}

func TestRemoteNotOwner(t *testing.T) {
	c := newRTCluster(t)
	a := c.start("a", rtRegistry(t, false), nil)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("counter", "b")
	for _, n := range []*rtNode{a, b} {
		if err := n.s.Register("counter", counterActor, 0); err != nil {
			t.Fatal(err)
		}
	}
	ref := actor.Virtual("counter", "x")
	askRetry(t, a.s, ref, rtSeq{Kind: "get"})
	// b still gets mail for counter after placement moved it to a (a's
	// view is stale): b refuses it and names the owner it knows.
	c.mu.Lock()
	c.stale["a"] = "b"
	c.mu.Unlock()
	c.place("counter", "a")
	// a's view never catches up: the ask waits for it until its deadline.
	if _, err := a.s.Ask(rtCtx(t, 300*time.Millisecond), ref, rtSeq{Kind: "get"}); !errors.Is(err, actor.ErrDeadlineExceeded) {
		t.Fatalf("ask to a node that no longer owns the actor, by a table that never catches up: %v", err)
	}
	if n := b.r.MailStats().RefusedOut[wire.RefusedReasonNotOwner]; n != 1 {
		t.Fatalf("b refused %d NOT_OWNER, want 1", n)
	}
	err := b.r.owns(ref)
	var re *wire.RefusedError
	if !errors.As(err, &re) || re.Reason != wire.RefusedReasonNotOwner || re.OwnerHint != "a" || !errors.Is(err, actor.ErrProcessUnavailable) {
		t.Fatalf("b's refusal: %v", err)
	}
	// Once it does, the same ask is answered.
	c.mu.Lock()
	delete(c.stale, "a")
	c.mu.Unlock()
	c.changed()
	if _, err := a.s.Ask(rtCtx(t, rtWait), ref, rtSeq{Kind: "get"}); err != nil {
		t.Fatalf("ask once a's table caught up: %v", err)
	}
}

func TestRemoteThreeNodes(t *testing.T) {
	c := newRTCluster(t)
	nodes := []*rtNode{
		c.start("n1", rtRegistry(t, false), nil),
		c.start("n2", rtRegistry(t, false), nil),
		c.start("n3", rtRegistry(t, false), nil),
	}
	for _, n := range nodes {
		kind := "counter-" + n.name
		c.place(kind, n.name)
		if err := n.s.Register(kind, counterActor, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Every node tells and then asks a counter on every other node; each
	// sender uses its own key, so each sum is its own.
	for _, from := range nodes {
		for _, to := range nodes {
			if to == from {
				continue
			}
			ref := actor.Virtual("counter-"+to.name, from.name)
			askRetry(t, from.s, ref, rtSeq{Kind: "get"})
			for i := 1; i <= 5; i++ {
				if err := from.s.Tell(ref, rtSeq{Kind: "add", DefaultDeadlineNs: uint64(i)}); err != nil {
					t.Fatal(err)
				}
			}
			if got := askRetry(t, from.s, ref, rtSeq{Kind: "get"}); got != any(rtCount{Count: 15}) {
				t.Fatalf("%s -> %s: %#v, want 15", from.name, to.name, got)
			}
		}
	}
	for _, n := range nodes {
		if st := n.r.MailStats(); st.TellsReceived != 10 || st.AsksReceived != 4 {
			t.Fatalf("%s received %d tells and %d asks, want 10 and 4", n.name, st.TellsReceived, st.AsksReceived)
		}
	}
}

func TestRemoteForeignCertificateDeliversNothing(t *testing.T) {
	c := newRTCluster(t)
	b := c.start("b", rtRegistry(t, false), nil)
	c.place("counter", "b")
	var runs sync.Map
	if err := b.s.Register("counter", func(key string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(rtSeq); ok {
				runs.Store(key, true)
				ctx.Reply(rtCount{})
			}
		})
	}, 0); err != nil {
		t.Fatal(err)
	}
	other, err := wire.NewCA("foreign CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	evil := c.startWith("evil", rtRegistry(t, false), other, nil)
	// The handshake fails, the link backs off, and sends then fail fast;
	// until then they were only queued.
	waitFor(t, "the foreign node's sends to fail", func() bool {
		return errors.Is(evil.s.Tell(actor.Virtual("counter", "evil"), rtSeq{}), actor.ErrProcessUnavailable)
	})
	if _, err := evil.s.Ask(rtCtx(t, rtWait), actor.Virtual("counter", "evil"), rtSeq{}); err == nil {
		t.Fatal("an ask from a node with a foreign certificate was answered")
	}
	// A legitimate node's mail on the same node goes through, and
	// afterwards nothing from the foreign node has run.
	a := c.start("a", rtRegistry(t, false), nil)
	askRetry(t, a.s, actor.Virtual("counter", "a"), rtSeq{})
	if _, ran := runs.Load("evil"); ran {
		t.Fatal("mail from a node with a foreign certificate was delivered")
	}
	if st := b.r.MailStats(); st.TellsReceived != 0 || st.AsksReceived != 1 {
		t.Fatalf("b received %d tells and %d asks, want only a's ask", st.TellsReceived, st.AsksReceived)
	}
}
