package e2e

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/internal/worker"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Profiles    []string          `yaml:"profiles"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]any    `yaml:"depends_on"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Deploy struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
	} `yaml:"services"`
}

// settings returns the environment variables a binary reads, from its flag set.
func settings(define func(*config.Set)) map[string]bool {
	s := config.NewSet("t", func(string) (string, bool) { return "", false })
	define(s)
	out := map[string]bool{}
	for _, p := range s.Params() {
		if p.Env != "" {
			out[p.Env] = true
		}
	}
	return out
}

// otelVars are the OpenTelemetry variables the binaries honour (internal/otelsetup).
var otelVars = regexp.MustCompile(`^OTEL_(SERVICE_NAME|RESOURCE_ATTRIBUTES|TRACES_EXPORTER|METRICS_EXPORTER|EXPORTER_OTLP_[A-Z_]+|TRACES_SAMPLER(_ARG)?|BSP_[A-Z_]+)$`)

// readCompose parses compose.yaml.
func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml does not parse: %v", err)
	}
	return c
}

func TestComposeMatchesTheCode(t *testing.T) {
	c := readCompose(t)
	workerEnv := settings(func(s *config.Set) { var c worker.Config; worker.Flags(s, &c) })
	producerEnv := settings(func(s *config.Set) { var c producer.Config; producer.Flags(s, &c) })
	stockctlEnv := map[string]bool{}
	for _, p := range stockctl.Settings() {
		stockctlEnv[p.Env] = p.Env != ""
	}

	for _, name := range []string{"redis", "jaeger", "worker", "producer", "worker-redlock"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("compose.yaml has no %s service", name)
		}
	}
	if r := c.Services["worker"].Deploy.Replicas; r != 3 {
		t.Errorf("worker replicas %d, want 3", r)
	}
	if !slices.Contains(c.Services["jaeger"].Ports, "16686:16686") {
		t.Errorf("jaeger does not publish its UI on 16686: %v", c.Services["jaeger"].Ports)
	}
	for name, svc := range c.Services {
		var reads map[string]bool
		switch {
		case strings.HasPrefix(name, "worker"):
			reads = workerEnv
			if len(svc.Entrypoint) == 0 || svc.Entrypoint[0] != "/usr/local/bin/worker" {
				t.Errorf("%s does not run the worker: %v", name, svc.Entrypoint)
			}
		case strings.HasPrefix(name, "producer"):
			reads = producerEnv
			if len(svc.Entrypoint) == 0 || svc.Entrypoint[0] != "/usr/local/bin/producer" {
				t.Errorf("%s does not run the producer: %v", name, svc.Entrypoint)
			}
			checkFlags(t, svc.Command, producerFlags())
		case name == "stockctl":
			reads = stockctlEnv
			if len(svc.Entrypoint) == 0 || svc.Entrypoint[0] != "/usr/local/bin/stockctl" {
				t.Errorf("stockctl does not run stockctl: %v", svc.Entrypoint)
			}
		default:
			continue
		}
		for k, v := range svc.Environment {
			if !reads[k] && !otelVars.MatchString(k) {
				t.Errorf("%s sets %s, which the binary does not read", name, k)
			}
			for _, host := range redisHosts(v) {
				if _, ok := c.Services[host]; !ok {
					t.Errorf("%s: %s points at %q, which is not a service", name, k, host)
				}
			}
		}
		if ep := svc.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; ep != "" && ep != "http://jaeger:4318" {
			t.Errorf("%s exports to %s; Jaeger takes OTLP/HTTP on jaeger:4318", name, ep)
		}
		for dep := range svc.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on undefined service %s", name, dep)
			}
		}
		if addr := svc.Environment["METRICS_ADDR"]; addr != "" && addr != ":9090" {
			t.Errorf("%s: METRICS_ADDR %s, the image exposes 9090", name, addr)
		}
	}

	// The redlock profile: 5 independent masters, all of them and only them in REDLOCK_URLS.
	var masters []string
	for name, svc := range c.Services {
		if slices.Contains(svc.Profiles, "redlock") && strings.HasPrefix(name, "redlock-") {
			masters = append(masters, name)
		}
	}
	urls := redisHosts(c.Services["worker-redlock"].Environment["REDLOCK_URLS"])
	slices.Sort(masters)
	slices.Sort(urls)
	if len(masters) != 5 || !slices.Equal(masters, urls) {
		t.Errorf("redlock profile masters %v, REDLOCK_URLS hosts %v: want the same 5", masters, urls)
	}
	if _, ok := c.Services["worker"].Environment["REDLOCK_URLS"]; ok {
		t.Error("the default workers set REDLOCK_URLS")
	}
}

var redisURL = regexp.MustCompile(`rediss?://(?:[^@/,]*@)?([^:/,]+)`)

func redisHosts(v string) []string {
	var hosts []string
	for _, m := range redisURL.FindAllStringSubmatch(v, -1) {
		hosts = append(hosts, m[1])
	}
	return hosts
}

func producerFlags() map[string]bool {
	s := config.NewSet("t", func(string) (string, bool) { return "", false })
	var c producer.Config
	producer.Flags(s, &c)
	out := map[string]bool{}
	for _, p := range s.Params() {
		out[p.Flag] = true
	}
	return out
}

func checkFlags(t *testing.T, args []string, known map[string]bool) {
	t.Helper()
	for _, a := range args {
		if strings.HasPrefix(a, "--") && !known[strings.SplitN(a, "=", 2)[0]] {
			t.Errorf("unknown flag %s in %v", a, args)
		}
	}
}
