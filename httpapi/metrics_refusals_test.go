package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/tempesttest"
)

// refusalReasons are the label values tempest_mail_refusals_total must
// carry on every scrape, one per reason of the wire protocol.
var refusalReasons = []string{"mailbox_full", "node_overloaded", "unknown_kind", "expired",
	"terminated_incarnation", "not_owner", "call_chain_too_long", "not_serving", "busy"}

// A refusal between nodes is read from /metrics on both sides: an ask
// through one node's HTTP API to an actor on the other node, whose
// mailbox is full, is refused MAILBOX_FULL; the owner counts it sent, the
// asking node received. Every reason and direction is exported, zero
// included, and the exposition stays promtool-clean.
func TestMetricsMailRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	c := tempesttest.New(t, tempesttest.Options{Nodes: 2, Register: func(n *tempest.Node) error {
		// gate holds the turn of an EchoIn "hold" until the test ends; its
		// mailbox takes one message.
		gate := func(string) actor.Actor {
			return actor.Func(func(ctx actor.Context, msg any) {
				in, ok := msg.(demo.EchoIn)
				if !ok {
					return
				}
				if in.Text == "hold" {
					held <- struct{}{}
					<-release
				}
				ctx.Reply(in)
			})
		}
		return n.Register("gate", gate, tempest.KindOptions{
			KindOptions: prospero.KindOptions{MailboxDepth: 1, TurnBudget: time.Minute},
			Messages:    []tempest.Message{tempest.SchemaMessage[demo.EchoIn]()},
			Gateway:     &tempest.Gateway{Schema: demo.Schema, Input: "EchoIn", Reply: "EchoIn"},
		})
	}})
	t.Cleanup(func() { close(release) }) // before the cluster is killed
	ref := actor.Virtual("gate", "g")
	owner, caller := c.Owner(ref), c.NotOwner(ref)
	ownerAPI, callerAPI := serveMetrics(t, owner), serveMetrics(t, caller)

	post := func(op, text string) int {
		t.Helper()
		resp, err := http.Post(callerAPI.URL+"/v1/actors/gate/g/"+op, "application/json",
			strings.NewReader(fmt.Sprintf(`{"text":%q}`, text)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("tell", "hold"); code != http.StatusAccepted {
		t.Fatalf("tell hold: %d, want 202", code)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the gate's turn did not start")
	}
	// The held turn keeps the mailbox's one place taken by this tell;
	// the ask after it on the same lane finds it full.
	if code := post("tell", "fill"); code != http.StatusAccepted {
		t.Fatalf("tell fill: %d, want 202", code)
	}
	if code := post("ask", "refused"); code != http.StatusTooManyRequests {
		t.Fatalf("ask: %d, want 429 (refused)", code)
	}

	// The owner counted the refusal before sending it, the caller before
	// failing the ask: both are in the next scrape.
	sent := mailRefusals(t, ownerAPI.URL)
	received := mailRefusals(t, callerAPI.URL)
	if n := sent["sent/mailbox_full"]; n < 1 {
		t.Errorf("owner: tempest_mail_refusals_total{direction=sent,reason=mailbox_full} = %v, want >= 1", n)
	}
	if n := received["received/mailbox_full"]; n < 1 {
		t.Errorf("caller: tempest_mail_refusals_total{direction=received,reason=mailbox_full} = %v, want >= 1", n)
	}
	for _, got := range []map[string]float64{sent, received} {
		if len(got) != 2*len(refusalReasons) {
			t.Errorf("%d series, want %d: %v", len(got), 2*len(refusalReasons), got)
		}
		for _, dir := range []string{"sent", "received"} {
			for _, r := range refusalReasons {
				if _, ok := got[dir+"/"+r]; !ok {
					t.Errorf("no series for direction %s, reason %s", dir, r)
				}
			}
		}
	}
	if n := received["sent/mailbox_full"] + sent["received/mailbox_full"]; n != 0 {
		t.Errorf("mailbox_full counted in the wrong direction %v times", n)
	}

	// The catch-up failures are exported beside the other replica counters.
	if s := scrape(t, ownerAPI.URL); !strings.Contains(s, "\ntempest_replica_catchup_failures_total ") {
		t.Error("no tempest_replica_catchup_failures_total in /metrics")
	}

	t.Run("promtool", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool is not installed (Debian package prometheus): the exposition is not linted")
		}
		for _, srv := range []*httptest.Server{ownerAPI, callerAPI} {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(scrape(t, srv.URL))
			out, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) != 0 {
				t.Errorf("promtool check metrics: %v\n%s", err, out)
			}
		}
	})
}

// serveMetrics serves n's API with a registry attached to n.
func serveMetrics(t *testing.T, n *tempest.Node) *httptest.Server {
	t.Helper()
	m := httpapi.NewMetrics("test")
	m.Attach(n)
	api, err := httpapi.New(httpapi.Config{Node: n, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

var refusalSample = regexp.MustCompile(`^tempest_mail_refusals_total\{direction="([a-z_]+)",reason="([a-z_]+)"\} (\S+)$`)

// mailRefusals returns the samples of tempest_mail_refusals_total in
// base's /metrics by "direction/reason".
func mailRefusals(t *testing.T, base string) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for line := range strings.Lines(scrape(t, base)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "tempest_mail_refusals_total{") {
			continue
		}
		m := refusalSample.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected sample %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		got[m[1]+"/"+m[2]] = v
	}
	return got
}
