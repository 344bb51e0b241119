package tempest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
	"github.com/tempest-actors/tempest/wire/bare"
)

// Three kinds that relay an ask along a path of hops, one per policy.
// A hop message is the rest of the path, "kind/key,kind/key,..."; the
// actor at the end of the path answers with its own name, and every
// actor on the way answers its caller with what it got, from its
// continuation.
type (
	hopR string
	hopC string
	hopN string
)

var hopKinds = []struct {
	kind string
	pol  actor.Reentrancy
}{{"hopR", actor.Reentrant}, {"hopC", actor.CallChainReentrant}, {"hopN", actor.NonReentrant}}

func hopMsg(kind, path string) any {
	switch kind {
	case "hopR":
		return hopR(path)
	case "hopC":
		return hopC(path)
	}
	return hopN(path)
}

func hopCodec[T ~string](tag uint32) tempest.Message {
	return tempest.CodecOf[T](tag, "Hop",
		func(dst []byte, v T) ([]byte, error) { return bare.AppendString(dst, string(v)), nil },
		func(b []byte) (T, error) {
			var d bare.Decoder
			d.Reset(b, bare.Config{})
			s := d.Str()
			return T(s), d.Finish()
		})
}

type hopper struct{ key string }

func (h *hopper) Receive(ctx actor.Context, msg any) {
	var path string
	switch m := msg.(type) {
	case hopR:
		path = string(m)
	case hopC:
		path = string(m)
	case hopN:
		path = string(m)
	default:
		return
	}
	if path == "" {
		ctx.Reply(hopR("end at " + h.key))
		return
	}
	next, rest, _ := strings.Cut(path, ",")
	kind, key, _ := strings.Cut(next, "/")
	r := ctx.ReplyLater()
	ctx.Ask(actor.Virtual(kind, key), hopMsg(kind, rest), func(ctx actor.Context, v any, err error) {
		if err != nil {
			_ = r.ReplyError(ctx, err)
			return
		}
		_ = r.Reply(ctx, v)
	})
}

func registerHops(n *tempest.Node) error {
	codecs := []tempest.Message{hopCodec[hopR](901), hopCodec[hopC](902), hopCodec[hopN](903)}
	for i, k := range hopKinds {
		opts := tempest.KindOptions{KindOptions: prospero.KindOptions{Reentrancy: k.pol}, Messages: []tempest.Message{codecs[i]}}
		if err := n.Register(k.kind, func(key string) actor.Actor { return &hopper{key: key} }, opts); err != nil {
			return err
		}
	}
	return nil
}

// keyOn returns a key of kind owned by node in c's table.
func keyOn(t *testing.T, c *tempesttest.Cluster, kind, node string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		key := fmt.Sprintf("k%d", i)
		if c.Owner(actor.Virtual(kind, key)).Name() == node {
			return key
		}
	}
	t.Fatalf("no key of %s on %s", kind, node)
	return ""
}

// A → B → A with A and B on different nodes: it completes when A is
// Reentrant or CallChainReentrant, and fails at once with ErrDeadlock,
// the cycle named and decoded on the caller's node, when A is
// NonReentrant. A three-actor cycle over three nodes is named in order.
func TestAskCyclesAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: registerHops})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	n1 := c.Node("n1")
	b := "hopR/" + keyOn(t, c, "hopR", "n2")
	for _, k := range hopKinds {
		a := keyOn(t, c, k.kind, "n1")
		start := time.Now()
		v, err := n1.Ask(ctx, actor.Virtual(k.kind, a), hopMsg(k.kind, b+","+k.kind+"/"+a))
		switch k.pol {
		case actor.NonReentrant:
			var de *actor.DeadlockError
			if !errors.Is(err, actor.ErrDeadlock) || !errors.As(err, &de) {
				t.Fatalf("%s: %v, %v; want a DeadlockError", k.kind, v, err)
			}
			want := []string{k.kind + "/" + a, b, k.kind + "/" + a}
			if got := refNames(de.Cycle); !slices.Equal(got, want) {
				t.Fatalf("%s: cycle %v, want %v", k.kind, got, want)
			}
			if d := time.Since(start); d > actor.DefaultAskTimeout/2 {
				t.Fatalf("%s: the cycle took %v to report: it waited for a deadline", k.kind, d)
			}
		default:
			if err != nil || v != hopR("end at "+a) {
				t.Fatalf("%s: %v, %v; want end at %s", k.kind, v, err, a)
			}
		}
	}

	// A (NonReentrant, n1) → B (n2) → C (n3) → A.
	a := "hopN/" + keyOn(t, c, "hopN", "n1")
	cc := "hopR/" + keyOn(t, c, "hopR", "n3")
	_, err := c.Node("n2").Ask(ctx, actor.Virtual("hopN", strings.TrimPrefix(a, "hopN/")), hopN(b+","+cc+","+a))
	var de *actor.DeadlockError
	if !errors.As(err, &de) {
		t.Fatalf("three-node cycle: %v, want a DeadlockError", err)
	}
	if got, want := refNames(de.Cycle), []string{a, b, cc, a}; !slices.Equal(got, want) {
		t.Fatalf("three-node cycle %v, want %v", got, want)
	}
}

func refNames(refs []actor.Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.Unpinned().String()
	}
	return out
}
