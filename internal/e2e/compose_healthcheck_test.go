package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Every service of compose.yaml has a healthcheck: a command, or disable where no command could tell (the
// stockflow images are distroless: no shell, no HTTP client) or where nothing should wait for health (a
// one-shot service, which its dependents wait for to complete). No Docker engine runs here: the test
// holds the file to that and to itself, not the images to the commands.

// composeHealth is what the test reads of each service.
type composeHealth struct {
	Services map[string]struct {
		Image       string `yaml:"image"`
		Build       any    `yaml:"build"`
		Restart     string `yaml:"restart"`
		Ports       []string
		DependsOn   map[string]struct{ Condition string } `yaml:"depends_on"`
		Healthcheck *struct {
			Test     []string `yaml:"test"`
			Disable  bool     `yaml:"disable"`
			Interval string   `yaml:"interval"`
			Timeout  string   `yaml:"timeout"`
			Retries  int      `yaml:"retries"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func TestComposeHasAHealthcheckOnEveryService(t *testing.T) {
	if problems := healthcheckProblems(t, readFile(t, "../../compose.yaml")); len(problems) > 0 {
		t.Fatalf("compose.yaml:\n%s", strings.Join(problems, "\n"))
	}
	text := string(readFile(t, "../../compose.yaml"))
	breaks := []struct{ name, from, to, named string }{
		{"a service without a healthcheck", "    healthcheck: *redis-healthcheck\n", "\n", "redis has no healthcheck"},
		{"a long-running service that disables it", "      test: [\"CMD\", \"wget\", \"-q\", \"-O\", \"/dev/null\", \"http://127.0.0.1:9090/-/ready\"]\n", "      disable: true\n", "prometheus disables its healthcheck"},
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
		distroless := svc.Image == "stockflow:latest" || svc.Image == "stockflow-producer:latest"
		switch {
		case h == nil:
			problems = append(problems, name+" has no healthcheck")
		case h.Disable && svc.Restart != "no" && !distroless:
			problems = append(problems, name+" disables its healthcheck, but runs on and has a shell or tools to check with")
		case h.Disable:
		case len(h.Test) < 2 || (h.Test[0] != "CMD" && h.Test[0] != "CMD-SHELL") || h.Interval == "" || h.Timeout == "" || h.Retries == 0:
			problems = append(problems, fmt.Sprintf("%s's healthcheck %+v: want a CMD or CMD-SHELL test with interval, timeout and retries", name, *h))
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
