package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/reminders"
	"github.com/tempest-actors/tempest/wire"
)

// fakeNode answers by key: the key names the error to return.
type fakeNode struct {
	ready    bool
	degraded string
	members  []membership.Member
	proven   map[string]bool
}

var _ Node = (*fakeNode)(nil)

var fakeErrs = map[string]error{
	"deadline":    fmt.Errorf("ask: %w", actor.ErrDeadlineExceeded),
	"unavail":     fmt.Errorf("owner gone: %w", actor.ErrProcessUnavailable),
	"closed":      tempest.ErrClosed,
	"refused":     fmt.Errorf("mailbox full: %w", actor.ErrRefused),
	"terminated":  actor.ErrActorTerminated,
	"noeligible":  actor.ErrNoEligibleNode,
	"noquorum":    fmt.Errorf("%w: wire: peer unavailable: n3 is not a live member", tempest.ErrNoQuorum),
	"badjson":     &tempest.JSONError{Kind: "k", Type: "In", Err: errors.New("$.n: not an i64")},
	"boom":        errors.New("something else"),
	"uncommitted": fmt.Errorf("prospero: state of k/uncommitted not committed: %w", actor.ErrNotCommitted),
	// Reminder errors an actor replied, as an asker gets them.
	"shortperiod": &wire.RemoteError{Message: `reminders: reminder "r": period below the minimum: 1ms (the minimum is 1s)`,
		AppCode: "tempest.reminder_period_too_short", App: reminders.ErrPeriodTooShort},
	"noreminder": &wire.RemoteError{Message: `reminders: no such reminder: k/noreminder "r"`,
		AppCode: "tempest.reminder_not_found", App: reminders.ErrNotFound},
}

func (f *fakeNode) Name() string    { return "fake" }
func (f *fakeNode) Kinds() []string { return []string{"k"} }

func (f *fakeNode) Policies() []tempest.KindPolicy {
	return []tempest.KindPolicy{{Kind: "k", Remedy: "Restart", Digest: "d"}}
}
func (f *fakeNode) result(kind, key string) error {
	if kind != "k" {
		return fmt.Errorf("%w: %q", actor.ErrUnknownKind, kind)
	}
	return fakeErrs[key]
}
func (f *fakeNode) AskJSON(ctx context.Context, kind, key string, js []byte) ([]byte, error) {
	if key == "block" {
		<-ctx.Done()
		return nil, fmt.Errorf("ask: %w", ctx.Err())
	}
	if err := f.result(kind, key); err != nil {
		return nil, err
	}
	return js, nil
}
func (f *fakeNode) TellJSON(_ context.Context, kind, key string, _ []byte) error {
	return f.result(kind, key)
}
func (f *fakeNode) Status(_ context.Context, ref actor.Ref) (tempest.Status, error) {
	if err := f.result(ref.Kind(), ""); err != nil {
		return tempest.Status{}, err
	}
	return tempest.Status{Kind: ref.Kind(), Key: ref.Key(), State: actor.Dormant, Node: "fake"}, nil
}
func (f *fakeNode) Passivate(_ context.Context, ref actor.Ref) error { return f.result(ref.Kind(), "") }
func (f *fakeNode) Locate(actor.Ref) (string, uint64, error)         { return "fake", 0, nil }
func (f *fakeNode) Ready() bool                                      { return f.ready }
func (f *fakeNode) Degraded() string                                 { return f.degraded }
func (f *fakeNode) Live() bool                                       { return true }
func (f *fakeNode) Manifest() manifest.Manifest                      { return manifest.Manifest{} }
func (f *fakeNode) Members() []membership.Member                     { return f.members }
func (f *fakeNode) Proven(m membership.Member) bool                  { return f.proven[m.Name] }
func (f *fakeNode) Table() *placement.Table                          { return nil }
func (f *fakeNode) RaftInfo() tempest.RaftInfo                       { return tempest.RaftInfo{} }
func (f *fakeNode) PlacementStatus() (placement.Status, bool)        { return placement.Status{}, false }
func (f *fakeNode) ReplicationLag() []tempest.ReplicaLag             { return nil }
func (f *fakeNode) Actors(_ context.Context, kind string, dormant bool) ([]tempest.ActorEntry, error) {
	if err := f.result(kind, ""); err != nil {
		return nil, err
	}
	var out []tempest.ActorEntry
	for i := range 25 {
		if active := i%2 == 0; active || dormant {
			out = append(out, tempest.ActorEntry{Key: fmt.Sprintf("a%02d", i), Active: active})
		}
	}
	return out, nil
}

func do(t *testing.T, h http.Handler, method, path, body string, hdr map[string]string) (int, ErrorBody, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	var eb ErrorBody
	_ = json.Unmarshal(b, &eb)
	return rec.Code, eb, string(b)
}

func TestHTTPStatusCodes(t *testing.T) {
	met := NewMetrics("test")
	met.SetKinds([]string{"k"})
	h := (&Server{node: &fakeNode{ready: true}, met: met}).Handler()
	cases := []struct {
		method, path, body string
		want               int
		code               string
	}{
		{"POST", "/v1/actors/k/ok/ask", `{"n":1}`, 200, ""},
		{"POST", "/v1/actors/k/ok/tell", `{"n":1}`, 202, ""},
		{"POST", "/v1/actors/k/deadline/ask", `{}`, 504, codeDeadline},
		{"POST", "/v1/actors/k/unavail/ask", `{}`, 503, codeUnavailable},
		{"POST", "/v1/actors/k/closed/ask", `{}`, 503, codeUnavailable},
		{"POST", "/v1/actors/k/noeligible/ask", `{}`, 503, codeNoEligibleNode},
		{"POST", "/v1/actors/k/noquorum/ask", `{}`, 503, codeNoQuorum},
		{"POST", "/v1/actors/k/noquorum/tell", `{}`, 503, codeNoQuorum},
		{"POST", "/v1/actors/k/uncommitted/ask", `{}`, 503, codeNotCommitted},
		{"POST", "/v1/actors/k/refused/ask", `{}`, 429, codeRefused},
		{"POST", "/v1/actors/k/refused/tell", `{}`, 429, codeRefused},
		{"POST", "/v1/actors/nokind/x/ask", `{}`, 404, codeUnknownKind},
		{"POST", "/v1/actors/nokind/x/tell", `{}`, 404, codeUnknownKind},
		{"POST", "/v1/actors/k/badjson/ask", `{"n":"x"}`, 400, codeBadJSON},
		{"POST", "/v1/actors/k/ok/ask", `{not json`, 400, codeBadJSON},
		{"POST", "/v1/actors/k/terminated/ask", `{}`, 410, codeTerminated},
		{"POST", "/v1/actors/k/boom/ask", `{}`, 500, codeInternal},
		{"POST", "/v1/actors/k/shortperiod/ask", `{}`, 422, codeInvalidReminder},
		{"POST", "/v1/actors/k/shortperiod/tell", `{}`, 422, codeInvalidReminder},
		{"POST", "/v1/actors/k/noreminder/ask", `{}`, 404, codeNotFound},
		{"POST", "/v1/actors/k/ok/ask?timeout=forever", `{}`, 400, codeBadRequest},
		{"GET", "/v1/actors/k/a", "", 200, ""},
		{"GET", "/v1/actors/nokind/a", "", 404, codeUnknownKind},
		{"POST", "/v1/actors/k/a/passivate", "", 200, ""},
		{"POST", "/v1/actors/nokind/a/passivate", "", 404, codeUnknownKind},
		{"GET", "/v1/actors/k/a/ask", "", 405, codeMethodNotAllowed},
		{"POST", "/v1/members", "", 405, codeMethodNotAllowed},
		{"GET", "/v1/nothing", "", 404, codeNotFound},
		{"GET", "/", "", 404, codeNotFound},
		{"GET", "/healthz", "", 200, ""},
		{"GET", "/readyz", "", 200, ""},
		{"GET", "/v1/members", "", 200, ""},
		{"GET", "/v1/placement", "", 200, ""},
		{"GET", "/v1/manifest", "", 200, ""},
		{"GET", "/v1/manifest?node=other", "", 404, codeNotFound},
		{"GET", "/metrics", "", 200, ""},
	}
	for _, tc := range cases {
		got, eb, body := do(t, h, tc.method, tc.path, tc.body, nil)
		if got != tc.want || eb.Code != tc.code {
			t.Errorf("%s %s: got %d %q, want %d %q (body %s)", tc.method, tc.path, got, eb.Code, tc.want, tc.code, body)
		}
	}
	// The ask's reply is the node's JSON.
	if _, _, body := do(t, h, "POST", "/v1/actors/k/ok/ask", `{"n":1}`, nil); strings.TrimSpace(body) != `{"n":1}` {
		t.Errorf("ask reply %q", body)
	}
	// Each series counts every request, not only its first.
	series := func(name string) string {
		_, _, m := do(t, h, "GET", "/metrics", "", nil)
		for _, l := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				return v
			}
		}
		return "absent"
	}
	const okAsks, okLatency = `tempest_messages_total{kind="k",op="ask",outcome="ok"}`, `tempest_ask_duration_seconds_count{kind="k"}`
	if a, l := series(okAsks), series(okLatency); a != "2" || l != "2" {
		t.Fatalf("after two asks: %s %s, %s %s", okAsks, a, okLatency, l)
	}
	do(t, h, "POST", "/v1/actors/k/ok/ask", `{"n":2}`, nil)
	if a, l := series(okAsks), series(okLatency); a != "3" || l != "3" {
		t.Errorf("after three asks: %s %s, %s %s", okAsks, a, okLatency, l)
	}
	// The ask refused for its timeout above is counted too.
	if c := series(`tempest_messages_total{kind="k",op="ask",outcome="bad_request"}`); c != "1" {
		t.Errorf("asks refused for their timeout: %s, want 1", c)
	}
	// Metrics never carry actor keys, and unknown kinds share one label.
	_, _, metrics := do(t, h, "GET", "/metrics", "", nil)
	for _, key := range []string{`"unavail"`, `"badjson"`, `"nokind"`, `key="`} {
		if strings.Contains(metrics, key) {
			t.Errorf("/metrics mentions %q", key)
		}
	}
	for _, want := range []string{
		`tempest_messages_total{kind="k",op="ask",outcome="deadline_exceeded"} 1`,
		`tempest_messages_total{kind="k",op="tell",outcome="refused"} 1`,
		`tempest_messages_total{kind="_unknown",op="ask",outcome="unknown_kind"} 1`,
		`tempest_build_info{`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A reminder error is the request's fault, whatever form it reached the
// node in: the engine's own error, or the one an actor's reply gives the
// asker, which keeps only the specific sentinel (which matches
// reminders.ErrInvalid). No such reminder, and a shard not held, are
// answered as the reminder endpoints answer them.
func TestClassifyReminderErrors(t *testing.T) {
	_, badCatchup := reminders.ParseCatchup("sometimes")
	remote := func(code string, app error) error {
		return &wire.RemoteError{Message: app.Error() + ": detail", AppCode: code, App: app}
	}
	for _, tc := range []struct {
		err     error
		status  int
		code    string
		outcome string
	}{
		{badCatchup, 422, codeInvalidReminder, outcomeError},
		{fmt.Errorf("reminders: reminder %q: %w", "r", reminders.ErrTooMany), 422, codeInvalidReminder, outcomeError},
		{reminders.ErrBadName, 422, codeInvalidReminder, outcomeError},
		{remote("tempest.reminder_period_too_short", reminders.ErrPeriodTooShort), 422, codeInvalidReminder, outcomeError},
		{remote("tempest.reminder_due_in_past", reminders.ErrDueInPast), 422, codeInvalidReminder, outcomeError},
		{remote("tempest.reminder_unknown_payload", reminders.ErrUnknownPayload), 422, codeInvalidReminder, outcomeError},
		{remote("tempest.reminder_invalid", reminders.ErrInvalid), 422, codeInvalidReminder, outcomeError},
		{remote("tempest.reminder_not_found", reminders.ErrNotFound), 404, codeNotFound, outcomeError},
		{remote("tempest.reminder_not_owner", reminders.ErrNotOwner), 503, codeUnavailable, outcomeUnavailable},
		{actor.ErrNoReply, 502, codeNoReply, outcomeError},
		{fmt.Errorf("%w: %w", actor.ErrPanicked, actor.ErrRefused), 500, codePanicked, outcomeError},
		{&wire.RemoteError{Message: "tempest: actor panicked: boom", Code: wire.CodePanicked}, 500, codePanicked, outcomeError},
		{&wire.RemoteError{Message: actor.ErrNoReply.Error(), Code: wire.CodeNoReply}, 502, codeNoReply, outcomeError},
		{remote("tempest.message_too_large", wire.ErrFrameTooLarge), 502, codeMessageTooLarge, outcomeError},
	} {
		s := &Server{node: &fakeNode{}}
		if status, code, outcome := s.classify(tc.err); status != tc.status || code != tc.code || outcome != tc.outcome {
			t.Errorf("%v: %d %s %s, want %d %s %s", tc.err, status, code, outcome, tc.status, tc.code, tc.outcome)
		}
	}
}

func TestHTTPReadiness(t *testing.T) {
	f := &fakeNode{}
	h := (&Server{node: f}).Handler()
	if got, _, _ := do(t, h, "GET", "/readyz", "", nil); got != 503 {
		t.Errorf("readyz of a node not ready: %d", got)
	}
	if got, _, _ := do(t, h, "GET", "/healthz", "", nil); got != 200 {
		t.Errorf("healthz of a live node: %d", got)
	}
	f.ready = true
	if got, _, body := do(t, h, "GET", "/readyz", "", nil); got != 200 || strings.Contains(body, "degraded") {
		t.Errorf("readyz of a ready node: %d %s", got, body)
	}
	// A degraded node is still ready (it answers and supervises) and says
	// why it runs short of capacity.
	f.degraded = "scheduler pool at 0 of 2 workers"
	if got, _, body := do(t, h, "GET", "/readyz", "", nil); got != 200 || !strings.Contains(body, `"degraded":"scheduler pool at 0 of 2 workers"`) {
		t.Errorf("readyz of a degraded node: %d %s", got, body)
	}
}

func TestHTTPBearerToken(t *testing.T) {
	token := "0123456789abcdef-secret"
	for _, public := range []bool{false, true} {
		h := (&Server{node: &fakeNode{ready: true}, token: []byte(token), met: NewMetrics("t"), metricsPublic: public}).Handler()
		for _, tc := range []struct {
			path, auth string
			want       int
		}{
			{"/v1/members", "", 401},
			{"/v1/members", "Bearer wrong", 401},
			{"/v1/members", token, 401}, // no scheme
			{"/v1/members", "Bearer " + token, 200},
			{"/v1/members", "bearer " + token, 200},
			{"/v1/members", "BEARER  " + token, 200},
			{"/v1/members", "Basic " + token, 401},
			{"/v1/members", "Bearer" + token, 401},
			{"/healthz", "", 200},
			{"/readyz", "", 200},
			{"/metrics", "", map[bool]int{false: 401, true: 200}[public]},
			{"/metrics", "Bearer " + token, 200},
		} {
			got, eb, body := do(t, h, "GET", tc.path, "", map[string]string{"Authorization": tc.auth})
			if got != tc.want {
				t.Errorf("public=%v %s %q: got %d, want %d", public, tc.path, tc.auth, got, tc.want)
			}
			if got == 401 && (eb.Code != codeUnauthorized || strings.Contains(body, token)) {
				t.Errorf("401 body %q", body)
			}
		}
		got, _, _ := do(t, h, "POST", "/v1/actors/k/ok/ask", "{}", nil)
		if got != 401 {
			t.Errorf("ask without token: %d", got)
		}
	}
}

// A token is MinTokenBytes to MaxTokenBytes of printable ASCII, as the
// agent's and the clients' are: an embedding program cannot set one the
// CLI would refuse to send.
func TestServerTokenRule(t *testing.T) {
	for tok, ok := range map[string]bool{
		"":                        true, // none
		"0123456789abcdef":        true,
		"0123456789abcde":         false,
		"0123456789abcdef\n":      false,
		"0123456789abcdefé":       false,
		strings.Repeat("a", 4096): true,
		strings.Repeat("a", 4097): false,
	} {
		_, err := New(Config{Node: &fakeNode{}, Token: []byte(tok)})
		if (err == nil) != ok {
			t.Errorf("token of %d bytes %.20q: %v, want ok %v", len(tok), tok, err, ok)
		}
	}
}

func TestHTTPBodyLimit(t *testing.T) {
	h := (&Server{node: &fakeNode{ready: true}}).Handler()
	big := `{"text":"` + strings.Repeat("x", MaxRequestBody) + `"}`
	got, eb, _ := do(t, h, "POST", "/v1/actors/k/ok/ask", big, nil)
	if got != http.StatusRequestEntityTooLarge || eb.Code != codeTooLarge {
		t.Fatalf("oversized body: got %d %q", got, eb.Code)
	}
	fits := `{"text":"` + strings.Repeat("x", MaxRequestBody-20) + `"}`
	if got, _, _ := do(t, h, "POST", "/v1/actors/k/ok/ask", fits, nil); got != 200 {
		t.Fatalf("body under the limit: got %d", got)
	}
}

// TestHTTPBodyLengths: a body is read by its declared length when it has
// one and to its end when it has none (chunked), and one shorter than it
// declared is refused, not handed on truncated.
func TestHTTPBodyLengths(t *testing.T) {
	h := (&Server{node: &fakeNode{ready: true}}).Handler()
	send := func(body string, length int64) (int, string) {
		req := httptest.NewRequest("POST", "/v1/actors/k/ok/ask", nil)
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), length
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, got := send(`{"a":1}`, 7); code != 200 || got != "{\"a\":1}\n" {
		t.Fatalf("declared length: %d %q", code, got)
	}
	if code, got := send(`{"a":1}`, -1); code != 200 || got != "{\"a\":1}\n" {
		t.Fatalf("unknown length: %d %q", code, got)
	}
	if code, got := send(`{"a":1}`, 12); code != http.StatusBadRequest || !strings.Contains(got, codeBadRequest) {
		t.Fatalf("body shorter than declared: %d %q", code, got)
	}
	// Larger than what is set aside before the bytes arrive: read whole
	// as they come in.
	big := `{"a":"` + strings.Repeat("x", 3*presizeBody) + `"}`
	if code, got := send(big, int64(len(big))); code != 200 || got != big+"\n" {
		t.Fatalf("declared length over the presized buffer: %d, %d bytes back", code, len(got))
	}
	if code, got := send(big, int64(len(big))+1); code != http.StatusBadRequest || !strings.Contains(got, codeBadRequest) {
		t.Fatalf("large body shorter than declared: %d %q", code, got)
	}
}

// A declared length sets aside at most presizeBody before the body's
// bytes arrive: a client that announces a megabyte and sends ten bytes
// pins no megabyte.
func TestHTTPDeclaredLengthIsNotPreallocated(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/actors/k/ok/ask", nil)
	r.ContentLength = MaxRequestBody
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	r.Body = io.NopCloser(strings.NewReader("0123456789"))
	if _, err := readAllBody(httptest.NewRecorder(), r, MaxRequestBody); err == nil {
		t.Fatal("a body shorter than declared was read")
	}
	runtime.ReadMemStats(&ms)
	if got := ms.TotalAlloc - before; got > 2*presizeBody {
		t.Fatalf("reading 10 bytes of a declared %d allocated %d bytes", MaxRequestBody, got)
	}
}

// TestHTTPClientCancelIsNotAnError: an ask whose client goes away is
// counted as canceled and logged below warn, not as an internal error.
func TestHTTPClientCancelIsNotAnError(t *testing.T) {
	met := NewMetrics("test")
	met.SetKinds([]string{"k"})
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h := (&Server{node: &fakeNode{ready: true}, met: met, log: log}).Handler()
	ctx, cancel := context.WithCancel(t.Context())
	req := httptest.NewRequestWithContext(ctx, "POST", "/v1/actors/k/block/ask", strings.NewReader(`{}`))
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	cancel()
	<-done
	if rec.Code != StatusClientClosedRequest {
		t.Errorf("status %d, want %d", rec.Code, StatusClientClosedRequest)
	}
	if logs.Len() != 0 {
		t.Errorf("a client's cancellation was logged at warn or above:\n%s", logs.String())
	}
	_, _, metrics := do(t, h, "GET", "/metrics", "", nil)
	if !strings.Contains(metrics, `tempest_messages_total{kind="k",op="ask",outcome="canceled"} 1`) {
		t.Errorf("no canceled ask counted:\n%s", metrics)
	}
	// Anything else unexplained is still an internal error, logged.
	do(t, h, "POST", "/v1/actors/k/boom/ask", `{}`, nil)
	if !strings.Contains(logs.String(), "internal error") {
		t.Errorf("an internal error was not logged: %q", logs.String())
	}
}

// TestHTTPActorsPaging walks the inventory page by page.
func TestHTTPActorsPaging(t *testing.T) {
	h := (&Server{node: &fakeNode{ready: true}}).Handler()
	get := func(path string) ActorsBody {
		t.Helper()
		code, eb, body := do(t, h, "GET", path, "", nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %+v", path, code, eb)
		}
		var ab ActorsBody
		if err := json.Unmarshal([]byte(body), &ab); err != nil {
			t.Fatal(err)
		}
		return ab
	}
	if ab := get("/v1/actors?kind=k"); ab.Count != 13 || len(ab.Actors) != 13 || ab.Next != "" || ab.Actors[0] != (ActorEntry{"a00", "active"}) {
		t.Fatalf("active: %+v", ab)
	}
	var keys []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		ab := get("/v1/actors?kind=k&dormant=true&limit=10&after=" + after)
		if ab.Count != 25 || !ab.Dormant || len(ab.Actors) > 10 {
			t.Fatalf("page after %q: %+v", after, ab)
		}
		for _, e := range ab.Actors {
			keys = append(keys, e.Key)
		}
		if ab.Next == "" {
			break
		}
		after = ab.Next
	}
	if len(keys) != 25 || keys[0] != "a00" || keys[24] != "a24" || !slices.IsSorted(keys) {
		t.Fatalf("keys over all pages: %v", keys)
	}
	for _, tc := range []struct {
		path string
		want int
		code string
	}{
		{"/v1/actors", 400, codeBadRequest},
		{"/v1/actors?kind=k&limit=0", 400, codeBadRequest},
		{"/v1/actors?kind=k&limit=1001", 400, codeBadRequest},
		{"/v1/actors?kind=k&dormant=maybe", 400, codeBadRequest},
		{"/v1/actors?kind=k&after=%ff", 400, codeBadRequest},
		{"/v1/actors?kind=nokind", 404, codeUnknownKind},
	} {
		if got, eb, _ := do(t, h, "GET", tc.path, "", nil); got != tc.want || eb.Code != tc.code {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, got, eb.Code, tc.want, tc.code)
		}
	}
}

// A gossip member that never proved its name with a cluster certificate
// is listed, but as unproven: its advertised HTTP address is a hint, not
// a node's.
func TestMembersMarksUnprovenMembers(t *testing.T) {
	f := &fakeNode{ready: true, proven: map[string]bool{"n1": true},
		members: []membership.Member{
			{Name: "n1", Status: membership.StatusAlive, Meta: membership.Meta{HTTPAddr: "10.0.0.1:7948"}},
			{Name: "rogue", Status: membership.StatusAlive, Meta: membership.Meta{HTTPAddr: "10.0.0.66:7948"}},
		}}
	h := (&Server{node: f}).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/members", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var mb MembersBody
	if err := json.Unmarshal(rec.Body.Bytes(), &mb); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range mb.Members {
		got[m.Name] = m.Proven
	}
	if want := map[string]bool{"n1": true, "rogue": false}; !maps.Equal(got, want) {
		t.Fatalf("proven: got %v, want %v (%s)", got, want, rec.Body)
	}
}
