package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one run measured and checked; it is written as JSON.
type Report struct {
	Mode     string    `json:"mode"`
	Commit   string    `json:"commit"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Machine  Machine   `json:"machine"`
	Rounds   int       `json:"rounds"`
	Tables   []*Table  `json:"comparisons"`
	Targets  []Target  `json:"targets"`
	Checks   []*Check  `json:"checks"`
	Problems []string  `json:"problems"` // failed checks, one line each; empty when all passed
}

// Table is one comparison: a row per contender, medians over the rounds.
type Table struct {
	ID      string   `json:"id"`
	Title   string   `json:"title"`
	Setup   string   `json:"setup"`
	Columns []Column `json:"columns"`
	Rows    []*Row   `json:"rows"`
	// RatioOf names the column the ratio column compares: median of RatioBase's row / median of this row.
	RatioOf   string `json:"ratio_of"`
	RatioBase string `json:"ratio_base"`
}

// Column is one metric of a table.
type Column struct {
	Key    string `json:"key"`
	Header string `json:"header"`
	Digits int    `json:"digits"`
}

// Row is one contender: its medians and the value of every round.
type Row struct {
	Contender string               `json:"contender"`
	Median    map[string]float64   `json:"median"`
	Rounds    []map[string]float64 `json:"rounds"`
}

// Target is one acceptance target of the issue, judged on the medians.
type Target struct {
	Name   string  `json:"name"`
	Want   string  `json:"want"`
	Got    float64 `json:"got"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	Detail string  `json:"detail,omitempty"`
}

// Check is one correctness check, over every round of a contender.
type Check struct {
	Name   string `json:"name"`
	Runs   int    `json:"runs"`
	Failed int    `json:"failed"`
	Detail string `json:"detail,omitempty"` // the first failure
}

// row returns the row of contender, adding it.
func (t *Table) row(contender string) *Row {
	for _, r := range t.Rows {
		if r.Contender == contender {
			return r
		}
	}
	r := &Row{Contender: contender, Median: map[string]float64{}}
	t.Rows = append(t.Rows, r)
	return r
}

// add records one round of contender.
func (t *Table) add(contender string, values map[string]float64) {
	for k, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) { // JSON has no NaN: a value that could not be measured is absent
			delete(values, k)
		}
	}
	r := t.row(contender)
	r.Rounds = append(r.Rounds, values)
	for _, c := range t.Columns {
		var vs []float64
		for _, round := range r.Rounds {
			if v, ok := round[c.Key]; ok {
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			r.Median[c.Key] = median(vs)
		}
	}
}

// value is the median of column key of contender, NaN when missing.
func (t *Table) value(contender, key string) float64 {
	for _, r := range t.Rows {
		if r.Contender == contender {
			if v, ok := r.Median[key]; ok {
				return v
			}
		}
	}
	return math.NaN()
}

// pairedRatios lists of/base of column key round by round: the contenders ran side by side, so a
// drift of the machine shows in both.
func (t *Table) pairedRatios(of, base, key string) string {
	var a, b *Row
	for _, r := range t.Rows {
		switch r.Contender {
		case of:
			a = r
		case base:
			b = r
		}
	}
	if a == nil || b == nil {
		return "-"
	}
	var parts []string
	for i := range min(len(a.Rounds), len(b.Rounds)) {
		parts = append(parts, format(a.Rounds[i][key]/b.Rounds[i][key], 2))
	}
	return strings.Join(parts, " ")
}

// Print writes the tables, the targets and the checks.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\nstockflow bench at %s, %s mode, medians of %d interleaved rounds, %.0f s\n%s\n", r.Commit, r.Mode,
		r.Rounds, r.Seconds, r.Machine)
	for _, t := range r.Tables {
		t.print(w)
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(w, "\n== targets of issue 8\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, tg := range r.Targets {
			verdict := "met"
			if !tg.Met {
				verdict = "MISSED"
			}
			fmt.Fprintf(tw, "%s\twant %s\tgot %s%s\t%s\t%s\n", tg.Name, tg.Want, format(tg.Got, 2), tg.Unit, verdict, tg.Detail)
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\n== correctness checks\n")
	for _, c := range r.Checks {
		status := "ok  "
		if c.Failed > 0 {
			status = "FAIL"
		}
		fmt.Fprintf(w, "%s %s (%d runs)", status, c.Name, c.Runs)
		if c.Detail != "" {
			fmt.Fprintf(w, ": %s", c.Detail)
		}
		fmt.Fprintln(w)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintf(w, "\n!!!!!!!! %d CORRECTNESS CHECK(S) FAILED !!!!!!!!\n  %s\n", len(r.Problems), strings.Join(r.Problems, "\n  "))
	} else {
		fmt.Fprintf(w, "all %d correctness checks passed\n", len(r.Checks))
	}
}

func (t *Table) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s\n   %s\n", t.Title, t.Setup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "contender\t")
	for _, c := range t.Columns {
		fmt.Fprintf(tw, "%s\t", c.Header)
	}
	if t.RatioOf != "" {
		fmt.Fprintf(tw, "%s ÷ this\t", t.RatioBase)
	}
	fmt.Fprintln(tw)
	for _, r := range t.Rows {
		fmt.Fprintf(tw, "%s\t", r.Contender)
		for _, c := range t.Columns {
			fmt.Fprintf(tw, "%s\t", format(t.value(r.Contender, c.Key), c.Digits))
		}
		if t.RatioOf != "" {
			fmt.Fprintf(tw, "%sx\t", format(t.value(t.RatioBase, t.RatioOf)/t.value(r.Contender, t.RatioOf), 2))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// format prints v with digits decimals and thousands separators.
func format(v float64, digits int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	s := fmt.Sprintf("%.*f", digits, v)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var b strings.Builder
	for i, ch := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	out := b.String()
	if neg {
		out = "-" + out
	}
	if frac != "" {
		out += "." + frac
	}
	return out
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile of sorted durations, in milliseconds (nearest rank).
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)]) / float64(time.Millisecond)
}

// checks accumulates correctness checks by name.
type checks struct {
	list []*Check
}

// expect records one run of check name: ok, or failed with detail.
func (cs *checks) expect(name string, ok bool, detail string, args ...any) bool {
	var c *Check
	for _, x := range cs.list {
		if x.Name == name {
			c = x
		}
	}
	if c == nil {
		c = &Check{Name: name}
		cs.list = append(cs.list, c)
	}
	c.Runs++
	if !ok {
		c.Failed++
		if c.Detail == "" {
			c.Detail = fmt.Sprintf(detail, args...)
		}
	}
	return ok
}
