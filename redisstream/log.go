package redisstream

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// logHandler writes the group reader's log records (log/slog) to a Watermill LoggerAdapter: errors with
// the record's "err" attribute as the error, warnings as info (Watermill has no warning level), the rest as
// debug.
type logHandler struct {
	logger watermill.LoggerAdapter
	attrs  []slog.Attr
}

func (h logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h logHandler) Handle(_ context.Context, r slog.Record) error {
	fields := make(watermill.LogFields, len(h.attrs)+r.NumAttrs())
	add := func(a slog.Attr) bool {
		fields[a.Key] = a.Value.Any()
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	switch {
	case r.Level >= slog.LevelError:
		err, _ := fields["err"].(error)
		delete(fields, "err")
		h.logger.Error(r.Message, err, fields)
	case r.Level >= slog.LevelWarn:
		h.logger.Info(r.Message, fields)
	default:
		h.logger.Debug(r.Message, fields)
	}
	return nil
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{logger: h.logger, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)}
}

// WithGroup is not used by the reader; the attributes stay flat.
func (h logHandler) WithGroup(string) slog.Handler { return h }
