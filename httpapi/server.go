package httpapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/manifest"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/reminders"
)

// HTTP API limits and defaults.
const (
	MaxRequestBody    = 1 << 20 // bytes of a request body
	DefaultAskTimeout = 5 * time.Second
	MaxAskTimeout     = 5 * time.Minute
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
	codeNoReply          = "no_reply"
	codePanicked         = "actor_panicked"
	codeNotReady         = "not_ready"
	codeNoEligibleNode   = "no_eligible_node"
	codeNoQuorum         = "no_quorum"
	codeNotCommitted     = "not_committed"
	codeInvalidKey       = "invalid_key"
	codeCanceled         = "canceled"
	codeBodyTimeout      = "request_timeout"
	codeNotSupported     = "not_supported"
	codeMethodNotAllowed = "method_not_allowed"
	codeInvalidReminder  = "invalid_reminder"
	codeForbidden        = "forbidden"
	codeMessageTooLarge  = "message_too_large"
)

// Node is what the HTTP API needs from a node; *tempest.Node has it.
type Node interface {
	Name() string
	Kinds() []string
	Policies() []tempest.KindPolicy
	AskJSON(ctx context.Context, kind, key string, js []byte) ([]byte, error)
	TellJSON(ctx context.Context, kind, key string, js []byte) error
	Status(ctx context.Context, ref actor.Ref) (tempest.Status, error)
	Passivate(ctx context.Context, ref actor.Ref) error
	Locate(ref actor.Ref) (string, uint64, error)
	Ready() bool
	Live() bool
	Degraded() string
	Manifest() manifest.Manifest
	Members() []membership.Member
	Proven(m membership.Member) bool
	Table() *placement.Table
	RaftInfo() tempest.RaftInfo
	PlacementStatus() (placement.Status, bool)
	Actors(ctx context.Context, kind string, dormant bool) ([]tempest.ActorEntry, error)
	ReplicationLag() []tempest.ReplicaLag
}

var _ Node = (*tempest.Node)(nil)

// Config configures a Server. Only Node is required.
type Config struct {
	// Node is the node the API serves.
	Node Node
	// Token is the bearer token every request but the probes (and
	// /metrics when MetricsPublic) must carry; empty: none. Otherwise
	// MinTokenBytes to MaxTokenBytes of printable ASCII, the rule the
	// agent's token file and the clients' tokens follow too.
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
	// Limits bound connections, timeouts and header sizes; zero fields
	// mean DefaultLimits. The body timeout applies to Handler wherever it
	// is mounted; the others to HTTPServer and Listener.
	Limits Limits
}

// MinTokenBytes and MaxTokenBytes bound a bearer token's length: a short
// one can be guessed, and every request carries it in a header (servers
// and proxies refuse long headers).
const (
	MinTokenBytes = 16
	MaxTokenBytes = 4096
)

// CheckToken reports why tok cannot be a bearer token: it must be
// MinTokenBytes to MaxTokenBytes of printable ASCII.
func CheckToken(tok []byte) error {
	switch {
	case len(tok) < MinTokenBytes:
		return fmt.Errorf("the token is %d characters: at least %d", len(tok), MinTokenBytes)
	case len(tok) > MaxTokenBytes:
		return fmt.Errorf("the token is %d bytes: at most %d", len(tok), MaxTokenBytes)
	}
	for i, c := range tok {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("the token must be one line of printable ASCII (byte %d is 0x%02x)", i, c)
		}
	}
	return nil
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Node == nil {
		return nil, errors.New("httpapi: Config.Node is nil")
	}
	if len(cfg.Token) > 0 {
		if err := CheckToken(cfg.Token); err != nil {
			return nil, fmt.Errorf("httpapi: Config.Token: %w", err)
		}
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	lim := cfg.Limits.withDefaults()
	s := &Server{node: cfg.Node, metricsPublic: cfg.MetricsPublic, met: cfg.Metrics, log: cfg.Logger,
		version: cfg.Version, limits: lim, conns: newConnLimiter(lim)}
	if cfg.Metrics != nil {
		cfg.Metrics.attachConns(s.conns)
	}
	if len(cfg.Token) > 0 {
		s.token = cfg.Token
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

	limits Limits       // with defaults (zero in tests that build a Server directly)
	conns  *connLimiter // nil in such tests
}

// HTTPServer returns an http.Server for Handler within Config.Limits:
// ReadHeaderTimeout, IdleTimeout, MaxHeaderBytes and the connection
// accounting of Listener; OPTIONS * goes to Handler too
// (DisableGeneralOptionsHandler), which requires the token for it. Serve
// it on Listener(ln) (wrapped in TLS if need be). It sets no ReadTimeout
// or WriteTimeout, which would cut asks that wait longer (up to
// MaxAskTimeout): bodies have their own timeout.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.limits.ReadHeaderTimeout,
		IdleTimeout:       s.limits.IdleTimeout,
		MaxHeaderBytes:    s.limits.MaxHeaderBytes,
		ConnState:         s.conns.connState,
		// OPTIONS * reaches Handler, which requires the token for it and
		// answers in JSON, like every other request.
		DisableGeneralOptionsHandler: true,
	}
}

// Listener returns ln bounded by Config.Limits' MaxConns and
// MaxConnsPerClient (see Limits). Connections it refuses are closed at
// once. Only an http.Server from HTTPServer tells it which connections
// are idle; on another server a connection counts as idle whenever it
// waits in a read, also while a request of its is served.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return limitedListener{Listener: ln, lim: s.conns}
}

// ConnStats returns the counters of the connections accepted by
// Listener.
func (s *Server) ConnStats() ConnStats { return s.conns.snapshot() }

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
	// PolicyDissenters counts the live nodes whose policy digest for the
	// kind differs from the cluster's: they own none of its shards until
	// they agree (GET /v1/placement names them). 0 when every node agrees.
	PolicyDissenters int `json:"policy_dissenters,omitempty"`
}

// MemberBody is one entry of GET /v1/members.
type MemberBody struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	QUIC    string `json:"quic,omitempty"`
	HTTP    string `json:"http,omitempty"`
	Status  string `json:"status"`
	// Proven is true once the member proved its name to the answering
	// node with a certificate of the cluster CA. A member that has not is
	// a gossip hint: it is not in placement, and its addresses (HTTP
	// included) are only what it advertised.
	Proven  bool   `json:"proven"`
	Raft    string `json:"raft"`
	Profile string `json:"profile,omitempty"`
	Version string `json:"version,omitempty"`
	// DataID is the data ID of its data directory the member gossips,
	// RecordedDataID the one the answering node's table records for it
	// (docs/placement.md, A node that lost its data directory): both set
	// and different, the member lost its data directory and is being
	// re-added as a new server.
	DataID         string `json:"data_id,omitempty"`
	RecordedDataID string `json:"recorded_data_id,omitempty"`
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
	// Follows counts the shards whose in-sync replica set has this node
	// as a follower (a copy of their state at rest).
	Follows int `json:"follows"`
	// StoreFailing, when set, is why the node's state store cannot write,
	// as the node reported it: it is given no shard and no place in a
	// replica set until its writes work again.
	StoreFailing string `json:"store_failing,omitempty"`
	// Kinds are the kinds the node published, with requirements and
	// policy digests.
	Kinds []placement.KindSpec `json:"kinds,omitempty"`
}

type PlacementBody struct {
	Node   string `json:"node"`
	Leader string `json:"leader"`
	Epoch  uint64 `json:"epoch"` // version of the applied table
	Term   uint64 `json:"term"`
	// Current is whether the answering node's placement lease is fresh:
	// its table then holds every change committed before the lease's
	// last sync with the leader. False on a node that just started (its
	// table may still be the one it stopped with) or that is cut off from
	// the leader: ask another node for the cluster's table.
	Current    bool `json:"current"`
	ShardCount int  `json:"shard_count"` // per group
	Groups     int  `json:"groups"`
	Moving     int  `json:"moving"`
	Unassigned int  `json:"unassigned"`
	// Replicas is the replica set size of every shard (owner included);
	// UnderReplicated counts the assigned shards whose in-sync set is
	// smaller than the cluster can hold; BelowReplicas those whose set,
	// on nodes not down, is smaller than Replicas (redundancy lost,
	// whether or not a node could restore it: a cluster of fewer nodes
	// than Replicas, a member down, or one that left the set, as a node
	// whose store fails does).
	Replicas        int             `json:"replicas"`
	UnderReplicated int             `json:"under_replicated"`
	BelowReplicas   int             `json:"below_replicas"`
	Nodes           []PlacementNode `json:"nodes"`
	// Policies are, per kind, the policy digest the cluster agrees on,
	// the nodes that publish it and those that publish another (and so
	// own none of the kind's shards).
	Policies []placement.PolicyView `json:"policies,omitempty"`
	// Replication lists the followers of the shards the answering node
	// owns, each with what it has not acknowledged yet. Each node
	// reports only its own streams: ask every node for the whole cluster.
	Replication []PlacementReplica `json:"replication,omitempty"`
	Standalone  bool               `json:"standalone,omitempty"`
}

// PlacementReplica is one follower's lag behind the answering node (the
// owner of the shards it follows), from tempest.Node.ReplicationLag.
type PlacementReplica struct {
	Follower string `json:"follower"`
	// Shards counts the shards the answering node owns whose in-sync set
	// has the follower.
	Shards int `json:"shards"`
	// CatchingUp: a bulk copy to the follower runs; it joins the sets
	// once the copy is acknowledged.
	CatchingUp bool `json:"catching_up"`
	// QueuedRecords are records not sent yet, InFlightRecords those sent
	// and not acknowledged yet.
	QueuedRecords   int `json:"queued_records"`
	InFlightRecords int `json:"in_flight_records"`
	// LagSeconds is the age of the oldest record the follower has not
	// acknowledged (0: it has acknowledged every record sent to it).
	LagSeconds float64 `json:"lag_seconds"`
	// LastAckSeconds is the time since its last acknowledgement; -1 if it
	// never acknowledged one.
	LastAckSeconds float64 `json:"last_ack_seconds"`
	// AckedRecords counts the records it acknowledged since this node
	// started.
	AckedRecords uint64 `json:"acked_records"`
}

func toPlacementReplicas(ls []tempest.ReplicaLag) []PlacementReplica {
	out := make([]PlacementReplica, 0, len(ls))
	for _, l := range ls {
		last := -1.0
		if l.SinceAck >= 0 {
			last = l.SinceAck.Seconds()
		}
		out = append(out, PlacementReplica{Follower: l.Follower, Shards: l.Shards, CatchingUp: l.CatchingUp,
			QueuedRecords: l.Queued, InFlightRecords: l.InFlight, LagSeconds: l.Oldest.Seconds(),
			LastAckSeconds: last, AckedRecords: l.Acked})
	}
	return out
}

type ManifestBody struct {
	Node     string            `json:"node"`
	Manifest manifest.Manifest `json:"manifest"`
}

// Handler is the API's root handler.
//
// A request goes through, in order: the checks of auth (another site's
// request, the token), then those of front (a path of /v1/actors that is
// not clean, a body where none may be, a declared body over the limit),
// then the router (404, 405) and, for an actor's route, the kind and key.
// Only then is its body read (readWhole), so that a request refused for
// its path, method or key is answered at once, whatever body it declared.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) { mux.Handle(pattern, s.withBody("", h.ServeHTTP)) }
	handleActor := func(pattern, op string, h http.HandlerFunc) { mux.Handle(pattern, s.withBody(op, h)) }
	handle("GET /healthz", http.HandlerFunc(s.healthz))
	handle("GET /readyz", http.HandlerFunc(s.readyz))
	if s.met != nil {
		handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}))
	}
	handle("GET /v1/members", http.HandlerFunc(s.members))
	handle("GET /v1/placement", http.HandlerFunc(s.placement))
	handle("GET /v1/manifest", http.HandlerFunc(s.manifest))
	handle("GET /v1/kinds", http.HandlerFunc(s.kinds))
	handle("GET /v1/actors", http.HandlerFunc(s.actors))
	handleActor("GET /v1/actors/{kind}/{key}", "", s.status)
	handleActor("POST /v1/actors/{kind}/{key}/tell", "tell", s.tell)
	handleActor("POST /v1/actors/{kind}/{key}/ask", "ask", s.ask)
	handleActor("POST /v1/actors/{kind}/{key}/passivate", "", s.passivate)
	handleActor("GET /v1/actors/{kind}/{key}/reminders", "", s.reminderList)
	handleActor("GET /v1/actors/{kind}/{key}/reminders/{name}", "", s.reminderGet)
	handleActor("DELETE /v1/actors/{kind}/{key}/reminders/{name}", "", s.reminderCancel)
	handle("/ui/", s.uiHandler())
	handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	// Anything else is a JSON error like every other one: 405 (with
	// Allow) for a known path with another method, 404 otherwise.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.actorRoute(w, r) {
			return
		}
		if r.ContentLength != 0 {
			dropBody(w) // refused unread
		}
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); m != r.Method && pattern != "/" && pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			methodNotAllowed(w, r, allow)
			return
		}
		writeError(w, http.StatusNotFound, codeNotFound, "no endpoint "+truncatePath(r.URL.Path))
	})
	return s.auth(s.front(mux))
}

// actorRoute serves a request for an actor that the mux missed: Go's
// ServeMux does not match a path segment that is exactly "%2F" (the key
// "/") to a pattern's wildcard. It routes by the escaped path, each
// segment unescaped, as the patterns above would, and reports whether it
// served r.
func (s *Server) actorRoute(w http.ResponseWriter, r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/actors/")
	if !ok || r.URL.RawPath == "" {
		return false
	}
	segs := strings.Split(rest, "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil || u == "" {
			return false
		}
		segs[i] = u
	}
	h, op := s.actorHandler(r.Method, segs)
	if h == nil {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			if h, _ := s.actorHandler(m, segs); h != nil {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			return false
		}
		if r.ContentLength != 0 {
			dropBody(w) // refused unread
		}
		methodNotAllowed(w, r, allow)
		return true
	}
	r.SetPathValue("kind", segs[0])
	r.SetPathValue("key", segs[1])
	if len(segs) == 4 {
		r.SetPathValue("name", segs[3])
	}
	s.withBody(op, h)(w, r)
	return true
}

// actorHandler is the handler of the actor route that method and the
// path's unescaped segments below /v1/actors/ name (HEAD as GET, as the
// mux's patterns have it), and its operation for the metrics; nil if
// there is none.
func (s *Server) actorHandler(method string, segs []string) (http.HandlerFunc, string) {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	switch {
	case len(segs) == 2 && method == http.MethodGet:
		return s.status, ""
	case len(segs) == 3 && method == http.MethodPost:
		switch segs[2] {
		case "tell":
			return s.tell, "tell"
		case "ask":
			return s.ask, "ask"
		case "passivate":
			return s.passivate, ""
		}
	case len(segs) == 3 && method == http.MethodGet && segs[2] == "reminders":
		return s.reminderList, ""
	case len(segs) == 4 && segs[2] == "reminders" && method == http.MethodGet:
		return s.reminderGet, ""
	case len(segs) == 4 && segs[2] == "reminders" && method == http.MethodDelete:
		return s.reminderCancel, ""
	}
	return nil, ""
}

// methodNotAllowed answers 405 with the methods the path allows (HEAD
// with GET).
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, r.Method+" is not allowed on "+truncatePath(r.URL.Path))
}

// auth refuses a request made on another site's behalf (foreign) and
// requires the bearer token on every path but the probes, the sign-in
// form and the dashboard's style sheet (and /metrics when public). A
// request it refuses is answered without reading its body.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := s.foreign(r); why != "" {
			refuse(w, r, http.StatusForbidden, codeForbidden, why)
			return
		}
		if s.token != nil && !s.open(r) {
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
					dropBody(w)
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="tempest"`)
				writeError(w, http.StatusUnauthorized, codeUnauthorized, "missing or wrong bearer token")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// open reports whether anyone may send r, without the token.
func (s *Server) open(r *http.Request) bool {
	p := r.URL.Path
	return p == "/healthz" || p == "/readyz" || (s.metricsPublic && p == "/metrics") || p == "/ui/login" || p == "/ui/style.css"
}

// front refuses, before routing and without reading the body, what no
// route may take: a request target that is no path (OPTIONS * is
// answered here), a path of /v1/actors that is not clean (actorPathError),
// a body sent to a path anyone may call but the sign-in form, and a
// declared body over the limit.
func (s *Server) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/") {
			// OPTIONS * (the server as a whole), which Go's server would
			// answer itself, to anyone, but HTTPServer leaves to the API;
			// or a target in authority form (CONNECT).
			if r.Method == http.MethodOptions && r.URL.Path == "*" {
				if r.ContentLength != 0 {
					dropBody(w)
				}
				w.Header().Set("Allow", serverMethods)
				writeJSON(w, http.StatusOK, OptionsBody{Allow: strings.Split(serverMethods, ", ")})
				return
			}
			refuse(w, r, http.StatusNotFound, codeNotFound, "no endpoint "+truncatePath(r.RequestURI))
			return
		}
		if why := actorPathError(r.URL.EscapedPath()); why != "" {
			refuse(w, r, http.StatusBadRequest, codeInvalidKey, why)
			return
		}
		switch {
		case r.URL.Path == "/ui/login" && (r.ContentLength < 0 || r.ContentLength > maxOpenBody):
			refuse(w, r, http.StatusRequestEntityTooLarge, codeTooLarge,
				fmt.Sprintf("the sign-in form takes at most %d bytes, with its length declared", maxOpenBody))
			return
		case r.ContentLength != 0 && r.URL.Path != "/ui/login" && s.open(r):
			// Anyone may send these: a body is read only for the sign-in
			// form, small and at once, so that unauthenticated clients
			// cannot hold connections open sending bodies slowly.
			refuse(w, r, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("%s takes no body", truncatePath(r.URL.Path)))
			return
		case r.ContentLength > MaxRequestBody:
			refuse(w, r, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("request body over %d bytes", MaxRequestBody))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serverMethods are the methods some path of the API takes: the Allow
// of OPTIONS *.
const serverMethods = "GET, HEAD, POST, DELETE"

// OptionsBody is the answer of OPTIONS *: the methods some path of the
// API takes (also its Allow header).
type OptionsBody struct {
	Allow []string `json:"allow"`
}

// refuse answers r with an error without reading its body: the
// connection is closed after the answer if r has one.
func refuse(w http.ResponseWriter, r *http.Request, code int, errCode, msg string) {
	if r.ContentLength != 0 {
		dropBody(w)
	}
	writeError(w, code, errCode, msg)
}

// actorPathError returns why the escaped path p, if it is one of
// /v1/actors/..., is refused as naming no kind and key: it is not clean
// (an empty, "." or ".." segment, or it only cleans to such a path) and
// Go's ServeMux would redirect it to another path, keeping the method
// and body, so that a write meant for one actor could reach another. ""
// if p is fine. A key holding '/', or one that is "." or "..", is given
// percent-encoded (%2F, %2E).
func actorPathError(p string) string {
	rest, under := strings.CutPrefix(p, "/v1/actors/")
	if !under {
		if !strings.Contains(p, "//") && !strings.Contains(p, "/.") {
			return "" // clean
		}
		if c := path.Clean("/" + p); strings.HasPrefix(c, "/v1/actors/") {
			return fmt.Sprintf("path %q is not clean: an actor's path takes no empty, '.' or '..' segment (percent-encode a key that holds '/' or is '.' or '..')", truncatePath(p))
		}
		return ""
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Sprintf("path %q has an empty, '.' or '..' segment: an actor's kind and key are non-empty path segments (percent-encode a key that holds '/' or is '.' or '..')", truncatePath(p))
		}
	}
	return ""
}

// bodyLimits returns how large r's body may be and how long its reading
// may take.
func (s *Server) bodyLimits(r *http.Request) (int64, time.Duration) {
	d := s.limits.BodyTimeout
	if d == 0 {
		d = DefaultLimits().BodyTimeout
	}
	if r.URL.Path == "/ui/login" {
		return maxOpenBody, min(d, openBodyTimeout)
	}
	return MaxRequestBody, d
}

// withBody serves h once r's body is read whole, within bodyLimits, so
// that no handler waits on a slow client and no read deadline outlives
// the body. A request of an actor's route (one with a {kind} and {key})
// whose kind or key no actor can have is answered 400 invalid_key without
// reading the body, and counted for op ("ask", "tell") if set.
func (s *Server) withBody(op string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if kind, key := r.PathValue("kind"), r.PathValue("key"); kind != "" || key != "" {
			if err := actor.CheckVirtual(kind, key); err != nil {
				if r.ContentLength != 0 {
					dropBody(w)
				}
				if op != "" {
					s.count(kind, op, outcomeInvalidKey, 0)
				}
				s.fail(w, err) // 400 invalid_key
				return
			}
		}
		if r.ContentLength != 0 {
			limit, d := s.bodyLimits(r)
			if !s.readWhole(w, r, limit, d) {
				return
			}
		}
		h(w, r)
	}
}

// foreign returns why r is refused as a browser's request on another
// site's behalf, "" if it is not one. A request that changes something
// (any method but GET, HEAD and OPTIONS) and carries an Origin other than
// its own Host came from a page of another site (a cross-site request
// forgery: a form or a script's simple request needs no preflight). And
// without a token, a request that reached a loopback address under a
// Host that is no loopback name was addressed to another site's name
// resolved to this machine (DNS rebinding), which would let that site's
// pages read the answers. Clients that are not browsers send no Origin
// and address loopback by a loopback name.
func (s *Server) foreign(r *http.Request) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if o := r.Header.Get("Origin"); o != "" {
			if u, err := url.Parse(o); err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
				return fmt.Sprintf("cross-origin request refused: Origin %q is not this API (%q)", truncatePath(o), truncatePath(r.Host))
			}
		}
	}
	if s.token == nil && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" { // probes tell only liveness
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && isLoopback(la) && !loopbackHost(r.Host) {
			return fmt.Sprintf("Host %q is not a loopback name: without a token this API answers only requests addressed to this machine's loopback", truncatePath(r.Host))
		}
	}
	return ""
}

// isLoopback reports whether a is a loopback address.
func isLoopback(a net.Addr) bool {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether host (a Host header: a name or an
// address, with or without a port) names the loopback: localhost, a
// name under .localhost, or a loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// dropBody makes the connection of a request whose body is not (or no
// longer) read close once the answer is written. The Connection header
// alone does not do it: after the handler the server reads what is left
// of a body of up to 256 KiB to keep the connection, and would wait for
// a client that never sends it; a read deadline in the past ends that
// read at once.
func dropBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now()) // not supported by test recorders
}

// The body of a request anyone may send (the sign-in form): its size and
// how long its reading may take.
const (
	maxOpenBody     = 4 << 10
	openBodyTimeout = 2 * time.Second
)

// readWhole replaces r.Body by its bytes, read within the body timeout
// (a read deadline on the connection, cleared again before the handler
// runs: a deadline left in place would cancel long asks) and the size
// limit. It answers 413, 408 or 400 itself and reports false when the
// body could not be read; the connection is then closed, since what is
// left of the body must not be read as the next request.
func (s *Server) readWhole(w http.ResponseWriter, r *http.Request, limit int64, d time.Duration) bool {
	rc := http.NewResponseController(w)
	if d == 0 {
		d = DefaultLimits().BodyTimeout
	}
	_ = rc.SetReadDeadline(time.Now().Add(d)) // not supported by test recorders
	b, err := readAllBody(w, r, limit)
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
		r.Body = newWholeBody(b)
		return true
	}
	dropBody(w)
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

// presizeBody bounds the buffer a declared length gets before any byte
// of the body arrived: a client that declares a large body and sends it
// slowly (or never) pins no more than this; larger bodies grow as their
// bytes come in.
const presizeBody = 64 << 10

// readAllBody reads r's body within limit bytes; a body of a declared
// length within the limit is read into a buffer of that size (at most
// presizeBody up front), without a copy once read.
func readAllBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		b := make([]byte, 0, min(n, presizeBody))
		for int64(len(b)) < n {
			if len(b) == cap(b) {
				b = append(b, 0)[:len(b)] // grow as the bytes arrive
			}
			m, err := body.Read(b[len(b):min(int64(cap(b)), n)])
			b = b[:len(b)+m]
			if err == io.EOF && int64(len(b)) < n {
				err = io.ErrUnexpectedEOF
			}
			if err != nil && int64(len(b)) < n {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					err = fmt.Errorf("%w: %d of %d bytes", err, len(b), n)
				}
				return nil, err
			}
		}
		// A body longer than it declared is the transport's to refuse;
		// what follows the declared length is not read as this body.
		return b, nil
	}
	return io.ReadAll(body)
}

// wholeBody is a request body already read whole (readWhole): handlers
// take its bytes (bodyBytes) instead of copying them out again.
type wholeBody struct {
	bytes.Reader
	b []byte
}

func newWholeBody(b []byte) *wholeBody {
	wb := &wholeBody{b: b}
	wb.Reset(b)
	return wb
}

func (*wholeBody) Close() error { return nil }

// bodyBytes returns r's body: the bytes readWhole read if it did, else
// the rest of the body read now.
func bodyBytes(r *http.Request) ([]byte, error) {
	if wb, ok := r.Body.(*wholeBody); ok && wb.Len() == len(wb.b) {
		return wb.b, nil
	}
	return io.ReadAll(r.Body)
}

// jsonContentType is the Content-Type header value of JSON answers, set
// as a shared slice (never modified) instead of a new one per answer.
var jsonContentType = []string{"application/json"}

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
	if errors.Is(err, actor.ErrPanicked) {
		// The actor's turn panicked: whatever the panic's value
		// matches, the request met a bug, not that condition.
		return http.StatusInternalServerError, codePanicked, outcomeError
	}
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
	case errors.Is(err, tempest.ErrNoQuorum):
		// Unreachable, or unanswered in time, because placement has no
		// leader: not until a majority of the voters is back.
		return http.StatusServiceUnavailable, codeNoQuorum, outcomeUnavailable
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
	case errors.Is(err, actor.ErrNoReply):
		// The actor ran and will not answer (its turn ended without a
		// reply, or it dropped its Replier): the actor's fault, and
		// final, unlike a timeout.
		return http.StatusBadGateway, codeNoReply, outcomeError
	case errors.Is(err, tempest.ErrMessageTooLarge):
		// The actor's reply is over the transport's frame limit and
		// could not cross from its owner's node (a request body is far
		// below it): the actor's doing, and final, like no_reply.
		return http.StatusBadGateway, codeMessageTooLarge, outcomeError
	case errors.Is(err, actor.ErrNotCommitted):
		// The actor's store failed to make the update durable: it was
		// not acknowledged, and the actor went back to its last
		// committed state. Retrying is safe.
		return http.StatusServiceUnavailable, codeNotCommitted, outcomeNotCommitted
	case errors.Is(err, reminders.ErrInvalid):
		// A reminder registration the engine refused, which the actor
		// replied (it keeps its identity from any node): the request's
		// fault, not the node's.
		return http.StatusUnprocessableEntity, codeInvalidReminder, outcomeError
	case errors.Is(err, reminders.ErrNotFound):
		// As the reminder endpoints answer it (failReminder).
		return http.StatusNotFound, codeNotFound, outcomeError
	case errors.Is(err, reminders.ErrNotOwner), errors.Is(err, reminders.ErrClosed):
		// The identity's shard is moving, or its owner closing: retry.
		return http.StatusServiceUnavailable, codeUnavailable, outcomeUnavailable
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

// Readier is the optional capability of a Node (tempest.Node has it) to
// say why it is not ready; /readyz then says so.
type Readier interface {
	Readiness() error
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.node.Ready() {
		msg := "node not ready"
		if rn, ok := s.node.(Readier); ok {
			if why := rn.Readiness(); why != nil {
				msg += ": " + why.Error()
			}
		}
		writeError(w, http.StatusServiceUnavailable, codeNotReady, msg)
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
	b, err := bodyBytes(r)
	if err != nil || !json.Valid(b) {
		msg := "the body is not valid JSON"
		if err == nil {
			// Why (where the syntax broke, or nesting deeper than the
			// parser takes), never more than a character of the input.
			if jerr := json.Unmarshal(b, new(json.RawMessage)); jerr != nil {
				msg += ": " + strings.TrimPrefix(jerr.Error(), "json: ")
			}
		}
		writeError(w, http.StatusBadRequest, codeBadJSON, msg)
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
	if err := s.node.TellJSON(traceContext(r), kind, key, body); err != nil {
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
			s.count(kind, "ask", outcomeBadRequest, 0)
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
	w.Header()["Content-Type"] = jsonContentType
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

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	ref := actor.Virtual(r.PathValue("kind"), r.PathValue("key"))
	if err := ref.Check(); err != nil {
		s.fail(w, err)
		return
	}
	// The node asks the owner's supervisor over the cluster's
	// authenticated links when the actor lives elsewhere: nothing of this
	// request (its token least of all) leaves this node.
	st, err := s.node.Status(r.Context(), ref)
	if err != nil {
		s.fail(w, err)
		return
	}
	body := toStatusBody(st)
	if t := s.node.Table(); t != nil {
		body.PolicyDissenters = len(t.Policy(ref.Kind()).Differ)
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) passivate(w http.ResponseWriter, r *http.Request) {
	ref := actor.Virtual(r.PathValue("kind"), r.PathValue("key"))
	if err := ref.Check(); err != nil {
		s.fail(w, err)
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
			Status: m.Status.String(), Proven: s.node.Proven(m), Raft: string(raft.Role(m.Name)), Version: m.Meta.Version,
			DataID: m.Meta.DataID}
		if table != nil {
			mb.RecordedDataID = table.DataIDs[m.Name]
		}
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
		out.Members = append(out.Members, MemberBody{Name: s.node.Name(), Status: "alive", Proven: true,
			Raft: string(tempest.RoleNone), Profile: s.node.Manifest().Profile.String(), Version: s.version})
	}
	slices.SortFunc(out.Members, func(a, b MemberBody) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) placement(w http.ResponseWriter, _ *http.Request) {
	t := s.node.Table()
	if t == nil {
		writeJSON(w, http.StatusOK, PlacementBody{Node: s.node.Name(), Leader: s.node.Name(), Standalone: true, Current: true,
			Nodes: []PlacementNode{{Name: s.node.Name(), Status: "up"}}})
		return
	}
	raft := s.node.RaftInfo()
	st, _ := s.node.PlacementStatus()
	out := PlacementBody{Node: s.node.Name(), Leader: raft.Leader, Epoch: t.Version, Term: raft.Term,
		Current: st.LeaseFresh, ShardCount: t.ShardCount, Groups: len(t.Groups)}
	out.Replicas = t.Replication()
	owned, follows := map[string]int{}, map[string]int{}
	for _, g := range t.Groups {
		for _, sh := range g.Shards {
			switch {
			case sh.Owner == "":
				out.Unassigned++
			default:
				owned[sh.Owner]++
				for _, f := range sh.Followers() {
					follows[f]++
				}
			}
			if sh.MovingTo != "" {
				out.Moving++
			}
		}
	}
	out.UnderReplicated, out.BelowReplicas = len(t.UnderReplicated()), len(t.BelowReplicas())
	for _, name := range t.NodeNames() {
		ni := t.Nodes[name]
		out.Nodes = append(out.Nodes, PlacementNode{Name: name, Status: ni.Status.String(), Shards: owned[name], Follows: follows[name], StoreFailing: ni.StoreFailing, Kinds: ni.Kinds})
	}
	for _, k := range t.KindNames() {
		out.Policies = append(out.Policies, t.Policy(k))
	}
	if ls := s.node.ReplicationLag(); len(ls) > 0 {
		out.Replication = toPlacementReplicas(ls)
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
	if after != "" && actor.CheckVirtual("k", after) != nil {
		// A cursor is a key of an earlier page: one no key can be is a
		// client's mistake, not the start of the list.
		writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("after %.64q: not a key (1 to %d bytes of UTF-8)", after, actor.MaxKeyLen))
		return
	}
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
// (tempest.Config.TracerProvider) makes its tempest.ask or tempest.tell
// span a child of the caller's span; one that does not ignores it.
func traceContext(r *http.Request) context.Context {
	ctx := r.Context()
	if r.Header.Get("traceparent") == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
}
