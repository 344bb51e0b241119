package main

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// load keeps asking counter Adds of 1 to a fixed set of keys, each key
// owned by one worker so that its asks are sequential: every
// acknowledged reply is the counter's value after that add, so the value
// must never fall below the last acknowledged reply.
type load struct {
	api      *api
	keys     []string
	gateways atomic.Pointer[[]string] // nodes to send requests to
	pace     time.Duration

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	events []event
	model  []keyModel
	// regressionLog describes the first regressions seen.
	regressionLog []string
}

type event struct {
	at      time.Time
	key     int
	outcome outcome
	latency time.Duration
}

// keyModel is what the client knows of one counter.
type keyModel struct {
	lastAcked   int64 // value in the last acknowledged reply
	acked       int   // acknowledged adds
	unknown     int   // adds whose outcome is unknown (error, timeout)
	regressions int   // acknowledged replies below lastAcked+1
}

func newLoad(a *api, prefix string, keys int, pace time.Duration) *load {
	l := &load{api: a, pace: pace, model: make([]keyModel, keys)}
	for i := range keys {
		l.keys = append(l.keys, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return l
}

func (l *load) setGateways(nodes ...string) {
	g := slices.Clone(nodes)
	l.gateways.Store(&g)
}

// start runs workers goroutines until stop.
func (l *load) start(workers int, seed int64) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(w)))
			var mine []int
			for i := w; i < len(l.keys); i += workers {
				mine = append(mine, i)
			}
			for n := 0; ; n++ {
				k := mine[n%len(mine)]
				gws := *l.gateways.Load()
				gw := gws[rng.Intn(len(gws))]
				v, r := l.api.add(ctx, gw, l.keys[k], 1)
				if ctx.Err() != nil {
					return // stopping: the last add's outcome is unknown
				}
				l.record(k, v, r)
				select {
				case <-ctx.Done():
					return
				case <-time.After(l.pace):
				}
			}
		}()
	}
}

func (l *load) record(k int, v int64, r result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event{at: time.Now(), key: k, outcome: r.outcome, latency: r.latency})
	m := &l.model[k]
	if r.outcome != okOutcome {
		m.unknown++
		return
	}
	if v < m.lastAcked+1 {
		m.regressions++
		if len(l.regressionLog) < 20 {
			l.regressionLog = append(l.regressionLog, fmt.Sprintf("%s %s: reply %d after an acknowledged %d",
				time.Now().Format("15:04:05.000"), l.keys[k], v, m.lastAcked))
		}
	}
	m.acked++
	m.lastAcked = max(m.lastAcked, v)
}

func (l *load) stop() {
	if l.cancel != nil {
		l.cancel()
		l.wg.Wait()
		l.cancel = nil
	}
}

// window summarises the events since t0.
type window struct {
	requests    int
	errors      map[outcome]int
	latencies   []time.Duration
	recovery    time.Duration // until every key that failed answered again
	unrecovered int           // keys still failing at the end
	failedKeys  int
}

func (l *load) window(t0 time.Time) window {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := window{errors: map[outcome]int{}}
	lastFail := map[int]time.Time{}
	for _, e := range l.events {
		if e.at.Before(t0) {
			continue
		}
		w.requests++
		if e.outcome != okOutcome {
			w.errors[e.outcome]++
			lastFail[e.key] = e.at
		} else {
			w.latencies = append(w.latencies, e.latency)
		}
	}
	w.failedKeys = len(lastFail)
	for k, lf := range lastFail {
		var ok time.Time
		for _, e := range l.events {
			if e.key == k && e.outcome == okOutcome && e.at.After(lf) {
				ok = e.at
				break
			}
		}
		if ok.IsZero() {
			w.unrecovered++
			continue
		}
		w.recovery = max(w.recovery, ok.Sub(t0))
	}
	return w
}

// answeredAgain is, for each of keys (indices), how long after t0 it
// first answered an ask completed after gone (when its old owner could
// no longer answer it: t0 is when the fault began, gone when it had
// surely taken effect), and the longest of those; ok is false if one of
// them never did.
func (l *load) answeredAgain(keys []int, t0, gone time.Time) (longest time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		var first time.Time
		for _, e := range l.events {
			if e.key == k && e.outcome == okOutcome && e.at.After(gone) {
				first = e.at
				break
			}
		}
		if first.IsZero() {
			return longest, false
		}
		longest = max(longest, first.Sub(t0))
	}
	return longest, true
}

func (w window) errorCount() int {
	n := 0
	for _, c := range w.errors {
		n += c
	}
	return n
}

// settled reports whether, since t0, every key that failed has answered
// again and nothing failed during the last quiet period.
func (l *load) settled(t0 time.Time, quiet time.Duration) bool {
	if time.Since(t0) < quiet {
		return false
	}
	l.mu.Lock()
	var last time.Time
	for _, e := range l.events {
		if e.at.After(t0) && e.outcome != okOutcome {
			last = e.at
		}
	}
	l.mu.Unlock()
	if !last.IsZero() && time.Since(last) < quiet {
		return false
	}
	return l.window(t0).unrecovered == 0
}

// verify reads every counter and compares it with the acknowledged
// updates: lost are acknowledged adds missing from the value. The load
// may still run: each counter's model is taken before its read, so it
// holds only adds acknowledged before the read began, which the read
// must see (one acknowledged during the read need not be in its value).
func (l *load) verify(ctx context.Context, via string) (lost, regressions, checked int, err error) {
	for k, key := range l.keys {
		l.mu.Lock()
		m := l.model[k]
		l.mu.Unlock()
		v, r := l.api.getRetry(ctx, via, key)
		if r.outcome != okOutcome {
			return lost, regressions, checked, r.err
		}
		if v < m.lastAcked {
			lost += int(m.lastAcked - v)
		}
		regressions += m.regressions
		checked++
	}
	return lost, regressions, checked, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

// regressions describes the first acknowledged replies that went
// backwards since the last call, and forgets them.
func (l *load) regressions() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.regressionLog
	l.regressionLog = nil
	return r
}
