package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// The check behind TestDashboardAndAlertsNameSeriesTheWorkerExports: every selector of every PromQL query
// of the dashboard and the alert rules must select at least one series that Prometheus really gets, and
// every label a query groups by must be on one of them. What Prometheus gets is described by sources: a
// scrape of a real worker's /metrics, and the span metrics that Jaeger derives from the worker's real spans.

// series is one series: its name and labels, and the labels of its exemplar (nil without one).
type series struct {
	name     string
	labels   map[string]string
	exemplar map[string]string
}

// source is what one scrape job brings to Prometheus.
type source struct {
	what     string          // for messages: "the worker's /metrics"
	series   []series        // with the labels Prometheus adds (job)
	anyValue map[string]bool // labels Prometheus sets per target (instance): any value matches
}

// query is one PromQL expression of the dashboard or the alert rules, or one Jaeger search of the dashboard.
type query struct {
	where    string // `panel "Lock wait"` or `alert StockflowLockLost`
	expr     string // PromQL; "" for a Jaeger search
	exemplar bool   // the panel shows the exemplars of the series it selects
	service  string // a Jaeger search: service and operation (span name)
	span     string
}

// checkQueries returns a problem for each thing a query refers to that sources do not have.
func checkQueries(queries []query, sources []source, spans map[string]map[string]string, traceIDLabel string) []string {
	var problems []string
	for _, q := range queries {
		if q.expr == "" {
			problems = append(problems, checkJaegerSearch(q, spans)...)
			continue
		}
		for _, p := range checkExpr(q, sources, traceIDLabel) {
			problems = append(problems, q.where+": "+p)
		}
	}
	return problems
}

// checkExpr checks one PromQL query.
func checkExpr(q query, sources []source, traceIDLabel string) []string {
	refs, err := parsePromQL(q.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", q.expr, err)}
	}
	var problems []string
	var selected []series
	var withExemplar bool
	for _, sel := range refs.selectors {
		got, problem := selectSeries(sel, sources)
		if problem != "" {
			problems = append(problems, problem)
		}
		selected = append(selected, got...)
		withExemplar = withExemplar || slices.ContainsFunc(got, func(s series) bool { return s.exemplar[traceIDLabel] != "" })
	}
	for _, l := range refs.labels {
		if !hasLabel(selected, sources, l) {
			problems = append(problems, fmt.Sprintf("groups by label %q, which no series it selects has", l))
		}
	}
	if q.exemplar && len(problems) == 0 && !withExemplar {
		problems = append(problems, fmt.Sprintf("shows exemplars, but no series it selects has one with a %s label", traceIDLabel))
	}
	return problems
}

// selectSeries returns the series that sel selects, or a problem saying why none.
func selectSeries(sel selector, sources []source) ([]series, string) {
	var named, got []series
	for _, src := range sources {
		for _, s := range src.series {
			if s.name != sel.name {
				continue
			}
			named = append(named, s)
			if matchesAll(s, src, sel.matchers) {
				got = append(got, s)
			}
		}
	}
	switch {
	case len(named) == 0:
		return nil, fmt.Sprintf("%s: no series named %s; %s", sel, sel.name, similarNames(sel.name, sources))
	case len(got) == 0:
		return nil, fmt.Sprintf("%s: no series of %s has these labels; they have %s", sel, sel.name, labelSets(named))
	}
	return got, ""
}

func matchesAll(s series, src source, matchers []matcher) bool {
	for _, m := range matchers {
		if src.anyValue[m.label] {
			continue
		}
		v := s.labels[m.label]
		var ok bool
		switch m.op {
		case "=", "!=":
			ok = v == m.value
		default:
			re, err := regexp.Compile("^(?:" + m.value + ")$")
			ok = err == nil && re.MatchString(v)
		}
		if ok == (m.op == "!=" || m.op == "!~") {
			return false
		}
	}
	return true
}

func hasLabel(selected []series, sources []source, label string) bool {
	for _, src := range sources {
		if src.anyValue[label] {
			return true
		}
	}
	return slices.ContainsFunc(selected, func(s series) bool { _, ok := s.labels[label]; return ok })
}

// similarNames lists the names of the sources that share the first two words of name, else the first
// word, else all of them.
func similarNames(name string, sources []source) string {
	words := strings.Split(name, "_")
	for n := min(2, len(words)); n >= 0; n-- {
		prefix := strings.Join(words[:n], "_")
		names := map[string]bool{}
		for _, src := range sources {
			for _, s := range src.series {
				if strings.HasPrefix(s.name, prefix) {
					names[s.name] = true
				}
			}
		}
		if len(names) > 0 {
			return "the sources have " + strings.Join(sortedKeys(names), ", ")
		}
	}
	return "the sources have no series at all"
}

// labelSets shows the label sets of some series, without the instrumentation scope labels.
func labelSets(ss []series) string {
	seen := map[string]bool{}
	for _, s := range ss {
		var kv []string
		for k, v := range s.labels {
			if !strings.HasPrefix(k, "otel_scope_") && k != "le" {
				kv = append(kv, fmt.Sprintf("%s=%q", k, v))
			}
		}
		sort.Strings(kv)
		seen["{"+strings.Join(kv, ", ")+"}"] = true
	}
	return strings.Join(sortedKeys(seen), " ")
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkJaegerSearch checks a Jaeger search of the dashboard against the spans the worker made (by name:
// their attributes and service).
func checkJaegerSearch(q query, spans map[string]map[string]string) []string {
	attrs, ok := spans[q.span]
	switch {
	case !ok:
		return []string{fmt.Sprintf("%s: searches for spans named %q; the worker makes %q", q.where, q.span, sortedKeys(keysOf(spans)))}
	case attrs["service.name"] != q.service:
		return []string{fmt.Sprintf("%s: searches service %q; the worker's spans are of %q", q.where, q.service, attrs["service.name"])}
	}
	return nil
}

func keysOf[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// dashboardQueries lists the queries of a Grafana dashboard: the PromQL of every Prometheus target and
// every Jaeger search, in every panel (rows' panels included), with the dashboard's template variables
// replaced by their default values (what Grafana asks when the dashboard opens).
func dashboardQueries(dashboard []byte) ([]query, error) {
	var d grafanaDashboard
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, fmt.Errorf("the dashboard is not JSON: %w", err)
	}
	var out []query
	for _, p := range d.allPanels() {
		for _, t := range p.Targets {
			q := t.query(p)
			q.expr, q.service, q.span = d.expand(q.expr), d.expand(q.service), d.expand(q.span)
			out = append(out, q)
		}
	}
	return out, nil
}

// grafanaDashboard is what the tests read of a dashboard: its panels and its template variables.
type grafanaDashboard struct {
	Panels     []panel
	Templating struct{ List []dashboardVariable }
}

// dashboardVariable is one template variable: a data source (Query is its plugin type), a query of label
// values, or a text box.
type dashboardVariable struct {
	Name, Type, Query, AllValue string
	Datasource                  *datasourceRef
	Current                     struct{ Value any } // a string, or a list of a multi-value variable
}

// value is the variable's default value as a query sees it ("All" becomes its allValue).
func (v dashboardVariable) value() string {
	switch c := v.Current.Value.(type) {
	case string:
		if c == "$__all" {
			return v.AllValue
		}
		return c
	case []any:
		return strings.Trim(fmt.Sprint(c...), "[]")
	}
	return ""
}

// variableRef matches a reference to a template variable: $name, ${name}, ${name:format} or [[name]].
var variableRef = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// referencedVariable is the name of the variable a match of variableRef refers to.
func referencedVariable(match []string) string { return match[1] + match[2] + match[3] }

// variable returns the template variable named name.
func (d grafanaDashboard) variable(name string) (dashboardVariable, bool) {
	i := slices.IndexFunc(d.Templating.List, func(v dashboardVariable) bool { return v.Name == name })
	if i < 0 {
		return dashboardVariable{}, false
	}
	return d.Templating.List[i], true
}

// expand replaces the dashboard's variables in s by their default values; Grafana's own ($__range...) stay.
func (d grafanaDashboard) expand(s string) string {
	return variableRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := d.variable(referencedVariable(variableRef.FindStringSubmatch(ref))); ok {
			return v.value()
		}
		return ref
	})
}

// allPanels lists the panels, those inside rows included.
func (d grafanaDashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

type datasourceRef struct{ Type, UID string }

type panel struct {
	Title      string
	Datasource *datasourceRef
	Targets    []target
	Panels     []panel
}

type target struct {
	Datasource *datasourceRef
	Expr       string
	Exemplar   bool
	Service    string
	Operation  string
}

// query is what t asks for; a target's data source is the panel's unless it names its own.
func (t target) query(p panel) query {
	ds := t.Datasource
	if ds == nil {
		ds = p.Datasource
	}
	q := query{where: fmt.Sprintf("panel %q", p.Title), expr: t.Expr, exemplar: t.Exemplar}
	if ds != nil && ds.Type == "jaeger" {
		q.service, q.span = t.Service, t.Operation
	} else if q.expr == "" {
		q.expr = "(no PromQL expression)"
	}
	return q
}
