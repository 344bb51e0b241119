package route

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/prospero/federation/mailq"
	"github.com/tempest-actors/tempest/wire"
)

// countingTransport counts the mail frames sent to each peer.
type countingTransport struct {
	mu    sync.Mutex
	sends map[string]int
}

func (t *countingTransport) Name() string { return "a" }
func (t *countingTransport) Send(peer string, _ uint64, _ []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sends[peer]++
	return nil
}
func (t *countingTransport) SendControl(string, []byte) error { return nil }
func (t *countingTransport) DialStream(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no streams")
}
func (t *countingTransport) ListenStream(string) (net.Listener, error) {
	return nil, errors.New("no streams")
}
func (t *countingTransport) Disconnect(string) {}
func (t *countingTransport) Close() error      { return nil }
func (t *countingTransport) count(peer string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sends[peer]
}

// sendingBufRemote is newBufRemote whose table routes every recipient to
// c at epoch 2, with a mailer that sends through a countingTransport.
func sendingBufRemote(t *testing.T) (*Router, *ariel.SimClock, *countingTransport) {
	t.Helper()
	r, clk := newBufRemote(t, func(actor.Ref) (string, uint64, bool, error) { return "c", 2, false, nil })
	r.reg = rtRegistry(t, false)
	tr := &countingTransport{sends: map[string]int{}}
	m, err := wire.NewMailer(wire.MailConfig{Registry: r.reg, Local: delivery{r}, Complete: func(uint64, any, error) {}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	m.Attach(tr)
	r.mail = m
	return r, clk, tr
}

// A NOT_OWNER refusal by b that arrives once this node's table routes
// the recipient to c already goes to c in its turn, also behind other
// mail queued for the recipient: it waits for a table change only while
// the table still names the refuser at the epoch it was sent by. It
// used to wait for c to change (the route at the refusal), which in a
// settled cluster never comes: the ask failed at its deadline, and the
// recipient's later mail waited behind it.
func TestNotOwnerRefusalBehindQueuedMailGoesToTheNewOwner(t *testing.T) {
	r, clk, tr := sendingBufRemote(t)
	to, from := actor.Virtual("log", "x"), actor.Virtual("pump", "p")
	// First a tell c refused NOT_SERVING: it waits its back-off.
	if !r.retry(ariel.Outbound{To: to, From: from, Msg: rtSeq{Kind: "seq", DefaultDeadlineNs: 1}}, 0, mailq.Place{}, wire.NotServing(errors.New("lease"))) {
		t.Fatal("not taken")
	}
	// Then one b refused NOT_OWNER, sent by the table of epoch 1.
	notOwner := &wire.RefusedError{Node: "b", Reason: wire.RefusedReasonNotOwner, OwnerHint: "c"}
	if !r.retry(ariel.Outbound{To: to, From: from, Msg: rtSeq{Kind: "seq", DefaultDeadlineNs: 2}}, 1, mailq.Place{}, notOwner) {
		t.Fatal("not taken")
	}
	clk.Advance(Backoff(0))
	r.flushBuffered()
	if got := tr.count("c"); got != 2 || r.buf.Waiting() != 0 {
		t.Fatalf("sent %d of 2 tells to c, %d waiting for a table change that is not coming", got, r.buf.Waiting())
	}
}

// Mail refused NOT_SERVING again and again (an owner renewing its lease
// for a while) waits a back-off that grows with each refusal, from 5 ms
// doubling to 100 ms; it went again every 5 ms, each refusal starting
// the back-off afresh.
func TestBackoffGrowsWithEachRefusal(t *testing.T) {
	r, clk, tr := sendingBufRemote(t)
	to, from := actor.Virtual("log", "x"), actor.Virtual("pump", "p")
	msg := rtSeq{Kind: "seq", DefaultDeadlineNs: 1}
	notServing := &wire.RefusedError{Node: "c", Reason: wire.RefusedReasonNotServing, Detail: "lease"}
	var waits []time.Duration
	r.undelivered(from, to, msg, notServing)
	for range 7 {
		items := r.buf.Items(mailq.Key(to))
		if len(items) != 1 {
			t.Fatalf("%d waiting, want the one tell", len(items))
		}
		w := items[0].Due.Sub(clk.Now())
		waits = append(waits, w)
		clk.Advance(w)
		r.flushBuffered()
		r.undelivered(from, to, msg, notServing) // refused again
	}
	want := []time.Duration{Backoff(0), Backoff(1), Backoff(2), Backoff(3), Backoff(4), Backoff(5), Backoff(6)}
	if !slices.Equal(waits, want) || want[6] != retryBackoffMax {
		t.Fatalf("waits between the sends = %v, want %v", waits, want)
	}
	if got := tr.count("c"); got != 7 {
		t.Fatalf("sent %d times, want 7", got)
	}
}
