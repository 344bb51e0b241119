package httpapi

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"html"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	tempest "github.com/tempest-actors/tempest"
)

// The dashboard's files, embedded: the binary serves it with no network
// and no files beside it.
//
//go:embed ui
var uiFiles embed.FS

// uiCookie is the session of a browser signed in at /ui/login: not the
// token, but the session's end and a MAC of it keyed by the token
// (uiSession), so that the cookie neither reveals the token nor outlives
// uiSessionLife, whatever the browser keeps, and a new token ends every
// session.
const uiCookie = "tempest_session"

// uiSessionLife is how long a sign-in lasts.
const uiSessionLife = 12 * time.Hour

// uiHeader marks requests made by the dashboard's script. A request
// authenticated by the cookie alone must carry it unless it is a GET or
// HEAD, so that another site cannot make a signed-in browser passivate
// actors (a form cannot set a header; the cookie is also SameSite).
const uiHeader = "X-Tempest-UI"

// uiCSP keeps the dashboard to this node's own files and API.
const uiCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (s *Server) uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", uiCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		if r.URL.Path == "/ui/login" || r.URL.Path == "/ui/login.html" {
			s.uiLogin(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// uiLogin shows the sign-in form (GET) and checks a token posted from it
// (POST), setting the session cookie.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	page := func(code int, msg string) {
		b, _ := uiFiles.ReadFile("ui/login.html")
		if msg != "" {
			b = bytes.Replace(b, []byte("<!--message-->"), []byte(`<p class="error">`+html.EscapeString(msg)+`</p>`), 1)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(code)
		_, _ = w.Write(b)
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if s.token == nil {
			http.Redirect(w, r, "/ui/", http.StatusSeeOther)
			return
		}
		page(http.StatusOK, "")
	case http.MethodPost:
		if s.token == nil {
			http.Redirect(w, r, "/ui/", http.StatusSeeOther)
			return
		}
		if err := r.ParseForm(); err != nil {
			page(http.StatusBadRequest, "unreadable form")
			return
		}
		tok := strings.TrimSpace(r.PostForm.Get("token"))
		if subtle.ConstantTimeCompare([]byte(tok), s.token) != 1 {
			page(http.StatusUnauthorized, "wrong token")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: uiSession(s.token, time.Now().Add(uiSessionLife)), Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(uiSessionLife.Seconds())})
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeError(w, http.StatusMethodNotAllowed, codeBadRequest, "method not allowed")
	}
}

// cookieAuthorized reports whether r carries the session cookie of a
// signed-in dashboard (and, unless it only reads, the dashboard's
// header).
func (s *Server) cookieAuthorized(r *http.Request) bool {
	c, err := r.Cookie(uiCookie)
	if err != nil || !uiSessionValid(s.token, c.Value, time.Now()) {
		return false
	}
	return r.Method == http.MethodGet || r.Method == http.MethodHead || r.Header.Get(uiHeader) != ""
}

// uiSession is the cookie of a session that ends at end: the end in
// Unix seconds and an HMAC-SHA256 of it keyed by the token.
func uiSession(token []byte, end time.Time) string {
	e := strconv.FormatInt(end.Unix(), 10)
	return e + "." + base64.RawURLEncoding.EncodeToString(uiMAC(token, e))
}

// uiSessionValid reports whether v is a session uiSession made with
// token that has not ended at now.
func uiSessionValid(token []byte, v string, now time.Time) bool {
	e, mac, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil || !hmac.Equal(got, uiMAC(token, e)) {
		return false
	}
	end, err := strconv.ParseInt(e, 10, 64)
	return err == nil && now.Unix() < end
}

func uiMAC(token []byte, end string) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("tempest ui session until "))
	m.Write([]byte(end))
	return m.Sum(nil)
}

// KindsBody is GET /v1/kinds: the kinds registered on the node, and
// each one's supervision and deadline policy with its digest as this
// node publishes it (compare GET /v1/placement's policies).
type KindsBody struct {
	Node     string               `json:"node"`
	Kinds    []string             `json:"kinds"`
	Policies []tempest.KindPolicy `json:"policies"`
}

func (s *Server) kinds(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, KindsBody{Node: s.node.Name(), Kinds: s.node.Kinds(), Policies: s.node.Policies()})
}
