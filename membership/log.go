package membership

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"sync"

	"github.com/tempest-actors/tempest/internal/ratelog"
)

// Log attribute keys.
const (
	logKeyNode   = "node"
	logKeyPeer   = "peer"
	logKeyAddr   = "addr"
	logKeyErr    = "err"
	logKeySource = "source"
)

// newStdLogger returns a *log.Logger (what memberlist accepts) whose lines
// go to l at the level named by memberlist's "[LEVEL] " prefix; lines
// about dropped traffic go to drops instead, counted and rate-limited.
func newStdLogger(l *slog.Logger, drops *ratelog.Limiter) *log.Logger {
	return log.New(&slogWriter{l: l, drops: drops}, "", 0)
}

// slogWriter turns memberlist's log lines, "[WARN] memberlist: text", into
// slog records. log.Logger serializes writes, but the mutex keeps the writer
// safe on its own.
type slogWriter struct {
	mu    sync.Mutex
	l     *slog.Logger
	drops *ratelog.Limiter // nil: no classification
}

var _ io.Writer = (*slogWriter)(nil)

func (w *slogWriter) Write(p []byte) (int, error) {
	level, msg := parseLogLine(p)
	if w.drops != nil {
		if cause, ok := dropCause([]byte(msg)); ok {
			w.drops.Note(cause, slog.String("detail", msg), slog.String(logKeySource, "memberlist"))
			return len(p), nil
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.l.Enabled(context.Background(), level) {
		w.l.LogAttrs(context.Background(), level, msg, slog.String(logKeySource, "memberlist"))
	}
	return len(p), nil
}

// parseLogLine splits a memberlist log line into a level and the message
// without the level tag, the "memberlist: " prefix and the newline. Lines
// without a known tag are logged at Info; errors on the node's own closed
// sockets (at shutdown) at Debug.
func parseLogLine(p []byte) (slog.Level, string) {
	p = bytes.TrimRight(p, "\r\n")
	level := slog.LevelInfo
	if len(p) > 0 && p[0] == '[' {
		if end := bytes.IndexByte(p, ']'); end > 0 {
			known := true
			switch string(p[1:end]) {
			case "TRACE", "DEBUG":
				level = slog.LevelDebug
			case "INFO":
				level = slog.LevelInfo
			case "WARN", "WARNING":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			default:
				known = false
			}
			if known {
				p = bytes.TrimLeft(p[end+1:], " ")
			}
		}
	}
	p = bytes.TrimPrefix(p, []byte("memberlist: "))
	if level > slog.LevelDebug && bytes.Contains(p, closedConn) {
		// A send or read on this node's own socket after it closed it:
		// the node is shutting down, nothing an operator must act on.
		level = slog.LevelDebug
	}
	if level > slog.LevelDebug && bytes.HasPrefix(p, failedErrorAnswer) {
		// memberlist answers a stream it dropped (already counted and
		// logged by its cause) with an error message; a sender that
		// reset the connection makes that answer fail, once per stream.
		level = slog.LevelDebug
	}
	return level, string(p)
}

// closedConn is the text of net.ErrClosed, which memberlist only formats
// into its lines.
var closedConn = []byte("use of closed network connection")

// failedErrorAnswer starts memberlist's line about an error answer to a
// stream it could not read that it could not send.
var failedErrorAnswer = []byte("Failed to send error: ")
