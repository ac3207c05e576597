package harness

import (
	"fmt"
	"io"
	"maps"
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

// table is the table of comparison id, nil when it did not run.
func (r *Report) table(id string) *Table {
	i := slices.IndexFunc(r.Tables, func(t *Table) bool { return t.ID == id })
	if i < 0 {
		return nil
	}
	return r.Tables[i]
}

// find is the row of contender, nil when it has none.
func (t *Table) find(contender string) *Row {
	i := slices.IndexFunc(t.Rows, func(r *Row) bool { return r.Contender == contender })
	if i < 0 {
		return nil
	}
	return t.Rows[i]
}

// row returns the row of contender, adding it.
func (t *Table) row(contender string) *Row {
	if r := t.find(contender); r != nil {
		return r
	}
	r := &Row{Contender: contender, Median: map[string]float64{}}
	t.Rows = append(t.Rows, r)
	return r
}

// add records one round of contender. JSON has no NaN: a value that could not be measured is left out.
func (t *Table) add(contender string, values map[string]float64) {
	maps.DeleteFunc(values, func(_ string, v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) })
	r := t.row(contender)
	r.Rounds = append(r.Rounds, values)
	for _, c := range t.Columns {
		if vs := r.column(c.Key); len(vs) > 0 {
			r.Median[c.Key] = median(vs)
		}
	}
}

// column is the values of key over the rounds that measured it.
func (r *Row) column(key string) []float64 {
	var vs []float64
	for _, round := range r.Rounds {
		if v, ok := round[key]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// value is the median of column key of contender, NaN when missing.
func (t *Table) value(contender, key string) float64 {
	if r := t.find(contender); r != nil {
		if v, ok := r.Median[key]; ok {
			return v
		}
	}
	return math.NaN()
}

// pairedRatios lists of/base of column key round by round: the contenders ran side by side, so a
// drift of the machine shows in both.
func (t *Table) pairedRatios(of, base, key string) string {
	a, b := t.find(of), t.find(base)
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
	printTargets(w, r.Targets)
	printChecks(w, r.Checks)
	printVerdict(w, r)
}

func printTargets(w io.Writer, targets []Target) {
	if len(targets) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== targets (issues 8, 12 and 45; 29: the cost of an order)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, tg := range targets {
		fmt.Fprintf(tw, "%s\twant %s\tgot %s%s\t%s\t%s\n", tg.Name, tg.Want, format(tg.Got, 2), tg.Unit,
			pick(tg.Met, "met", "MISSED"), tg.Detail)
	}
	_ = tw.Flush()
}

func printChecks(w io.Writer, checks []*Check) {
	fmt.Fprintf(w, "\n== correctness checks\n")
	for _, c := range checks {
		fmt.Fprintf(w, "%s %s (%d runs)", pick(c.Failed == 0, "ok  ", "FAIL"), c.Name, c.Runs)
		if c.Detail != "" {
			fmt.Fprintf(w, ": %s", c.Detail)
		}
		fmt.Fprintln(w)
	}
}

func printVerdict(w io.Writer, r *Report) {
	if len(r.Problems) > 0 {
		fmt.Fprintf(w, "\n!!!!!!!! %d CORRECTNESS CHECK(S) FAILED !!!!!!!!\n  %s\n", len(r.Problems), strings.Join(r.Problems, "\n  "))
		return
	}
	fmt.Fprintf(w, "all %d correctness checks passed\n", len(r.Checks))
}

// pick is yes when ok, else no.
func pick(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

func (t *Table) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s\n   %s\n", t.Title, t.Setup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	t.printHeader(tw)
	for _, r := range t.Rows {
		t.printRow(tw, r.Contender)
	}
	_ = tw.Flush()
}

func (t *Table) printHeader(w io.Writer) {
	fmt.Fprintf(w, "contender\t")
	for _, c := range t.Columns {
		fmt.Fprintf(w, "%s\t", c.Header)
	}
	if t.RatioOf != "" {
		fmt.Fprintf(w, "%s ÷ this\t", t.RatioBase)
	}
	fmt.Fprintln(w)
}

func (t *Table) printRow(w io.Writer, contender string) {
	fmt.Fprintf(w, "%s\t", contender)
	for _, c := range t.Columns {
		fmt.Fprintf(w, "%s\t", format(t.value(contender, c.Key), c.Digits))
	}
	if t.RatioOf != "" {
		fmt.Fprintf(w, "%sx\t", format(t.value(t.RatioBase, t.RatioOf)/t.value(contender, t.RatioOf), 2))
	}
	fmt.Fprintln(w)
}

// format prints v with digits decimals and thousands separators.
func format(v float64, digits int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	s := fmt.Sprintf("%.*f", digits, v)
	intPart, frac, hasFrac := strings.Cut(s, ".")
	sign, digitsPart := "", intPart
	if strings.HasPrefix(intPart, "-") {
		sign, digitsPart = "-", intPart[1:]
	}
	out := sign + groupThousands(digitsPart)
	if hasFrac {
		out += "." + frac
	}
	return out
}

// groupThousands puts a comma between every three digits, from the right.
func groupThousands(digits string) string {
	var b strings.Builder
	for i, ch := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
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
