// Package httpapi is a Tempest node's HTTP API as a handler a program
// mounts on its own server: the admin endpoints (/v1/members,
// /v1/placement, /v1/manifest, /v1/actors/{kind}/{key} status and
// passivation, the inventory /v1/actors?kind=K, an identity's durable
// reminders under /v1/actors/{kind}/{key}/reminders), the JSON gateway (POST /v1/actors/{kind}/{key}/ask and
// /tell for every kind registered with a gateway schema), /metrics and
// the /healthz and /readyz probes. The tempest binary's agent serves the
// same handler, so the `tempest` client commands work against any
// program that mounts it.
//
//	met := httpapi.NewMetrics(version)
//	cfg := tempest.Config{Name: "n1", Events: met.Event, ...}
//	cfg.Scheduler.Latency = met
//	n, _ := tempest.New(cfg)
//	// register kinds, then:
//	_ = n.Start(ctx)
//	met.Attach(n)
//	api, _ := httpapi.New(httpapi.Config{Node: n, Token: token, Metrics: met})
//	http.Handle("/", api.Handler())
//
// Every path but the probes (and /metrics when Config.MetricsPublic)
// requires the bearer token when one is configured, and so does
// OPTIONS * when served by Server.HTTPServer. Errors have a JSON body
// {"error": text, "code": code}; the codes and HTTP statuses are listed
// in docs/operations.md, with the few answers Go's HTTP server gives
// itself, in plain text, to requests it cannot parse. The response body
// types (MembersBody, PlacementBody, StatusBody, ...) are exported for
// clients.
package httpapi
