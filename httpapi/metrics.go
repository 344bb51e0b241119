package httpapi

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/ariel"
	"github.com/tempest-actors/tempest/membership"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/wire"
)

// Outcome label values of tempest_messages_total.
const (
	outcomeOK           = "ok"
	outcomeBadJSON      = "bad_json"
	outcomeBadRequest   = "bad_request"
	outcomeInvalidKey   = "invalid_key"
	outcomeUnknownKind  = "unknown_kind"
	outcomeDeadline     = "deadline_exceeded"
	outcomeRefused      = "refused"
	outcomeUnavailable  = "unavailable"
	outcomeTerminated   = "terminated"
	outcomeNotCommitted = "not_committed"
	outcomeError        = "error"
	outcomeCanceled     = "canceled"
)

// otherKind labels requests for kinds the node does not know, so that a
// client cannot create label series at will.
const otherKind = "_unknown"

// Metrics is one node's Prometheus registry (never the global one)
// and the instruments the node and its HTTP API feed. Label values are
// kinds, operations, outcomes, event types and statuses; never actor
// keys.
type Metrics struct {
	reg      *prometheus.Registry
	messages *prometheus.CounterVec   // kind, op, outcome
	ask      *prometheus.HistogramVec // kind
	turn     prometheus.Histogram
	queued   prometheus.Histogram
	events   *prometheus.CounterVec   // kind, event
	hydrate  *prometheus.HistogramVec // kind, event
	late     prometheus.Histogram

	// kinds is replaced whole under mu (SetKinds) and read without a
	// lock: every gateway request reads it.
	mu    sync.Mutex
	kinds atomic.Pointer[map[string]bool]
	// The instruments of the gateway's (kind, op, outcome) series, once
	// resolved: a vector's WithLabelValues hashes and validates its label
	// values and takes the vector's lock on every call. The keys are
	// bounded as the labels are (kinds are registered kinds or otherKind).
	counters sync.Map // messageKey -> prometheus.Counter
	asks     sync.Map // kind label -> prometheus.Observer
}

// messageKey names one series of tempest_messages_total.
type messageKey struct{ kind, op, outcome string }

var _ ariel.LatencyObserver = (*Metrics)(nil)

func NewMetrics(version string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tempest_messages_total",
			Help: "Messages sent through the HTTP API, by kind, operation (tell, ask) and outcome.",
		}, []string{"kind", "op", "outcome"}),
		ask: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tempest_ask_duration_seconds",
			Help:    "Latency of asks through the HTTP API, by kind.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 14),
		}, []string{"kind"}),
		turn: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tempest_turn_duration_seconds",
			Help:    "Time an actor's handler took for one message.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}),
		queued: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tempest_mailbox_wait_seconds",
			Help:    "Time a message waited in its mailbox before its turn.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tempest_actor_events_total",
			Help: "Lifecycle decisions of the supervisor by kind and event (Activated, Hydrated, Passivated, Fault, Restarted, ...).",
		}, []string{"kind", "event"}),
		hydrate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tempest_activation_duration_seconds",
			Help:    "Time from the doorbell (mail for an inactive actor) to the actor attached, by kind and event (Activated, Hydrated, Rehydrated, Restarted); includes waiting for the hydration budget and reading the state at rest.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"kind", "event"}),
		late: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tempest_reminder_lateness_seconds",
			Help:    "Lateness of durable reminder ticks: dispatch minus scheduled time (missed occurrences fired by a catch-up policy included).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 12),
		}),
	}
	m.kinds.Store(&map[string]bool{})
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "tempest_build_info",
		Help:        "Build information; the value is always 1.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	info.Set(1)
	m.reg.MustRegister(m.messages, m.ask, m.turn, m.queued, m.events, m.hydrate, m.late, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// attachConns exports the connection counters of an API's listener. A
// Metrics shared by several Servers exports the first one's.
func (m *Metrics) attachConns(l *connLimiter) {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tempest_http_connections",
			Help: "Open connections to the HTTP API (accepted by its listener).",
		}, func() float64 { return float64(l.snapshot().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "tempest_http_connections_refused_total",
			Help:        "Connections to the HTTP API closed at once because a connection limit was reached and every connection was serving a request, by limit (node, client).",
			ConstLabels: prometheus.Labels{"limit": "node"},
		}, func() float64 { return float64(l.snapshot().RefusedNode) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "tempest_http_connections_refused_total",
			Help:        "Connections to the HTTP API closed at once because a connection limit was reached and every connection was serving a request, by limit (node, client).",
			ConstLabels: prometheus.Labels{"limit": "client"},
		}, func() float64 { return float64(l.snapshot().RefusedClient) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tempest_http_connections_evicted_total",
			Help: "Idle connections to the HTTP API closed to make room for a new one at a connection limit.",
		}, func() float64 { return float64(l.snapshot().Evicted) }),
	} {
		_ = m.reg.Register(c) // AlreadyRegistered: a second Server on this Metrics
	}
}

// SetKinds records the kinds that may appear as label values.
func (m *Metrics) SetKinds(kinds []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.kinds.Load()
	next := make(map[string]bool, len(old)+len(kinds))
	for k := range old {
		next[k] = true
	}
	for _, k := range kinds {
		next[k] = true
	}
	m.kinds.Store(&next)
}

// kindLabel is kind if registered, otherKind otherwise.
func (m *Metrics) kindLabel(kind string) string {
	if (*m.kinds.Load())[kind] {
		return kind
	}
	return otherKind
}

// ObserveQueued implements ariel.LatencyObserver.
func (m *Metrics) ObserveQueued(d time.Duration) { m.queued.Observe(d.Seconds()) }

// ObserveHandler implements ariel.LatencyObserver.
func (m *Metrics) ObserveHandler(d time.Duration) { m.turn.Observe(d.Seconds()) }

// event is the node's Events hook: fast, never blocks.
func (m *Metrics) Event(e prospero.Event) {
	k := m.kindLabel(e.ID.Kind)
	m.events.WithLabelValues(k, e.Type.String()).Inc()
	switch e.Type {
	case prospero.EventActivated, prospero.EventHydrated, prospero.EventRehydrated, prospero.EventRestarted:
		m.hydrate.WithLabelValues(k, e.Type.String()).Observe(e.Hydration.Seconds())
	}
}

// message counts one gateway message and, for asks, its latency.
func (m *Metrics) message(kind, op, outcome string, d time.Duration) {
	k := m.kindLabel(kind)
	key := messageKey{k, op, outcome}
	c, ok := m.counters.Load(key)
	if !ok {
		c, _ = m.counters.LoadOrStore(key, m.messages.WithLabelValues(k, op, outcome))
	}
	c.(prometheus.Counter).Inc()
	if op == "ask" && outcome == outcomeOK {
		o, ok := m.asks.Load(k)
		if !ok {
			o, _ = m.asks.LoadOrStore(k, m.ask.WithLabelValues(k))
		}
		o.(prometheus.Observer).Observe(d.Seconds())
	}
}

// attach registers the collector that reads n's counters at scrape time.
func (m *Metrics) Attach(n *tempest.Node) {
	m.SetKinds(n.Kinds())
	m.reg.MustRegister(&nodeCollector{n: n}, &federationCollector{n: n})
	rem := n.Reminders()
	for _, c := range []struct {
		name, help string
		v          func() float64
	}{
		{"tempest_replica_shrinks_total", "Followers this node, as a shard's owner, removed from an in-sync replica set (through raft) before committing without them, counted per shard.",
			func() float64 { return float64(n.ReplicationStats().Shrinks) }},
		{"tempest_replica_shrink_failures_total", "Failed replicas this node could not remove from an in-sync set; the writes waiting for them were not committed.",
			func() float64 { return float64(n.ReplicationStats().ShrinkFail) }},
		{"tempest_replica_records_sent_total", "Records of state at rest this node sent to replicas of the shards it owns.",
			func() float64 { return float64(n.ReplicationStats().Records) }},
		{"tempest_replica_batches_sent_total", "Network writes (batches) of those records; records/batches is the group commit's mean size.",
			func() float64 { return float64(n.ReplicationStats().Batches) }},
		{"tempest_replica_records_applied_total", "Records of other nodes' shards this node stored as their replica.",
			func() float64 { return float64(n.ReplicationStats().Applied) }},
		{"tempest_replica_batches_refused_total", "Replication batches this node refused (bad checksum, truncated, stale epoch, failed disk).",
			func() float64 { return float64(n.ReplicationStats().Refused) }},
		{"tempest_replica_catchups_total", "Catch-ups (bulk copy, then join) of a follower this node started as a shard's owner.",
			func() float64 { return float64(n.ReplicationStats().CatchUps) }},
		{"tempest_replica_catchup_failures_total", "Catch-ups of a follower this node, as a shard's owner, tried that failed (the follower did not answer, a copy or write to it failed, its join was not committed); retried every second, logged at WARN once per follower and failure.",
			func() float64 { return float64(n.ReplicationStats().CatchUpFails) }},
		{"tempest_replica_bulk_records_total", "Records this node sent in bulk copies to catching-up followers.",
			func() float64 { return float64(n.ReplicationStats().Bulk) }},
		{"tempest_replica_bulk_deletions_total", "Deletions catch-ups sent for records a returning follower held that this node, as the owner, no longer has (deleted while it was away).",
			func() float64 { return float64(n.ReplicationStats().BulkDeleted) }},
		{"tempest_replica_joins_total", "Followers this node added to an in-sync set after a catch-up, counted per shard.",
			func() float64 { return float64(n.ReplicationStats().Joins) }},
		{"tempest_reminder_ticks_fired_total", "Durable reminder ticks dispatched to their actors.",
			func() float64 { return float64(rem.Stats().Fired) }},
		{"tempest_reminder_ticks_skipped_total", "Reminder occurrences not delivered by their catch-up policy.",
			func() float64 { return float64(rem.Stats().Skipped) }},
		{"tempest_reminder_ticks_failed_total", "Reminder ticks refused or not handled within the delivery timeout (fired again).",
			func() float64 { return float64(rem.Stats().Failed) }},
		{"tempest_reminder_records_recommitted_total", "Reminder records this node wrote again, and committed, when it loaded a replicated shard's reminders, before any of them fired: records at rest here that may not have been committed.",
			func() float64 { return float64(rem.Stats().Recommitted) }},
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, c.v))
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tempest_reminders",
		Help: "Durable reminders held by this node (of the shards whose reminders it loaded, paused ones included)."},
		func() float64 { return float64(rem.Stats().Reminders) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tempest_reminder_shards_paused",
		Help: "Shards whose reminders this node holds but does not fire for now: it owns them but may not serve them (lease lapsed, marked down), or their release failed and is tried again."},
		func() float64 { return float64(rem.Stats().Paused) }))
}

// ObserveReminderLateness observes a reminder tick's lateness (dispatch
// minus scheduled time); set it as the node's Config.Reminders.Lateness.
func (m *Metrics) ObserveReminderLateness(d time.Duration) { m.late.Observe(d.Seconds()) }

// BridgeGoMetrics sends the process-wide go-metrics (raft's and
// memberlist's own metrics) into this registry, named tempest_raft_...,
// tempest_memberlist_... . go-metrics has one global sink per process:
// call this for one node only.
func (m *Metrics) BridgeGoMetrics() error {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
		Registerer: m.reg,
		Name:       "tempest_gometrics_bridge",
		Expiration: 5 * time.Minute,
	})
	if err != nil {
		return err
	}
	cfg := gometrics.DefaultConfig("tempest")
	cfg.EnableHostname = false
	cfg.EnableHostnameLabel = false
	cfg.EnableRuntimeMetrics = false // the Go collector has them
	cfg.EnableServiceLabel = false
	_, err = gometrics.NewGlobal(cfg, promNames{sink})
	return err
}

// promNames renames go-metrics keys to Prometheus conventions on their
// way into the Prometheus sink, which only joins the key parts with "_":
// every key part and label name in snake_case (raft's
// raft.leader.lastContact becomes tempest_raft_leader_last_contact, its
// rpcType label rpc_type), and counters end in _total. Timings stay what
// go-metrics measures: summaries in milliseconds.
type promNames struct{ next *gmprom.PrometheusSink }

var (
	_ gometrics.MetricSink               = promNames{}
	_ gometrics.PrecisionGaugeMetricSink = promNames{}
)

func (p promNames) SetGauge(key []string, val float32) { p.next.SetGauge(snakeKey(key), val) }
func (p promNames) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	p.next.SetGaugeWithLabels(snakeKey(key), val, snakeLabels(labels))
}
func (p promNames) SetPrecisionGauge(key []string, val float64) {
	p.next.SetPrecisionGauge(snakeKey(key), val)
}
func (p promNames) SetPrecisionGaugeWithLabels(key []string, val float64, labels []gometrics.Label) {
	p.next.SetPrecisionGaugeWithLabels(snakeKey(key), val, snakeLabels(labels))
}
func (p promNames) EmitKey(key []string, val float32) { p.next.EmitKey(snakeKey(key), val) }
func (p promNames) IncrCounter(key []string, val float32) {
	p.next.IncrCounter(counterKey(key), val)
}
func (p promNames) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	p.next.IncrCounterWithLabels(counterKey(key), val, snakeLabels(labels))
}
func (p promNames) AddSample(key []string, val float32) { p.next.AddSample(snakeKey(key), val) }
func (p promNames) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	p.next.AddSampleWithLabels(snakeKey(key), val, snakeLabels(labels))
}

func snakeKey(key []string) []string {
	out := make([]string, len(key))
	for i, k := range key {
		out[i] = snakeCase(k)
	}
	return out
}

func counterKey(key []string) []string {
	out := snakeKey(key)
	if n := len(out); n == 0 || out[n-1] != "total" {
		out = append(out, "total")
	}
	return out
}

func snakeLabels(labels []gometrics.Label) []gometrics.Label {
	out := make([]gometrics.Label, len(labels))
	for i, l := range labels {
		out[i] = gometrics.Label{Name: snakeCase(l.Name), Value: l.Value}
	}
	return out
}

// snakeCase turns a camelCase name into snake_case: an underscore before
// an upper-case letter that follows a lower-case letter or digit, or
// that ends an acronym (getRPCType: get_rpc_type), then all lower case.
func snakeCase(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 4)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				prev := s[i-1]
				lowerBefore := prev >= 'a' && prev <= 'z' || prev >= '0' && prev <= '9'
				acronymEnd := prev >= 'A' && prev <= 'Z' && i+1 < len(s) && s[i+1] >= 'a' && s[i+1] <= 'z'
				if lowerBefore || acronymEnd {
					b.WriteByte('_')
				}
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// nodeCollector turns tempest.Node's counters into metrics at scrape
// time.
type nodeCollector struct{ n *tempest.Node }

var nodeDescs = struct {
	turns, msgs, refused, undelivered, panics, exhausted, expired         *prometheus.Desc
	cancelled, withdrawn, lapsed                                          *prometheus.Desc
	retryParked, retryResent, retryGaveUp, retryWaiting                   *prometheus.Desc
	earlyCancels                                                          *prometheus.Desc
	stuck, fenced, workers, degraded                                      *prometheus.Desc
	active, entries, hydrating, waiting, unsaved, superseded, recommitted *prometheus.Desc
	commits, commitFails, groups, groupWrites                             *prometheus.Desc
	leader, term, members                                                 *prometheus.Desc
	frames, bytes, links, linkErrs                                        *prometheus.Desc
	ready                                                                 *prometheus.Desc
	rejected, unproven, proofsFailed                                      *prometheus.Desc
	policyDissent                                                         *prometheus.Desc
	replLag, replPending                                                  *prometheus.Desc
	mailRefusals                                                          *prometheus.Desc
}{
	mailRefusals: prometheus.NewDesc("tempest_mail_refusals_total",
		"Mail between nodes refused without being handled, by direction (sent: this node refused another node's mail; received: another node refused this node's) and reason (the wire protocol's refusal reason: mailbox_full, not_owner, ...). Every reason is exported, 0 included.",
		[]string{"direction", "reason"}, nil),
	replLag: prometheus.NewDesc("tempest_replica_lag_seconds",
		"Age of the oldest record a follower of a shard this node owns has not acknowledged, by follower (0: it acknowledged everything sent to it).",
		[]string{"follower"}, nil),
	replPending: prometheus.NewDesc("tempest_replica_pending_records",
		"Records queued for or in flight to a follower of a shard this node owns and not acknowledged yet, by follower.",
		[]string{"follower"}, nil),
	policyDissent: prometheus.NewDesc("tempest_kind_policy_dissenters",
		"Live nodes whose policy digest for the kind differs from the one the cluster agrees on; they own none of its shards until they agree (0: every host agrees).",
		[]string{"kind"}, nil),
	turns:       prometheus.NewDesc("tempest_turns_total", "Handler invocations (user and lifecycle messages).", nil, nil),
	msgs:        prometheus.NewDesc("tempest_scheduler_messages_total", "Messages taken out of mailboxes.", nil, nil),
	refused:     prometheus.NewDesc("tempest_refusals_total", "Sends refused by admission (full mailbox).", nil, nil),
	undelivered: prometheus.NewDesc("tempest_undelivered_total", "Messages not delivered for any reason (refusals included).", nil, nil),
	panics:      prometheus.NewDesc("tempest_turn_panics_total", "Handler panics recovered.", nil, nil),
	exhausted:   prometheus.NewDesc("tempest_turn_budget_exhausted_total", "Turns that ran past their kind's turn budget and were abandoned.", nil, nil),
	stuck:       prometheus.NewDesc("tempest_turns_stuck", "Goroutines of abandoned turns that have not returned yet.", nil, nil),
	fenced:      prometheus.NewDesc("tempest_turn_effects_fenced_total", "Sends, replies, timers and state writes of abandoned turns that were discarded.", nil, nil),
	workers:     prometheus.NewDesc("tempest_scheduler_workers", "Live scheduler pool workers.", nil, nil),
	degraded:    prometheus.NewDesc("tempest_scheduler_degraded", "1 while the pool runs below its size because the replacement cap is reached.", nil, nil),
	expired:     prometheus.NewDesc("tempest_asks_expired_total", "Asks dropped at dequeue because their deadline passed.", nil, nil),
	lapsed: prometheus.NewDesc("tempest_mail_lapsed_total",
		"Times user mail of a virtual actor was found due after this node's placement lease ran out (a frozen process thawing, a lapse before the fence passivated it) and was held back, not run.", nil, nil),
	cancelled: prometheus.NewDesc("tempest_asks_cancelled_total",
		"Asks dropped at dequeue, their turn never run, because their caller gave up before their deadline (context cancelled, CancelAsk from the asking node, that node gone).", nil, nil),
	withdrawn: prometheus.NewDesc("tempest_asks_withdrawn_total",
		"Asks from other nodes withdrawn here before their turn (their caller's CancelAsk, or its link went down).", nil, nil),
	earlyCancels: prometheus.NewDesc("tempest_asks_early_cancels_total",
		"CancelAsk notices that found no ask here: kept (for up to a minute, 4096 at most, in case it has not arrived; also a notice that crossed its ask's answer), matched (the ask dropped unrun on arrival), evicted (dropped unused because 4096 were kept).",
		[]string{"outcome"}, nil),
	retryParked: prometheus.NewDesc("tempest_mail_retry_parked_total",
		"Messages that waited to be sent again: their route was in flux, or the owner's node refused them without running them (NOT_OWNER, NOT_SERVING).", nil, nil),
	retryResent: prometheus.NewDesc("tempest_mail_retry_resent_total", "Messages sent again under the retry policy.", nil, nil),
	retryGaveUp: prometheus.NewDesc("tempest_mail_retry_gave_up_total",
		"Tells that waited to be sent again longer than the retry wait and were dropped (an actor sender gets them back as Undelivered).", nil, nil),
	retryWaiting: prometheus.NewDesc("tempest_mail_retry_waiting", "Messages waiting to be sent again now.", nil, nil),
	active:       prometheus.NewDesc("tempest_actors_active", "Identities with an attached activation.", nil, nil),
	entries:      prometheus.NewDesc("tempest_actors_in_memory", "Identities in memory (not dormant).", nil, nil),
	hydrating:    prometheus.NewDesc("tempest_hydrations_in_progress", "Activations in progress.", nil, nil),
	waiting:      prometheus.NewDesc("tempest_hydrations_waiting", "Activations waiting for the hydration budget.", nil, nil),
	unsaved:      prometheus.NewDesc("tempest_states_unsaved", "States whose write at rest failed and is retried.", nil, nil),
	superseded:   prometheus.NewDesc("tempest_states_superseded_total", "Unsaved states dropped at activation because the store held a newer record.", nil, nil),
	recommitted:  prometheus.NewDesc("tempest_states_recommitted_total", "Records written again at activation, before serving them, because they may not have been committed (a failed commit, or a record this node did not commit itself).", nil, nil),
	commits:      prometheus.NewDesc("tempest_state_commits_total", "Writes of active actors' state at rest committed (reply after commit and passivation).", nil, nil),
	commitFails:  prometheus.NewDesc("tempest_state_commit_failures_total", "Writes of active actors' state at rest that failed; each failed the outputs waiting for it.", nil, nil),
	groups:       prometheus.NewDesc("tempest_state_commit_groups_total", "Group commits of the state store (one transaction and its fsyncs each).", nil, nil),
	groupWrites:  prometheus.NewDesc("tempest_state_commit_group_writes_total", "Writes in the state store's group commits (divide by the groups for writes per fsync).", nil, nil),
	leader:       prometheus.NewDesc("tempest_raft_is_leader", "1 if this node is the placement raft leader.", nil, nil),
	term:         prometheus.NewDesc("tempest_raft_term", "This node's current raft term.", nil, nil),
	members:      prometheus.NewDesc("tempest_members", "Members in this node's view, by status.", []string{"status"}, nil),
	frames:       prometheus.NewDesc("tempest_link_frames_total", "QUIC frames by direction.", []string{"direction"}, nil),
	bytes:        prometheus.NewDesc("tempest_link_bytes_total", "QUIC payload bytes by direction.", []string{"direction"}, nil),
	links:        prometheus.NewDesc("tempest_link_changes_total", "QUIC links that came up or went down.", []string{"change"}, nil),
	linkErrs:     prometheus.NewDesc("tempest_link_errors_total", "QUIC send and receive problems by type.", []string{"type"}, nil),
	ready:        prometheus.NewDesc("tempest_ready", "1 if the node is ready (joined, leader known, placement applied).", nil, nil),
	rejected: prometheus.NewDesc("tempest_rejected_traffic_total",
		"Unauthenticated or malformed traffic this node dropped, by cause (gossip_undecryptable, gossip_malformed, tls_rejected, hello_rejected, not_member).",
		[]string{"cause"}, nil),
	unproven: prometheus.NewDesc("tempest_members_unproven",
		"Live gossip members that have not proved their name with a certificate of the cluster CA (placement ignores them).", nil, nil),
	proofsFailed: prometheus.NewDesc("tempest_member_proofs_failed_total",
		"Attempts to prove a gossip member's name over mutual TLS that failed.", nil, nil),
}

// refusalReasons are the reason labels of tempest_mail_refusals_total,
// indexed by wire.RefusedReason: the schema's names in lower case
// (NOT_OWNER is not_owner). Every reason the wire counts is exported on
// every scrape, 0 included, so that a dashboard's query of one reason
// finds a series before the first refusal of that reason.
var refusalReasons = func() []string {
	var counts wire.RefusalCounts
	out := make([]string, len(counts))
	for r := range out {
		out[r] = strings.ToLower(wire.RefusedReason(r).String())
	}
	return out
}()

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	d := nodeDescs
	for _, x := range []*prometheus.Desc{d.turns, d.msgs, d.refused, d.undelivered, d.panics, d.exhausted, d.expired,
		d.cancelled, d.withdrawn, d.lapsed, d.retryParked, d.retryResent, d.retryGaveUp, d.retryWaiting, d.earlyCancels, d.stuck, d.fenced, d.workers, d.degraded,
		d.active, d.entries, d.hydrating, d.waiting, d.unsaved, d.superseded, d.recommitted, d.commits, d.commitFails, d.groups, d.groupWrites, d.leader, d.term, d.members,
		d.frames, d.bytes, d.links, d.linkErrs, d.ready, d.rejected, d.unproven, d.proofsFailed, d.policyDissent,
		d.replLag, d.replPending, d.mailRefusals} {
		ch <- x
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	d := nodeDescs
	st := c.n.Stats()
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	s := st.Scheduler
	counter(d.turns, s.Turns)
	counter(d.msgs, s.Messages)
	counter(d.refused, s.Refused)
	counter(d.undelivered, s.Undelivered)
	counter(d.panics, s.Panics)
	counter(d.exhausted, s.Exhausted)
	counter(d.expired, s.Expired)
	counter(d.cancelled, s.Cancelled)
	counter(d.lapsed, s.Lapsed)
	counter(d.withdrawn, st.Mail.AsksWithdrawn)
	counter(d.earlyCancels, st.Mail.CancelsKept, "kept")
	counter(d.earlyCancels, st.Mail.CancelsMatched, "matched")
	counter(d.earlyCancels, st.Mail.CancelsEvicted, "evicted")
	for r, reason := range refusalReasons {
		counter(d.mailRefusals, st.Mail.RefusedOut[r], "sent", reason)
		counter(d.mailRefusals, st.Mail.RefusedIn[r], "received", reason)
	}
	counter(d.retryParked, st.Retry.Parked)
	counter(d.retryResent, st.Retry.Resent)
	counter(d.retryGaveUp, st.Retry.GaveUp)
	gauge(d.retryWaiting, float64(st.Retry.Waiting))
	p := st.Supervisor
	gauge(d.stuck, float64(s.Stuck))
	counter(d.fenced, s.Fenced+p.StaleWrites)
	gauge(d.workers, float64(s.Workers))
	degraded := 0.0
	if s.Degraded {
		degraded = 1
	}
	gauge(d.degraded, degraded)
	gauge(d.active, float64(p.Active))
	gauge(d.entries, float64(p.Entries))
	gauge(d.hydrating, float64(p.Hydrating))
	gauge(d.waiting, float64(p.Waiting))
	gauge(d.unsaved, float64(p.Unsaved))
	counter(d.superseded, p.Superseded)
	counter(d.recommitted, p.Recommitted)
	counter(d.commits, p.Commits)
	counter(d.commitFails, p.CommitFailures)
	counter(d.groups, p.Store.Groups)
	counter(d.groupWrites, p.Store.Writes)
	leader := 0.0
	if st.Leader {
		leader = 1
	}
	gauge(d.leader, leader)
	gauge(d.term, float64(c.n.RaftInfo().Term))
	byStatus := map[string]int{}
	for _, s := range []membership.Status{membership.StatusAlive, membership.StatusSuspect, membership.StatusDead, membership.StatusLeft} {
		byStatus[s.String()] = 0
	}
	for _, m := range c.n.Members() {
		byStatus[m.Status.String()]++
	}
	for status, v := range byStatus {
		gauge(d.members, float64(v), status)
	}
	t := st.Transport
	counter(d.frames, t.FramesSent, "sent")
	counter(d.frames, t.FramesReceived, "received")
	counter(d.bytes, t.BytesSent, "sent")
	counter(d.bytes, t.BytesReceived, "received")
	counter(d.links, t.LinksUp, "up")
	counter(d.links, t.LinksDown, "down")
	counter(d.linkErrs, t.QueueFull, "queue_full")
	counter(d.linkErrs, t.Dropped, "dropped")
	counter(d.linkErrs, t.Oversized, "oversized")
	counter(d.linkErrs, t.Malformed, "malformed")
	counter(d.linkErrs, t.HelloRejected, "hello_rejected")
	counter(d.linkErrs, t.SendsRefused, "send_refused")
	counter(d.rejected, st.Gossip.Undecryptable, membership.CauseUndecryptable)
	counter(d.rejected, st.Gossip.Malformed, membership.CauseMalformed)
	counter(d.rejected, t.TLSRejected, "tls_rejected")
	counter(d.rejected, t.HelloRejected, "hello_rejected")
	counter(d.rejected, t.NotMember, "not_member")
	gauge(d.unproven, float64(st.Unproven))
	counter(d.proofsFailed, st.ProofsFailed)
	for _, v := range c.n.PolicyViews() {
		gauge(d.policyDissent, float64(len(v.Differ)), v.Kind)
	}
	for _, l := range c.n.ReplicationLag() {
		gauge(d.replLag, l.Oldest.Seconds(), l.Follower)
		gauge(d.replPending, float64(l.Queued+l.InFlight), l.Follower)
	}
	ready := 0.0
	if c.n.Ready() {
		ready = 1
	}
	gauge(d.ready, ready)
}
