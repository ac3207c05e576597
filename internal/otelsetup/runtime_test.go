package otelsetup_test

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// runtimeAliases are the names that each measure of the Go runtime has in the two collectors that could
// export it: the OTel runtime instrumentation's first, the Prometheus client's Go collector's after. /metrics
// must show each measure under one name only, or a dashboard summing "goroutines" counts them twice.
var runtimeAliases = [][]string{
	{"go_goroutine_count", "go_goroutines"},
	{"go_memory_allocated_bytes_total", "go_memstats_alloc_bytes_total"},
	{"go_memory_allocations_total", "go_memstats_mallocs_total"},
	{"go_memory_gc_goal_bytes", "go_memstats_next_gc_bytes"},
	{"go_processor_limit", "go_sched_gomaxprocs_threads"},
	{"go_config_gogc_percent", "go_gc_gogc_percent"},
}

// /metrics shows each measure of the Go runtime once, under the runtime instrumentation's name, and every
// metric family once.
func TestMetricsShowTheGoRuntimeOnce(t *testing.T) {
	rec := httptest.NewRecorder()
	meters.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	families := metricFamilies(rec.Body.String())
	for _, names := range runtimeAliases {
		var present []string
		for _, n := range names {
			present = append(present, strings.Repeat(n+" ", families[n]))
		}
		if got := strings.Fields(strings.Join(present, "")); !slices.Equal(got, names[:1]) {
			t.Errorf("/metrics has %q for the runtime measure %s; want %s once (OTel's runtime instrumentation), no other name",
				got, names[0], names[0])
		}
	}
	for name, n := range families {
		if n > 1 {
			t.Errorf("/metrics declares the family %s %d times", name, n)
		}
	}
}

// metricFamilies counts the # TYPE lines of a Prometheus text exposition (0.0.4: counters with their
// _total) by family name.
func metricFamilies(body string) map[string]int {
	families := map[string]int{}
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ := strings.Cut(rest, " ")
			families[name]++
		}
	}
	return families
}
