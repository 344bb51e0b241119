package tempest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
)

// ledgerKind is an echo that only some nodes register.
const ledgerKind = "ledger"

func registerLedger(n *tempest.Node, remedy prospero.Remedy) error {
	return n.Register(ledgerKind, func(string) actor.Actor {
		return actor.Func(func(ctx actor.Context, msg any) {
			if m, ok := msg.(demo.EchoIn); ok {
				ctx.Reply(demo.EchoIn{Text: ctx.Self().Key() + ":" + m.Text})
			}
		})
	}, tempest.KindOptions{
		KindOptions: prospero.KindOptions{Remedy: remedy},
		Messages:    []tempest.Message{tempest.MessageOf[demo.EchoIn](demo.TagEchoIn, "EchoIn")},
	})
}

// askLedgerEverywhere asks keys of the ledger kind from every node and
// fails the test unless each answers.
func askLedgerEverywhere(t *testing.T, c *tempesttest.Cluster, keys int) {
	t.Helper()
	for _, n := range c.Nodes() {
		for k := range keys {
			key := fmt.Sprintf("acct-%d", k)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, err := n.Ask(ctx, actor.Virtual(ledgerKind, key), demo.EchoIn{Text: "hi"})
			cancel()
			if want := (demo.EchoIn{Text: key + ":hi"}); err != nil || got != want {
				t.Fatalf("%s asks %s/%s: %v, %v; want %v", n.Name(), ledgerKind, key, got, err, want)
			}
		}
	}
}

// ledgerOwners counts the ledger shards each node owns in n's table.
func ledgerOwners(n *tempest.Node) map[string]int {
	out := map[string]int{}
	tab := n.Table()
	if g, ok := tab.Groups[ledgerKind]; ok {
		for _, s := range g.Shards {
			out[s.Owner]++
		}
	}
	return out
}

// TestKindOnSomeNodesIsPlacedOnlyThere: a kind registered on two of
// three nodes has its shards on those two only, so every key of it
// answers, from every node (the third routes to them).
func TestKindOnSomeNodesIsPlacedOnlyThere(t *testing.T) {
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		if err := demo.Register(n, demo.Options{}); err != nil {
			return err
		}
		if n.Name() == "n3" {
			return nil
		}
		return registerLedger(n, prospero.Restart)
	}})
	for _, n := range c.Nodes() {
		if o := ledgerOwners(n); o["n3"] != 0 || o["n1"] == 0 || o["n2"] == 0 {
			t.Fatalf("%s's table places ledger shards %v; want n1 and n2 only", n.Name(), o)
		}
	}
	askLedgerEverywhere(t, c, 40)
	// A kind nobody registers is refused at once, naming the kind.
	_, err := c.Node("n3").Ask(t.Context(), actor.Virtual("nobody", "x"), demo.EchoIn{})
	if !errors.Is(err, actor.ErrUnknownKind) || !strings.Contains(err.Error(), `"nobody"`) {
		t.Fatalf("ask of an unregistered kind: %v", err)
	}
}

// TestPolicyDigestMismatchKeepsTheNodeOut: the rolling-upgrade case. n3
// registers the ledger kind with another remedy than n1 and n2, so its
// policy digest differs: it is reported (table, status, metric) and owns
// none of the kind's shards, while every key still answers. Restarted
// with the cluster's policy, it agrees and receives shards again.
func TestPolicyDigestMismatchKeepsTheNodeOut(t *testing.T) {
	var n3Remedy atomic.Uint32
	n3Remedy.Store(uint32(prospero.Retire))
	c := tempesttest.New(t, tempesttest.Options{Nodes: 3, Register: func(n *tempest.Node) error {
		if err := demo.Register(n, demo.Options{}); err != nil {
			return err
		}
		remedy := prospero.Restart
		if n.Name() == "n3" {
			remedy = prospero.Remedy(n3Remedy.Load())
		}
		return registerLedger(n, remedy)
	}})
	n1, n3 := c.Node("n1"), c.Node("n3")
	p1 := policyOf(t, n1, ledgerKind)
	p3 := policyOf(t, n3, ledgerKind)
	if p1.Digest == p3.Digest || p3.Remedy != "Retire" {
		t.Fatalf("n1 and n3 publish the same digest %s for different remedies", p1.Digest)
	}
	for _, n := range c.Nodes() {
		if o := ledgerOwners(n); o["n3"] != 0 {
			t.Fatalf("%s's table gives n3 %d ledger shards though it disagrees", n.Name(), o["n3"])
		}
		v := n.Table().Policy(ledgerKind)
		if v.Digest != p1.Digest || v.Differ["n3"] != p3.Digest || !slices.Equal(v.Agree, []string{"n1", "n2"}) {
			t.Fatalf("%s's policy view %+v", n.Name(), v)
		}
		if got := n.PolicyDisagreements(); len(got) != 1 || got[0].Kind != ledgerKind || got[0].Differ["n3"] != p3.Digest {
			t.Fatalf("%s reports disagreements %+v", n.Name(), got)
		}
	}
	// The operator sees it over HTTP: GET /v1/placement (tempest
	// placement), GET /v1/actors/... (tempest status), /metrics.
	checkHTTPReportsDissent(t, n1, p3.Digest)
	askLedgerEverywhere(t, c, 20)

	// n3 is upgraded to the cluster's policy: it agrees and gets shards.
	n3Remedy.Store(uint32(prospero.Restart))
	c.Restart("n3")
	c.WaitSettled()
	for _, n := range c.Nodes() {
		if o := ledgerOwners(n); o["n3"] == 0 {
			t.Fatalf("%s's table gives n3 no ledger shards after it agreed: %v", n.Name(), o)
		}
		if got := n.PolicyDisagreements(); len(got) != 0 {
			t.Fatalf("%s still reports %+v", n.Name(), got)
		}
	}
	askLedgerEverywhere(t, c, 20)
}

func policyOf(t *testing.T, n *tempest.Node, kind string) tempest.KindPolicy {
	t.Helper()
	for _, p := range n.Policies() {
		if p.Kind == kind {
			return p
		}
	}
	t.Fatalf("%s has no policy for %q", n.Name(), kind)
	return tempest.KindPolicy{}
}

func checkHTTPReportsDissent(t *testing.T, n *tempest.Node, digest string) {
	t.Helper()
	met := httpapi.NewMetrics("test")
	met.Attach(n)
	srv, err := httpapi.New(httpapi.Config{Node: n, Metrics: met, MetricsPublic: true})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) []byte {
		t.Helper()
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	var pb httpapi.PlacementBody
	if err := json.Unmarshal(get("/v1/placement"), &pb); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range pb.Policies {
		found = found || (v.Kind == ledgerKind && v.Differ["n3"] == digest)
	}
	if !found {
		t.Fatalf("/v1/placement policies %+v do not show n3's digest %s", pb.Policies, digest)
	}
	var key string
	for k := 0; key == ""; k++ {
		if owner, _, _ := n.Locate(actor.Virtual(ledgerKind, fmt.Sprint(k))); owner == n.Name() {
			key = fmt.Sprint(k)
		}
	}
	var sb httpapi.StatusBody
	if err := json.Unmarshal(get("/v1/actors/"+ledgerKind+"/"+key), &sb); err != nil {
		t.Fatal(err)
	}
	if sb.PolicyDissenters != 1 {
		t.Fatalf("status %+v does not report n3", sb)
	}
	if m := string(get("/metrics")); !strings.Contains(m, `tempest_kind_policy_dissenters{kind="ledger"} 1`) ||
		!strings.Contains(m, `tempest_kind_policy_dissenters{kind="echo"} 0`) {
		t.Fatalf("metrics lack the dissent gauge:\n%s", m)
	}
}

// TestPolicyDigestCoversTheDeclaredTags: a kind's policy digest is a
// function of what the node would do with it: the same options give the
// same digest on every node, and a message tag declared differently (or
// another remedy, or another turn budget) gives another.
func TestPolicyDigestCoversTheDeclaredTags(t *testing.T) {
	digest := func(t *testing.T, opts tempest.KindOptions, cfg func(*tempest.Config)) tempest.KindPolicy {
		t.Helper()
		c := tempest.Config{DataDir: t.TempDir()}
		if cfg != nil {
			cfg(&c)
		}
		n, err := tempest.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Register("k", func(string) actor.Actor { return actor.Func(func(actor.Context, any) {}) }, opts); err != nil {
			t.Fatal(err)
		}
		return policyOf(t, n, "k")
	}
	schema := tempest.KindOptions{Messages: []tempest.Message{tempest.SchemaMessage[demo.EchoIn]()}}
	explicit := tempest.KindOptions{Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](1001, "EchoIn")}}
	base := digest(t, schema, nil)
	if base.Messages[0].Tag != demo.EchoInMessageTag || base.Messages[0].Name != "EchoIn" {
		t.Fatalf("SchemaMessage registered %+v, want the schema's tag %d", base.Messages, demo.EchoInMessageTag)
	}
	if again := digest(t, explicit, nil); again.Digest != base.Digest {
		t.Fatalf("the same tag declared two ways gives digests %s and %s", base.Digest, again.Digest)
	}
	for name, p := range map[string]tempest.KindPolicy{
		"another tag": digest(t, tempest.KindOptions{Messages: []tempest.Message{tempest.MessageOf[demo.EchoIn](1999, "EchoIn")}}, nil),
		"another remedy": digest(t, tempest.KindOptions{KindOptions: prospero.KindOptions{Remedy: prospero.Hydrate},
			Messages: schema.Messages}, nil),
		"another node turn budget": digest(t, schema, func(c *tempest.Config) { c.Scheduler.TurnBudget = time.Second }),
		"another ask timeout": digest(t, tempest.KindOptions{KindOptions: prospero.KindOptions{AskTimeout: time.Second},
			Messages: schema.Messages}, nil),
		"another maximum ask timeout": digest(t, tempest.KindOptions{KindOptions: prospero.KindOptions{MaxAskTimeout: time.Minute},
			Messages: schema.Messages}, nil),
	} {
		if p.Digest == base.Digest {
			t.Errorf("%s: digest unchanged (%s)", name, p.Digest)
		}
	}
	if base.AskTimeout != actor.DefaultAskTimeout || base.MaxAskTimeout != prospero.DefaultMaxAskTimeout ||
		base.Expiry != tempest.ExpiryDropQueued || base.TurnBudget == 0 {
		t.Fatalf("deadline policy %+v", base)
	}
}
