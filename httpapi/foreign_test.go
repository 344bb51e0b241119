package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/httpapi"
)

// TestRequestsOnAnotherSitesBehalfRefused: without a token the API is
// open on loopback, so a page of another site the developer visits must
// not drive it. A request that changes something and carries another
// Origin (a cross-site form or script) is refused 403 and changes
// nothing; and a request that reached loopback under a Host that is no
// loopback name (another site's name resolved to 127.0.0.1: DNS
// rebinding) is refused too, probes aside. Clients that are not browsers
// (no Origin, a loopback Host) are served as before.
func TestRequestsOnAnotherSitesBehalfRefused(t *testing.T) {
	_, addr := serveAPI(t, httpapi.Limits{})
	base := "http://" + addr
	do := func(method, path, origin, host, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Content-Type", "text/plain") // a simple request: no preflight
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	add := `{"Add":{"n":1000}}`
	for _, origin := range []string{"http://evil.example", "null", "http://127.0.0.1:1"} {
		code, body := do("POST", "/v1/actors/counter/victim/ask", origin, "", add)
		var eb struct{ Code string }
		_ = json.Unmarshal([]byte(body), &eb)
		if code != http.StatusForbidden || eb.Code != "forbidden" {
			t.Fatalf("POST with Origin %q: %d %s, want 403 forbidden", origin, code, body)
		}
	}
	if code, body := do("POST", "/v1/actors/counter/victim/ask", base, "", `{"Add":{"n":1}}`); code != 200 || !strings.Contains(body, `"n":1`) {
		t.Fatalf("same-origin POST: %d %s, want 200 and n=1 (the refused adds did not run)", code, body)
	}
	if code, body := do("POST", "/v1/actors/counter/victim/ask", "", "", `{"Add":{"n":1}}`); code != 200 || !strings.Contains(body, `"n":2`) {
		t.Fatalf("POST without Origin: %d %s, want 200 and n=2", code, body)
	}
	if code, _ := do("GET", "/v1/members", "http://evil.example", "", ""); code != 200 {
		t.Fatalf("GET with another Origin: %d, want 200 (its answer is the browser's to withhold)", code)
	}
	for _, host := range []string{"attacker.example", "attacker.example:80", "127.0.0.1.attacker.example"} {
		if code, body := do("GET", "/v1/members", "", host, ""); code != http.StatusForbidden {
			t.Fatalf("GET under Host %q: %d %s, want 403", host, code, body)
		}
		if code, _ := do("GET", "/healthz", "", host, ""); code != 200 {
			t.Fatalf("probe under Host %q: %d, want 200", host, code)
		}
	}
	for _, host := range []string{"localhost", "localhost:7948", "app.localhost", "127.0.0.1", "[::1]:7948"} {
		if code, body := do("GET", "/v1/members", "", host, ""); code != 200 {
			t.Fatalf("GET under Host %q: %d %s, want 200", host, code, body)
		}
	}
}

// TestOpenPathsReadNoSlowBody: the paths anyone may call read no body
// (the probes, /metrics, the style sheet: 413 at once, the connection
// closed), and the sign-in form's only a small one within two seconds,
// so unauthenticated clients cannot hold connections open by sending
// bodies slowly.
func TestOpenPathsReadNoSlowBody(t *testing.T) {
	_, addr := serveAPI(t, httpapi.Limits{BodyTimeout: time.Minute, ReadHeaderTimeout: time.Minute})
	head := "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1048576\r\n\r\n"
	if line, _ := rawRequest(t, addr, head, "xxxx", 10*time.Millisecond); !strings.Contains(line, " 413 ") {
		t.Fatalf("a body to /healthz: %q, want 413", line)
	}
	head = "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 8192\r\n\r\n"
	if line, _ := rawRequest(t, addr, head, "token=", 10*time.Millisecond); !strings.Contains(line, " 413 ") {
		t.Fatalf("an 8 KiB sign-in form: %q, want 413", line)
	}
	body := "token=0123456789"
	head = "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 16\r\n\r\n"
	line, took := rawRequest(t, addr, head, body, time.Second)
	if !strings.Contains(line, " 408 ") || took > 30*time.Second {
		t.Fatalf("a sign-in form sent a byte a second: %q after %v, want 408 (the open body timeout, not the minute)", line, took)
	}
}

// TestRefusedBodyClosesTheConnection: a request refused without reading
// its body (no token, here) is answered and its connection closed at
// once, also when the body it declared is small: the server would
// otherwise read what is left of it to keep the connection, waiting for
// a client that never sends it, and such connections, busy, could never
// be evicted to make room for other clients.
func TestRefusedBodyClosesTheConnection(t *testing.T) {
	addr := serveWithToken(t, "secret-token-secret")
	for _, head := range []string{
		"POST /v1/actors/counter/x/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{", // no token
		"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{",                 // a body where none is read
		"POST /v1/actors/counter/x/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Length: 100\r\n\r\n{",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("%q: %d, want a refusal", head, resp.StatusCode)
		}
		// The rest of the body is never sent: the server must close.
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("%q: after the %d the connection gave %v, want EOF (closed by the server)", head, resp.StatusCode, err)
		}
		c.Close()
	}
}

// TestRefusedBeforeTheBody: a request refused for its path, method or
// key, or for the length of the body it declares, is answered at once
// and its connection closed, without waiting for a body that never
// comes (the body timeout here is a minute).
func TestRefusedBeforeTheBody(t *testing.T) {
	_, addr := serveAPI(t, httpapi.Limits{BodyTimeout: time.Minute, ReadHeaderTimeout: time.Minute})
	const declared = "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	for _, tc := range []struct {
		head string
		code int
		err  string
	}{
		{"PUT /v1/actors/counter/x/ask HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 405, "method_not_allowed"},
		{"POST /v1/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 404, "not_found"},
		{"POST /v1/actors/counter/x/y/z/ask HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 404, "not_found"},
		{"POST /v1/actors/echo/%FF/ask HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 400, "invalid_key"},
		{"POST /v1/actors/echo/%FF/tell HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 400, "invalid_key"},
		{"POST /v1/actors/ec%FFho/%2F/ask HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 400, "invalid_key"},
		{"GET /v1/actors/echo/" + strings.Repeat("k", 5000) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 400, "invalid_key"},
		{"POST /v1/actors/echo//ask HTTP/1.1\r\nHost: 127.0.0.1\r\n" + declared, 400, "invalid_key"},
		{"POST /v1/actors/echo/x/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1048577\r\n\r\n", 413, "body_too_large"},
		{"POST /v1/actors/echo/x/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n\r\n{", 413, "body_too_large"},
		{"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n", 413, "body_too_large"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.head); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%.60q: %v", tc.head, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb httpapi.ErrorBody
		_ = json.Unmarshal(b, &eb)
		if resp.StatusCode != tc.code || eb.Code != tc.err || time.Since(start) > 5*time.Second {
			t.Errorf("%.60q: %d %s after %v, want %d %s at once", tc.head, resp.StatusCode, b, time.Since(start), tc.code, tc.err)
		}
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%.60q: after the %d the connection gave %v, want EOF (closed by the server)", tc.head, resp.StatusCode, err)
		}
		c.Close()
	}
}

// serveWithToken runs the API of a standalone node without kinds that
// requires token, as the agent does (HTTPServer on Listener), and
// returns its address.
func serveWithToken(t *testing.T, token string) string {
	t.Helper()
	n, err := tempest.New(tempest.Config{Name: "n1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	api, err := httpapi.New(httpapi.Config{Node: n, Token: []byte(token)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.HTTPServer()
	go func() { _ = srv.Serve(api.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestOptionsStarIsTheAPIs: OPTIONS * (the server as a whole) is
// answered by the API like any other request, token required and in
// JSON, not by Go's server with an empty 200 to anyone; another method
// on * is 404.
func TestOptionsStarIsTheAPIs(t *testing.T) {
	const token = "secret-token-secret"
	addr := serveWithToken(t, token)
	for _, tc := range []struct {
		head string
		code int
		err  string
	}{
		{"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 401, "unauthorized"},
		{"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + "\r\n\r\n", 200, ""},
		{"GET * HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + "\r\n\r\n", 404, "not_found"},
		{"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + "\r\n\r\n", 404, "not_found"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.head); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("%.40q: %v", tc.head, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%.40q: %d %q %s, want %d JSON", tc.head, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.code)
			continue
		}
		if tc.code == 200 {
			var ob httpapi.OptionsBody
			if err := json.Unmarshal(b, &ob); err != nil || strings.Join(ob.Allow, ", ") != resp.Header.Get("Allow") || !strings.Contains(resp.Header.Get("Allow"), "POST") {
				t.Errorf("%.40q: body %s, Allow %q", tc.head, b, resp.Header.Get("Allow"))
			}
			continue
		}
		var eb httpapi.ErrorBody
		if err := json.Unmarshal(b, &eb); err != nil || eb.Code != tc.err {
			t.Errorf("%.40q: %d %s, want code %s", tc.head, resp.StatusCode, b, tc.err)
		}
	}
}
