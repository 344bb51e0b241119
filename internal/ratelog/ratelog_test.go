package ratelog_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/internal/ratelog"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestLimiterOneLinePerIntervalAndExactCounts(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Unix(0, 0)}
	l := ratelog.New(slog.New(slog.NewTextHandler(&buf, nil)), slog.LevelWarn, "dropped", time.Minute, clk.now)
	for i := range 10_000 {
		l.Note("a", slog.Int("i", i))
		if i%2 == 0 {
			l.Note("b")
		}
		if i%1000 == 999 {
			clk.add(20 * time.Second) // 10,000 events over 200 s
		}
	}
	if got := l.Count("a"); got != 10_000 {
		t.Errorf("count a = %d, want 10000", got)
	}
	if got := l.Count("b"); got != 5_000 {
		t.Errorf("count b = %d, want 5000", got)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	// 200 s at one line a minute per cause: the first at once, then one
	// per minute passed.
	if len(lines) > 2*(1+200/60) {
		t.Fatalf("%d lines for 15,000 events:\n%s", len(lines), buf.String())
	}
	var sumA int
	for _, ln := range lines {
		if strings.Contains(ln, "cause=a") {
			var n int
			for _, f := range strings.Fields(ln) {
				if v, ok := strings.CutPrefix(f, "count="); ok {
					for _, ch := range v {
						n = n*10 + int(ch-'0')
					}
				}
			}
			sumA += n
		}
	}
	// The lines account for every event up to the last one logged.
	if sumA == 0 || sumA > 10_000 {
		t.Errorf("lines of a count %d events", sumA)
	}
	if !strings.Contains(lines[0], "count=1 total=1") {
		t.Errorf("first line %q, want the first event at once", lines[0])
	}
}
