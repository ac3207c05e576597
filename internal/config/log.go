package config

import (
	"io"
	"log/slog"
	"os"
)

// Logger logs text to a terminal and JSON otherwise (to a log collector).
func Logger(w io.Writer) *slog.Logger {
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return slog.New(slog.NewTextHandler(w, nil))
		}
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}
