package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/prospero"
)

// badNames are kind/key pairs no actor can have; each must be refused
// with ErrInvalidKey by every operation.
var badNames = []struct{ name, kind, key string }{
	{"invalid UTF-8 key", demo.Counter, "\xff\xfe"},
	{"empty key", demo.Counter, ""},
	{"key one byte over the limit", demo.Counter, strings.Repeat("k", actor.MaxKeyLen+1)},
	{"key over the state store's limit", demo.Counter, strings.Repeat("k", 40<<10)},
	{"invalid UTF-8 kind", "count\xffer", "a"},
	{"kind over the limit", strings.Repeat("c", actor.MaxKindLen+1), "a"},
	{"kind with a slash", "count/er", "a"},
}

// checkRefusesBadNames runs every operation of n on every bad name.
func checkRefusesBadNames(t *testing.T, n *tempest.Node) {
	t.Helper()
	ctx := ctxT(t)
	for _, tc := range badNames {
		ref := n.Ref(tc.kind, tc.key)
		ops := map[string]error{}
		ops["Tell"] = n.Tell(ref, demo.Add{N: 1})
		_, ops["Ask"] = n.Ask(ctx, ref, demo.Add{N: 1})
		_, ops["AskJSON"] = n.AskJSON(ctx, tc.kind, tc.key, []byte(`{"Add":{"n":1}}`))
		ops["TellJSON"] = n.TellJSON(tc.kind, tc.key, []byte(`{"Add":{"n":1}}`))
		_, ops["AskJSON with a bad body"] = n.AskJSON(ctx, tc.kind, tc.key, []byte(`{"Nope":1}`))
		_, ops["Status"] = n.Status(ctx, ref)
		ops["Passivate"] = n.Passivate(ctx, ref)
		_, _, ops["Locate"] = n.Locate(ref)
		for op, err := range ops {
			if !errors.Is(err, tempest.ErrInvalidKey) {
				t.Errorf("%s: %s %s: got %v, want ErrInvalidKey", n.Name(), op, tc.name, err)
				continue
			}
			var ike *actor.InvalidKeyError
			if !errors.As(err, &ike) || ike.Reason == "" || len(ike.Key) > 100 {
				t.Errorf("%s: %s %s: error %v is not a short *actor.InvalidKeyError", n.Name(), op, tc.name, err)
			}
		}
	}
}

func TestInvalidKeysAreRefused(t *testing.T) {
	dir := t.TempDir()
	n := newNode(t, dir, nil)
	checkRefusesBadNames(t, n)
	ctx := ctxT(t)
	// The longest key and a key of multi-byte characters are fine, and
	// their state is written at rest.
	long := strings.Repeat("é", actor.MaxKeyLen/2)
	for _, key := range []string{long, "日本/語 key"} {
		ref := n.Ref(demo.Counter, key)
		if _, err := n.Ask(ctx, ref, demo.Add{N: 7}); err != nil {
			t.Fatalf("ask %d-byte key: %v", len(key), err)
		}
		if err := n.Passivate(ctx, ref); err != nil {
			t.Fatalf("passivate %d-byte key: %v", len(key), err)
		}
		got, err := n.AskJSON(ctx, demo.Counter, key, []byte(`{"Get":null}`))
		if err != nil || string(got) != `{"n":7}` {
			t.Fatalf("%d-byte key after hydration: %s, %v", len(key), got, err)
		}
	}
	if st := n.Stats().Supervisor; st.Unsaved != 0 {
		t.Fatalf("%d states not written at rest", st.Unsaved)
	}
}

func TestRegisterRefusesInvalidKindNames(t *testing.T) {
	n, err := tempest.New(tempest.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	f := func(string) actor.Actor { return nil }
	for _, kind := range []string{"", "a\xff", strings.Repeat("k", actor.MaxKindLen+1), "a/b", "a#b", "@a"} {
		if err := n.Register(kind, f, tempest.KindOptions{}); !errors.Is(err, tempest.ErrInvalidKind) {
			t.Errorf("Register(%q): got %v, want ErrInvalidKind", kind, err)
		}
	}
	if err := n.Register(strings.Repeat("k", actor.MaxKindLen), f, tempest.KindOptions{}); err != nil {
		t.Errorf("Register of a kind of MaxKindLen bytes: %v", err)
	}
}

// TestClusterRefusesInvalidKeysOnEveryNode: a bad name is refused by the
// node that sees it first, owner or not, so it never reaches a state
// store or a shard index, and a handoff afterwards moves every other
// actor of the cluster with its state. (An invalid UTF-8 key used to be
// accepted by its owner and made the next handoff of its shard drop the
// rest of the shard.)
func TestClusterRefusesInvalidKeysOnEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t)
	for _, name := range []string{"n1", "n2"} {
		c.start(name, 2)
	}
	waitSettled(t, c, 30*time.Second, "two ready nodes with a settled table")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.logs.String())
		}
	})
	ctx := ctxT(t)
	n1 := c.node("n1")
	want := map[string]int64{}
	onN2 := 0
	for k := range 32 {
		key := fmt.Sprintf("v%d", k)
		if _, err := n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Add{N: int64(k + 1)}); err != nil {
			t.Fatalf("add to %s: %v", key, err)
		}
		want[key] = int64(k + 1)
		if owner, _, _ := n1.Locate(n1.Ref(demo.Counter, key)); owner == "n2" {
			onN2++
		}
	}
	if onN2 == 0 {
		t.Fatal("no counter on n2; pick more keys")
	}
	for _, n := range c.live() {
		checkRefusesBadNames(t, n)
	}
	// The counter's overflow is the same error whichever node asks.
	over := n1.Ref(demo.Counter, "overflow")
	if _, err := n1.Ask(ctx, over, demo.Add{N: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.live() {
		if _, err := n.Ask(ctx, over, demo.Add{N: 1}); !errors.Is(err, demo.ErrOverflow) {
			t.Errorf("%s: add past MaxInt64: %v, want demo.ErrOverflow", n.Name(), err)
		}
	}
	want["overflow"] = math.MaxInt64
	leaver := c.remove("n2")
	if err := leaver.Close(ctx); err != nil {
		t.Fatalf("graceful close of n2: %v", err)
	}
	waitSettled(t, c, 30*time.Second, "n1 owning every shard")
	for key, v := range want {
		got, err := n1.Ask(ctx, n1.Ref(demo.Counter, key), demo.Get{})
		if err != nil {
			t.Fatalf("get %s after the handoff: %v", key, err)
		}
		if g := got.(demo.CounterValue).N; g != v {
			t.Fatalf("%s after the handoff = %d, want %d", key, g, v)
		}
	}
}

// unwritable is a persistent actor whose state cannot be written.
type unwritable struct{}

var errUnwritable = errors.New("state cannot be marshalled")

func (unwritable) Receive(actor.Context, any)    {}
func (unwritable) MarshalState() ([]byte, error) { return nil, errUnwritable }
func (unwritable) UnmarshalState(b []byte) error { return nil }

// TestStoreErrorsAreLogged: a write at rest that fails is logged with the
// identity it was for, not only counted.
func TestStoreErrorsAreLogged(t *testing.T) {
	logs := &syncBuffer{}
	cfg := tempest.Config{Name: "n1", DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(logs, nil))}
	n, err := tempest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := tempest.KindOptions{KindOptions: prospero.KindOptions{
		Persistence: prospero.Persistence{Mode: prospero.PersistEveryTurn}}}
	if err := n.Register("unwritable", func(string) actor.Actor { return unwritable{} }, opts); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	if err := n.Tell(n.Ref("unwritable", "k1"), 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the store error in the log", func() bool {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(line, tempest.LogStoreError) && attr(line, tempest.LogKeyActor) == "unwritable/k1" &&
				strings.Contains(line, errUnwritable.Error()) && strings.Contains(line, "level=ERROR") {
				return true
			}
		}
		return false
	})
}
