package tempest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire/bare"
)

// TestMain checks that nothing leaks. Memberlist finishes a probe that is
// in flight when it shuts down (up to its TCP timeout) on its own, so the
// check retries for a few seconds before it calls a goroutine leaked.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // polling for stragglers to end
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newNode(t *testing.T, dir string, logs *syncBuffer) *tempest.Node {
	t.Helper()
	cfg := tempest.Config{Name: "n1", DataDir: dir}
	cfg.Scheduler.Workers = 2
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConfigValidate(t *testing.T) {
	if err := (tempest.Config{}).Validate(); !errors.Is(err, tempest.ErrInvalidConfig) {
		t.Fatalf("no DataDir: got %v", err)
	}
	if err := (tempest.Config{DataDir: "x", Name: "a b"}).Validate(); !errors.Is(err, tempest.ErrInvalidConfig) {
		t.Fatalf("bad name: got %v", err)
	}
	if err := (tempest.Config{DataDir: "x"}).Validate(); err != nil {
		t.Fatalf("zero config with a DataDir: %v", err)
	}
	// MinInSync within the replica sets' size, the default size too.
	for _, c := range []struct {
		replicas, minInSync int
		ok                  bool
	}{{0, 3, true}, {0, 4, false}, {5, 5, true}, {5, 6, false}, {1, 2, false}, {0, -1, false}} {
		cl := &tempest.ClusterConfig{Certificate: tls.Certificate{Certificate: [][]byte{{1}}}, CAs: x509.NewCertPool()}
		cl.Placement.Replicas, cl.Replication.MinInSync = c.replicas, c.minInSync
		err := (tempest.Config{DataDir: "x", Name: "n1", Cluster: cl}).Validate()
		if c.ok != (err == nil) || err != nil && !errors.Is(err, tempest.ErrInvalidConfig) {
			t.Errorf("Replicas %d, MinInSync %d: %v", c.replicas, c.minInSync, err)
		}
	}
	n, err := tempest.New(tempest.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Name(); got != "local" {
		t.Errorf("default name %q", got)
	}
	m := n.Manifest()
	if m.Capacities.MailboxDepth != 1024 || m.Capacities.HydrationBudget != 64 || m.Capacities.Workers < 1 {
		t.Errorf("manifest capacities %+v", m.Capacities)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestTellAsk(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ctx := ctxT(t)
	got, err := n.Ask(ctx, n.Ref(demo.Echo, "a"), &demo.EchoIn{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := got.(demo.EchoIn); !ok || e.Text != "hi" {
		t.Fatalf("echo: got %#v", got)
	}
	c := n.Ref(demo.Counter, "c")
	for range 10 {
		if err := n.Tell(c, demo.Add{N: 2}); err != nil {
			t.Fatal(err)
		}
	}
	got, err = n.Ask(ctx, c, demo.Get{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.(demo.CounterValue).N; v != 20 {
		t.Fatalf("counter after 10 tells of 2: got %d, want 20", v)
	}
	st, err := n.Status(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != actor.Valid || !st.Active || st.Node != "n1" || st.Incarnation != 1 || st.Key != "c" {
		t.Fatalf("status %+v", st)
	}
	if s := n.Stats(); s.Scheduler.Messages == 0 || s.Supervisor.Active != 2 {
		t.Fatalf("stats %+v", s)
	}
	if !n.Ready() || !n.Live() {
		t.Fatal("a started node is ready and live")
	}
}

func TestUnknownKind(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ctx := ctxT(t)
	ref := n.Ref("nope", "x")
	if err := n.Tell(ref, 1); !errors.Is(err, actor.ErrUnknownKind) {
		t.Errorf("tell: %v", err)
	}
	if _, err := n.Ask(ctx, ref, 1); !errors.Is(err, actor.ErrUnknownKind) {
		t.Errorf("ask: %v", err)
	}
	if _, err := n.AskJSON(ctx, "nope", "x", []byte(`{}`)); !errors.Is(err, actor.ErrUnknownKind) {
		t.Errorf("ask JSON: %v", err)
	}
	if _, err := n.Status(ctx, ref); !errors.Is(err, actor.ErrUnknownKind) {
		t.Errorf("status: %v", err)
	}
}

func TestAskJSON(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ctx := ctxT(t)
	for _, tc := range []struct{ in, want string }{
		{`{"Add":{"n":5}}`, `{"n":5}`},
		{`{"Add":{"n":-2}}`, `{"n":3}`},
		{`{"Get":null}`, `{"n":3}`},
	} {
		got, err := n.AskJSON(ctx, demo.Counter, "j", []byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if string(got) != tc.want {
			t.Fatalf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
	got, err := n.AskJSON(ctx, demo.Echo, "e", []byte(`{"text":"ünïcode"}`))
	if err != nil || string(got) != `{"text":"ünïcode"}` {
		t.Fatalf("echo JSON: %s, %v", got, err)
	}
	if err := n.TellJSON(t.Context(), demo.Counter, "j", []byte(`{"Add":{"n":1}}`)); err != nil {
		t.Fatal(err)
	}
	if got, _ := n.AskJSON(ctx, demo.Counter, "j", []byte(`{"Get":null}`)); string(got) != `{"n":4}` {
		t.Fatalf("after TellJSON: %s", got)
	}
}

func TestBadJSONNamesTheField(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ctx := ctxT(t)
	for _, in := range []string{`{"Add":{"n":"five"}}`, `{"Add":{}}`, `{"Add":{"n":1,"m":2}}`} {
		_, err := n.AskJSON(ctx, demo.Counter, "j", []byte(in))
		if !errors.Is(err, tempest.ErrBadJSON) || !errors.Is(err, bare.ErrJSON) {
			t.Fatalf("%s: got %v, want ErrBadJSON wrapping bare.ErrJSON", in, err)
		}
		var je *tempest.JSONError
		if !errors.As(err, &je) || je.Kind != demo.Counter || je.Type != "CounterIn" {
			t.Fatalf("%s: got %#v", in, err)
		}
		if !strings.Contains(err.Error(), "Add") {
			t.Errorf("%s: error %q does not name the field", in, err)
		}
	}
	_, err := n.AskJSON(ctx, demo.Counter, "j", []byte(`{"Add":{"n":"five"}}`))
	if !strings.Contains(err.Error(), "n") {
		t.Errorf("error %q does not name n", err)
	}
	if _, err := n.AskJSON(ctx, demo.Counter, "j", []byte(`{"Add":`)); !errors.Is(err, tempest.ErrBadJSON) {
		t.Errorf("truncated JSON: %v", err)
	}
}

func TestPassivateThenAskHydrates(t *testing.T) {
	logs := &syncBuffer{}
	n := newNode(t, t.TempDir(), logs)
	ctx := ctxT(t)
	c := n.Ref(demo.Counter, "p")
	if _, err := n.Ask(ctx, c, &demo.Add{N: 7}); err != nil {
		t.Fatal(err)
	}
	if err := n.Passivate(ctx, c); err != nil {
		t.Fatal(err)
	}
	st, err := n.Status(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != actor.Dormant || st.Active {
		t.Fatalf("after Passivate: %+v", st)
	}
	got, err := n.Ask(ctx, c, demo.Get{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.(demo.CounterValue).N; v != 7 {
		t.Fatalf("hydrated counter: got %d, want 7", v)
	}
	st, _ = n.Status(ctx, c)
	if st.State != actor.Valid || st.Incarnation != 1 {
		t.Fatalf("after hydration: %+v (identity must be kept)", st)
	}
	out := logs.String()
	for _, want := range []string{`msg="actor activated" node=n1 actor=counter/p incarnation=1 epoch=0`,
		`msg="actor deactivated" node=n1 actor=counter/p incarnation=1 epoch=0`} {
		if !strings.Contains(out, want) {
			t.Errorf("activation log lacks %q:\n%s", want, out)
		}
	}
}

func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 {
		cfg := tempest.Config{Name: "n1", DataDir: dir}
		cfg.Scheduler.Workers = 2
		n, err := tempest.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// On-passivation persistence: only the graceful Close writes.
		if err := demo.Register(n, demo.Options{CounterPersistence: &prospero.Persistence{Mode: prospero.PersistOnPassivation}}); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		got, err := n.Ask(ctxT(t), n.Ref(demo.Counter, "r"), &demo.Add{N: 10})
		if err != nil {
			t.Fatal(err)
		}
		if v, want := got.(demo.CounterValue).N, int64(10*(round+1)); v != want {
			t.Fatalf("round %d: got %d, want %d", round, v, want)
		}
		if err := n.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n.Ready() || n.Live() {
			t.Fatal("a closed node is neither ready nor live")
		}
		if err := n.Tell(n.Ref(demo.Counter, "r"), demo.Get{}); !errors.Is(err, tempest.ErrClosed) || !errors.Is(err, actor.ErrProcessUnavailable) {
			t.Fatalf("tell after close: %v", err)
		}
		if err := n.Close(t.Context()); err != nil {
			t.Fatalf("second close: %v", err)
		}
	}
}

func TestRegisterErrors(t *testing.T) {
	n, err := tempest.New(tempest.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(t.Context())
	f := func(string) actor.Actor { return actor.Func(func(actor.Context, any) {}) }
	if err := n.Register("k", nil, tempest.KindOptions{}); !errors.Is(err, tempest.ErrInvalidKind) {
		t.Errorf("nil factory: %v", err)
	}
	if err := n.Register("tempest.index", f, tempest.KindOptions{}); !errors.Is(err, tempest.ErrInvalidKind) {
		t.Errorf("reserved name: %v", err)
	}
	if err := n.Register("k", f, tempest.KindOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Register("k", f, tempest.KindOptions{}); !errors.Is(err, prospero.ErrKindExists) {
		t.Errorf("twice: %v", err)
	}
	m := tempest.MessageOf[demo.EchoIn](7, "EchoIn")
	if err := n.Register("k2", f, tempest.KindOptions{Messages: []tempest.Message{m, m}}); !errors.Is(err, tempest.ErrInvalidKind) {
		t.Errorf("tag twice: %v", err)
	}
	if err := n.Register("k3", f, tempest.KindOptions{Messages: []tempest.Message{m},
		Gateway: &tempest.Gateway{Schema: demo.Schema, Input: "Add"}}); !errors.Is(err, tempest.ErrInvalidKind) {
		t.Errorf("gateway input not among messages: %v", err)
	}
	if err := n.Register("k4", f, tempest.KindOptions{Messages: []tempest.Message{m},
		Gateway: &tempest.Gateway{Schema: "type x", Input: "EchoIn"}}); !errors.Is(err, tempest.ErrInvalidKind) {
		t.Errorf("bad schema: %v", err)
	}
	// Messages Start could not register are refused here, not there
	// (where the node would close).
	encAny := func(dst []byte, _ any) ([]byte, error) { return dst, nil }
	decAny := func([]byte) (any, error) { return nil, nil }
	for i, tc := range []struct {
		name string
		msg  tempest.Message
	}{
		{"codec without functions", tempest.CodecOf[int](90, "Int", nil, nil)},
		{"codec without a decoder", tempest.CodecOf(91, "Int", func(dst []byte, _ int) ([]byte, error) { return dst, nil }, nil)},
		{"codec of an interface", tempest.CodecOf(92, "Any", encAny, decAny)},
		{"message without a name", tempest.MessageOf[demo.EchoIn](93, "")},
	} {
		kind := fmt.Sprintf("m%d", i)
		if err := n.Register(kind, f, tempest.KindOptions{Messages: []tempest.Message{tc.msg}}); !errors.Is(err, tempest.ErrInvalidKind) || !strings.Contains(err.Error(), `"`+kind+`": message`) {
			t.Errorf("%s: %v, want ErrInvalidKind naming the message", tc.name, err)
		}
	}
	errA, errB := errors.New("a"), errors.New("b")
	for name, errs := range map[string]map[string]error{
		"empty code":    {"": errA},
		"nil error":     {"app.a": nil},
		"reserved code": {"tempest.a": errA},
		"Tempest's own": {"app.too_many": reminders.ErrTooMany},
		"two codes":     {"app.a": errA, "app.a2": errA},
	} {
		if err := n.Register("e-"+name, f, tempest.KindOptions{Errors: errs}); !errors.Is(err, tempest.ErrInvalidKind) {
			t.Errorf("errors, %s: %v", name, err)
		}
	}
	if err := n.Register("e1", f, tempest.KindOptions{Errors: map[string]error{"app.a": errA}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Register("e2", f, tempest.KindOptions{Errors: map[string]error{"app.a": errA}}); err != nil {
		t.Errorf("an error shared by two kinds: %v", err)
	}
	for name, errs := range map[string]map[string]error{
		"code taken":  {"app.a": errB},
		"error taken": {"app.b": errA},
	} {
		if err := n.Register("e-"+name, f, tempest.KindOptions{Errors: errs}); !errors.Is(err, tempest.ErrInvalidKind) {
			t.Errorf("errors, %s: %v", name, err)
		}
	}
	if err := n.Tell(n.Ref("k", "a"), 1); !errors.Is(err, tempest.ErrNotStarted) {
		t.Errorf("tell before start: %v", err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := n.Register("k5", f, tempest.KindOptions{}); !errors.Is(err, tempest.ErrStarted) {
		t.Errorf("after start: %v", err)
	}
	if _, err := n.AskJSON(t.Context(), "k", "a", []byte(`{}`)); !errors.Is(err, tempest.ErrNoGateway) {
		t.Errorf("no gateway: %v", err)
	}
}

func TestCloseUnderLoad(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := n.Ref(demo.Counter, string(rune('a'+i)))
			for {
				if _, err := n.Ask(ctx, ref, &demo.Add{N: 1}); err != nil {
					return
				}
			}
		}()
	}
	if _, err := n.Ask(ctx, n.Ref(demo.Echo, "x"), &demo.EchoIn{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestPassivateWaitsForAPassivationInProgress: a second Passivate that
// finds the actor already being passivated returns only once its state is
// at rest (a handoff relies on it to ship the latest state).
func TestPassivateWaitsForAPassivationInProgress(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ctx := ctxT(t)
	c := n.Ref(demo.Counter, "twice")
	for i := range 20 {
		if _, err := n.Ask(ctx, c, demo.Add{N: 1}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := n.Passivate(ctx, c); err != nil {
					t.Error(err)
					return
				}
				st, err := n.Status(ctx, c)
				if err != nil || st.Active || st.State != actor.Dormant {
					t.Errorf("round %d: Passivate returned with the actor %+v (%v)", i, st, err)
				}
			}()
		}
		wg.Wait()
	}
	got, err := n.Ask(ctx, c, demo.Get{})
	if err != nil || got.(demo.CounterValue).N != 20 {
		t.Fatalf("after 20 passivations: %v, %v", got, err)
	}
}

func TestKindsShareAMessageType(t *testing.T) {
	n, err := tempest.New(tempest.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.WithoutCancel(t.Context()))
	echo := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) { ctx.Reply(msg) })
	}
	m := tempest.MessageOf[demo.EchoIn](7, "EchoIn")
	for _, kind := range []string{"a", "b"} {
		if err := n.Register(kind, echo, tempest.KindOptions{Messages: []tempest.Message{m}}); err != nil {
			t.Fatalf("kind %s: %v", kind, err)
		}
	}
	for name, msg := range map[string]tempest.Message{
		"same tag, another type": tempest.MessageOf[demo.Add](7, "Add"),
		"same type, another tag": tempest.MessageOf[demo.EchoIn](8, "EchoIn"),
	} {
		if err := n.Register("c", echo, tempest.KindOptions{Messages: []tempest.Message{msg}}); !errors.Is(err, tempest.ErrInvalidKind) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"a", "b"} {
		got, err := tempest.AskAs[demo.EchoIn](t.Context(), n, n.Ref(kind, "k"), &demo.EchoIn{Text: kind})
		if err != nil || got.Text != kind {
			t.Fatalf("%s: %+v, %v", kind, got, err)
		}
	}
}

// TestAskPastItsDeadlineHadNoTime: an ask whose context's deadline passed
// before it was made says it had no time, not a negative one.
func TestAskPastItsDeadlineHadNoTime(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	ref := n.Ref(demo.Echo, "late")
	_, err := n.Ask(ctx, ref, demo.EchoIn{Text: "x"})
	if !errors.Is(err, actor.ErrDeadlineExceeded) || err.Error() != "tempest: ask of echo/late: deadline exceeded after 0s" {
		t.Fatalf("ask past its deadline: %v", err)
	}
}

// A graceful Close takes as long as its handoffs and the last
// passivations; meanwhile the node's read-only accessors (a metrics
// scrape reads Kinds, /readyz reads Degraded, the agent StoreDamage)
// answer at once instead of waiting for it.
func TestAccessorsDoNotWaitForClose(t *testing.T) {
	cfg := tempest.Config{Name: "n1", DataDir: t.TempDir()}
	cfg.Scheduler.Workers = 2
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resting, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	slow := func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			switch msg.(type) {
			case actor.Passivating:
				resting <- struct{}{}
				<-release
			case demo.EchoIn:
				ctx.Reply(msg)
			}
		})
	}
	opts := tempest.KindOptions{Messages: []tempest.Message{tempest.SchemaMessage[demo.EchoIn]()}}
	opts.TurnBudget = time.Minute // the passivation waits for the test, not for the watchdog
	if err := n.Register("slowrest", slow, opts); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := n.Ask(ctx, n.Ref("slowrest", "a"), demo.EchoIn{}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close(context.Background()) }()
	<-resting // Close is passivating the actor, and waits for it
	done := make(chan struct{})
	go func() {
		defer close(done)
		if got := n.Kinds(); !slices.Equal(got, []string{"slowrest"}) {
			t.Errorf("Kinds during Close: %v", got)
		}
		if len(n.Policies()) != 1 {
			t.Error("Policies during Close: want the one kind")
		}
		if why := n.Degraded(); why != "" {
			t.Errorf("Degraded during Close: %q", why)
		}
		if err := n.StoreDamage(); err != nil {
			t.Errorf("StoreDamage during Close: %v", err)
		}
		_ = n.StoreDamaged()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("the node's accessors waited for Close")
	}
	unblock()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-done
}

// TestNodeTellDoesNotAllocate: a tell from program code that the node's
// scheduler accepts allocates nothing (what may be sent again on a
// refusal is built only after one).
func TestNodeTellDoesNotAllocate(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	ref := n.Ref(demo.Echo, "alloc")
	var msg any = demo.EchoIn{Text: "x"}
	if _, err := n.Ask(ctxT(t), ref, msg); err != nil { // activated, its cell made
		t.Fatal(err)
	}
	if got := testing.AllocsPerRun(200, func() {
		if err := n.Tell(ref, msg); err != nil {
			t.Fatal(err)
		}
	}); got >= 0.5 {
		t.Fatalf("Node.Tell allocates %.2f times a tell", got)
	}
}

// A nil *T of a registered message type is refused on a standalone node
// as in a cluster (where it could not cross the wire), sent or replied:
// an actor is never handed one (the demo echo, which takes *EchoIn too,
// panicked on it).
func TestNilPointerOfARegisteredTypeIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := tempest.Config{Name: "n1", DataDir: dir}
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Register("nilreply", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if _, ok := msg.(demo.EchoIn); ok {
				ctx.Reply((*demo.EchoIn)(nil))
			}
		})
	}, tempest.KindOptions{Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	ctx := ctxT(t)
	ref := n.Ref(demo.Echo, "a")
	if _, err := n.Ask(ctx, ref, (*demo.EchoIn)(nil)); !errors.Is(err, tempest.ErrUnregisteredMessage) {
		t.Fatalf("ask with a nil *EchoIn: %v, want ErrUnregisteredMessage", err)
	}
	if err := n.Tell(ref, (*demo.EchoIn)(nil)); !errors.Is(err, tempest.ErrUnregisteredMessage) {
		t.Fatalf("tell of a nil *EchoIn: %v, want ErrUnregisteredMessage", err)
	}
	if _, err := n.Ask(ctx, n.Ref("nilreply", "a"), demo.EchoIn{}); !errors.Is(err, tempest.ErrUnregisteredMessage) {
		t.Fatalf("a nil *EchoIn replied: %v, want ErrUnregisteredMessage", err)
	}
	if got := n.Stats().Scheduler.Panics; got != 0 {
		t.Fatalf("%d turns panicked", got)
	}
	// A value of the type still goes.
	if _, err := n.Ask(ctx, ref, demo.EchoIn{Text: "x"}); err != nil {
		t.Fatal(err)
	}
}

// A kind whose MaxAskTimeout is below the default ask timeout starts,
// and an ask that sets no deadline gets the maximum: Register accepted
// it, and Start failed (the scheduler refused a default above the
// maximum), closing the node.
func TestMaxAskTimeoutBelowTheDefaultLowersIt(t *testing.T) {
	n, err := tempest.New(tempest.Config{Name: "n1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	if err := n.Register("slow", func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) { <-release })
	}, tempest.KindOptions{KindOptions: prospero.KindOptions{MaxAskTimeout: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	_, err = n.Ask(context.Background(), n.Ref("slow", "a"), "x")
	var de *tempest.DeadlineError
	if !errors.As(err, &de) || de.Timeout != 200*time.Millisecond {
		t.Fatalf("ask with no deadline: %v, want a DeadlineError after the kind's maximum, 200ms", err)
	}
}

// A Node that was declared, not made by New, refuses what returns an
// error (ErrNotStarted) and answers zero values otherwise: no method
// panics or hangs (Close waited forever on a channel New makes).
func TestZeroNodeNeitherPanicsNorHangs(t *testing.T) {
	var z tempest.Node
	ctx := ctxT(t)
	ref := actor.Virtual("echo", "a")
	f := func(string) actor.Actor { return actor.Func(func(actor.Context, any) {}) }
	_, askErr := z.Ask(ctx, ref, "x")
	_, statusErr := z.Status(ctx, ref)
	_, askJSONErr := z.AskJSON(ctx, "echo", "a", []byte(`{}`))
	_, actorsErr := z.Actors(ctx, "echo", false)
	_, _, locateErr := z.Locate(ref)
	_, listErr := z.Reminders().ListOf(ctx, ref)
	_, zrListErr := (&tempest.Reminders{}).ListOf(ctx, ref)
	for name, err := range map[string]error{
		"Register":         z.Register("k", f, tempest.KindOptions{}),
		"Start":            z.Start(ctx),
		"Close":            z.Close(ctx),
		"Shutdown":         z.Shutdown(ctx),
		"WaitReady":        z.WaitReady(ctx),
		"Readiness":        z.Readiness(),
		"Tell":             z.Tell(ref, "x"),
		"TellContext":      z.TellContext(ctx, ref, "x"),
		"TellJSON":         z.TellJSON(ctx, "echo", "a", []byte(`{}`)),
		"Ask":              askErr,
		"AskJSON":          askJSONErr,
		"Status":           statusErr,
		"Passivate":        z.Passivate(ctx, ref),
		"Actors":           actorsErr,
		"Locate":           locateErr,
		"Reminders.ListOf": listErr,
		"Reminders.Cancel": z.Reminders().Cancel(ctx, ref, "r"),
		"zero Reminders":   zrListErr,
		"Close, once more": z.Close(ctx),
	} {
		if !errors.Is(err, tempest.ErrNotStarted) {
			t.Errorf("%s: %v, want ErrNotStarted", name, err)
		}
	}
	if z.Live() || z.Ready() || z.Degraded() != "" || len(z.Kinds()) != 0 || len(z.Members()) != 0 ||
		z.Leader() != "" || z.Table() != nil || len(z.ReplicationLag()) != 0 || len(z.PolicyViews()) != 0 ||
		len(z.PolicyDisagreements()) != 0 || len(z.Policies()) != 0 || z.StoreDamaged() != nil || z.StoreDamage() != nil {
		t.Error("a zero Node answered as if it were a live node")
	}
	_ = z.RaftInfo()
	_ = z.Stats()
	_ = z.FederationStats()
	_ = z.ReplicationStats()
	_, _ = z.PlacementStatus()
	_, _ = z.ErrorCode(errors.New("x"))
	_ = z.Proven(membership.Member{})
	_ = z.Reminders().Stats()
}

// Every method that takes a context refuses a nil one with
// ErrNilContext: several panicked, and the others took it for a context
// that never ends.
func TestNilContextIsRefused(t *testing.T) {
	n := newNode(t, t.TempDir(), nil)
	var nilCtx context.Context
	ref := n.Ref(demo.Echo, "a")
	_, askErr := n.Ask(nilCtx, ref, demo.EchoIn{})
	_, askAsErr := tempest.AskAs[demo.EchoIn](nilCtx, n, ref, demo.EchoIn{})
	_, statusErr := n.Status(nilCtx, ref)
	_, askJSONErr := n.AskJSON(nilCtx, demo.Echo, "a", []byte(`{"text":"x"}`))
	_, actorsErr := n.Actors(nilCtx, demo.Echo, false)
	_, listErr := n.Reminders().ListOf(nilCtx, ref)
	for name, err := range map[string]error{
		"Ask":              askErr,
		"AskAs":            askAsErr,
		"TellContext":      n.TellContext(nilCtx, ref, demo.EchoIn{}),
		"TellJSON":         n.TellJSON(nilCtx, demo.Echo, "a", []byte(`{"text":"x"}`)),
		"AskJSON":          askJSONErr,
		"Status":           statusErr,
		"Passivate":        n.Passivate(nilCtx, ref),
		"Actors":           actorsErr,
		"WaitReady":        n.WaitReady(nilCtx),
		"Reminders.ListOf": listErr,
		"Reminders.Cancel": n.Reminders().Cancel(nilCtx, ref, "r"),
		"Start":            n.Start(nilCtx),
		"Shutdown":         n.Shutdown(nilCtx),
		"Close":            n.Close(nilCtx),
	} {
		if !errors.Is(err, tempest.ErrNilContext) {
			t.Errorf("%s: %v, want ErrNilContext", name, err)
		}
	}
	if !n.Live() {
		t.Fatal("a Close with a nil context closed the node")
	}
	fresh, err := tempest.New(tempest.Config{Name: "n2", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Start(nilCtx); !errors.Is(err, tempest.ErrNilContext) {
		t.Fatalf("Start of a new node: %v, want ErrNilContext", err)
	}
	if err := fresh.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Close returns by its context's end even while a kind's factory does
// not return (an activation stuck in it): it used to wait for the
// supervisor's I/O workers without a bound.
func TestCloseReturnsWhileAFactoryIsStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := tempest.New(tempest.Config{Name: "n1", DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		if err := n.Register("stuck", func(string) actor.Actor {
			<-release
			return actor.Func(func(actor.Context, any) {})
		}, tempest.KindOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := n.Ask(ctx, n.Ref("stuck", "a"), "x"); !errors.Is(err, actor.ErrDeadlineExceeded) {
			t.Fatalf("ask: %v, want ErrDeadlineExceeded", err)
		}
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancelClose()
		if err := n.Close(closeCtx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v, want its context's end", err)
		}
		close(release) // the factory returns, to a closed node
		synctest.Wait()
	})
}

// A graceful Close of a node whose pool has no worker left (every one
// stuck in a turn past its budget, the replacement cap reached) still
// writes the state of its healthy actors: their Passivating turns need a
// worker, and Close used to spend its whole timeout waiting for one,
// losing what counters persisted on passivation held.
func TestCloseWithNoWorkerLeftStillPassivates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		release := make(chan struct{})
		defer close(release)
		passivation, err := demo.ParsePersistence("passivation")
		if err != nil {
			t.Fatal(err)
		}
		start := func() *tempest.Node {
			cfg := tempest.Config{Name: "n1", DataDir: dir, CloseTimeout: 5 * time.Second}
			cfg.Scheduler.Workers, cfg.Scheduler.MaxReplacements = 2, 2
			n, err := tempest.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := demo.Register(n, demo.Options{CounterPersistence: &passivation}); err != nil {
				t.Fatal(err)
			}
			if err := n.Register("stuck", func(string) actor.Actor {
				return actor.Func(func(actor.Context, any) { <-release })
			}, tempest.KindOptions{KindOptions: prospero.KindOptions{TurnBudget: 200 * time.Millisecond}}); err != nil {
				t.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return n
		}
		n := start()
		ctx := context.Background()
		for i := range 5 {
			if _, err := n.Ask(ctx, n.Ref(demo.Counter, fmt.Sprint("k", i)), demo.Add{N: 1}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 6 {
			if err := n.Tell(n.Ref("stuck", fmt.Sprint("s", i)), "x"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Second) // the watchdog abandons the turns, past their budget
		synctest.Wait()
		if st := n.Stats().Scheduler; st.Workers != 0 {
			t.Fatalf("the pool has %d workers (%d stuck), want none left", st.Workers, st.Stuck)
		}
		_ = n.Close(ctx) // its error says what did not finish (the stuck turns)
		n = start()
		defer n.Close(ctx)
		for i := range 5 {
			v, err := n.Ask(ctx, n.Ref(demo.Counter, fmt.Sprint("k", i)), demo.Get{})
			if err != nil || v != (demo.CounterValue{N: 1}) {
				t.Fatalf("counter k%d after the restart: %v, %v; want the 1 it held at Close", i, v, err)
			}
		}
	})
}
