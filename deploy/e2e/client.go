package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// api talks to the nodes' HTTP APIs through their loopback ports.
type api struct {
	hc    *http.Client
	token string
	base  map[string]string // node -> http://127.0.0.1:port
}

// outcome classifies a request's result for the figures.
type outcome string

const (
	okOutcome     outcome = "ok"
	unavailable   outcome = "unavailable"    // 503: process unavailable (owner down, handoff)
	deadline      outcome = "deadline"       // 504
	refused       outcome = "refused"        // 429
	gatewayDown   outcome = "gateway-down"   // the node we asked did not answer
	clientTimeout outcome = "client-timeout" // no answer within the client's timeout
	otherError    outcome = "other"
)

type result struct {
	status  int
	body    []byte
	outcome outcome
	err     error
	latency time.Duration
}

func (a *api) do(ctx context.Context, node, method, path string, body string, timeout time.Duration) result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base[node]+path, rd)
	if err != nil {
		return result{outcome: otherError, err: err}
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := a.hc.Do(req)
	r := result{latency: time.Since(start)}
	if err != nil {
		r.err = err
		var ne net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
			r.outcome = clientTimeout
		default:
			r.outcome = gatewayDown
		}
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	r.body, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	r.latency = time.Since(start)
	switch {
	case resp.StatusCode < 300:
		r.outcome = okOutcome
	case resp.StatusCode == http.StatusServiceUnavailable:
		r.outcome = unavailable
	case resp.StatusCode == http.StatusGatewayTimeout:
		r.outcome = deadline
	case resp.StatusCode == http.StatusTooManyRequests:
		r.outcome = refused
	default:
		r.outcome = otherError
	}
	if r.outcome != okOutcome {
		r.err = fmt.Errorf("%s %s via %s: %d %s", method, path, node, resp.StatusCode, bytes.TrimSpace(r.body))
	}
	return r
}

// add asks counter/key to add n and returns the value after it.
func (a *api) add(ctx context.Context, node, key string, n int64) (int64, result) {
	r := a.do(ctx, node, http.MethodPost, "/v1/actors/counter/"+key+"/ask", fmt.Sprintf(`{"Add":{"n":%d}}`, n), 3*time.Second)
	return counterValue(r)
}

// get asks counter/key for its value.
func (a *api) get(ctx context.Context, node, key string) (int64, result) {
	r := a.do(ctx, node, http.MethodPost, "/v1/actors/counter/"+key+"/ask", `{"Get":null}`, 3*time.Second)
	return counterValue(r)
}

func counterValue(r result) (int64, result) {
	if r.outcome != okOutcome {
		return 0, r
	}
	var v struct {
		N *int64 `json:"n"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil || v.N == nil {
		r.outcome, r.err = otherError, fmt.Errorf("counter reply %q: %v", r.body, err)
		return 0, r
	}
	return *v.N, r
}

// getRetry is get, retried for a while on errors (a key whose owner
// just changed may be briefly unavailable).
func (a *api) getRetry(ctx context.Context, node, key string) (int64, result) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, r := a.get(ctx, node, key)
		if r.outcome == okOutcome || time.Now().After(deadline) || ctx.Err() != nil {
			return v, r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tell sends counter/key an Add without waiting for it.
func (a *api) tell(ctx context.Context, node, key string, n int64) result {
	return a.do(ctx, node, http.MethodPost, "/v1/actors/counter/"+key+"/tell", fmt.Sprintf(`{"Add":{"n":%d}}`, n), 3*time.Second)
}

type actorStatus struct {
	Kind        string `json:"kind"`
	Key         string `json:"key"`
	State       string `json:"state"`
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	Active      bool   `json:"active"`
}

func (a *api) status(ctx context.Context, node, kind, key string) (actorStatus, error) {
	var s actorStatus
	r := a.do(ctx, node, http.MethodGet, "/v1/actors/"+kind+"/"+key, "", 3*time.Second)
	if r.outcome != okOutcome {
		return s, r.err
	}
	return s, json.Unmarshal(r.body, &s)
}

func (a *api) passivate(ctx context.Context, node, kind, key string) error {
	r := a.do(ctx, node, http.MethodPost, "/v1/actors/"+kind+"/"+key+"/passivate", "", 10*time.Second)
	return r.err
}

type placementView struct {
	Leader     string `json:"leader"`
	Epoch      uint64 `json:"epoch"`
	Unassigned int    `json:"unassigned"`
	Moving     int    `json:"moving"`
	// UnderReplicated: assigned shards whose in-sync set is not whole.
	UnderReplicated int `json:"under_replicated"`
	Nodes           []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Shards int    `json:"shards"`
	} `json:"nodes"`
}

func (a *api) placement(ctx context.Context, node string) (placementView, error) {
	var p placementView
	r := a.do(ctx, node, http.MethodGet, "/v1/placement", "", 3*time.Second)
	if r.outcome != okOutcome {
		return p, r.err
	}
	return p, json.Unmarshal(r.body, &p)
}

func (a *api) ready(ctx context.Context, node string) bool {
	r := a.do(ctx, node, http.MethodGet, "/readyz", "", 2*time.Second)
	return r.outcome == okOutcome
}
