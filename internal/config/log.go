package config

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Logger logs text to a terminal and JSON otherwise (to a log collector), records of level and above.
// Durations are written as Go writes them ("3s", "1.5ms") in both: slog's JSON handler would write
// nanoseconds (3000000000).
func Logger(w io.Writer, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{ReplaceAttr: durationAsString, Level: level}
	if IsTerminal(w) {
		return slog.New(traced{slog.NewTextHandler(w, opts)})
	}
	return slog.New(traced{slog.NewJSONHandler(w, opts)})
}

// traced adds the trace_id and span_id of a record's context (a log line written while an order is
// handled, with the *Context methods) to the record, so a log line leads to the order's trace.
type traced struct{ slog.Handler }

func (h traced) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traced) WithAttrs(attrs []slog.Attr) slog.Handler { return traced{h.Handler.WithAttrs(attrs)} }

func (h traced) WithGroup(name string) slog.Handler { return traced{h.Handler.WithGroup(name)} }

// durationAsString is a slog ReplaceAttr that writes a time.Duration as its String ("3s").
func durationAsString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// IsTerminal tells whether w is a terminal (for progress bars and human-readable logs).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Progress is where a progress bar goes: standard error when it is a terminal, nowhere (nil) otherwise.
func Progress() io.Writer {
	if IsTerminal(os.Stderr) {
		return os.Stderr
	}
	return nil
}

// ParseLogLevel reads LOG_LEVEL: debug, info, warn or error.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil || strings.ContainsAny(s, "+-") {
		return 0, fmt.Errorf("invalid LOG_LEVEL %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// CaptureLogs makes every line that the libraries write on their own a record of l, so that a process's
// output stays one record a line (JSON when l is): go-redis's (a pool that cannot dial), OpenTelemetry's
// (an exporter that cannot reach its collector: its error handler and its logger) and the standard log
// package's, as warnings.
func CaptureLogs(l *slog.Logger) {
	redis.SetLogger(RedisLogger{L: l})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { l.Warn(err.Error(), "component", "opentelemetry") }))
	otel.SetLogger(logr.FromSlogHandler(l.With("component", "opentelemetry").Handler()))
	log.SetFlags(0)
	log.SetOutput(slog.NewLogLogger(l.With("component", "log").Handler(), slog.LevelWarn).Writer())
}

// RedisLogger is a go-redis logger (redis.SetLogger) that writes go-redis's lines (a pool that cannot
// dial, a connection given up) as warnings of l, so a process's output stays one record a line.
type RedisLogger struct{ L *slog.Logger }

// Printf logs one go-redis line.
func (r RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.L.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
