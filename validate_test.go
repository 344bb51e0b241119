package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
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
		ops["TellJSON"] = n.TellJSON(t.Context(), tc.kind, tc.key, []byte(`{"Add":{"n":1}}`))
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
	c := demoCluster(t, tempesttest.Options{Nodes: 2})
	ctx := ctxT(t)
	n1 := c.Node("n1")
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
	for _, n := range c.Nodes() {
		checkRefusesBadNames(t, n)
	}
	// The counter's overflow is the same error whichever node asks.
	over := n1.Ref(demo.Counter, "overflow")
	if _, err := n1.Ask(ctx, over, demo.Add{N: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if _, err := n.Ask(ctx, over, demo.Add{N: 1}); !errors.Is(err, demo.ErrOverflow) {
			t.Errorf("%s: add past MaxInt64: %v, want demo.ErrOverflow", n.Name(), err)
		}
	}
	want["overflow"] = math.MaxInt64
	if err := c.Close("n2"); err != nil {
		t.Fatalf("graceful close of n2: %v", err)
	}
	c.WaitSettled()
	ctx = ctxT(t) // a deadline for the reads, not one across the handoff
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

// TestStateStoreDamagedWhileRunning: state.db cut short under a running
// node used to end the process with a fatal SIGBUS. Now the ask whose
// update could not be written fails with an error matching
// prospero.ErrCorrupt that names the file, so does an activation, the
// store error is logged with the file's path, and the node says so in
// Degraded.
func TestStateStoreDamagedWhileRunning(t *testing.T) {
	logs := &syncBuffer{}
	dir := t.TempDir()
	n, err := tempest.New(tempest.Config{Name: "n1", DataDir: dir, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	ctx := ctxT(t)
	for i := range 50 {
		if _, err := n.Ask(ctx, n.Ref(demo.Counter, fmt.Sprintf("c%d", i)), demo.Add{N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, tempest.StateFile)
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	_, err = n.Ask(ctx, n.Ref(demo.Counter, "c1"), demo.Add{N: 1})
	if !errors.Is(err, prospero.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("ask after state.db was cut short: %v, want ErrCorrupt naming %s", err, path)
	}
	if d := n.Degraded(); !strings.Contains(d, path) {
		t.Errorf("Degraded() = %q, want it to name %s", d, path)
	}
	// An activation reads the identity's record: it fails alike.
	if _, err := n.Ask(ctx, n.Ref(demo.Counter, "new"), demo.Add{N: 1}); !errors.Is(err, prospero.ErrCorrupt) {
		t.Errorf("activation after state.db was cut short: %v, want ErrCorrupt", err)
	}
	waitFor(t, 10*time.Second, "the store error in the log naming the file", func() bool {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(line, tempest.LogStoreError) && strings.Contains(line, path) && strings.Contains(line, "level=ERROR") {
				return true
			}
		}
		return false
	})
}
