package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/testkit/redistest"
)

// A real worker runs orders that make every series of the dashboard appear (reserved and rejected orders,
// a lock wait given up, a lost lock, a permanent failure, poison, a recreated group); then every query of
// the dashboard and of the alert rules must name series its /metrics really has (OpenMetrics, as
// Prometheus scrapes it), with the labels the query filters and groups by, and exemplars where a panel
// shows them; the queries of trace-derived span metrics and the Jaeger searches must name spans and span
// attributes the worker really makes. The check would fail if the worker or the dashboard renamed a metric,
// a label or a span: the subtests show it.
func TestDashboardAndAlertsNameSeriesTheWorkerExports(t *testing.T) {
	s := redistest.Start(t)
	addr := freeAddr(t)
	w := startWorker(t, s, "dash", "METRICS_ADDR="+addr, "OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=200",
		"FAULT_DELAY_WRITE=1500ms", "LOCK_LEASE=1s", "MAX_ATTEMPTS=2")
	waitFor(t, 10*time.Second, "the worker is ready", func() bool { c, _ := readyz(addr); return c == 200 })
	provokeEverySeries(t, s.Client())

	dashboard := readFile(t, dashboardFile)
	queries := append(mustDashboardQueries(t, dashboard), alertQueries(t, alertRulesFile)...)
	traceLabel := traceIDLabel(t)
	var obs observation
	var problems []string
	deadline := time.Now().Add(45 * time.Second)
	for {
		obs = observe(t, addr, w.logText())
		if problems = checkQueries(queries, obs.sources, obs.spanAttrs, traceLabel); len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(problems) > 0 {
		t.Fatalf("%d queries of %s or %s name what the worker does not export:\n%s", len(problems), dashboardFile,
			alertRulesFile, strings.Join(problems, "\n"))
	}
	t.Logf("%d queries checked against %d series and %d span names", len(queries), len(obs.sources[0].series), len(obs.spanAttrs))

	renames := []struct{ name, file, old, new, named string }{
		{"a metric renamed in the dashboard", dashboardFile, "stockflow_lock_wait_seconds_bucket", "stockflow_lock_waits_seconds_bucket", "stockflow_lock_waits_seconds_bucket"},
		{"a label renamed in the dashboard", dashboardFile, "by (poison_reason)", "by (reason)", `"reason"`},
		{"a label value changed in the dashboard", dashboardFile, `replayed=\"true\"`, `replayed=\"yes\"`, `stockflow_stock_replayed="yes"`},
		{"a span renamed in the dashboard", dashboardFile, `"operation": "lock wait"`, `"operation": "lock waited"`, `"lock waited"`},
		{"a span attribute renamed in the dashboard", dashboardFile, "sum by (stockflow_lock_key)", "sum by (stockflow_sku)", `"stockflow_sku"`},
		{"a metric renamed in the alert rules", alertRulesFile, "rlock_lost_total", "rlock_locks_lost_total", "rlock_locks_lost_total"},
	}
	for _, r := range renames {
		t.Run(r.name+" is reported", func(t *testing.T) {
			renamed := renamedQueries(t, r.file, r.old, r.new)
			problems := checkQueries(renamed, obs.sources, obs.spanAttrs, traceLabel)
			if len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), r.named) {
				t.Fatalf("with %q for %q in %s, the check reported %q; want a problem naming %s", r.new, r.old, r.file, problems, r.named)
			}
			t.Logf("reported: %s", problems[0])
		})
	}
	t.Run("a metric the worker no longer exports is reported", func(t *testing.T) {
		changed := withSeries(obs.sources, func(s series) series {
			s.name = strings.Replace(s.name, "stockflow_consumer_lag", "stockflow_consumer_group_lag", 1)
			return s
		})
		problems := checkQueries(queries, changed, obs.spanAttrs, traceLabel)
		if !strings.Contains(strings.Join(problems, "\n"), "no series named stockflow_consumer_lag") {
			t.Fatalf("with stockflow_consumer_lag renamed on /metrics, the check reported %q", problems)
		}
	})
	t.Run("a histogram without exemplars is reported", func(t *testing.T) {
		changed := withSeries(obs.sources, func(s series) series { s.exemplar = nil; return s })
		problems := checkQueries(queries, changed, obs.spanAttrs, traceLabel)
		if !strings.Contains(strings.Join(problems, "\n"), "shows exemplars, but no series it selects has one") {
			t.Fatalf("without exemplars on /metrics, the check reported %q", problems)
		}
	})
}

// withSeries returns a copy of sources with every series changed by change.
func withSeries(sources []source, change func(series) series) []source {
	out := make([]source, len(sources))
	for i, src := range sources {
		out[i] = src
		out[i].series = nil
		for _, s := range src.series {
			out[i].series = append(out[i].series, change(s))
		}
	}
	return out
}

// renamedQueries are the queries of the dashboard and the alert rules, with old replaced by new (once)
// in a copy of file.
func renamedQueries(t *testing.T, file, old, new string) []query {
	t.Helper()
	text := string(readFile(t, file))
	if !strings.Contains(text, old) {
		t.Fatalf("%s does not contain %q", file, old)
	}
	text = strings.Replace(text, old, new, 1)
	alerts := alertRulesFile
	dashboard := readFile(t, dashboardFile)
	if file == dashboardFile {
		dashboard = []byte(text)
	} else {
		alerts = t.TempDir() + "/alerts.yml"
		if err := os.WriteFile(alerts, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return append(mustDashboardQueries(t, dashboard), alertQueries(t, alerts)...)
}

func mustDashboardQueries(t *testing.T, dashboard []byte) []query {
	t.Helper()
	qs, err := dashboardQueries(dashboard)
	if err != nil || len(qs) == 0 {
		t.Fatalf("%s: %d queries, %v", dashboardFile, len(qs), err)
	}
	return qs
}

// provokeEverySeries runs orders through the worker (which holds each lock 1.5 s before it writes, its
// watchdog renewing the 1 s lease every third of a second) so
// that every series the dashboard shows exists: a reserved and a rejected order on one SKU whose lock
// another owner holds for 2.5 s first (so the worker gives up its lock wait, LOCK_WAIT 1s, at least once);
// an unknown SKU; a stock field that is not an integer (a
// permanent failure, poisoned at the second delivery); an entry that is not an order (poison); a lock
// deleted while held (lost); and then the group deleted (recreated, and every order replayed).
func provokeEverySeries(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	rdb.HSet(ctx, "stock:{A}", "available", 1, "reserved", 0)
	rdb.HSet(ctx, "stock:{L}", "available", 5, "reserved", 0)
	rdb.HSet(ctx, "stock:{BAD}", "available", "many", "reserved", 0)
	rdb.HSet(ctx, "lock:{A}", "another-process:1", 1)
	rdb.PExpire(ctx, "lock:{A}", 2500*time.Millisecond)
	xaddOrder(t, rdb, "a1", "A", 1)
	xaddOrder(t, rdb, "a2", "A", 1)
	xaddOrder(t, rdb, "none", "NOSKU", 1)
	xaddOrder(t, rdb, "bad", "BAD", 1)
	xaddOrder(t, rdb, "lost", "L", 1)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []string{"payload", "not an order"}}).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the worker holds the lock of L", lockHeldBy(rdb, "L", "dash"))
	rdb.Del(ctx, "lock:{L}")
	for _, o := range [][2]string{{"A", "a1"}, {"A", "a2"}, {"NOSKU", "none"}, {"L", "lost"}} {
		waitFor(t, 20*time.Second, "order "+o[1]+" is decided", decided(rdb, o[0], o[1]))
	}
	waitFor(t, 20*time.Second, "two entries are poisoned", func() bool { return rdb.XLen(ctx, "orders-poison").Val() >= 2 })
	if err := rdb.XGroupDestroy(ctx, "orders", "inventory").Err(); err != nil {
		t.Fatal(err)
	}
}

// observation is what the check compares the queries with.
type observation struct {
	sources   []source
	spanAttrs map[string]map[string]string // span name -> attribute -> a value, and service.name
}

// observe scrapes the worker at addr and reads the spans it printed in its log.
func observe(t *testing.T, addr, log string) observation {
	t.Helper()
	prom := readPromConfig(t)
	scraped, err := parseExposition(scrapeOpenMetrics(t, "http://"+addr+"/metrics"))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	spans := workerSpans(log)
	obs := observation{spanAttrs: map[string]map[string]string{}}
	for _, sp := range spans {
		obs.spanAttrs[sp.name] = sp.attrs
	}
	obs.sources = []source{
		workerSource(prom.job(t, workerServicePrefix).JobName, scraped),
		spanMetricsSource(readJaegerConfig(t).spanMetrics(t), prom.job(t, spanMetricsJobHost).JobName, spans),
	}
	return obs
}

// scrapeOpenMetrics gets url as Prometheus does with exemplar storage: in the OpenMetrics format.
func scrapeOpenMetrics(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") {
		t.Fatalf("scrape %s: %s, Content-Type %q: want OpenMetrics, which exemplars need", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	return string(b)
}

// workerSource is what Prometheus keeps of a worker's scrape: its series with the job label, and the
// series Prometheus adds to every target (up, scrape_*). instance (and service, from the DNS name) are set
// per target.
func workerSource(job string, scraped []series) source {
	src := source{what: "the worker's /metrics", anyValue: map[string]bool{"instance": true, "service": true}}
	for _, s := range scraped {
		s.labels["job"] = job
		src.series = append(src.series, s)
	}
	for _, name := range []string{"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling", "scrape_series_added"} {
		src.series = append(src.series, series{name: name, labels: map[string]string{"job": job}})
	}
	return src
}

// spanRecord is one span the worker printed: its name and attributes (and service.name of its resource).
type spanRecord struct {
	name  string
	attrs map[string]string
}

// workerSpans reads the spans of OTEL_TRACES_EXPORTER=console (one JSON object a line) from a log.
func workerSpans(log string) []spanRecord {
	type keyValue struct {
		Key   string
		Value struct{ Value any }
	}
	var out []spanRecord
	for _, line := range strings.Split(log, "\n") {
		var sp struct {
			Name       string
			SpanKind   int
			Attributes []keyValue
			Resource   []keyValue
		}
		if !strings.HasPrefix(line, `{"Name":`) || json.Unmarshal([]byte(line), &sp) != nil {
			continue
		}
		rec := spanRecord{name: sp.Name, attrs: map[string]string{}}
		for _, kv := range sp.Attributes {
			rec.attrs[kv.Key] = fmt.Sprint(kv.Value.Value)
		}
		for _, kv := range sp.Resource {
			if kv.Key == "service.name" {
				rec.attrs["service.name"] = fmt.Sprint(kv.Value.Value)
			}
		}
		out = append(out, rec)
	}
	return out
}

// spanMetricsSource is what Jaeger's span metrics connector makes of the worker's spans, as Prometheus
// keeps it: per span, series named as the connector names them, labelled with service_name, span_name,
// span_kind, status_code and each configured dimension the span has (dots become underscores).
func spanMetricsSource(sm spanMetricsConfig, job string, spans []spanRecord) source {
	src := source{what: "Jaeger's span metrics", anyValue: map[string]bool{"instance": true, "span_kind": true, "status_code": true, "le": true}}
	seen := map[string]bool{}
	for _, sp := range spans {
		labels := map[string]string{"job": job, "service_name": sp.attrs["service.name"], "span_name": sp.name}
		for _, d := range sm.Dimensions {
			if v, ok := sp.attrs[d.Name]; ok {
				labels[strings.ReplaceAll(d.Name, ".", "_")] = v
			}
		}
		key := fmt.Sprint(labels)
		if seen[key] {
			continue
		}
		seen[key] = true
		for _, name := range sm.metricNames() {
			src.series = append(src.series, series{name: name, labels: labels})
		}
	}
	return src
}

// parseExposition reads the samples of a Prometheus text or OpenMetrics exposition, with their exemplars.
func parseExposition(text string) ([]series, error) {
	var out []series
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := series{labels: map[string]string{}}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			return nil, fmt.Errorf("sample line %q", line)
		}
		s.name, line = line[:end], line[end:]
		var err error
		if strings.HasPrefix(line, "{") {
			if s.labels, line, err = parseLabels(line); err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
		}
		if _, ex, ok := strings.Cut(line, " # "); ok {
			if s.exemplar, _, err = parseLabels(ex); err != nil {
				return nil, fmt.Errorf("%s exemplar: %w", s.name, err)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// parseLabels reads {name="value",...} at the start of s and returns what follows.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	i := 1
	for i < len(s) && s[i] != '}' {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return nil, "", fmt.Errorf("cannot read labels %q", s)
		}
		name := s[i : i+eq]
		n, value, err := lexString(s[i+eq+1:])
		if err != nil {
			return nil, "", fmt.Errorf("label %s: %w", name, err)
		}
		labels[name] = value.text
		i += eq + 1 + n
		if i < len(s) && s[i] == ',' {
			i++
		}
	}
	if i >= len(s) {
		return nil, "", fmt.Errorf("no closing } in %q", s)
	}
	return labels, s[i+1:], nil
}
