package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The dashboard is portable: imported into a Grafana whose data sources have other uids, beside a Prometheus
// whose scrape job has another name, it is set up from its variables alone. No panel names a data source
// uid, a job, a traced service or a host: they come from the template variables datasource, traces, job,
// instance, service and jaeger_ui.

// The variables every dashboard query takes its data source, job, instance and service from.
const (
	jobMatcher      = `job=~"$job"`
	instanceMatcher = `instance=~"$instance"`
	serviceMatcher  = `service_name="$service"`
)

func TestDashboardIsPortable(t *testing.T) {
	text := readFile(t, dashboardFile)
	spanMetrics := readJaegerConfig(t).spanMetrics(t).metricNames()
	if problems := portabilityProblems(t, text, spanMetrics); len(problems) > 0 {
		t.Fatalf("%s is not portable:\n%s", dashboardFile, strings.Join(problems, "\n"))
	}
	breaks := []struct{ name, old, new, named string }{
		{"a data source uid written out", `"uid": "${datasource}"`, `"uid": "prometheus"`, `"prometheus"`},
		{"a job written out", `job=~\"$job\", instance=~\"$instance\"`, `job=\"stockflow-worker\"`, "stockflow-worker"},
		{"a query without the instance variable", `, instance=~\"$instance\"`, ``, instanceMatcher},
		{"a traced service written out in a Jaeger search", `"service": "$service"`, `"service": "stockflow-worker"`, "stockflow-worker"},
		{"a traced service written out in PromQL", `service_name=\"$service\"`, `service_name=\"stockflow-worker\"`, serviceMatcher},
		{"a host written out in a link", `${jaeger_ui}/search`, `http://localhost:16686/search`, "http://localhost:16686"},
		{"an undefined variable", `$instance\"}[$__rate_interval]`, `$instances\"}[$__rate_interval]`, "$instances"},
	}
	for _, b := range breaks {
		t.Run(b.name+" is reported", func(t *testing.T) {
			if !strings.Contains(string(text), b.old) {
				t.Fatalf("%s does not contain %q", dashboardFile, b.old)
			}
			broken := strings.Replace(string(text), b.old, b.new, 1)
			problems := portabilityProblems(t, []byte(broken), spanMetrics)
			if !strings.Contains(strings.Join(problems, "\n"), b.named) {
				t.Fatalf("with %q for %q, the check reported %q; want a problem naming %s", b.new, b.old, problems, b.named)
			}
		})
	}
}

// portabilityProblems lists what in the dashboard text would not follow its variables.
func portabilityProblems(t *testing.T, text []byte, spanMetrics []string) []string {
	t.Helper()
	var d grafanaDashboard
	var links struct{ Panels, Links json.RawMessage }
	if err := json.Unmarshal(text, &d); err != nil || json.Unmarshal(text, &links) != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	problems := d.variableProblems(string(links.Panels) + string(links.Links))
	for _, ref := range d.datasourceRefs() {
		if name := strings.Trim(ref.UID, "${}"); !strings.HasPrefix(ref.UID, "$") || !d.hasDatasourceVariable(name, ref.Type) {
			problems = append(problems, fmt.Sprintf("a %s data source with uid %q, not a data source variable of that type", ref.Type, ref.UID))
		}
	}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			problems = append(problems, targetProblems(p, tg, spanMetrics)...)
		}
	}
	if strings.Contains(string(links.Panels)+string(links.Links), "://") {
		problems = append(problems, "a panel or link writes out a URL with its host (http://localhost:16686...): use ${jaeger_ui}")
	}
	return problems
}

// targetProblems: a Jaeger search is of $service; a PromQL selector takes the job and instance variables,
// or the service variable for the span metrics, which Jaeger's own scrape job brings.
func targetProblems(p panel, tg target, spanMetrics []string) []string {
	where := fmt.Sprintf("panel %q", p.Title)
	if tg.Expr == "" {
		if tg.Service != "$service" {
			return []string{fmt.Sprintf("%s: searches Jaeger for service %q, not $service", where, tg.Service)}
		}
		return nil
	}
	refs, err := parsePromQL(tg.Expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", where, err)}
	}
	var problems []string
	for _, sel := range refs.selectors {
		want := []string{jobMatcher, instanceMatcher}
		if slices.Contains(spanMetrics, sel.name) {
			want = []string{serviceMatcher}
		}
		for _, m := range want {
			if !strings.Contains(sel.String(), m) {
				problems = append(problems, fmt.Sprintf("%s: %s does not select %s", where, sel, m))
			}
		}
	}
	return problems
}

// variableProblems: the variables the queries need exist, every variable used is defined, and every
// variable defined is used.
func (d grafanaDashboard) variableProblems(used string) []string {
	var problems []string
	for _, name := range []string{"datasource", "job", "instance", "service", "jaeger_ui"} {
		if _, ok := d.variable(name); !ok {
			problems = append(problems, "no template variable "+name)
		}
	}
	if !d.hasDatasourceVariable("datasource", "prometheus") {
		problems = append(problems, "the variable datasource is not a Prometheus data source variable")
	}
	for _, v := range d.Templating.List {
		used += v.Query + fmt.Sprint(v.Datasource)
	}
	for _, m := range variableRef.FindAllStringSubmatch(used, -1) {
		if name := referencedVariable(m); !strings.HasPrefix(name, "__") {
			if _, ok := d.variable(name); !ok {
				problems = append(problems, fmt.Sprintf("%s names the variable $%s, which the dashboard does not define", m[0], name))
			}
		}
	}
	for _, v := range d.Templating.List {
		if !slices.ContainsFunc(variableRef.FindAllStringSubmatch(used, -1), func(m []string) bool { return referencedVariable(m) == v.Name }) {
			problems = append(problems, fmt.Sprintf("the variable %s is used nowhere", v.Name))
		}
	}
	return problems
}

// hasDatasourceVariable reports whether name is a data source variable of the plugin type typ.
func (d grafanaDashboard) hasDatasourceVariable(name, typ string) bool {
	v, ok := d.variable(name)
	return ok && v.Type == "datasource" && v.Query == typ
}

// datasourceRefs lists every data source reference of the dashboard: panels, targets, template variables.
func (d grafanaDashboard) datasourceRefs() []datasourceRef {
	var refs []datasourceRef
	for _, p := range d.allPanels() {
		if p.Datasource != nil {
			refs = append(refs, *p.Datasource)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil {
				refs = append(refs, *tg.Datasource)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Datasource != nil {
			refs = append(refs, *v.Datasource)
		}
	}
	return refs
}
