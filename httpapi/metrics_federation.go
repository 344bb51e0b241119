package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/prospero/federation"
)

// federationCollector exports the federation protocol's counters (see
// docs/federation.md) at scrape time.
type federationCollector struct{ n *tempest.Node }

var federationDescs = struct {
	messages, answers, malformed, late, unanswered, aborted, promoted *prometheus.Desc
	notices, noticesDropped                                           *prometheus.Desc
	hydrated, hydrateBusy, hydrateRetries, mailBusy, streamsRefused   *prometheus.Desc
}{
	streamsRefused: prometheus.NewDesc("tempest_streams_refused_total",
		"Raft, handoff and replication streams refused because the peer that opened them is not a member (not in the placement table, not a proven gossip member).", nil, nil),
	hydrated: prometheus.NewDesc("tempest_hydrate_warmed_total",
		"Activations started on this node by warm handoffs (an old owner's HydrateRequest).", nil, nil),
	hydrateBusy: prometheus.NewDesc("tempest_hydrate_busy_total",
		"HydrateRequests this node answered BUSY because its hydration backlog was full.", nil, nil),
	hydrateRetries: prometheus.NewDesc("tempest_hydrate_retries_total",
		"BUSY answers to this node's HydrateRequests that it waited out and retried, as the old owner.", nil, nil),
	mailBusy: prometheus.NewDesc("tempest_mail_busy_refusals_total",
		"Mail from peers refused BUSY because it needed an activation while the hydration backlog was full.", nil, nil),
	promoted: prometheus.NewDesc("tempest_handoffs_promoted_total",
		"Planned moves from this node to a follower in the shard's in-sync set, done as a promotion: no actor state shipped.", nil, nil),
	notices: prometheus.NewDesc("tempest_federation_notices_total",
		"Notices from peers this node judged, by outcome (CancelAsk: OK when the ask was dropped, UNKNOWN_ASK when none waited).", []string{"code"}, nil),
	noticesDropped: prometheus.NewDesc("tempest_federation_notices_dropped_total",
		"Notices not sent because the control lane's queue was full.", nil, nil),
	messages: prometheus.NewDesc("tempest_federation_messages_total",
		"Federation requests and notices on the control lanes, by direction.", []string{"direction"}, nil),
	answers: prometheus.NewDesc("tempest_federation_answers_total",
		"Answers this node sent to peers' federation requests, by code (every code but OK is a refusal).", []string{"code"}, nil),
	malformed: prometheus.NewDesc("tempest_federation_malformed_total",
		"Control-lane frames that did not decode (the lane was reset).", nil, nil),
	late: prometheus.NewDesc("tempest_federation_late_answers_total",
		"Answers that arrived for no federation request waiting on their sender (ended already, or sent to another node).", nil, nil),
	unanswered: prometheus.NewDesc("tempest_federation_unanswered_total",
		"Federation requests failed because their link went down before the answer.", nil, nil),
	aborted: prometheus.NewDesc("tempest_federation_handoffs_aborted_total",
		"Handoffs to this node that the old owner aborted.", nil, nil),
}

func (c *federationCollector) Describe(ch chan<- *prometheus.Desc) {
	d := federationDescs
	for _, x := range []*prometheus.Desc{d.messages, d.answers, d.malformed, d.late, d.unanswered, d.aborted, d.promoted, d.notices, d.noticesDropped,
		d.hydrated, d.hydrateBusy, d.hydrateRetries, d.mailBusy, d.streamsRefused} {
		ch <- x
	}
}

func (c *federationCollector) Collect(ch chan<- prometheus.Metric) {
	d := federationDescs
	st := c.n.FederationStats()
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	counter(d.messages, st.Sent, "sent")
	counter(d.messages, st.Received, "received")
	for code, v := range st.Answered {
		counter(d.answers, v, federation.Code(code).String())
	}
	counter(d.malformed, st.Malformed)
	counter(d.late, st.Late)
	counter(d.unanswered, st.Unanswered)
	counter(d.aborted, st.HandoffsAborted)
	counter(d.promoted, st.HandoffsPromoted)
	for _, code := range []federation.Code{federation.CodeOk, federation.CodeUnknownAsk} {
		counter(d.notices, st.Noticed[code], code.String())
	}
	counter(d.noticesDropped, st.NoticesDropped)
	counter(d.hydrated, st.Hydrated)
	counter(d.hydrateBusy, st.HydrateBusy)
	counter(d.hydrateRetries, st.HydrateRetries)
	counter(d.mailBusy, st.MailBusy)
	counter(d.streamsRefused, st.StreamsRefused)
}
