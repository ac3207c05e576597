package stockctl

import (
	"encoding/json"
	"io"
	"text/tabwriter"
	"time"
)

// report is the result of a command: JSON with --json, its text otherwise.
type report interface {
	writeText(w io.Writer)
}

func (a *app) emit(r report) error {
	if a.opts.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	r.writeText(a.stdout)
	return nil
}

// table writes aligned columns; call Flush.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// millis is a duration in whole milliseconds, for JSON.
func millis(d time.Duration) int64 { return d.Milliseconds() }

// human prints a duration in milliseconds rounded for reading.
func human(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// dash stands for an empty value in a table.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
