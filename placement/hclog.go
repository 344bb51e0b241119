package placement

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets raft and raft-wal log through the injected slog
// logger. Raft's Info chatter is lowered to Debug: a healthy cluster
// should be quiet at Info.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []interface{}
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLog(l *slog.Logger, name string) hclog.Logger {
	return &hclogAdapter{l: l, name: name}
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

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...interface{}) {
	lv := toSlog(level)
	ctx := context.Background()
	if !h.l.Enabled(ctx, lv) {
		return
	}
	all := make([]interface{}, 0, len(h.args)+len(args)+2)
	if h.name != "" {
		all = append(all, "component", h.name)
	}
	all = append(all, h.args...)
	all = append(all, args...)
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
	return &hclogAdapter{l: h.l, name: name, args: h.args}
}
func (h *hclogAdapter) With(args ...interface{}) hclog.Logger {
	return &hclogAdapter{l: h.l, name: h.name, args: append(append([]interface{}{}, h.args...), args...)}
}
func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return &hclogAdapter{l: h.l, name: name, args: h.args}
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
