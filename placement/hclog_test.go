package placement

import (
	"context"
	"log/slog"
	"sync"
	"testing"

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
		newHCLog(slog.New(&r), "raft").Log(tc.level, tc.msg, "peer", "n2")
		if len(r.recs) != 1 {
			t.Fatalf("%q: %d records, want 1", tc.msg, len(r.recs))
		}
		if got := r.recs[0].Level; got != tc.want {
			t.Errorf("%s %q logged at %v, want %v", tc.level, tc.msg, got, tc.want)
		}
	}
}
