package httpapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
)

// HTTP API limits and defaults.
const (
	MaxRequestBody    = 1 << 20 // bytes of a request body
	DefaultAskTimeout = 5 * time.Second
	MaxAskTimeout     = 5 * time.Minute
	// forwardedHeader marks a request one node forwarded to the owner of
	// an actor, so that it is not forwarded again.
	forwardedHeader = "X-Tempest-Forwarded"
)

// Error codes in the "code" field of an error body.
const (
	codeBadJSON          = "bad_json"
	codeBadRequest       = "bad_request"
	codeUnknownKind      = "unknown_kind"
	codeNotFound         = "not_found"
	codeDeadline         = "deadline_exceeded"
	codeRefused          = "refused"
	codeUnavailable      = "process_unavailable"
	codeTerminated       = "actor_terminated"
	codeUnauthorized     = "unauthorized"
	codeTooLarge         = "body_too_large"
	codeInternal         = "internal"
	codeNotReady         = "not_ready"
	codeNoEligibleNode   = "no_eligible_node"
	codeNotCommitted     = "not_committed"
	codeInvalidKey       = "invalid_key"
	codeCanceled         = "canceled"
	codeBodyTimeout      = "request_timeout"
	codeNotSupported     = "not_supported"
	codeMethodNotAllowed = "method_not_allowed"
)

// Node is what the HTTP API needs from a node; *tempest.Node has it.
type Node interface {
	Name() string
	Kinds() []string
	AskJSON(ctx context.Context, kind, key string, js []byte) ([]byte, error)
	TellJSON(kind, key string, js []byte) error
	Status(ctx context.Context, ref actor.Ref) (tempest.Status, error)
	Passivate(ctx context.Context, ref actor.Ref) error
	Locate(ref actor.Ref) (string, uint64, error)
	Ready() bool
	Live() bool
	Degraded() string
	Manifest() manifest.Manifest
	Members() []membership.Member
	Table() *placement.Table
	RaftInfo() tempest.RaftInfo
	Actors(ctx context.Context, kind string, dormant bool) ([]tempest.ActorEntry, error)
}

var _ Node = (*tempest.Node)(nil)

// Config configures a Server. Only Node is required.
type Config struct {
	// Node is the node the API serves.
	Node Node
	// Token is the bearer token every request but the probes (and
	// /metrics when MetricsPublic) must carry; empty: none.
	Token []byte
	// MetricsPublic serves /metrics without the token.
	MetricsPublic bool
	// Metrics is the registry served at /metrics and fed by the gateway;
	// nil: no /metrics.
	Metrics *Metrics
	// Logger receives the API's warnings; nil: none.
	Logger *slog.Logger
	// Version is reported for a standalone node in /v1/members.
	Version string
	// Forward reaches other nodes' HTTP APIs for status and passivation
	// of an actor owned elsewhere; nil: answer locally.
	Forward *http.Client
	// ForwardTLS, when set, makes forwarding use https and verifies each
	// peer as its node name, the first DNS name of its certificate.
	ForwardTLS *tls.Config
	// Limits bound connections, timeouts and header sizes; zero fields
	// mean DefaultLimits. The body timeout applies to Handler wherever it
	// is mounted; the others to HTTPServer and Listener.
	Limits Limits
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Node == nil {
		return nil, errors.New("httpapi: Config.Node is nil")
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	lim := cfg.Limits.withDefaults()
	s := &Server{node: cfg.Node, metricsPublic: cfg.MetricsPublic, met: cfg.Metrics, log: cfg.Logger,
		version: cfg.Version, fwd: cfg.Forward, scheme: "http", fwdTLS: cfg.ForwardTLS,
		limits: lim, conns: newConnLimiter(lim)}
	if cfg.Metrics != nil {
		cfg.Metrics.attachConns(s.conns)
	}
	if len(cfg.Token) > 0 {
		s.token = cfg.Token
	}
	if cfg.ForwardTLS != nil {
		s.scheme = "https"
	}
	return s, nil
}

// Server serves a node's HTTP API: the admin endpoints, the JSON gateway
// of every kind with a gateway schema, /metrics and the probes. Mount
// its Handler on any http.Server; it is safe for concurrent use.
type Server struct {
	node          Node
	token         []byte // required bearer token; nil: none
	metricsPublic bool
	met           *Metrics     // nil: no /metrics
	log           *slog.Logger // nil: no logs
	version       string
	// fwd reaches other nodes' HTTP APIs (status and passivation of an
	// actor owned elsewhere); scheme is "http" or "https". For https,
	// fwdTLS (non-nil) verifies each peer as its node name, the first DNS
	// name of its certificate.
	fwd    *http.Client
	scheme string
	fwdTLS *tls.Config

	fwdMu   sync.Mutex
	fwdPeer map[string]*http.Client // https clients by node name

	limits Limits       // with defaults (zero in tests that build a Server directly)
	conns  *connLimiter // nil in such tests
}

// HTTPServer returns an http.Server for Handler within Config.Limits:
// ReadHeaderTimeout, IdleTimeout, MaxHeaderBytes and the connection
// accounting of Listener. Serve it on Listener(ln) (wrapped in TLS if
// need be). It sets no ReadTimeout or WriteTimeout, which would cut asks
// that wait longer (up to MaxAskTimeout): bodies have their own timeout.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.limits.ReadHeaderTimeout,
		IdleTimeout:       s.limits.IdleTimeout,
		MaxHeaderBytes:    s.limits.MaxHeaderBytes,
		ConnState:         s.conns.connState,
	}
}

// Listener returns ln bounded by Config.Limits' MaxConns and
// MaxConnsPerClient (see Limits). Connections it refuses are closed at
// once. Only an http.Server from HTTPServer tells it which connections
// are idle; on another server every connection counts as idle.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return limitedListener{Listener: ln, lim: s.conns}
}

// ConnStats returns the counters of the connections accepted by
// Listener.
func (s *Server) ConnStats() ConnStats { return s.conns.snapshot() }

// client returns the HTTP client that reaches node peer.
func (s *Server) client(peer string) *http.Client {
	if s.fwdTLS == nil {
		return s.fwd
	}
	s.fwdMu.Lock()
	defer s.fwdMu.Unlock()
	if c, ok := s.fwdPeer[peer]; ok {
		return c
	}
	if s.fwdPeer == nil {
		s.fwdPeer = map[string]*http.Client{}
	}
	cfg := s.fwdTLS.Clone()
	cfg.ServerName = peer
	c := &http.Client{Timeout: s.fwd.Timeout, Transport: &http.Transport{TLSClientConfig: cfg, IdleConnTimeout: time.Minute}}
	s.fwdPeer[peer] = c
	return c
}

// CloseIdle closes idle forwarding connections.
func (s *Server) CloseIdle() {
	if s.fwd != nil {
		s.fwd.CloseIdleConnections()
	}
	s.fwdMu.Lock()
	defer s.fwdMu.Unlock()
	for _, c := range s.fwdPeer {
		c.CloseIdleConnections()
	}
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// StatusBody is the JSON form of tempest.Status.
type StatusBody struct {
	Kind        string `json:"kind"`
	Key         string `json:"key"`
	State       string `json:"state"`
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	Active      bool   `json:"active"`
}

// MemberBody is one entry of GET /v1/members.
type MemberBody struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	QUIC    string `json:"quic,omitempty"`
	HTTP    string `json:"http,omitempty"`
	Status  string `json:"status"`
	Raft    string `json:"raft"`
	Profile string `json:"profile,omitempty"`
	Version string `json:"version,omitempty"`
}

type MembersBody struct {
	Node    string       `json:"node"` // the node that answered
	Leader  string       `json:"leader"`
	Members []MemberBody `json:"members"`
}

type PlacementNode struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Shards int    `json:"shards"`
}

type PlacementBody struct {
	Node       string          `json:"node"`
	Leader     string          `json:"leader"`
	Epoch      uint64          `json:"epoch"` // version of the applied table
	Term       uint64          `json:"term"`
	ShardCount int             `json:"shard_count"` // per group
	Groups     int             `json:"groups"`
	Moving     int             `json:"moving"`
	Unassigned int             `json:"unassigned"`
	Nodes      []PlacementNode `json:"nodes"`
	Standalone bool            `json:"standalone,omitempty"`
}

type ManifestBody struct {
	Node     string            `json:"node"`
	Manifest manifest.Manifest `json:"manifest"`
}

// Handler is the API's root handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.met != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /v1/members", s.members)
	mux.HandleFunc("GET /v1/placement", s.placement)
	mux.HandleFunc("GET /v1/manifest", s.manifest)
	mux.HandleFunc("GET /v1/kinds", s.kinds)
	mux.HandleFunc("GET /v1/actors", s.actors)
	mux.HandleFunc("GET /v1/actors/{kind}/{key}", s.status)
	mux.HandleFunc("POST /v1/actors/{kind}/{key}/tell", s.tell)
	mux.HandleFunc("POST /v1/actors/{kind}/{key}/ask", s.ask)
	mux.HandleFunc("POST /v1/actors/{kind}/{key}/passivate", s.passivate)
	mux.Handle("/ui/", s.uiHandler())
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	// Anything else is a JSON error like every other one: 405 (with
	// Allow) for a known path with another method, 404 otherwise.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); m != r.Method && pattern != "/" && pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, r.Method+" is not allowed on "+truncatePath(r.URL.Path))
			return
		}
		writeError(w, http.StatusNotFound, codeNotFound, "no endpoint "+truncatePath(r.URL.Path))
	})
	return s.auth(mux)
}

// auth requires the bearer token on every path but the probes (and
// /metrics when public), then reads the request body whole, within
// Limits.BodyTimeout and MaxRequestBody, so that no handler waits on a
// slow client and no read deadline outlives the body.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || (s.metricsPublic && r.URL.Path == "/metrics") ||
			r.URL.Path == "/ui/login" || r.URL.Path == "/ui/style.css"
		if s.token != nil && !open {
			got, ok := bearer(r.Header.Get("Authorization"))
			if (!ok || subtle.ConstantTimeCompare([]byte(got), s.token) != 1) && !s.cookieAuthorized(r) {
				if (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) && r.Method == http.MethodGet {
					// A browser: to the sign-in form.
					http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
					return
				}
				if r.ContentLength != 0 {
					// Do not read an unauthenticated body to keep the
					// connection: close it after the answer.
					w.Header().Set("Connection", "close")
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="tempest"`)
				writeError(w, http.StatusUnauthorized, codeUnauthorized, "missing or wrong bearer token")
				return
			}
		}
		if r.ContentLength != 0 && !s.readWhole(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// readWhole replaces r.Body by its bytes, read within the body timeout
// (a read deadline on the connection, cleared again before the handler
// runs: a deadline left in place would cancel long asks) and the size
// limit. It answers 413, 408 or 400 itself and reports false when the
// body could not be read; the connection is then closed, since what is
// left of the body must not be read as the next request.
func (s *Server) readWhole(w http.ResponseWriter, r *http.Request) bool {
	rc := http.NewResponseController(w)
	d := s.limits.BodyTimeout
	if d == 0 {
		d = DefaultLimits().BodyTimeout
	}
	_ = rc.SetReadDeadline(time.Now().Add(d)) // not supported by test recorders
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	_ = rc.SetReadDeadline(time.Time{})
	if err == nil {
		r.Body = io.NopCloser(bytes.NewReader(b))
		return true
	}
	w.Header().Set("Connection", "close")
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit))
	case errors.As(err, &ne) && ne.Timeout():
		writeError(w, http.StatusRequestTimeout, codeBodyTimeout, fmt.Sprintf("request body not received within %v", d))
	default:
		writeError(w, http.StatusBadRequest, codeBadRequest, "reading the body: "+err.Error())
	}
	return false
}

// truncatePath shortens a path for an error message.
func truncatePath(p string) string {
	if len(p) > 128 {
		return p[:128] + "..."
	}
	return p
}

// bearer returns the credentials of a Bearer Authorization header. The
// scheme is case-insensitive (RFC 9110, section 11.1), as is the space
// count before the token.
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeInternal, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	b, _ := json.Marshal(ErrorBody{Error: msg, Code: errCode})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// StatusClientClosedRequest is the status recorded for a request whose
// client went away before the answer (nginx's 499; no standard code
// exists, and the client never sees it).
const StatusClientClosedRequest = 499

// StatusError is an application error that chooses its HTTP answer: an
// ask or tell that fails with an error that is or wraps one (errors.As),
// for example an actor's Context.ReplyError, is answered HTTPStatus (when
// it is a 4xx) with ErrorCode in the error body, instead of 500 internal.
type StatusError interface {
	error
	HTTPStatus() int
	ErrorCode() string
}

// classify maps a node error to an HTTP status, an error code and the
// metrics outcome.
func classify(err error) (int, string, string) {
	var se StatusError
	if errors.As(err, &se) && se.HTTPStatus() >= 400 && se.HTTPStatus() < 500 && se.ErrorCode() != "" {
		return se.HTTPStatus(), se.ErrorCode(), outcomeError
	}
	switch {
	case errors.Is(err, actor.ErrInvalidKey):
		return http.StatusBadRequest, codeInvalidKey, outcomeInvalidKey
	case errors.Is(err, tempest.ErrBadJSON):
		return http.StatusBadRequest, codeBadJSON, outcomeBadJSON
	case errors.Is(err, actor.ErrUnknownKind), errors.Is(err, tempest.ErrNoGateway):
		return http.StatusNotFound, codeUnknownKind, outcomeUnknownKind
	case errors.Is(err, actor.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, codeDeadline, outcomeDeadline
	case errors.Is(err, actor.ErrRefused):
		return http.StatusTooManyRequests, codeRefused, outcomeRefused
	case errors.Is(err, actor.ErrNoEligibleNode):
		return http.StatusServiceUnavailable, codeNoEligibleNode, outcomeUnavailable
	case errors.Is(err, actor.ErrProcessUnavailable), errors.Is(err, tempest.ErrNotStarted):
		return http.StatusServiceUnavailable, codeUnavailable, outcomeUnavailable
	case errors.Is(err, actor.ErrActorTerminated):
		return http.StatusGone, codeTerminated, outcomeTerminated
	case errors.Is(err, actor.ErrNotCommitted):
		// The actor's store failed to make the update durable: it was
		// not acknowledged, and the actor went back to its last
		// committed state. Retrying is safe.
		return http.StatusServiceUnavailable, codeNotCommitted, outcomeNotCommitted
	}
	if errors.Is(err, tempest.ErrNoDormantInventory) {
		return http.StatusNotImplemented, codeNotSupported, outcomeError
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, codeTooLarge, outcomeBadJSON
	}
	if errors.Is(err, context.Canceled) {
		// The request's context ended before the node did: the client
		// went away (or the server is closing). Nobody reads the answer;
		// it is no fault of the node's.
		return StatusClientClosedRequest, codeCanceled, outcomeCanceled
	}
	return http.StatusInternalServerError, codeInternal, outcomeError
}

// ErrorCoder is the optional capability of a Node (tempest.Node has it)
// to name the application error an error matches: the code a kind
// registered it under (tempest.KindOptions.Errors).
type ErrorCoder interface {
	ErrorCode(err error) (string, bool)
}

// classify is the package's classify with the node's application error
// codes: an error nothing else classifies that matches one is a 422 with
// that code, not a 500 internal.
func (s *Server) classify(err error) (int, string, string) {
	code, errCode, outcome := classify(err)
	if code == http.StatusInternalServerError {
		if ec, ok := s.node.(ErrorCoder); ok {
			if app, ok := ec.ErrorCode(err); ok {
				return http.StatusUnprocessableEntity, app, outcomeError
			}
		}
	}
	return code, errCode, outcome
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	code, errCode, _ := s.classify(err)
	if code == http.StatusInternalServerError && s.log != nil {
		s.log.Warn("http api: internal error", "error", err)
	}
	writeError(w, code, errCode, err.Error())
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.node.Live() {
		writeError(w, http.StatusServiceUnavailable, codeNotReady, "node closed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive", "node": s.node.Name()})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.node.Ready() {
		writeError(w, http.StatusServiceUnavailable, codeNotReady, "node not ready")
		return
	}
	body := map[string]string{"status": "ready", "node": s.node.Name()}
	if why := s.node.Degraded(); why != "" {
		// Still ready (it answers and supervises), but short of capacity.
		body["degraded"] = why
	}
	writeJSON(w, http.StatusOK, body)
}

// readBody returns the request body (read whole by auth) if it is JSON.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(r.Body)
	if err != nil || !json.Valid(b) {
		writeError(w, http.StatusBadRequest, codeBadJSON, "the body is not valid JSON")
		return nil, false
	}
	return b, true
}

func (s *Server) tell(w http.ResponseWriter, r *http.Request) {
	kind, key := r.PathValue("kind"), r.PathValue("key")
	body, ok := s.readBody(w, r)
	if !ok {
		s.count(kind, "tell", outcomeBadJSON, 0)
		return
	}
	if err := s.node.TellJSON(kind, key, body); err != nil {
		_, _, outcome := s.classify(err)
		s.count(kind, "tell", outcome, 0)
		s.fail(w, err)
		return
	}
	s.count(kind, "tell", outcomeOK, 0)
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) ask(w http.ResponseWriter, r *http.Request) {
	kind, key := r.PathValue("kind"), r.PathValue("key")
	timeout := DefaultAskTimeout
	if t := r.URL.Query().Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d > MaxAskTimeout {
			writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("timeout %q: want a positive duration up to %v", t, MaxAskTimeout))
			return
		}
		timeout = d
	}
	body, ok := s.readBody(w, r)
	if !ok {
		s.count(kind, "ask", outcomeBadJSON, 0)
		return
	}
	ctx, cancel := context.WithTimeout(traceContext(r), timeout)
	defer cancel()
	start := time.Now()
	reply, err := s.node.AskJSON(ctx, kind, key, body)
	if err != nil {
		_, _, outcome := s.classify(err)
		s.count(kind, "ask", outcome, 0)
		s.fail(w, err)
		return
	}
	s.count(kind, "ask", outcomeOK, time.Since(start))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(reply, '\n'))
}

func (s *Server) count(kind, op, outcome string, d time.Duration) {
	if s.met != nil {
		s.met.message(kind, op, outcome, d)
	}
}

func toStatusBody(st tempest.Status) StatusBody {
	return StatusBody{Kind: st.Kind, Key: st.Key, State: st.State.String(), Node: st.Node,
		Incarnation: st.Incarnation, Active: st.Active}
}

// forward sends r to the owner's HTTP API and copies its answer. It
// reports false when it could not (no known address, or already
// forwarded), so that the caller answers itself.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, owner string) bool {
	if owner == "" || owner == s.node.Name() || r.Header.Get(forwardedHeader) != "" || s.fwd == nil {
		return false
	}
	var addr string
	for _, m := range s.node.Members() {
		if m.Name == owner && !m.Status.Gone() {
			addr = m.Meta.HTTPAddr
		}
	}
	if addr == "" {
		return false
	}
	u := url.URL{Scheme: s.scheme, Host: addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), http.NoBody)
	if err != nil {
		return false
	}
	req.Header.Set(forwardedHeader, s.node.Name())
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := s.client(owner).Do(req)
	if err != nil {
		if s.log != nil {
			s.log.Debug("http api: forwarding to the owner failed", "owner", owner, "error", err)
		}
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, fmt.Sprintf("owner %s: %v", owner, errors.Unwrap(err)))
		return true
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, MaxRequestBody))
	return true
}

// ownerOf is the node that owns ref by this node's table ("" if unknown).
func (s *Server) ownerOf(ref actor.Ref) string {
	owner, _, err := s.node.Locate(ref)
	if err != nil {
		return ""
	}
	return owner
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	ref := actor.Virtual(r.PathValue("kind"), r.PathValue("key"))
	if err := ref.Check(); err != nil {
		s.fail(w, err)
		return
	}
	if !slices.Contains(s.node.Kinds(), ref.Kind()) {
		writeError(w, http.StatusNotFound, codeUnknownKind, fmt.Sprintf("unknown kind %q", ref.Kind()))
		return
	}
	if s.forward(w, r, s.ownerOf(ref)) {
		return
	}
	st, err := s.node.Status(r.Context(), ref)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toStatusBody(st))
}

func (s *Server) passivate(w http.ResponseWriter, r *http.Request) {
	ref := actor.Virtual(r.PathValue("kind"), r.PathValue("key"))
	if err := ref.Check(); err != nil {
		s.fail(w, err)
		return
	}
	if !slices.Contains(s.node.Kinds(), ref.Kind()) {
		writeError(w, http.StatusNotFound, codeUnknownKind, fmt.Sprintf("unknown kind %q", ref.Kind()))
		return
	}
	if s.forward(w, r, s.ownerOf(ref)) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := s.node.Passivate(ctx, ref); err != nil {
		s.fail(w, err)
		return
	}
	st, err := s.node.Status(ctx, ref)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toStatusBody(st))
}

func (s *Server) members(w http.ResponseWriter, _ *http.Request) {
	raft := s.node.RaftInfo()
	out := MembersBody{Node: s.node.Name(), Leader: raft.Leader, Members: []MemberBody{}}
	var table *placement.Table
	ms := s.node.Members()
	if len(ms) > 0 {
		table = s.node.Table()
	}
	for _, m := range ms {
		mb := MemberBody{Name: m.Name, Address: m.Addr.String(), QUIC: m.Meta.QUICAddr, HTTP: m.Meta.HTTPAddr,
			Status: m.Status.String(), Raft: string(raft.Role(m.Name)), Version: m.Meta.Version}
		switch {
		case m.Name == s.node.Name():
			mb.Profile = s.node.Manifest().Profile.String()
		case table != nil && table.Nodes[m.Name] != nil:
			mb.Profile = table.Nodes[m.Name].Manifest.Profile.String()
		}
		out.Members = append(out.Members, mb)
	}
	if len(ms) == 0 { // a standalone node
		out.Leader = s.node.Name()
		out.Members = append(out.Members, MemberBody{Name: s.node.Name(), Status: "alive",
			Raft: string(tempest.RoleNone), Profile: s.node.Manifest().Profile.String(), Version: s.version})
	}
	slices.SortFunc(out.Members, func(a, b MemberBody) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) placement(w http.ResponseWriter, _ *http.Request) {
	t := s.node.Table()
	if t == nil {
		writeJSON(w, http.StatusOK, PlacementBody{Node: s.node.Name(), Leader: s.node.Name(), Standalone: true,
			Nodes: []PlacementNode{{Name: s.node.Name(), Status: "up"}}})
		return
	}
	raft := s.node.RaftInfo()
	out := PlacementBody{Node: s.node.Name(), Leader: raft.Leader, Epoch: t.Version, Term: raft.Term,
		ShardCount: t.ShardCount, Groups: len(t.Groups)}
	owned := map[string]int{}
	for _, g := range t.Groups {
		for _, sh := range g.Shards {
			switch {
			case sh.Owner == "":
				out.Unassigned++
			default:
				owned[sh.Owner]++
			}
			if sh.MovingTo != "" {
				out.Moving++
			}
		}
	}
	for _, name := range t.NodeNames() {
		out.Nodes = append(out.Nodes, PlacementNode{Name: name, Status: t.Nodes[name].Status.String(), Shards: owned[name]})
	}
	writeJSON(w, http.StatusOK, out)
}

// Inventory paging: the default and the largest page.
const (
	DefaultActorsLimit = 100
	MaxActorsLimit     = 1000
)

// ActorEntry is one identity of an ActorsBody.
type ActorEntry struct {
	Key   string `json:"key"`
	State string `json:"state"` // "active" or "dormant"
}

// ActorsBody is a page of GET /v1/actors: this node's identities of
// kind in key order. Count is the number of identities listed over all
// pages; Next, when set, is the after= of the next page.
type ActorsBody struct {
	Node    string       `json:"node"`
	Kind    string       `json:"kind"`
	Dormant bool         `json:"dormant"`
	Count   int          `json:"count"`
	Actors  []ActorEntry `json:"actors"`
	Next    string       `json:"next,omitempty"`
}

// actors lists this node's identities of a kind:
// ?kind=K[&dormant=true][&limit=N][&after=KEY].
func (s *Server) actors(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	kind := q.Get("kind")
	if kind == "" {
		writeError(w, http.StatusBadRequest, codeBadRequest, "kind is required: /v1/actors?kind=KIND")
		return
	}
	dormant := false
	if v := q.Get("dormant"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("dormant %q: want true or false", v))
			return
		}
		dormant = b
	}
	limit := DefaultActorsLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxActorsLimit {
			writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("limit %q: want 1 to %d", v, MaxActorsLimit))
			return
		}
		limit = n
	}
	after := q.Get("after")
	list, err := s.node.Actors(r.Context(), kind, dormant)
	if err != nil {
		s.fail(w, err)
		return
	}
	body := ActorsBody{Node: s.node.Name(), Kind: kind, Dormant: dormant, Count: len(list), Actors: []ActorEntry{}}
	// list is in key order: the page starts after the cursor.
	i, _ := slices.BinarySearchFunc(list, after, func(e tempest.ActorEntry, k string) int { return strings.Compare(e.Key, k) })
	for i < len(list) && after != "" && list[i].Key <= after {
		i++
	}
	for ; i < len(list) && len(body.Actors) < limit; i++ {
		st := "dormant"
		if list[i].Active {
			st = "active"
		}
		body.Actors = append(body.Actors, ActorEntry{Key: list[i].Key, State: st})
	}
	if i < len(list) {
		body.Next = body.Actors[len(body.Actors)-1].Key
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) manifest(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("node")
	if name == "" || name == s.node.Name() {
		writeJSON(w, http.StatusOK, ManifestBody{Node: s.node.Name(), Manifest: s.node.Manifest()})
		return
	}
	if t := s.node.Table(); t != nil {
		if ni := t.Nodes[name]; ni != nil {
			writeJSON(w, http.StatusOK, ManifestBody{Node: name, Manifest: ni.Manifest})
			return
		}
	}
	writeError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no node %q in the placement table", name))
}

// traceContext is the request's context with the W3C trace context of its
// traceparent and tracestate headers, if it has any: a node that traces
// (tempest.Config.TracerProvider) makes its tempest.ask span a child of
// the caller's span; one that does not ignores it.
func traceContext(r *http.Request) context.Context {
	ctx := r.Context()
	if r.Header.Get("traceparent") == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
}
