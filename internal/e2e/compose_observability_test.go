package e2e

import (
	"encoding/json"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The observability services of compose.yaml (Jaeger v2, Prometheus, Grafana) and the files of deploy/
// they mount are held to each other and to the code here; no Docker engine runs these tests.

// mountedHostPath is the repository file that a service sees at path through its bind mounts, "" when
// none of them covers path.
func mountedHostPath(volumes []string, path string) string {
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
			continue
		}
		src, dst := parts[0], parts[1]
		if path == dst || strings.HasPrefix(path, dst+"/") {
			return hostPath(src + path[len(dst):])
		}
	}
	return ""
}

// Every bind mount of compose.yaml names a file or directory of the repository.
func TestComposeBindMountsExist(t *testing.T) {
	for name, svc := range readCompose(t).Services {
		for _, v := range svc.Volumes {
			if src := strings.Split(v, ":")[0]; strings.HasPrefix(src, "./") {
				if _, err := os.Stat(hostPath(src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			}
		}
	}
}

func TestComposeJaegerV2ReceivesOTLPAndServesSpanMetrics(t *testing.T) {
	c := readCompose(t)
	j, ok := c.Services["jaeger"]
	if !ok {
		t.Fatal("compose.yaml has no jaeger service")
	}
	if want := "jaegertracing/jaeger:" + testedJaegerRelease(t); j.Image != want {
		t.Errorf("jaeger runs %s, want %s, the release TestJaegerWithTheDeployConfig runs deploy/jaeger/config.yaml in", j.Image, want)
	}
	for _, p := range []string{"16686:16686", "4317:4317", "4318:4318"} {
		if !slices.Contains(j.Ports, p) {
			t.Errorf("jaeger does not publish %s: %v", p, j.Ports)
		}
	}
	i := slices.Index(j.Command, "--config")
	if i < 0 || i+1 >= len(j.Command) || mountedHostPath(j.Volumes, j.Command[i+1]) != hostPath("./deploy/jaeger/config.yaml") {
		t.Errorf("jaeger does not run with deploy/jaeger/config.yaml: command %v, volumes %v", j.Command, j.Volumes)
	}
	cfg := readJaegerConfig(t)
	for proto, port := range map[string]string{"grpc": "4317", "http": "4318"} {
		if ep := cfg.Receivers.OTLP.Protocols[proto].Endpoint; ep != "0.0.0.0:"+port {
			t.Errorf("Jaeger's OTLP %s receiver listens on %q, want 0.0.0.0:%s (the other containers send there)", proto, ep, port)
		}
	}
	sm := cfg.spanMetrics(t)
	if !slices.Contains(sm.Dimensions, dimension{Name: "stockflow.lock.key"}) || sm.AggregationCardinalityLimit <= 0 {
		t.Errorf("span metrics: dimensions %v, cardinality limit %d: want stockflow.lock.key, bounded", sm.Dimensions, sm.AggregationCardinalityLimit)
	}
	_, exporterPort, _ := net.SplitHostPort(cfg.Exporters.Prometheus.Endpoint)
	if job := readPromConfig(t).job(t, spanMetricsJobHost); !slices.Contains(job.StaticConfigs[0].Targets, spanMetricsJobHost+":"+exporterPort) {
		t.Errorf("Prometheus scrapes %v for span metrics; Jaeger exports them on %s", job.StaticConfigs, cfg.Exporters.Prometheus.Endpoint)
	}
	for name, b := range cfg.Extensions.JaegerStorage.MetricBackends {
		if b.Prometheus.Endpoint != "http://prometheus:9090" {
			t.Errorf("Jaeger's metric backend %s reads %q, want the prometheus service, http://prometheus:9090", name, b.Prometheus.Endpoint)
		}
	}
}

func TestComposePrometheusScrapesTheWorkersWithExemplars(t *testing.T) {
	c := readCompose(t)
	p, ok := c.Services["prometheus"]
	if !ok {
		t.Fatal("compose.yaml has no prometheus service")
	}
	if !strings.HasPrefix(p.Image, "prom/prometheus:v3.") || !slices.Contains(p.Ports, "9090:9090") {
		t.Errorf("prometheus: image %s, ports %v: want prom/prometheus:v3.x on 9090", p.Image, p.Ports)
	}
	if !slices.ContainsFunc(p.Command, func(a string) bool {
		return strings.HasPrefix(a, "--enable-feature=") && slices.Contains(strings.Split(strings.TrimPrefix(a, "--enable-feature="), ","), "exemplar-storage")
	}) {
		t.Errorf("prometheus runs without --enable-feature=exemplar-storage: %v", p.Command)
	}
	configArg := slices.IndexFunc(p.Command, func(a string) bool { return strings.HasPrefix(a, "--config.file=") })
	if configArg < 0 || mountedHostPath(p.Volumes, strings.TrimPrefix(p.Command[configArg], "--config.file=")) != hostPath("./deploy/prometheus/prometheus.yml") {
		t.Fatalf("prometheus does not run with deploy/prometheus/prometheus.yml: command %v, volumes %v", p.Command, p.Volumes)
	}
	prom := readPromConfig(t)
	for _, f := range prom.RuleFiles {
		if host := mountedHostPath(p.Volumes, f); host == "" {
			t.Errorf("prometheus.yml loads rules from %s, which compose does not mount", f)
		} else {
			alertQueries(t, host) // parses, and has rules
		}
	}
	checkWorkerScrapeJob(t, c, prom.job(t, workerServicePrefix), p.Volumes)
}

// checkWorkerScrapeJob: the job scrapes every worker service on its METRICS_ADDR port, asks for
// OpenMetrics first (exemplars travel in nothing else), and sends the workers' METRICS_TOKEN.
func checkWorkerScrapeJob(t *testing.T, c composeFile, job scrapeConfig, volumes []string) {
	t.Helper()
	var workers, names []string
	token := ""
	for name, svc := range c.Services {
		if strings.HasPrefix(name, workerServicePrefix) {
			workers = append(workers, name)
			token = svc.Environment["METRICS_TOKEN"]
			if _, port, _ := net.SplitHostPort(svc.Environment["METRICS_ADDR"]); len(job.DNSSDConfigs) == 0 || port != "9090" || job.DNSSDConfigs[0].Port != 9090 {
				t.Errorf("%s serves /metrics on %q; the scrape job %s scrapes %+v", name, svc.Environment["METRICS_ADDR"], job.JobName, job.DNSSDConfigs)
			}
		}
	}
	for _, d := range job.DNSSDConfigs {
		names = append(names, d.Names...)
	}
	slices.Sort(workers)
	slices.Sort(names)
	if !slices.Equal(workers, names) {
		t.Errorf("job %s scrapes %v; the services running the worker are %v", job.JobName, names, workers)
	}
	if len(job.ScrapeProtocols) == 0 || !strings.HasPrefix(job.ScrapeProtocols[0], "OpenMetricsText") {
		t.Errorf("job %s scrape_protocols %v: want OpenMetrics first, for the exemplars", job.JobName, job.ScrapeProtocols)
	}
	checkScrapeToken(t, job, token, volumes)
}

func checkScrapeToken(t *testing.T, job scrapeConfig, token string, volumes []string) {
	t.Helper()
	if token == "" {
		return
	}
	if utf8.RuneCountInString(token) < 16 || strings.ContainsFunc(token, unicode.IsSpace) {
		t.Errorf("the workers' METRICS_TOKEN is one they refuse (at least 16 characters, no white space)")
	}
	auth := job.Authorization
	sent := auth.Credentials
	if auth.CredentialsFile != "" {
		host := mountedHostPath(volumes, auth.CredentialsFile)
		b, err := os.ReadFile(host)
		if host == "" || err != nil {
			t.Fatalf("job %s reads its token from %s, which compose does not mount from the repository (%v)", job.JobName, auth.CredentialsFile, err)
		}
		sent = strings.TrimSpace(string(b)) // as Prometheus reads a credentials_file
	}
	if (auth.Type != "" && auth.Type != "Bearer") || sent != token {
		t.Errorf("job %s sends %s credentials that are not the workers' METRICS_TOKEN: every scrape would get 401", job.JobName, auth.Type)
	}
}

func TestComposeGrafanaProvisionsTheDashboardAndItsDataSources(t *testing.T) {
	c := readCompose(t)
	g, ok := c.Services["grafana"]
	if !ok {
		t.Fatal("compose.yaml has no grafana service")
	}
	if !strings.HasPrefix(g.Image, "grafana/grafana:") || !slices.Contains(g.Ports, "3000:3000") {
		t.Errorf("grafana: image %s, ports %v: want grafana/grafana on 3000", g.Image, g.Ports)
	}
	for host, container := range map[string]string{grafanaDatasources: "/etc/grafana/provisioning/datasources/datasources.yaml",
		grafanaDashboards: "/etc/grafana/provisioning/dashboards/dashboards.yaml"} {
		if got := mountedHostPath(g.Volumes, container); got != host {
			t.Errorf("grafana sees %s at %s, want %s", got, container, host)
		}
	}
	var providers struct {
		Providers []struct {
			Options struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, grafanaDashboards, &providers)
	if len(providers.Providers) != 1 || mountedHostPath(g.Volumes, providers.Providers[0].Options.Path+"/stockflow.json") != dashboardFile {
		t.Errorf("the dashboards provider %+v does not load %s as compose mounts it", providers.Providers, dashboardFile)
	}
	if home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" && mountedHostPath(g.Volumes, home) != dashboardFile {
		t.Errorf("the home dashboard %s is not %s", home, dashboardFile)
	}
	checkDatasources(t, c)
}

// checkDatasources: the data sources point at the compose services, the exemplars' trace ids at the Jaeger
// data source, and every data source the dashboard uses is provisioned with its type.
func checkDatasources(t *testing.T, c composeFile) {
	t.Helper()
	byUID := map[string]grafanaDatasource{}
	for _, ds := range readDatasources(t) {
		byUID[ds.UID] = ds
	}
	want := map[string]string{"prometheus": "http://prometheus:9090", "jaeger": "http://jaeger:16686"}
	for typ, url := range want {
		if !slices.ContainsFunc(slices.Collect(maps.Values(byUID)), func(ds grafanaDatasource) bool { return ds.Type == typ && ds.URL == url }) {
			t.Errorf("%s: no %s data source at %s", grafanaDatasources, typ, url)
		}
		if _, ok := c.Services[strings.Split(strings.TrimPrefix(url, "http://"), ":")[0]]; !ok {
			t.Errorf("%s is not a compose service", url)
		}
	}
	for _, ds := range byUID {
		for _, d := range ds.JSONData.ExemplarTraceIDDestinations {
			if d.DatasourceUID != "" && byUID[d.DatasourceUID].Type != "jaeger" {
				t.Errorf("exemplar trace ids of %s go to data source %q, which is not the Jaeger one", ds.Name, d.DatasourceUID)
			}
		}
	}
	for _, ref := range dashboardDatasources(t) {
		if ds, ok := byUID[ref.UID]; !ok || ds.Type != ref.Type {
			t.Errorf("the dashboard uses data source %+v, which is not provisioned", ref)
		}
	}
}

// dashboardDatasources lists every data source reference of the dashboard (panels, targets and template
// variables), with the variables they name replaced by their default values.
func dashboardDatasources(t *testing.T) []datasourceRef {
	t.Helper()
	var d grafanaDashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatal(err)
	}
	var refs []datasourceRef
	for _, ref := range d.datasourceRefs() {
		refs = append(refs, datasourceRef{Type: ref.Type, UID: d.expand(ref.UID)})
	}
	if len(refs) == 0 {
		t.Fatal("the dashboard names no data source")
	}
	return refs
}

// The dashboard section of docs/observability.md gives the addresses and the credentials compose.yaml
// really has, and names every alert rule.
func TestDocsDashboardSectionMatchesCompose(t *testing.T) {
	text := section(t, doc(t, "observability.md"), "## Dashboard and alerts")
	c := readCompose(t)
	for svc, port := range map[string]string{"grafana": "3000", "prometheus": "9090", "jaeger": "16686"} {
		if !slices.Contains(c.Services[svc].Ports, port+":"+port) || !strings.Contains(text, "http://localhost:"+port) {
			t.Errorf("docs/observability.md or compose.yaml: %s at http://localhost:%s", svc, port)
		}
	}
	g := c.Services["grafana"].Environment
	if login := "`" + g["GF_SECURITY_ADMIN_USER"] + "` / `" + g["GF_SECURITY_ADMIN_PASSWORD"] + "`"; !strings.Contains(text, login) {
		t.Errorf("docs/observability.md does not give Grafana's login %s", login)
	}
	for _, q := range alertQueries(t, alertRulesFile) {
		if name := strings.TrimPrefix(q.where, "alert "); !strings.Contains(text, "`"+name+"`") {
			t.Errorf("docs/observability.md does not name the alert %s", name)
		}
	}
}
