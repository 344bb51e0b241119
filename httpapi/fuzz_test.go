package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
)

const fuzzToken = "fuzz-token-0123456789"

// The HTTP statuses and error codes docs/operations.md lists (301, 307: the
// router redirects unclean paths; 422 overflow: the demo counter's
// application error), except those of a node or kind at fault, which no
// input may cause: 500 internal and actor_panicked, 502 no_reply.
var (
	documentedStatus = map[int]bool{200: true, 202: true, 301: true, 307: true, 400: true, 401: true, 403: true, 404: true, 405: true,
		408: true, 410: true, 413: true, 422: true, 429: true, 501: true, 503: true, 504: true}
	documentedCodes = map[string]bool{"bad_json": true, "bad_request": true, "invalid_key": true,
		"unknown_kind": true, "not_found": true, "method_not_allowed": true, "deadline_exceeded": true,
		"refused": true, "process_unavailable": true, "no_quorum": true, "no_eligible_node": true, "actor_terminated": true,
		"unauthorized": true, "body_too_large": true, "request_timeout": true, "not_ready": true, "overflow": true,
		"not_committed": true, "not_supported": true, "invalid_reminder": true, "forbidden": true}
)

var (
	fuzzOnce    sync.Once
	fuzzHandler http.Handler
	fuzzErr     error
)

// fuzzAPI is the API of one standalone demo node, shared by every input
// of a fuzzing run (a node per input would be too slow). The node is
// closed when the process ends.
func fuzzAPI(f *testing.F) http.Handler {
	fuzzOnce.Do(func() {
		n, err := tempest.New(tempest.Config{Name: "fuzz", DataDir: f.TempDir()})
		if err == nil {
			err = demo.Register(n, demo.Options{})
		}
		if err == nil {
			err = n.Start(context.Background())
		}
		if err != nil {
			fuzzErr = err
			return
		}
		api, err := httpapi.New(httpapi.Config{Node: n, Token: []byte(fuzzToken), Metrics: httpapi.NewMetrics("fuzz")})
		if err != nil {
			fuzzErr = err
			return
		}
		fuzzHandler = api.Handler()
		f.Cleanup(func() { _ = n.Close(context.Background()) })
	})
	if fuzzErr != nil {
		f.Fatal(fuzzErr)
	}
	return fuzzHandler
}

// FuzzHandler sends arbitrary requests (method, target with path and
// query, headers, body) through the real handler of a real node: no
// input may panic it or get an answer outside the documented statuses
// and error codes, and every error body is the documented JSON.
func FuzzHandler(f *testing.F) {
	auth := "Authorization: Bearer " + fuzzToken + "\r\n"
	for _, seed := range []struct{ method, target, headers, body string }{
		{"GET", "/healthz", "", ""},
		{"GET", "/readyz", "", ""},
		{"GET", "/metrics", auth, ""},
		{"GET", "/v1/members", auth, ""},
		{"GET", "/v1/placement", "authorization: bearer " + fuzzToken + "\r\n", ""},
		{"GET", "/v1/manifest?node=other", auth, ""},
		{"GET", "/v1/actors/counter/a", auth, ""},
		{"GET", "/v1/actors?kind=counter&dormant=true&limit=2&after=%ff", auth, ""},
		{"POST", "/v1/actors/counter/a/ask?timeout=2s", auth + "Content-Type: application/json\r\n", `{"Add":{"n":5}}`},
		{"POST", "/v1/actors/counter/a/ask", auth, `{"Add":{"n":9223372036854775807}}`},
		{"POST", "/v1/actors/counter/%ff%fe/ask", auth, `{"Get":null}`},
		{"POST", "/v1/actors/echo/x/tell", auth, `{"text":"hi"}`},
		{"POST", "/v1/actors/echo/x/ask?timeout=-1s", auth, `{"text":"hi"}`},
		{"POST", "/v1/actors/nokind/x/ask", auth, `{}`},
		{"POST", "/v1/actors/counter/a/passivate", auth, ""},
		{"POST", "/v1/actors/counter/a/ask", "", `{"Get":null}`},
		{"POST", "/v1/actors/counter/a/ask", auth + "Transfer-Encoding: chunked\r\n", "5\r\n{\"Get\r\n0\r\n\r\n"},
		{"DELETE", "/v1/actors/counter/a", auth, ""},
		{"GET", "/v1/../v1//members", auth, ""},
		{"POST", "/v1/actors/counter/a/ask", auth + "Origin: http://evil.example\r\n", `{"Get":null}`},
		{"POST", "/healthz", "Content-Length: 3\r\n", "abc"},
		{"POST", "/v1/actors/counter/x/../victim/ask", auth, `{"Add":{"n":1}}`},
		{"OPTIONS", "*", auth, ""},
		{"OPTIONS", "*", "", ""},
	} {
		f.Add(seed.method, seed.target, seed.headers, seed.body)
	}
	h := fuzzAPI(f)
	f.Fuzz(func(t *testing.T, method, target, headers, body string) {
		raw := method + " " + target + " HTTP/1.1\r\nHost: fuzz\r\n" + headers
		if !strings.Contains(strings.ToLower(headers), "transfer-encoding") {
			raw += "Content-Length: " + itoa(len(body)) + "\r\n"
		}
		raw += "\r\n" + body
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // the server answers 400 itself before any handler
		}
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code, b := rec.Code, rec.Body.Bytes()
		if !documentedStatus[code] {
			t.Fatalf("%s %q: status %d not documented (body %.300s)", method, target, code, b)
		}
		switch {
		case code >= 400:
			var eb httpapi.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || eb.Error == "" || !documentedCodes[eb.Code] {
				t.Fatalf("%s %q: %d with body %.300q, want a documented JSON error", method, target, code, b)
			}
			if strings.Contains(string(b), fuzzToken) {
				t.Fatalf("%s %q: the answer echoes the token", method, target)
			}
		case code == 200 && req.URL.Path != "/metrics":
			if !json.Valid(b) {
				t.Fatalf("%s %q: 200 with a body that is not JSON: %.300q", method, target, b)
			}
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
