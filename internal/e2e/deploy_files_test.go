package e2e

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The observability files of deploy/ as the tests read them: Prometheus's configuration and alert rules,
// Grafana's provisioning and dashboard, Jaeger's configuration.

const (
	deployDir           = "../../deploy"
	prometheusConfig    = deployDir + "/prometheus/prometheus.yml"
	alertRulesFile      = deployDir + "/prometheus/alerts.yml"
	dashboardFile       = deployDir + "/grafana/dashboards/stockflow.json"
	grafanaDatasources  = deployDir + "/grafana/provisioning/datasources/datasources.yaml"
	grafanaDashboards   = deployDir + "/grafana/provisioning/dashboards/dashboards.yaml"
	jaegerConfig        = deployDir + "/jaeger/config.yaml"
	spanMetricsJobHost  = "jaeger" // the compose service whose span metrics Prometheus scrapes
	workerServicePrefix = "worker" // compose services that run the worker: worker, worker-redlock
)

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	if err := yaml.Unmarshal(readFile(t, path), v); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
}

type scrapeConfig struct {
	JobName         string   `yaml:"job_name"`
	ScrapeProtocols []string `yaml:"scrape_protocols"`
	Authorization   struct {
		Type            string `yaml:"type"`
		Credentials     string `yaml:"credentials"`
		CredentialsFile string `yaml:"credentials_file"`
	} `yaml:"authorization"`
	DNSSDConfigs []struct {
		Names []string `yaml:"names"`
		Type  string   `yaml:"type"`
		Port  int      `yaml:"port"`
	} `yaml:"dns_sd_configs"`
	StaticConfigs []struct {
		Targets []string `yaml:"targets"`
	} `yaml:"static_configs"`
}

type promConfig struct {
	RuleFiles     []string       `yaml:"rule_files"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
}

func readPromConfig(t *testing.T) promConfig {
	t.Helper()
	var c promConfig
	readYAML(t, prometheusConfig, &c)
	return c
}

// job returns the scrape config whose targets name host (a DNS name or a static target's host).
func (c promConfig) job(t *testing.T, host string) scrapeConfig {
	t.Helper()
	for _, sc := range c.ScrapeConfigs {
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				if n == host {
					return sc
				}
			}
		}
		for _, s := range sc.StaticConfigs {
			for _, target := range s.Targets {
				if strings.Split(target, ":")[0] == host {
					return sc
				}
			}
		}
	}
	t.Fatalf("%s has no scrape job for %s", prometheusConfig, host)
	return scrapeConfig{}
}

type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// alertQueries lists the expressions of the alert rules in path.
func alertQueries(t *testing.T, path string) []query {
	t.Helper()
	var r alertRules
	readYAML(t, path, &r)
	var out []query
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			out = append(out, query{where: "alert " + cmp.Or(rule.Alert, rule.Record), expr: rule.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", path)
	}
	return out
}

type grafanaDatasource struct {
	Name     string `yaml:"name"`
	UID      string `yaml:"uid"`
	Type     string `yaml:"type"`
	URL      string `yaml:"url"`
	JSONData struct {
		ExemplarTraceIDDestinations []struct {
			Name          string `yaml:"name"`
			DatasourceUID string `yaml:"datasourceUid"`
			URL           string `yaml:"url"`
		} `yaml:"exemplarTraceIdDestinations"`
	} `yaml:"jsonData"`
}

func readDatasources(t *testing.T) []grafanaDatasource {
	t.Helper()
	var c struct {
		Datasources []grafanaDatasource `yaml:"datasources"`
	}
	readYAML(t, grafanaDatasources, &c)
	return c.Datasources
}

// traceIDLabel is the exemplar label that Grafana's Prometheus data source reads trace ids from.
func traceIDLabel(t *testing.T) string {
	t.Helper()
	for _, ds := range readDatasources(t) {
		for _, d := range ds.JSONData.ExemplarTraceIDDestinations {
			return d.Name
		}
	}
	t.Fatalf("%s: no data source has exemplarTraceIdDestinations", grafanaDatasources)
	return ""
}

// spanMetricsConfig is the span metrics connector of Jaeger's configuration.
type spanMetricsConfig struct {
	Namespace string `yaml:"namespace"`
	Histogram struct {
		Unit string `yaml:"unit"`
	} `yaml:"histogram"`
	Dimensions                  []dimension `yaml:"dimensions"`
	AggregationCardinalityLimit int         `yaml:"aggregation_cardinality_limit"`
}

// dimension is a span attribute that the span metrics carry as a label.
type dimension struct {
	Name string `yaml:"name"`
}

type jaegerConfigFile struct {
	Connectors map[string]spanMetricsConfig `yaml:"connectors"`
	Receivers  struct {
		OTLP struct {
			Protocols map[string]struct {
				Endpoint string `yaml:"endpoint"`
			} `yaml:"protocols"`
		} `yaml:"otlp"`
	} `yaml:"receivers"`
	Exporters struct {
		Prometheus struct {
			Endpoint string `yaml:"endpoint"`
		} `yaml:"prometheus"`
	} `yaml:"exporters"`
	Extensions struct {
		JaegerStorage struct {
			MetricBackends map[string]struct {
				Prometheus struct {
					Endpoint string `yaml:"endpoint"`
				} `yaml:"prometheus"`
			} `yaml:"metric_backends"`
		} `yaml:"jaeger_storage"`
	} `yaml:"extensions"`
}

func readJaegerConfig(t *testing.T) jaegerConfigFile {
	t.Helper()
	var c jaegerConfigFile
	readYAML(t, jaegerConfig, &c)
	return c
}

// spanMetrics returns the span metrics connector: the component of type spanmetrics ("spanmetrics" or
// "spanmetrics/<name>"), the only name Jaeger 2.x knows it by (span_metrics does not load).
func (c jaegerConfigFile) spanMetrics(t *testing.T) spanMetricsConfig {
	t.Helper()
	for id, sm := range c.Connectors {
		if typ, _, _ := strings.Cut(id, "/"); typ == "spanmetrics" {
			return sm
		}
	}
	t.Fatalf("%s has no spanmetrics connector", jaegerConfig)
	return spanMetricsConfig{}
}

// metricNames are the Prometheus names of the span metrics: the connector's namespace (default
// traces.span.metrics) with calls and duration, the duration's unit (default ms) spelled out, as the
// Prometheus exporter names them (UnderscoreEscapingWithSuffixes).
func (sm spanMetricsConfig) metricNames() []string {
	ns := strings.ReplaceAll(cmp.Or(sm.Namespace, "traces.span.metrics"), ".", "_")
	unit := map[string]string{"s": "seconds", "ms": "milliseconds", "": "milliseconds"}[sm.Histogram.Unit]
	duration := ns + "_duration_" + unit
	return []string{ns + "_calls_total", duration + "_bucket", duration + "_sum", duration + "_count"}
}

// hostPath is the file or directory of the repository that a compose bind mount source names.
func hostPath(source string) string { return filepath.Join("../..", source) }
