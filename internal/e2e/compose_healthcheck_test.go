package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stockflow/stockflow/internal/worker"
)

// Every service of compose.yaml has a healthcheck: a command, or disable where nothing should wait for
// health (a one-shot service, which its dependents wait for to complete). A service that runs on has a
// command, the distroless stockflow image's too: its workers run worker probe, with a start period that
// covers STARTUP_TIMEOUT and a timeout longer than the probe's. No Docker engine runs here: the test holds
// the file to that and to itself (cmd/worker's tests run the probe), not the images to the commands.

// composeHealth is what the test reads of each service.
type composeHealth struct {
	Services map[string]struct {
		Image       string   `yaml:"image"`
		Build       any      `yaml:"build"`
		Restart     string   `yaml:"restart"`
		Entrypoint  []string `yaml:"entrypoint"`
		Environment map[string]string
		Ports       []string
		DependsOn   map[string]struct{ Condition string } `yaml:"depends_on"`
		Healthcheck *healthcheck                          `yaml:"healthcheck"`
	} `yaml:"services"`
}

// healthcheck is a service's healthcheck.
type healthcheck struct {
	Test        []string `yaml:"test"`
	Disable     bool     `yaml:"disable"`
	Interval    string   `yaml:"interval"`
	Timeout     string   `yaml:"timeout"`
	Retries     int      `yaml:"retries"`
	StartPeriod string   `yaml:"start_period"`
}

func TestComposeHasAHealthcheckOnEveryService(t *testing.T) {
	if problems := healthcheckProblems(t, readFile(t, "../../compose.yaml")); len(problems) > 0 {
		t.Fatalf("compose.yaml:\n%s", strings.Join(problems, "\n"))
	}
	text := string(readFile(t, "../../compose.yaml"))
	breaks := []struct{ name, from, to, named string }{
		{"a service without a healthcheck", "    healthcheck: *redis-healthcheck\n", "\n", "redis has no healthcheck"},
		{"a long-running service that disables it", "      test: [\"CMD\", \"wget\", \"-q\", \"-O\", \"/dev/null\", \"http://127.0.0.1:9090/-/ready\"]\n", "      disable: true\n", "prometheus disables its healthcheck"},
		{"a distroless worker that disables it", workerProbe, "    disable: true\n", "worker disables its healthcheck"},
		{"a worker checked by another command than its probe", workerProbe, "    test: [\"CMD\", \"/usr/local/bin/worker\", \"--version\"]\n", "worker's healthcheck runs"},
		{"a worker's start period shorter than STARTUP_TIMEOUT", "    start_period: 70s\n", "    start_period: 30s\n", "worker's start_period 30s"},
		{"a worker's timeout within the probe's", "    timeout: 3s\n    retries: 3\n    start_period", "    timeout: 2s\n    retries: 3\n    start_period", "worker's timeout 2s"},
		{"a check on a port the service does not serve", "http://127.0.0.1:3000/api/health", "http://127.0.0.1:3001/api/health", "grafana checks port 3001"},
		{"a wait for the health of a service that has none", "      producer-seed:\n        condition: service_completed_successfully", "      producer-seed:\n        condition: service_healthy", "waits for producer-seed to be healthy"},
	}
	for _, b := range breaks {
		t.Run(b.name+" is reported", func(t *testing.T) {
			if !strings.Contains(text, b.from) {
				t.Fatalf("compose.yaml has no %q to change", b.from)
			}
			problems := healthcheckProblems(t, []byte(strings.Replace(text, b.from, b.to, 1)))
			if !strings.Contains(strings.Join(problems, "\n"), b.named) {
				t.Fatalf("the check reported %q; want a problem naming %q", problems, b.named)
			}
		})
	}
}

// workerProbe is the workers' healthcheck command in compose.yaml.
const workerProbe = "    test: [\"CMD\", \"/usr/local/bin/worker\", \"probe\"]\n"

// healthcheckProblems lists the services of the compose file text whose healthcheck is missing, disabled
// without cause, incomplete or aimed at a port the service does not serve, and the waits for a health
// that no check reports.
func healthcheckProblems(t *testing.T, text []byte) []string {
	t.Helper()
	var c composeHealth
	if err := yaml.Unmarshal(text, &c); err != nil {
		t.Fatal(err)
	}
	var problems []string
	for name, svc := range c.Services {
		h := svc.Healthcheck
		switch {
		case h == nil:
			problems = append(problems, name+" has no healthcheck")
		case h.Disable && svc.Restart != "no":
			problems = append(problems, name+" disables its healthcheck, but runs on: nothing could wait for it to be healthy")
		case h.Disable:
		case len(h.Test) < 2 || (h.Test[0] != "CMD" && h.Test[0] != "CMD-SHELL") || h.Interval == "" || h.Timeout == "" || h.Retries == 0:
			problems = append(problems, fmt.Sprintf("%s's healthcheck %+v: want a CMD or CMD-SHELL test with interval, timeout and retries", name, *h))
		case slices.Equal(svc.Entrypoint, []string{"/usr/local/bin/worker"}):
			problems = append(problems, workerProbeProblems(name, *h, svc.Environment["STARTUP_TIMEOUT"])...)
		default:
			problems = append(problems, portProblems(name, h.Test, svc.Ports)...)
		}
		for dep, cond := range svc.DependsOn {
			if d := c.Services[dep].Healthcheck; cond.Condition == "service_healthy" && (d == nil || d.Disable) {
				problems = append(problems, fmt.Sprintf("%s waits for %s to be healthy, which no healthcheck reports", name, dep))
			}
		}
	}
	slices.Sort(problems)
	return problems
}

// portProblems: a check that asks a local URL asks a port the service publishes.
func portProblems(name string, test, ports []string) []string {
	m := regexp.MustCompile(`http://(?:127\.0\.0\.1|localhost):(\d+)/`).FindStringSubmatch(strings.Join(test, " "))
	if m == nil {
		return nil
	}
	for _, p := range ports {
		if strings.HasSuffix(p, ":"+m[1]) {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s checks port %s, which it does not serve (ports %v)", name, m[1], ports)}
}

// workerProbeProblems: a worker is checked by its probe (worker probe, which asks its /readyz), for longer
// than the probe waits, and not held unhealthy while it may still be waiting for Redis (startupTimeout,
// STARTUP_TIMEOUT as the service sets it; "" for the default).
func workerProbeProblems(name string, h healthcheck, startupTimeout string) []string {
	var problems []string
	if want := []string{"CMD", "/usr/local/bin/worker", worker.ProbeCommand}; !slices.Equal(h.Test, want) {
		problems = append(problems, fmt.Sprintf("%s's healthcheck runs %q, want %q", name, h.Test, want))
	}
	if timeout, err := time.ParseDuration(h.Timeout); err != nil || timeout <= worker.ProbeTimeout {
		problems = append(problems, fmt.Sprintf("%s's timeout %s: want more than the probe's %v", name, h.Timeout, worker.ProbeTimeout))
	}
	startup := worker.DefaultStartupTimeout
	if startupTimeout != "" {
		startup, _ = time.ParseDuration(startupTimeout)
	}
	if start, err := time.ParseDuration(h.StartPeriod); err != nil || start < startup {
		problems = append(problems, fmt.Sprintf("%s's start_period %s: want at least STARTUP_TIMEOUT (%v), the longest a starting worker waits for Redis", name, h.StartPeriod, startup))
	}
	return problems
}
