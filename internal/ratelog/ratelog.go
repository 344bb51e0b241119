// Package ratelog logs bursts of like events, such as traffic from
// unauthenticated or misconfigured peers, as at most one line per cause
// and interval, with a count, instead of one line per event: a flood of
// bad packets must neither fill the disk nor drown the lines that matter.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Attribute keys of the lines a Limiter writes.
const (
	KeyCause   = "cause"
	KeyDropped = "count"
	KeyTotal   = "total"
)

// Limiter counts events by cause and logs one of them at a time. The
// first event of a cause is logged at once; later ones only once the
// interval since the previous line of that cause has passed, the line
// then saying how many events there were since the previous line (the
// one logged included) and in total. Counts are exact whatever is
// logged. It starts no goroutine: the events of a burst's last interval
// are reported by the next line of their cause, and by Counts at any
// time. Safe for concurrent use.
type Limiter struct {
	log   *slog.Logger
	level slog.Level
	msg   string
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	causes map[string]*cause
}

type cause struct {
	total, since uint64
	last         time.Time
	logged       bool
}

// New returns a Limiter writing msg at level to log (nil: discard),
// at most once per every and cause, reading time from now (nil: the
// wall clock).
func New(log *slog.Logger, level slog.Level, msg string, every time.Duration, now func() time.Time) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{log: log, level: level, msg: msg, every: every, now: now, causes: map[string]*cause{}}
}

// Note counts one event of name and logs it with attrs when its line is
// due.
func (l *Limiter) Note(name string, attrs ...slog.Attr) {
	now := l.now()
	l.mu.Lock()
	c := l.causes[name]
	if c == nil {
		c = &cause{}
		l.causes[name] = c
	}
	c.total++
	c.since++
	due := !c.logged || now.Sub(c.last) >= l.every
	var since, total uint64
	if due {
		since, total = c.since, c.total
		c.since, c.last, c.logged = 0, now, true
	}
	l.mu.Unlock()
	if !due || !l.log.Enabled(context.Background(), l.level) {
		return
	}
	all := make([]slog.Attr, 0, 3+len(attrs))
	all = append(all, slog.String(KeyCause, name), slog.Uint64(KeyDropped, since), slog.Uint64(KeyTotal, total))
	all = append(all, attrs...)
	l.log.LogAttrs(context.Background(), l.level, l.msg, all...)
}

// Count returns how many events of name were noted.
func (l *Limiter) Count(name string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.causes[name]; c != nil {
		return c.total
	}
	return 0
}
