package stockctl

import (
	"bytes"
	"encoding/json"
	"io"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
)

// report is the result of a command: its text with -o text (the default), its JSON or YAML with -o json
// or -o yaml (the same fields, durations in milliseconds: every such field ends in _ms).
type report interface {
	writeText(w io.Writer)
}

// wideReport is a report with more columns for -o wide; a report without them shows its text.
type wideReport interface {
	writeWide(w io.Writer)
}

func (a *app) emit(r report) error {
	switch a.opts.output {
	case "json":
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "yaml":
		return writeYAML(a.stdout, r)
	case "wide":
		if wide, ok := r.(wideReport); ok {
			wide.writeWide(a.stdout)
			return nil
		}
	}
	r.writeText(a.stdout)
	return nil
}

// writeYAML writes r as YAML with the fields and order of its JSON: JSON is YAML, so the JSON document is
// read as a YAML node and written again in block style.
func writeYAML(w io.Writer, r report) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var node yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(doc)).Decode(&node); err != nil {
		return err
	}
	blockStyle(&node)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle drops the flow style and quotes of JSON; the encoder quotes a string that needs it.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
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
