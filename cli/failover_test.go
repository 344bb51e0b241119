package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/httpapi"
)

// TestFailoverRealProcesses measures failover on three `tempest agent`
// processes on loopback with the default (LAN) timing: under continuous
// asks to 16 counters through the surviving nodes, a follower and then
// the raft leader are killed with SIGKILL (each restarted afterwards).
// It reports, per kill, how long the keys the victim owned answered
// nothing (kill → first answer), and the longest interruption of a key
// owned by a survivor. It fails if a key does not answer again at all;
// the figures themselves are reported, not asserted (this machine's
// load decides them as much as the code does). Run with TEMPEST_SOAK
// set (make soak).
func TestFailoverRealProcesses(t *testing.T) {
	if testing.Short() || os.Getenv("TEMPEST_SOAK") == "" {
		t.Skip("set TEMPEST_SOAK=1 to measure failover of real processes with the default timing")
	}
	c := newE2ECluster(t, "lan")
	nodes := []*e2eNode{c.start("n1", nil), c.start("n2", nil), c.start("n3", nil)}
	c.waitSettled(t, 90*time.Second, "three ready agents", nodes...)
	for _, role := range []string{"follower", "leader"} {
		f := measureFailover(t, c, nodes, role)
		t.Logf("kill -9 of the %s %s: its %d keys answered again after %s (slowest key); longest interruption of a survivor's key %s; "+
			"placement: new leader after %s, marked down after %s, its shards reassigned after %s; failed asks %s",
			role, f.victim, f.victimKeys, ms(f.victimDown), ms(f.otherDown), ms(f.elected), ms(f.markedDown), ms(f.reassigned), f.failures)
	}
}

// failover is one kill's figures.
type failover struct {
	victim     string
	victimKeys int
	victimDown time.Duration // kill → the last of the victim's keys answers
	otherDown  time.Duration // longest gap between answers of another key
	// As a survivor's placement table showed it: kill → a leader other
	// than the victim, the victim down, the victim owning nothing.
	elected, markedDown, reassigned time.Duration
	failures                        string // failed asks by outcome
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// watchPlacement polls a survivor's placement view until ctx ends and
// records when the victim stopped leading, was marked down and owned
// nothing.
func watchPlacement(ctx context.Context, via *e2eNode, victim string, t0 time.Time, f *failover, done chan<- struct{}) {
	defer close(done)
	hc := &http.Client{Timeout: time.Second}
	for ctx.Err() == nil {
		if resp, err := hc.Get(via.addr() + "/v1/placement"); err == nil {
			var p httpapi.PlacementBody
			if json.NewDecoder(resp.Body).Decode(&p) == nil {
				at := time.Since(t0)
				if f.elected == 0 && p.Leader != "" && p.Leader != victim {
					f.elected = at
				}
				for _, n := range p.Nodes {
					if n.Name != victim {
						continue
					}
					if f.markedDown == 0 && n.Status == "down" {
						f.markedDown = at
					}
					if f.reassigned == 0 && n.Shards == 0 {
						f.reassigned = at
					}
				}
			}
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// measureFailover kills the node in role (follower or leader) under load,
// waits for every key to answer, measures, and restarts the victim.
func measureFailover(t *testing.T, c *e2eCluster, nodes []*e2eNode, role string) failover {
	t.Helper()
	var p httpapi.PlacementBody
	if err := json.Unmarshal([]byte(c.must("placement", "--json", "--addr", nodes[0].addr())), &p); err != nil {
		t.Fatal(err)
	}
	var victim *e2eNode
	for _, n := range nodes {
		if (n.name == p.Leader) == (role == "leader") {
			victim = n
			break
		}
	}
	var gateways []*e2eNode
	for _, n := range nodes {
		if n != victim {
			gateways = append(gateways, n)
		}
	}
	const keys = 16
	owner := map[string]string{}
	for k := range keys {
		key := fmt.Sprintf("f%d", k)
		c.must("ask", "counter/"+key, `{"Add":{"n":1}}`, "--addr", gateways[0].addr())
		var st httpapi.StatusBody
		if err := json.Unmarshal([]byte(c.must("status", "counter/"+key, "--json", "--addr", gateways[0].addr())), &st); err != nil {
			t.Fatal(err)
		}
		owner[key] = st.Node
	}
	l := startAskLoad(gateways, slices.Sorted(maps.Keys(owner)))
	defer l.stop()
	time.Sleep(2 * time.Second) // load before the fault
	f := failover{victim: victim.name}
	l.mu.Lock()
	clear(l.failures)
	l.mu.Unlock()
	t0 := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wctx, wstop := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go watchPlacement(wctx, gateways[0], victim.name, t0, &f, watched)
	<-victim.done
	waitFor(t, 60*time.Second, "every key answering after the kill", func() bool { return l.allAnsweredSince(t0) })
	time.Sleep(2 * time.Second) // interruptions of survivors' keys can show late
	l.stop()
	wstop()
	<-watched
	f.failures = fmt.Sprint(l.failures)
	for key, o := range owner {
		gap := l.longestGap(key, t0)
		if o == victim.name {
			f.victimKeys++
			f.victimDown = max(f.victimDown, gap)
		} else {
			f.otherDown = max(f.otherDown, gap)
		}
	}
	c.start(victim.name, victim)
	c.waitHealed(t, 90*time.Second, victim.name+" back", nodes...)
	return f
}

// askLoad sends Add asks to each key in a loop (one client per key,
// round-robin over the gateways) and records when each answered.
type askLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	// answers[key] are the completion times of successful asks whose
	// request was sent after the previous one completed.
	answers map[string][]time.Time
	sent    map[string][]time.Time // start times, parallel to answers
	// failures counts the failed asks by outcome.
	failures map[string]int
}

func startAskLoad(gateways []*e2eNode, keys []string) *askLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &askLoad{cancel: cancel, answers: map[string][]time.Time{}, sent: map[string][]time.Time{}, failures: map[string]int{}}
	hc := &http.Client{}
	for _, key := range keys {
		l.sent[key], l.answers[key] = nil, nil
	}
	for i, key := range keys {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for j := i; ctx.Err() == nil; j++ {
				gw := gateways[j%len(gateways)]
				start := time.Now()
				outcome := askOnce(ctx, hc, gw.addr(), key)
				l.mu.Lock()
				if outcome == "" {
					l.sent[key] = append(l.sent[key], start)
					l.answers[key] = append(l.answers[key], time.Now())
				} else if ctx.Err() == nil {
					l.failures[outcome]++
				}
				l.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond): // pacing between one client's asks
				}
			}
		}()
	}
	return l
}

// askOnce asks key to add 1 through base; "" if it was answered, else
// the outcome (an HTTP status and error code, or the client's error).
func askOnce(ctx context.Context, hc *http.Client, base, key string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/actors/counter/"+key+"/ask", strings.NewReader(`{"Add":{"n":1}}`))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "client timeout"
		}
		return "transport error"
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &e)
	return fmt.Sprintf("%d %s", resp.StatusCode, e.Code)
}

func (l *askLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// allAnsweredSince: every key has an answer to an ask sent after t0.
func (l *askLoad) allAnsweredSince(t0 time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sent {
		if len(s) == 0 || s[len(s)-1].Before(t0) {
			return false
		}
	}
	return true
}

// longestGap is the longest time after t0 during which key got no
// answer: from max(t0, an answer) to the next answer to an ask sent
// after t0.
func (l *askLoad) longestGap(key string, t0 time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := t0
	var gap time.Duration
	for i, at := range l.answers[key] {
		if l.sent[key][i].Before(t0) {
			if at.After(prev) {
				prev = at
			}
			continue
		}
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return gap
}
