package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/wire/bare"
)

// fakeInboxes is a fakeLocal that also resolves inboxes; their tells land
// in the same record as Deliver's.
type fakeInboxes struct {
	*fakeLocal
	mu       sync.Mutex
	resolves map[actor.Ref]int
	dead     map[*fakeInbox]bool
	tellErr  map[actor.Ref]error // returned once by the next Tell to that actor
	resolveE error
}

type fakeInbox struct {
	f  *fakeInboxes
	to actor.Ref
}

func newFakeInboxes() *fakeInboxes {
	return &fakeInboxes{fakeLocal: newFakeLocal(), resolves: map[actor.Ref]int{},
		dead: map[*fakeInbox]bool{}, tellErr: map[actor.Ref]error{}}
}

func (f *fakeInboxes) Inbox(to actor.Ref) (Inbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resolves[to]++
	if f.resolveE != nil {
		return nil, f.resolveE
	}
	return &fakeInbox{f: f, to: to}, nil
}

func (f *fakeInboxes) resolved(to actor.Ref) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resolves[to]
}

func (f *fakeInboxes) kill(to actor.Ref) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for in := range f.dead {
		if in.to == to {
			f.dead[in] = true
		}
	}
}

func (i *fakeInbox) Tell(from actor.Ref, msg any) error {
	f := i.f
	f.mu.Lock()
	if _, seen := f.dead[i]; !seen {
		f.dead[i] = false
	}
	err := f.tellErr[i.to]
	delete(f.tellErr, i.to)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Deliver(i.to, from, msg, time.Time{}, nil)
}

func (i *fakeInbox) Live() bool {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	return !i.f.dead[i]
}

func newInboxPair(t *testing.T) (a, b *mailNode, local *fakeInboxes) {
	t.Helper()
	net := NewMemNetwork(1, nil)
	reg := testRegistry(t)
	local = newFakeInboxes()
	a = newMailNode(t, net, "a", reg, nil)
	b = newMailNode(t, net, "b", reg, func(c *MailConfig) { c.Local = local })
	b.local = local.fakeLocal
	return a, b, local
}

func TestMailInboxResolvedOncePerRecipient(t *testing.T) {
	a, b, local := newInboxPair(t)
	other := actor.Spawned("b", 9, 2)
	const n = 50
	for i := range n {
		from := childRef
		if i%2 == 1 {
			from = actor.Ref{} // the sender header is cached per (to, from)
		}
		if err := a.m.Tell("b", userRef, from, testPing{TurnBudgetNs: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		if err := a.m.Tell("b", other, childRef, testPing{TurnBudgetNs: uint64(1000 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	got := b.local.waitN(t, 2*n)
	var seq [2]uint64
	for _, d := range got {
		p := d.msg.(testPing)
		switch d.to {
		case userRef:
			if p.TurnBudgetNs != seq[0] {
				t.Fatalf("to %v: got %d, want %d (order)", d.to, p.TurnBudgetNs, seq[0])
			}
			wantFrom := childRef
			if seq[0]%2 == 1 {
				wantFrom = actor.Ref{}
			}
			if d.from != wantFrom {
				t.Fatalf("message %d from %v, want %v", seq[0], d.from, wantFrom)
			}
			seq[0]++
		case other:
			if p.TurnBudgetNs != 1000+seq[1] || d.from != childRef {
				t.Fatalf("to %v: got %d from %v, want %d", d.to, p.TurnBudgetNs, d.from, 1000+seq[1])
			}
			seq[1]++
		default:
			t.Fatalf("delivered to %v", d.to)
		}
	}
	if r1, r2 := local.resolved(userRef), local.resolved(other); r1 != 1 || r2 != 1 {
		t.Fatalf("resolved %d and %d times, want once each", r1, r2)
	}
}

func TestMailInboxReresolvedWhenStale(t *testing.T) {
	a, b, local := newInboxPair(t)
	if err := a.m.Tell("b", userRef, actor.Ref{}, testPing{TurnBudgetNs: 1}); err != nil {
		t.Fatal(err)
	}
	b.local.waitN(t, 1)
	local.kill(userRef)
	if err := a.m.Tell("b", userRef, actor.Ref{}, testPing{TurnBudgetNs: 2}); err != nil {
		t.Fatal(err)
	}
	b.local.waitN(t, 2)
	if r := local.resolved(userRef); r != 2 {
		t.Fatalf("resolved %d times, want 2 (once more after the inbox went stale)", r)
	}
}

// The actor ends between the liveness check and the tell: nothing was
// admitted, so the tell goes to a fresh inbox, once.
func TestMailInboxTerminatedTellRetriedOnFreshInbox(t *testing.T) {
	net := NewMemNetwork(1, nil)
	reg := testRegistry(t)
	dying := &dyingInboxes{fakeInboxes: newFakeInboxes()}
	a := newMailNode(t, net, "a", reg, nil)
	b := newMailNode(t, net, "b", reg, func(c *MailConfig) { c.Local = dying })
	if err := a.m.Tell("b", userRef, actor.Ref{}, testPing{TurnBudgetNs: 3}); err != nil {
		t.Fatal(err)
	}
	got := dying.waitN(t, 1)
	if len(got) != 1 || got[0].msg.(testPing).TurnBudgetNs != 3 {
		t.Fatalf("deliveries %+v", got)
	}
	if n := dying.n.Load(); n != 2 {
		t.Fatalf("resolved %d times, want 2", n)
	}
	if s := b.m.Stats(); s.RefusalsSent != 0 {
		t.Fatalf("RefusalsSent = %d", s.RefusalsSent)
	}
}

// dyingInboxes hands out an inbox that dies on its first Tell, then
// healthy ones.
type dyingInboxes struct {
	*fakeInboxes
	n atomic.Int32
}

type dyingInbox struct {
	*fakeInbox
	dead bool
}

func (d *dyingInbox) Tell(from actor.Ref, msg any) error {
	d.dead = true
	return actor.ErrActorTerminated
}

func (d *dyingInbox) Live() bool { return !d.dead }

func (d *dyingInboxes) Inbox(to actor.Ref) (Inbox, error) {
	n := d.n.Add(1)
	in, err := d.fakeInboxes.Inbox(to)
	if err != nil || n > 1 {
		return in, err
	}
	return &dyingInbox{fakeInbox: in.(*fakeInbox)}, nil
}

func TestMailInboxRefusalReachesSender(t *testing.T) {
	a, _, local := newInboxPair(t)
	local.mu.Lock()
	local.tellErr[userRef] = fmt.Errorf("full: %w", actor.ErrRefused)
	local.mu.Unlock()
	msg := testPing{Kind: "x"}
	if err := a.m.Tell("b", userRef, childRef, msg); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-a.undeliv:
		if u.from != childRef || u.to != userRef || u.msg != any(msg) || !errors.Is(u.err, actor.ErrRefused) {
			t.Fatalf("undelivered = %+v", u)
		}
	case <-time.After(waitTimeout):
		t.Fatal("refusal did not reach the sender")
	}
}

func TestMailInboxResolveErrorFallsBackToDeliver(t *testing.T) {
	a, b, local := newInboxPair(t)
	local.mu.Lock()
	local.resolveE = actor.ErrUnknownKind
	local.mu.Unlock()
	for i := range 3 {
		if err := a.m.Tell("b", userRef, actor.Ref{}, testPing{TurnBudgetNs: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	b.local.waitN(t, 3) // the fake's Deliver admits what its Inbox would not
	if r := local.resolved(userRef); r != 3 {
		t.Fatalf("resolved %d times, want 3: a failed resolution is not cached", r)
	}
}

// frameTap is a Transport that keeps the frames sent.
type frameTap struct {
	mu     sync.Mutex
	frames [][]byte
	keys   []uint64
}

func (f *frameTap) Name() string { return "a" }
func (f *frameTap) Send(_ string, key uint64, frame []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frames = append(f.frames, bytes.Clone(frame))
	f.keys = append(f.keys, key)
	return nil
}
func (f *frameTap) SendControl(string, []byte) error { return nil }
func (f *frameTap) DialStream(context.Context, string, string) (net.Conn, error) {
	return nil, ErrUnavailable
}
func (f *frameTap) ListenStream(string) (net.Listener, error) { return nil, ErrUnavailable }
func (f *frameTap) Disconnect(string)                         {}
func (f *frameTap) Close() error                              { return nil }

// The envelopes built in place are byte for byte those of the generated
// encoder, for every body length class, with and without a sender, and
// for a nil message.
func TestMailFramesMatchGeneratedEncoding(t *testing.T) {
	reg := testRegistry(t)
	if err := Register[benchMsg](reg, 200); err != nil {
		t.Fatal(err)
	}
	tap := &frameTap{}
	m, err := NewMailer(MailConfig{Registry: reg, Local: newFakeLocal(), Complete: func(uint64, any, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Attach(tap)
	deadline := time.Now().Add(time.Hour)
	var want [][]byte
	for _, size := range []int{0, 1, 125, 126, 127, 128, 300, 16383, 16384, 70000} {
		for _, from := range []actor.Ref{{}, childRef} {
			for _, to := range []actor.Ref{userRef, actor.Spawned("b", 12345, 6)} {
				msg := benchMsg{Payload: bytes.Repeat([]byte{byte(size)}, size)}
				body, _ := msg.AppendBARE(nil)
				env := Tell{To: ActorIDOf(to), Tag: 200, Body: body}
				if !from.IsZero() {
					fid := ActorIDOf(from)
					env.From = &fid
				}
				w, err := MarshalEnvelope(&env)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, w)
				if err := m.Tell("b", to, from, msg); err != nil {
					t.Fatal(err)
				}
				if err := m.Ask("b", uint64(len(want)), to, from, &msg, deadline); err != nil {
					t.Fatal(err)
				}
				tap.mu.Lock()
				ask := tap.frames[len(tap.frames)-1]
				tap.mu.Unlock()
				var d bare.Decoder
				d.Reset(ask, bare.Config{})
				var a Ask
				if d.Uint() != 2 {
					t.Fatal("not an ask")
				}
				a.DecodeBARE(&d)
				if err := d.Finish(); err != nil {
					t.Fatalf("ask frame does not decode: %v", err)
				}
				if a.Id != uint64(len(want)) || a.Tag != 200 || !bytes.Equal(a.Body, body) || a.To != ActorIDOf(to) ||
					(a.From == nil) != from.IsZero() || a.DeadlineNs == 0 {
					t.Fatalf("ask frame decodes to %+v", a)
				}
				want = append(want, nil) // the ask, checked above
			}
		}
	}
	if err := m.Tell("b", userRef, actor.Ref{}, nil); err != nil {
		t.Fatal(err)
	}
	w, _ := MarshalEnvelope(&Tell{To: ActorIDOf(userRef), Tag: TagNil})
	want = append(want, w)
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if len(tap.frames) != len(want) {
		t.Fatalf("%d frames sent, want %d", len(tap.frames), len(want))
	}
	for i, w := range want {
		if w != nil && !bytes.Equal(tap.frames[i], w) {
			t.Fatalf("frame %d:\n got %x\nwant %x", i, tap.frames[i], w)
		}
	}
	for i, k := range tap.keys {
		var d bare.Decoder
		d.Reset(tap.frames[i], bare.Config{})
		env := DecodeEnvelope(&d)
		var to ActorID
		switch e := env.(type) {
		case *Tell:
			to = e.To
		case *Ask:
			to = e.To
		}
		ref, _ := RefOf(&to)
		if k != RefHash(ref) {
			t.Fatalf("frame %d sent with lane key %x, want RefHash %x", i, k, RefHash(ref))
		}
	}
}

// Decoded messages share storage blocks but never each other's bytes.
func TestRegistryDecodedValuesAreIndependent(t *testing.T) {
	reg := NewRegistry()
	if err := Register[benchMsg](reg, 1); err != nil {
		t.Fatal(err)
	}
	const workers, per = 4, 500
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kept []benchMsg
			for i := range per {
				n := (w*per + i) % 700 // some above the shared-block limit
				body, _ := (&benchMsg{Payload: bytes.Repeat([]byte{byte(w)}, n)}).AppendBARE(nil)
				v, err := reg.Decode(1, body)
				if err != nil {
					errs <- err
					return
				}
				clear(body) // the message must not alias the body
				m := v.(benchMsg)
				if len(m.Payload) != n {
					errs <- fmt.Errorf("payload of %d bytes, want %d", len(m.Payload), n)
					return
				}
				// An append must not reach a neighbour's bytes.
				m.Payload = append(m.Payload, 0xEE)
				kept = append(kept, m)
			}
			for i, m := range kept {
				n := (w*per + i) % 700
				if !bytes.Equal(m.Payload[:n], bytes.Repeat([]byte{byte(w)}, n)) || m.Payload[n] != 0xEE {
					errs <- fmt.Errorf("worker %d message %d overwritten", w, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestMailCachesHoldAThousandRecipients: mail rotating over a thousand
// virtual actors whose keys differ only in their middle finds nearly
// every recipient in the sender's header cache and the receiver's
// recipient cache (a miss costs allocations: that is what is counted).
func TestMailCachesHoldAThousandRecipients(t *testing.T) {
	m, err := NewMailer(MailConfig{Registry: NewRegistry(), Local: newFakeLocal(), Complete: func(uint64, any, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const n = 1000
	refs := make([]actor.Ref, n)
	ids := make([][]byte, n)
	for i := range refs {
		refs[i] = actor.Virtual("user", fmt.Sprintf("u-%04d-x", i))
		id := ActorIDOf(refs[i])
		if ids[i], err = id.AppendBARE(nil); err != nil {
			t.Fatal(err)
		}
	}
	round := func() {
		for i := range refs {
			if _, err := m.header(refs[i], actor.Ref{}); err != nil {
				t.Fatal(err)
			}
			if _, err := m.actorAt(ids[i], false); err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	// A miss costs two or three allocations; 2n lookups a round.
	if a := testing.AllocsPerRun(5, round); a > n/2 {
		t.Fatalf("a round over %d recipients allocated %v times: the caches miss about one lookup in %.0f", n, a, 2*n*2.5/a)
	}
}
