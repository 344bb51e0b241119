package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The kill step's reminders: tickers (the demo kind counting the ticks
// of a durable reminder) owned by the node to be killed must tick on
// their new owners within the time each took to answer again plus one
// period, and keep every tick they had acknowledged.

// tickerPeriod is the tickers' reminder period (the nodes' minimum).
const tickerPeriod = time.Second

// tickerSlack covers the poll's interval, the tick's own turn and
// commit on the new owner, and one retry of a tick refused while the new
// owner's lease settles (the engine's RetryAfter, 1 s).
const tickerSlack = 2 * time.Second

type tickerStatus struct {
	Running         bool  `json:"running"`
	Ticks           int64 `json:"ticks"`
	LastSeq         int64 `json:"lastSeq"`
	LastScheduledMs int64 `json:"lastScheduledMs"`
}

func (a *api) ticker(ctx context.Context, node, key, msg string) (tickerStatus, result) {
	var s tickerStatus
	r := a.do(ctx, node, http.MethodPost, "/v1/actors/ticker/"+key+"/ask", msg, 3*time.Second)
	if r.outcome != okOutcome {
		return s, r
	}
	if err := json.Unmarshal(r.body, &s); err != nil {
		r.outcome, r.err = otherError, fmt.Errorf("ticker reply %q: %v", r.body, err)
	}
	return s, r
}

// startTickers starts n tickers owned by victim, through via, and waits
// until each has ticked; it returns what each acknowledged last.
func (e *env) startTickers(ctx context.Context, via, victim string, n int) (map[string]tickerStatus, error) {
	out := map[string]tickerStatus{}
	for i := 0; len(out) < n; i++ {
		if i == 500 {
			return nil, fmt.Errorf("none of 500 tickers is owned by %s", victim)
		}
		key := fmt.Sprintf("tick-%d", i)
		st, err := e.api.status(ctx, via, "ticker", key)
		if err != nil {
			return nil, err
		}
		if st.Node != victim {
			continue
		}
		if _, r := e.api.ticker(ctx, via, key, fmt.Sprintf(`{"Start":{"periodMs":%d}}`, tickerPeriod.Milliseconds())); r.err != nil {
			return nil, r.err
		}
		out[key] = tickerStatus{}
	}
	deadline := time.Now().Add(30 * time.Second)
	for key := range out {
		for {
			s, r := e.api.ticker(ctx, via, key, `{"Get":null}`)
			if r.err == nil && s.Ticks > 0 {
				out[key] = s
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("ticker/%s did not tick within 30 s (%+v, %v)", key, s, r.err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return out, nil
}

// tickerRecovery is one ticker after its owner died at t0: when it
// answered again and when it first showed a tick scheduled after t0,
// which only its new owner can have fired.
type tickerRecovery struct {
	key              string
	answered, ticked time.Duration
	err              error
}

// watchTickers polls each ticker through the gateways from the victim's
// death at t0 until it shows a tick scheduled after t0 (for at most 90 s).
func (e *env) watchTickers(ctx context.Context, before map[string]tickerStatus, gateways []string, t0 time.Time) []tickerRecovery {
	var mu sync.Mutex
	var out []tickerRecovery
	var wg sync.WaitGroup
	i := 0
	for key, b := range before {
		via := gateways[i%len(gateways)]
		i++
		wg.Go(func() {
			rec := tickerRecovery{key: key}
			defer func() { mu.Lock(); out = append(out, rec); mu.Unlock() }()
			for time.Since(t0) < 90*time.Second && ctx.Err() == nil {
				s, r := e.api.ticker(ctx, via, key, `{"Get":null}`)
				if r.err == nil {
					if rec.answered == 0 {
						rec.answered = time.Since(t0)
					}
					if s.Ticks < b.Ticks || s.LastSeq < b.LastSeq || !s.Running {
						rec.err = fmt.Errorf("ticker/%s: %+v after the kill, %+v acknowledged before it", key, s, b)
						return
					}
					if s.LastScheduledMs > t0.UnixMilli() {
						rec.ticked = time.Since(t0)
						return
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			rec.err = fmt.Errorf("ticker/%s: no tick scheduled after the kill within 90 s (answered after %v)", key, rec.answered)
		})
	}
	wg.Wait()
	return out
}

// checkTickers reports the tickers' recovery: the slowest tick after the
// kill, and whether each ticked within its failover plus one period.
func checkTickers(rep *report, step string, recs []tickerRecovery) {
	var slowest time.Duration
	bad := 0
	for _, r := range recs {
		switch {
		case r.err != nil:
			bad++
			rep.add(step, "ticker "+r.key, "%v", r.err)
		case r.ticked > r.answered+tickerPeriod+tickerSlack:
			bad++
			rep.add(step, "ticker "+r.key, "answered after %s, ticked only after %s", r.answered.Round(time.Millisecond), r.ticked.Round(time.Millisecond))
		}
		slowest = max(slowest, r.ticked)
	}
	rep.add(step, "reminders", "%d tickers of the victim ticked on the new owners, the last %s after the victim died", len(recs)-bad, slowest.Round(time.Millisecond))
	rep.check(step, bad == 0, "every reminder of the victim ticks on its new owner within its failover + one period (%s) + %s, no acknowledged tick lost (%d of %d failed)",
		tickerPeriod, tickerSlack, bad, len(recs))
}
