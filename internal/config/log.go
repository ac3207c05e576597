package config

import (
	"io"
	"log/slog"
	"os"
)

// Logger logs text to a terminal and JSON otherwise (to a log collector). Durations are written as Go
// writes them ("3s", "1.5ms") in both: slog's JSON handler would write nanoseconds (3000000000).
func Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{ReplaceAttr: durationAsString}
	if IsTerminal(w) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

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
