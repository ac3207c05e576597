package config

import (
	"io"
	"log/slog"
	"os"
)

// Logger logs text to a terminal and JSON otherwise (to a log collector).
func Logger(w io.Writer) *slog.Logger {
	if IsTerminal(w) {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
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
