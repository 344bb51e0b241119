package placement

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// recorder keeps the records a logger writes.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func TestHCLogLevels(t *testing.T) {
	for _, tc := range []struct {
		level hclog.Level
		msg   string
		want  slog.Level
	}{
		// Transient peer and election messages: one level down.
		{hclog.Error, "failed to heartbeat to", slog.LevelWarn},
		{hclog.Error, "failed to appendEntries to", slog.LevelWarn},
		{hclog.Warn, "failed to contact", slog.LevelInfo},
		{hclog.Warn, "heartbeat timeout reached, starting election", slog.LevelInfo},
		{hclog.Warn, "appendEntries rejected, sending older logs", slog.LevelInfo},
		// Everything else keeps its level; raft's Info is Debug.
		{hclog.Warn, "failed to contact quorum of nodes, stepping down", slog.LevelWarn},
		{hclog.Error, "failed to append to logs", slog.LevelError},
		{hclog.Error, "failed to take snapshot", slog.LevelError},
		{hclog.Info, "entering follower state", slog.LevelDebug},
	} {
		var r recorder
		newHCLog(slog.New(&r), "raft", time.Now).Log(tc.level, tc.msg, "peer", "n2")
		if len(r.recs) != 1 {
			t.Fatalf("%q: %d records, want 1", tc.msg, len(r.recs))
		}
		if got := r.recs[0].Level; got != tc.want {
			t.Errorf("%s %q logged at %v, want %v", tc.level, tc.msg, got, tc.want)
		}
	}
}

// A transient message about one peer is logged once per transientEvery,
// the next line counting those left out; another peer's, or a message
// that is not transient, is not held back.
func TestHCLogTransientRepeatsLimited(t *testing.T) {
	now := time.Unix(1000, 0)
	var r recorder
	l := newHCLog(slog.New(&r), "raft", func() time.Time { return now })
	named := l.Named("wal") // shares the limit
	for range 5 {
		l.Error("failed to appendEntries to", "peer", "n2", "backoff time", time.Second)
	}
	named.Error("failed to appendEntries to", "peer", "n2")
	l.Error("failed to appendEntries to", "peer", "n3")
	l.Error("failed to append to logs", "peer", "n2")
	l.Error("failed to append to logs", "peer", "n2")
	if len(r.recs) != 4 {
		t.Fatalf("%d records, want 4 (one per transient message and peer, every other one)", len(r.recs))
	}
	now = now.Add(transientEvery)
	l.Error("failed to appendEntries to", "peer", "n2")
	if len(r.recs) != 5 {
		t.Fatalf("%d records after %v, want 5", len(r.recs), transientEvery)
	}
	repeated := int64(-1)
	r.recs[4].Attrs(func(a slog.Attr) bool {
		if a.Key == "repeated" {
			repeated = a.Value.Int64()
		}
		return true
	})
	if repeated != 5 {
		t.Fatalf("the line after the limit says %d repeated, want 5", repeated)
	}
}
