package placement

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets raft and raft-wal log through the injected slog
// logger. Raft's Info chatter is lowered to Debug: a healthy cluster
// should be quiet at Info. Raft's transient peer messages (a peer that
// does not answer for a moment, an election, a follower catching up) go
// one level down as well (see transient), so Warn and Error stay for
// what an operator must look at, and each is logged at most once per
// transientEvery for each peer it names, the line saying how many were
// left out since (raft retries a peer that is down twice a second).
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []interface{}
	rep  *repeats // shared by the adapter's Named and With copies
}

var _ hclog.Logger = (*hclogAdapter)(nil)

// newHCLog returns the adapter; now is the clock of its repeat limit.
func newHCLog(l *slog.Logger, name string, now func() time.Time) hclog.Logger {
	return &hclogAdapter{l: l, name: name, rep: &repeats{now: now, seen: map[repeatKey]*repeat{}}}
}

// transientEvery is how often one transient message about one peer is
// logged.
const transientEvery = 10 * time.Second

// repeats limits transient messages: one line per message and peer
// every transientEvery.
type repeats struct {
	now  func() time.Time
	mu   sync.Mutex
	seen map[repeatKey]*repeat
}

type repeatKey struct{ msg, peer string }

type repeat struct {
	last    time.Time
	skipped int
}

// admit reports whether a record of msg about peer is logged now, and how
// many were left out since the last one that was.
func (r *repeats) admit(msg, peer string) (bool, int) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := repeatKey{msg, peer}
	p := r.seen[k]
	if p == nil {
		if len(r.seen) >= 4096 { // peers come and go: forget them all at once
			clear(r.seen)
		}
		r.seen[k] = &repeat{last: now}
		return true, 0
	}
	if now.Sub(p.last) < transientEvery {
		p.skipped++
		return false, 0
	}
	skipped := p.skipped
	p.last, p.skipped = now, 0
	return true, skipped
}

// peerOf is the peer a raft record names (its "peer", "target", "from"
// or "candidate" argument), or "".
func peerOf(args []interface{}) string {
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "peer", "target", "from", "candidate":
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

func toSlog(lv hclog.Level) slog.Level {
	switch lv {
	case hclog.Trace, hclog.Debug, hclog.Info:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// transient lists raft's messages about peers and elections that a
// healthy cluster produces whenever a node starts, stops, restarts or
// briefly stalls: raft logs them at Warn or Error, they are logged one
// level lower (Error as Warn, Warn as Info). Raft's messages about its
// own storage, snapshots and configuration keep their level.
var transient = map[string]bool{
	// A peer did not answer an RPC; replication retries with back-off.
	"failed to appendEntries to":                true,
	"failed to heartbeat to":                    true,
	"failed to pipeline appendEntries":          true,
	"failed to start pipeline replication to":   true,
	"failed to make requestVote RPC":            true,
	"peer has newer term, stopping replication": true,
	"failed to contact":                         true,
	// Elections and catch-up, normal at start-up and after a failure.
	"no known peers, aborting election":                          true,
	"heartbeat timeout reached, starting election":               true,
	"Election timeout reached, restarting election":              true,
	"new leader elected, stepping down":                          true,
	"failed to get previous log":                                 true,
	"previous log term mis-match":                                true,
	"appendEntries rejected, sending older logs":                 true,
	"duplicate requestVote from":                                 true,
	"rejecting vote request since we have a leader":              true,
	"rejecting vote request since our last term is greater":      true,
	"rejecting vote request since our last index is greater":     true,
	"rejecting pre-vote request since we have a leader":          true,
	"rejecting pre-vote request since our last term is greater":  true,
	"rejecting pre-vote request since our last index is greater": true,
}

// recordLevel is the slog level of one raft record.
func recordLevel(lv hclog.Level, msg string) slog.Level {
	if transient[msg] {
		switch lv {
		case hclog.Error:
			return slog.LevelWarn
		case hclog.Warn:
			return slog.LevelInfo
		}
	}
	return toSlog(lv)
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...interface{}) {
	lv := recordLevel(level, msg)
	ctx := context.Background()
	if !h.l.Enabled(ctx, lv) {
		return
	}
	skipped := 0
	if transient[msg] && h.rep != nil {
		var ok bool
		if ok, skipped = h.rep.admit(msg, peerOf(args)); !ok {
			return
		}
	}
	all := make([]interface{}, 0, len(h.args)+len(args)+4)
	if h.name != "" {
		all = append(all, "component", h.name)
	}
	all = append(all, h.args...)
	all = append(all, args...)
	if skipped > 0 {
		all = append(all, "repeated", skipped)
	}
	h.l.Log(ctx, lv, msg, all...)
}

func (h *hclogAdapter) Trace(msg string, args ...interface{}) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...interface{}) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...interface{})  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...interface{})  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...interface{}) { h.Log(hclog.Error, msg, args...) }
func (h *hclogAdapter) IsTrace() bool                         { return false }
func (h *hclogAdapter) IsDebug() bool {
	return h.l.Enabled(context.Background(), slog.LevelDebug)
}
func (h *hclogAdapter) IsInfo() bool               { return h.IsDebug() }
func (h *hclogAdapter) IsWarn() bool               { return h.l.Enabled(context.Background(), slog.LevelWarn) }
func (h *hclogAdapter) IsError() bool              { return h.l.Enabled(context.Background(), slog.LevelError) }
func (h *hclogAdapter) ImpliedArgs() []interface{} { return h.args }
func (h *hclogAdapter) Name() string               { return h.name }
func (h *hclogAdapter) SetLevel(hclog.Level)       {}
func (h *hclogAdapter) GetLevel() hclog.Level      { return hclog.Debug }
func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: h.l, name: name, args: h.args, rep: h.rep}
}
func (h *hclogAdapter) With(args ...interface{}) hclog.Logger {
	return &hclogAdapter{l: h.l, name: h.name, args: append(append([]interface{}{}, h.args...), args...), rep: h.rep}
}
func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return &hclogAdapter{l: h.l, name: name, args: h.args, rep: h.rep}
}
func (h *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}
func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		h.Log(hclog.Info, strings.TrimSpace(string(p)))
		return len(p), nil
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
