package stockctl

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockflow/stockflow/internal/hot"
)

// Defaults of hot.
const (
	DefaultHotSince = time.Minute // --since
	DefaultHotLimit = 10          // --limit
)

// The orders of hot's --sort-by: by total wait (the default), by orders (with the lock elided and orders
// batched, a busy SKU's waits can be short), or by the worst wait.
var hotSorts = []string{"wait", "orders", "worst"}

// hotSortNames say in hot's heading what each --sort-by orders by.
var hotSortNames = map[string]string{"wait": "total wait", "orders": "orders", "worst": "worst wait"}

type hotReport struct {
	SinceMS int64     `json:"since_ms"`
	From    time.Time `json:"from"` // the start of the oldest window read (windows of hot.Window)
	Until   time.Time `json:"until"`
	Total   int       `json:"skus_total"` // SKUs that waited in the span, of which SKUs shows the first --limit
	SortBy  string    `json:"sort_by"`    // wait, orders or worst: how SKUs is ordered, most first
	SKUs    []hot.SKU `json:"skus"`
	jaeger  string    // --jaeger-url
}

func (o *options) hotCommand() *cobra.Command {
	c := o.command("hot", "the SKUs whose orders waited longest for their lock recently, across the workers, with traces to open in Jaeger",
		"stockctl hot --since 5m --jaeger-url http://localhost:16686", noArgs, runHot)
	f := c.Flags()
	f.DurationVar(&o.since, "since", DefaultHotSince, fmt.Sprintf("the recent `duration` to show, at most %s (windows of %s)", hot.Retention, hot.Window))
	f.IntVar(&o.top, "limit", DefaultHotLimit, "show at most `n` SKUs, the first by --sort-by")
	f.StringVar(&o.sortBy, "sort-by", hotSorts[0], "order the SKUs by `key`, most first: wait (total wait), orders or worst (worst wait)")
	_ = c.RegisterFlagCompletionFunc("sort-by", cobra.FixedCompletions(hotSorts, cobra.ShellCompDirectiveNoFileComp))
	f.StringVar(&o.jaegerURL, "jaeger-url", "", "Jaeger UI `url`: show each trace as a link, <url>/trace/<id>")
	return c
}

// runHot shows the SKUs whose orders waited longest for their lock in the last --since: what every worker
// published (package hot), merged.
func runHot(ctx context.Context, a *app, _ []string) (report, error) {
	now := time.Now()
	skus, err := hot.Read(ctx, a.rdb, now, a.opts.since)
	if err != nil {
		return nil, err
	}
	sortHot(skus, a.opts.sortBy)
	return hotReport{SinceMS: millis(a.opts.since), From: hot.WindowOf(now.Add(-a.opts.since)), Until: now,
		Total: len(skus), SortBy: a.opts.sortBy, SKUs: skus[:min(len(skus), a.opts.top)],
		jaeger: strings.TrimSuffix(a.opts.jaegerURL, "/")}, nil
}

// sortHot orders skus, most total wait first (hot.Read's order), by key, most first; ties keep their order.
func sortHot(skus []hot.SKU, key string) {
	by := map[string]func(hot.SKU) float64{
		"orders": func(s hot.SKU) float64 { return float64(s.Orders) },
		"worst":  func(s hot.SKU) float64 { return s.WorstWaitMS },
	}[key]
	if by != nil {
		slices.SortStableFunc(skus, func(a, b hot.SKU) int { return cmp.Compare(by(b), by(a)) })
	}
}

func (r hotReport) writeText(w io.Writer) { r.write(w, false) }

func (r hotReport) writeWide(w io.Writer) { r.write(w, true) }

// write writes the table; wide adds the last trace of each SKU.
func (r hotReport) write(w io.Writer, wide bool) {
	since := time.Duration(r.SinceMS) * time.Millisecond
	if len(r.SKUs) == 0 {
		fmt.Fprintf(w, "no lock waits recorded in the last %s: no order was decided, or no worker publishes them\n", since)
		return
	}
	fmt.Fprintf(w, "lock waits in the last %s (%s to %s), all workers, most %s first; %d of %d SKUs\n",
		since, r.From.Format(time.TimeOnly), r.Until.Format(time.TimeOnly), hotSortNames[r.SortBy], len(r.SKUs), r.Total)
	tw := table(w)
	fmt.Fprint(tw, "SKU\tORDERS\tTOTAL WAIT\tWORST WAIT\tMEAN WAIT\tWORST WAIT'S TRACE")
	if wide {
		fmt.Fprint(tw, "\tLAST TRACE")
	}
	fmt.Fprintln(tw)
	for _, s := range r.SKUs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s", s.SKU, s.Orders, humanMS(s.TotalWaitMS), humanMS(s.WorstWaitMS),
			humanMS(s.TotalWaitMS/float64(max(s.Orders, 1))), r.trace(s.WorstTraceID))
		if wide {
			fmt.Fprintf(tw, "\t%s", r.trace(s.LastTraceID))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// trace is a trace id, or its link with --jaeger-url; "-" when the trace was not sampled.
func (r hotReport) trace(id string) string {
	if id == "" || r.jaeger == "" {
		return dash(id)
	}
	return r.jaeger + "/trace/" + id
}

// humanMS prints a wait in milliseconds for reading: to the microsecond below a millisecond.
func humanMS(ms float64) string {
	if ms < 1 {
		return (time.Duration(ms * float64(time.Millisecond))).Round(time.Microsecond).String()
	}
	return human(int64(ms))
}
