package httpapi

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// serve runs one request through h and returns the recorder.
func serve(h http.Handler, method, path, body string, hdr map[string]string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestUIProtectedLikeTheAPI: with a token, the dashboard and the API
// calls it makes need it: a browser signs in once at /ui/login and
// carries a cookie; a write by cookie alone needs the dashboard's header.
func TestUIProtectedLikeTheAPI(t *testing.T) {
	token := "0123456789abcdef-secret"
	h := (&Server{node: &fakeNode{ready: true}, token: []byte(token), met: NewMetrics("t")}).Handler()

	if rec := serve(h, "GET", "/ui/", "", nil); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/login" {
		t.Fatalf("GET /ui/ without a token: %d to %q, want a redirect to the sign-in form", rec.Code, rec.Header().Get("Location"))
	}
	if rec := serve(h, "GET", "/ui/app.js", "", nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("GET /ui/app.js without a token: %d", rec.Code)
	}
	if rec := serve(h, "GET", "/ui/login", "", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `name="token"`) {
		t.Fatalf("sign-in form: %d %s", rec.Code, rec.Body)
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if rec := serve(h, "POST", "/ui/login", url.Values{"token": {"wrong-wrong-wrong"}}.Encode(), form); rec.Code != http.StatusUnauthorized || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", rec.Code, rec.Result().Cookies())
	}
	rec := serve(h, "POST", "/ui/login", url.Values{"token": {token}}.Encode(), form)
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("sign in: %d, cookies %+v", rec.Code, cookies)
	}
	c := cookies[0]
	rec = serve(h, "GET", "/ui/", "", nil, c)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="members"`) {
		t.Fatalf("GET /ui/ signed in: %d", rec.Code)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("no same-origin content security policy: %q", csp)
	}
	for _, p := range []string{"/v1/members", "/v1/kinds", "/metrics", "/v1/actors?kind=k"} {
		if rec := serve(h, "GET", p, "", nil, c); rec.Code != http.StatusOK {
			t.Errorf("GET %s with the cookie: %d", p, rec.Code)
		}
	}
	if rec := serve(h, "POST", "/v1/actors/k/a/passivate", "", nil, c); rec.Code != http.StatusUnauthorized {
		t.Errorf("passivate by cookie without the dashboard's header: %d, want 401", rec.Code)
	}
	if rec := serve(h, "POST", "/v1/actors/k/a/passivate", "", map[string]string{uiHeader: "1"}, c); rec.Code != http.StatusOK {
		t.Errorf("passivate from the dashboard: %d", rec.Code)
	}
	if strings.Contains(c.Value, token) {
		t.Errorf("the session cookie holds the token: %q", c.Value)
	}
	// A forged, an ended, and another token's session are refused: the
	// session's end is the server's to check, not the browser's.
	for name, v := range map[string]string{
		"the token itself":    token,
		"forged":              "99999999999.AAAA",
		"ended":               uiSession([]byte(token), time.Now().Add(-time.Second)),
		"another token's":     uiSession([]byte("another-token-0123456789"), time.Now().Add(time.Hour)),
		"a later end claimed": strings.Replace(c.Value, c.Value[:strings.IndexByte(c.Value, '.')], "99999999999", 1),
	} {
		bad := &http.Cookie{Name: uiCookie, Value: v}
		if rec := serve(h, "GET", "/v1/members", "", nil, bad); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s session: %d, want 401", name, rec.Code)
		}
	}

	// Without a token (loopback), the dashboard is open.
	open := (&Server{node: &fakeNode{ready: true}}).Handler()
	if rec := serve(open, "GET", "/ui/", "", nil); rec.Code != http.StatusOK {
		t.Errorf("GET /ui/ without a token configured: %d", rec.Code)
	}
}

// TestUINoExternalAssets: every file the dashboard loads is its own.
func TestUINoExternalAssets(t *testing.T) {
	ref := regexp.MustCompile(`(?i)(src|href)\s*=\s*"([^"]*)"|url\(|@import|https?://`)
	err := fs.WalkDir(uiFiles, "ui", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := uiFiles.ReadFile(path)
		if err != nil {
			return err
		}
		// The SVG namespace is a name, not something loaded.
		text := strings.ReplaceAll(string(b), `"http://www.w3.org/2000/svg"`, "")
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			if m[2] != "" && !strings.Contains(m[2], ":") && !strings.HasPrefix(m[2], "//") {
				continue // a relative reference to another embedded file
			}
			t.Errorf("%s refers outside the node: %q", path, m[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUILoginBodyLimit: a sign-in form over 4 KiB, or without a declared
// length, is refused saying so; a body to another path anyone may call
// is refused as taking none.
func TestUILoginBodyLimit(t *testing.T) {
	h := (&Server{node: &fakeNode{ready: true}, token: []byte("0123456789abcdef-secret")}).Handler()
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	rec := serve(h, "POST", "/ui/login", "token="+strings.Repeat("x", maxOpenBody), form)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "the sign-in form takes at most 4096 bytes") ||
		strings.Contains(rec.Body.String(), "takes no body") {
		t.Errorf("an oversized sign-in form: %d %s", rec.Code, rec.Body)
	}
	req := httptest.NewRequest("POST", "/ui/login", strings.NewReader("token=x"))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "with its length declared") {
		t.Errorf("a sign-in form of no declared length: %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, "POST", "/ui/login", "token=wrong-wrong-wrong", form); rec.Code != http.StatusUnauthorized {
		t.Errorf("a small sign-in form: %d, want 401 (read and checked)", rec.Code)
	}
	if rec := serve(h, "POST", "/healthz", "x", nil); rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "/healthz takes no body") {
		t.Errorf("a body to /healthz: %d %s", rec.Code, rec.Body)
	}
}
