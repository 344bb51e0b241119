package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
)

// startNode runs a standalone node with the demo kinds behind the API.
func startNode(t *testing.T) (*tempest.Node, *httptest.Server) {
	t.Helper()
	n, err := tempest.New(tempest.Config{Name: "n1", DataDir: t.TempDir()})
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
	api, err := httpapi.New(httpapi.Config{Node: n})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	return n, srv
}

func call(t *testing.T, srv *httptest.Server, method, rawPath, body string) (int, httpapi.ErrorBody, string) {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rawPath, u.RawQuery, _ = strings.Cut(rawPath, "?")
	u.RawPath = rawPath
	u.Path, err = url.PathUnescape(rawPath)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u.String(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb httpapi.ErrorBody
	_ = json.Unmarshal(b, &eb)
	return resp.StatusCode, eb, string(b)
}

// TestHTTPRefusesInvalidKeys: a kind or key no actor can have is a 400
// invalid_key on every route, and nothing is written for it.
func TestHTTPRefusesInvalidKeys(t *testing.T) {
	n, srv := startNode(t)
	over := strings.Repeat("k", actor.MaxKeyLen+1)
	huge := strings.Repeat("k", 40<<10)
	for _, actorPath := range []string{
		"/v1/actors/counter/%ff%fe",
		"/v1/actors/counter/" + over,
		"/v1/actors/counter/" + huge,
		"/v1/actors/count%ffer/a",
		"/v1/actors/" + strings.Repeat("c", actor.MaxKindLen+1) + "/a",
	} {
		for _, op := range []struct{ method, suffix, body string }{
			{"POST", "/ask", `{"Add":{"n":1}}`},
			{"POST", "/tell", `{"Add":{"n":1}}`},
			{"POST", "/ask", `{"Nope":1}`},
			{"GET", "", ""},
			{"POST", "/passivate", ""},
		} {
			got, eb, body := call(t, srv, op.method, actorPath+op.suffix, op.body)
			if got != http.StatusBadRequest || eb.Code != "invalid_key" {
				t.Errorf("%s %.60s%s: got %d %q, want 400 invalid_key (%.200s)", op.method, actorPath, op.suffix, got, eb.Code, body)
			}
			if len(body) > 1024 {
				t.Errorf("%s %.60s: an error body of %d bytes echoes the key", op.method, actorPath, len(body))
			}
		}
	}
	for _, q := range []string{"count%ffer", strings.Repeat("c", actor.MaxKindLen+1), "a%2Fb"} {
		if got, eb, body := call(t, srv, "GET", "/v1/actors?kind="+q, ""); got != http.StatusBadRequest || eb.Code != "invalid_key" ||
			!strings.Contains(eb.Error, "invalid kind") {
			t.Errorf("inventory of kind %.40s: got %d %q, want 400 invalid_key (%.200s)", q, got, eb.Code, body)
		}
	}
	if st := n.Stats(); st.Supervisor.Entries != 0 {
		t.Fatalf("%d identities in memory after refused requests", st.Supervisor.Entries)
	}
	// The longest key works, its state is written at rest and read back.
	longest := "/v1/actors/counter/" + strings.Repeat("k", actor.MaxKeyLen)
	if got, _, body := call(t, srv, "POST", longest+"/ask", `{"Add":{"n":3}}`); got != 200 {
		t.Fatalf("ask with the longest key: %d %s", got, body)
	}
	if got, _, body := call(t, srv, "POST", longest+"/passivate", ""); got != 200 || !strings.Contains(body, `"Dormant"`) {
		t.Fatalf("passivate with the longest key: %d %s", got, body)
	}
	if got, _, body := call(t, srv, "POST", longest+"/ask", `{"Get":null}`); got != 200 || strings.TrimSpace(body) != `{"n":3}` {
		t.Fatalf("get with the longest key after passivation: %d %s", got, body)
	}
}

// TestHTTPCounterOverflow: the demo counter's i64 does not wrap (an Add
// past the range is 422 overflow and changes nothing), and its value stays
// a JSON number however large it is.
func TestHTTPCounterOverflow(t *testing.T) {
	_, srv := startNode(t)
	for _, tc := range []struct{ key, first, over, want string }{
		{"max", `{"Add":{"n":9223372036854775806}}`, `{"Add":{"n":2}}`, `{"n":9223372036854775806}`},
		{"min", `{"Add":{"n":-9223372036854775808}}`, `{"Add":{"n":-1}}`, `{"n":-9223372036854775808}`},
	} {
		p := "/v1/actors/counter/" + tc.key + "/ask"
		if got, _, body := call(t, srv, "POST", p, tc.first); got != 200 || strings.TrimSpace(body) != tc.want {
			t.Fatalf("%s: first add: %d %s, want 200 %s", tc.key, got, body, tc.want)
		}
		if got, eb, body := call(t, srv, "POST", p, tc.over); got != http.StatusUnprocessableEntity || eb.Code != "overflow" {
			t.Fatalf("%s: add past the range: %d %s, want 422 overflow", tc.key, got, body)
		}
		if got, _, body := call(t, srv, "POST", p, `{"Get":null}`); got != 200 || strings.TrimSpace(body) != tc.want {
			t.Fatalf("%s: value after the refused add: %d %s, want %s", tc.key, got, body, tc.want)
		}
	}
}

// TestHTTPRefusesInvalidReminderNames: a reminder name no reminder can
// have (not UTF-8, too long) is a 400 bad_request on the routes naming
// one, not a 404 as if it were merely absent.
func TestHTTPRefusesInvalidReminderNames(t *testing.T) {
	_, srv := startNode(t)
	for _, name := range []string{"%ff", "a%fe%ffb", strings.Repeat("r", 129)} {
		for _, method := range []string{"GET", "DELETE"} {
			got, eb, body := call(t, srv, method, "/v1/actors/counter/a/reminders/"+name, "")
			if got != http.StatusBadRequest || eb.Code != "bad_request" {
				t.Errorf("%s reminders/%.40s: got %d %q, want 400 bad_request (%.200s)", method, name, got, eb.Code, body)
			}
		}
	}
	// A valid name that names no reminder is still 404.
	if got, eb, body := call(t, srv, "GET", "/v1/actors/counter/a/reminders/none", ""); got != http.StatusNotFound || eb.Code != "not_found" {
		t.Errorf("GET reminders/none: got %d %q, want 404 not_found (%.200s)", got, eb.Code, body)
	}
}

// TestHTTPUncleanActorPathsRefused: a path of /v1/actors that is not
// clean (an empty, "." or ".." segment, or one that cleans to such a
// path) is 400 invalid_key, never redirected: Go's router would answer
// 307 to the cleaned path, which keeps the method and body, so that an
// ask for counter/x/../victim would add to counter/victim, and the
// reminders of ticker/ (empty key) would be the status of the actor
// ticker/reminders.
func TestHTTPUncleanActorPathsRefused(t *testing.T) {
	n, srv := startNode(t)
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	send := func(method, rawPath, body string) (int, http.Header, httpapi.ErrorBody, string) {
		t.Helper()
		// The target is sent as written: neither url.Parse nor the client
		// cleans a path.
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+rawPath, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if got := req.URL.RequestURI(); got != rawPath {
			t.Fatalf("the client would send %q, not %q", got, rawPath)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var eb httpapi.ErrorBody
		_ = json.Unmarshal(b, &eb)
		return resp.StatusCode, resp.Header, eb, string(b)
	}
	add := `{"Add":{"n":1}}`
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/actors/counter/x/../victim/ask", add},
		{"POST", "/v1/actors/counter/victim/./ask", add},
		{"POST", "/v1/actors/counter/./victim/ask", add},
		{"POST", "/v1/actors/counter//victim/ask", add},
		{"POST", "/v1/actors/counter/victim//ask", add},
		{"POST", "/v1/actors//victim/ask", add},
		{"POST", "/v1/actors/counter/victim/ask/", add},
		{"POST", "/v1/actors/counter/victim/tell/.", add},
		{"POST", "/v1/x/../actors/counter/victim/ask", add},
		{"POST", "//v1/actors/counter/victim/ask", add},
		{"POST", "/v1/actors/../actors/counter/victim/ask", add},
		{"POST", "/v1/actors/counter/victim/x/../passivate", ""},
		{"GET", "/v1/actors/ticker//reminders", ""},
		{"GET", "/v1/actors/ticker/x/reminders/", ""},
		{"GET", "/v1/actors//x", ""},
		{"GET", "/v1/actors/counter/", ""},
		{"GET", "/v1/actors/", ""},
		{"DELETE", "/v1/actors/ticker//reminders/r", ""},
	} {
		code, hdr, eb, body := send(tc.method, tc.path, tc.body)
		if code != http.StatusBadRequest || eb.Code != "invalid_key" || hdr.Get("Location") != "" ||
			hdr.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q (Location %q, %s), want 400 invalid_key and no redirect", tc.method, tc.path,
				code, eb.Code, hdr.Get("Location"), body)
		}
	}
	if st := n.Stats(); st.Supervisor.Entries != 0 {
		t.Fatalf("%d identities in memory after refused requests", st.Supervisor.Entries)
	}
	if code, _, _, body := send("POST", "/v1/actors/counter/victim/ask", `{"Get":null}`); code != 200 || strings.TrimSpace(body) != `{"n":0}` {
		t.Fatalf("counter/victim after the refused adds: %d %s, want {\"n\":0}", code, body)
	}
	// Other unclean paths are still redirected to their clean form.
	if code, hdr, _, _ := send("GET", "/v1/../v1//members", ""); code != http.StatusTemporaryRedirect || hdr.Get("Location") != "/v1/members" {
		t.Errorf("GET /v1/../v1//members: %d to %q, want 307 to /v1/members", code, hdr.Get("Location"))
	}
}

// TestHTTPKeysWithSlashesAndDots: a key that holds '/', or is "." or
// "..", is given percent-encoded and names its own actor on every route.
func TestHTTPKeysWithSlashesAndDots(t *testing.T) {
	_, srv := startNode(t)
	keys := []string{"a/b", "/", "//", "a/", ".", "..", "x/../victim", "./a", "a/.", "%", "victim"}
	for i, key := range keys {
		p := "/v1/actors/counter/" + url.PathEscape(key)
		if key == "." || key == ".." {
			p = "/v1/actors/counter/" + strings.ReplaceAll(key, ".", "%2E")
		}
		if got, _, body := call(t, srv, "POST", p+"/ask", fmt.Sprintf(`{"Add":{"n":%d}}`, i+1)); got != 200 {
			t.Fatalf("ask %q at %s: %d %s", key, p, got, body)
		}
		if got, _, body := call(t, srv, "GET", p, ""); got != 200 || !strings.Contains(body, fmt.Sprintf(`"key":%q`, key)) {
			t.Fatalf("status of %q at %s: %d %s", key, p, got, body)
		}
		if got, _, body := call(t, srv, "GET", "/v1/actors/ticker/"+strings.TrimPrefix(p, "/v1/actors/counter/")+"/reminders", ""); got != 200 || !strings.Contains(body, fmt.Sprintf(`"key":%q`, key)) {
			t.Fatalf("reminders of ticker %q: %d %s", key, got, body)
		}
		// HEAD is GET without a body, and another method is 405 with
		// Allow, as for any other key.
		if got, _, body := call(t, srv, "HEAD", p, ""); got != 200 {
			t.Fatalf("HEAD of %q at %s: %d %s", key, p, got, body)
		}
		for _, c := range []struct{ method, path, allow string }{
			{"PUT", p + "/ask", "POST"},
			{"DELETE", p, "GET, HEAD"},
			{"POST", p + "/reminders/r", "GET, DELETE, HEAD"},
		} {
			got, eb, body := call(t, srv, c.method, c.path, "")
			if got != http.StatusMethodNotAllowed || eb.Code != "method_not_allowed" {
				t.Fatalf("%s of %q at %s: %d %s, want 405", c.method, key, c.path, got, body)
			}
			req, err := http.NewRequestWithContext(t.Context(), c.method, srv.URL+c.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if a := resp.Header.Get("Allow"); a != c.allow {
				t.Fatalf("%s of %q at %s: Allow %q, want %q", c.method, key, c.path, a, c.allow)
			}
		}
	}
	// Each key kept its own count.
	for i, key := range keys {
		p := "/v1/actors/counter/" + strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
		if got, _, body := call(t, srv, "POST", p+"/ask", `{"Get":null}`); got != 200 || strings.TrimSpace(body) != fmt.Sprintf(`{"n":%d}`, i+1) {
			t.Fatalf("count of %q: %d %s, want %d", key, got, body, i+1)
		}
	}
}

// TestHTTPSchemaErrorsAreShort: a 400 bad_json quotes a little of the
// offending input, not all of it: an Add of 900,000 digits, or a field or
// message name as long, gets an error of a few hundred bytes.
func TestHTTPSchemaErrorsAreShort(t *testing.T) {
	_, srv := startNode(t)
	huge := strings.Repeat("9", 900000)
	for _, body := range []string{
		`{"Add":{"n":` + huge + `}}`,
		`{"Add":{"n":1,"` + huge + `":1}}`,
		`{"` + huge + `":null}`,
	} {
		got, eb, resp := call(t, srv, "POST", "/v1/actors/counter/a/ask", body)
		if got != http.StatusBadRequest || eb.Code != "bad_json" || len(resp) > 512 || !strings.Contains(resp, "(900000 bytes)") {
			t.Errorf("%.40s...: %d %q, %d bytes: %.300s", body, got, eb.Code, len(resp), resp)
		}
	}
}

// A body that is not JSON is answered with why (where the syntax broke,
// or nesting deeper than the parser takes), not only that it is not.
func TestHTTPInvalidJSONSaysWhy(t *testing.T) {
	_, srv := startNode(t)
	for body, why := range map[string]string{
		strings.Repeat("[", 100000) + strings.Repeat("]", 100000): "exceeded max depth",
		`{"Add":`:        "unexpected end of JSON input",
		`{"Add" {}}`:     "after object key",
		`{"Get":null} x`: "after top-level value",
	} {
		got, eb, resp := call(t, srv, "POST", "/v1/actors/counter/a/ask", body)
		if got != http.StatusBadRequest || eb.Code != "bad_json" || !strings.Contains(eb.Error, why) || len(resp) > 512 {
			t.Errorf("%.40s: %d %q %q, want 400 bad_json saying %q", body, got, eb.Code, eb.Error, why)
		}
	}
}
