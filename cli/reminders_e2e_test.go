package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/httpapi"
)

// The end-to-end test's reminder part: tickers (the demo kind with a
// durable reminder) whose owner is killed with SIGKILL must tick on the
// new owner within the failover time plus one period, and lose no tick
// they had acknowledged.

// tickerPeriod is the tickers' reminder period, the shortest the agent
// allows.
const tickerPeriod = time.Second

// tickerReply is the ticker's JSON reply (demo.TickerStatus).
type tickerReply struct {
	Running         bool  `json:"running"`
	Ticks           int64 `json:"ticks"`
	LastSeq         int64 `json:"lastSeq"`
	LastScheduledMs int64 `json:"lastScheduledMs"`
}

// askTicker asks ticker/key msg through n's HTTP API.
func askTicker(hc *http.Client, n *e2eNode, key, msg string) (tickerReply, error) {
	var r tickerReply
	resp, err := hc.Post(n.addr()+"/v1/actors/ticker/"+key+"/ask", "application/json", strings.NewReader(msg))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("ticker/%s: %s: %s", key, resp.Status, strings.TrimSpace(b.String()))
	}
	return r, json.Unmarshal(b.Bytes(), &r)
}

// victimTickers starts tickers until want of them are owned by victim,
// and waits until each has ticked once. It returns their keys and the
// last reply read of each: what the ticker acknowledged before the kill.
func victimTickers(t *testing.T, c *e2eCluster, via, victim *e2eNode, want int) map[string]tickerReply {
	t.Helper()
	hc := &http.Client{Timeout: 15 * time.Second}
	got := map[string]tickerReply{}
	for i := 0; len(got) < want; i++ {
		if i == 200 {
			t.Fatalf("none of 200 tickers is owned by %s", victim.name)
		}
		key := fmt.Sprintf("v%d", i)
		var st httpapi.StatusBody
		if err := json.Unmarshal([]byte(c.must("status", "ticker/"+key, "--json", "--addr", via.addr())), &st); err != nil {
			t.Fatal(err)
		}
		if st.Node != victim.name {
			continue
		}
		if _, err := askTicker(hc, via, key, fmt.Sprintf(`{"Start":{"periodMs":%d}}`, tickerPeriod.Milliseconds())); err != nil {
			t.Fatal(err)
		}
		got[key] = tickerReply{}
	}
	waitFor(t, 30*time.Second, "each ticker's first tick", func() bool {
		for key := range got {
			r, err := askTicker(hc, via, key, `{"Get":null}`)
			if err != nil || r.Ticks == 0 {
				return false
			}
			got[key] = r
		}
		return true
	})
	return got
}

// tickerRecovery is when, after the kill, a ticker first answered and
// first showed a tick scheduled after the kill (which only the new owner
// can have fired).
type tickerRecovery struct {
	key              string
	answered, ticked time.Duration
	err              error
}

// watchTickers polls each ticker through the survivors from killed on
// until it shows a tick scheduled after the kill.
func watchTickers(before map[string]tickerReply, survivors []*e2eNode, killed time.Time) []tickerRecovery {
	hc := &http.Client{Timeout: 3 * time.Second}
	var mu sync.Mutex
	var out []tickerRecovery
	var wg sync.WaitGroup
	i := 0
	for key, b := range before {
		via := survivors[i%len(survivors)]
		i++
		wg.Go(func() {
			rec := tickerRecovery{key: key}
			defer func() { mu.Lock(); out = append(out, rec); mu.Unlock() }()
			for time.Since(killed) < 60*time.Second {
				r, err := askTicker(hc, via, key, `{"Get":null}`)
				if err == nil {
					if rec.answered == 0 {
						rec.answered = time.Since(killed)
					}
					if r.Ticks < b.Ticks || r.LastSeq < b.LastSeq || !r.Running {
						rec.err = fmt.Errorf("ticker/%s after the kill: %+v, before it %+v: an acknowledged tick was lost", key, r, b)
						return
					}
					if r.LastScheduledMs > killed.UnixMilli() {
						rec.ticked = time.Since(killed)
						return
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			rec.err = fmt.Errorf("ticker/%s: no tick scheduled after the kill within 60 s (answered after %v)", key, rec.answered)
		})
	}
	wg.Wait()
	return out
}

// checkTickerRecovery fails unless every ticker ticked on the new owner
// within the time its identity took to answer again (the failover) plus
// one period. The slack covers the poll's granularity, the tick's own
// turn and commit, and one retry of a tick refused at first.
func checkTickerRecovery(t *testing.T, c *e2eCluster, recs []tickerRecovery, victim string, via *e2eNode) {
	t.Helper()
	const slack = 2 * time.Second // also one retry of a tick refused while the lease settles (RetryAfter)
	for _, r := range recs {
		switch {
		case r.err != nil:
			t.Error(r.err)
		case r.ticked > r.answered+tickerPeriod+slack:
			t.Errorf("ticker/%s: answered %v after the kill, ticked on the new owner only %v after it (more than one period %v plus %v later)",
				r.key, r.answered.Round(time.Millisecond), r.ticked.Round(time.Millisecond), tickerPeriod, slack)
		default:
			t.Logf("ticker/%s: answered again %v after kill -9 of its owner, ticked on the new owner after %v",
				r.key, r.answered.Round(time.Millisecond), r.ticked.Round(time.Millisecond))
		}
		if out := c.must("reminders", "ticker/"+r.key, "--addr", via.addr()); strings.Contains(out, " on "+victim+":") || !strings.Contains(out, "tick ") {
			t.Errorf("tempest reminders ticker/%s after the kill of %s:\n%s", r.key, victim, out)
		}
	}
}
