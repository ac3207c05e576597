package kubernetes

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/worker"
)

// fileSecrets are the settings naming a file that holds a secret (config.FileSuffix), which the manifests
// use so that no secret sits in the environment, and the key of the Secret each file is.
var fileSecrets = map[string]string{"REDIS_URL_FILE": "redis-url", "METRICS_TOKEN_FILE": "metrics-token"}

// otelVars are the OpenTelemetry variables the worker honours (internal/otelsetup), and goVars the Go
// runtime's (docs/configuration.md).
var (
	otelVars = regexp.MustCompile(`^OTEL_(SERVICE_NAME|RESOURCE_ATTRIBUTES|TRACES_EXPORTER|METRICS_EXPORTER|EXPORTER_OTLP_[A-Z_]+|TRACES_SAMPLER(_ARG)?|BSP_[A-Z_]+)$`)
	goVars   = regexp.MustCompile(`^(GOGC|GOMEMLIMIT|GOMAXPROCS)$`)
)

// workerSettings are the environment variables the worker reads.
func workerSettings() map[string]bool {
	s := config.NewSet("worker", func(string) (string, bool) { return "", false })
	var c worker.Config
	worker.Flags(s, &c)
	out := map[string]bool{}
	for _, p := range s.Params() {
		out[p.Env] = p.Env != ""
	}
	return out
}

// workerConfig is the worker's configuration from the environment env, as the worker parses it.
func workerConfig(t *testing.T, env map[string]string) worker.Config {
	t.Helper()
	s := config.NewSet("worker", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	c := worker.DefaultConfig()
	worker.Flags(s, &c)
	if err := s.Parse(nil); err != nil {
		t.Fatalf("the manifest's environment: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the manifest's environment: %v", err)
	}
	return c
}

// withSecretFiles points the file settings of values at temporary files holding secrets of the right form:
// the Redis URL redisURL, a metrics token.
func withSecretFiles(t *testing.T, values map[string]string, redisURL string) {
	t.Helper()
	for setting, key := range fileSecrets {
		content := "a-test-secret-of-" + key
		if key == "redis-url" {
			content = redisURL
		}
		values[setting] = writeFile(t, key, content)
	}
}

func TestTheDeploymentSetsOnlyRealSettings(t *testing.T) {
	b := render(t)
	c := b.container(t)
	known := workerSettings()
	_, names := env(c)
	for _, name := range names {
		switch {
		case known[name] || otelVars.MatchString(name) || goVars.MatchString(name):
		case fileSecrets[name] != "" && known[strings.TrimSuffix(name, config.FileSuffix)]:
		default:
			t.Errorf("the Deployment sets %s, which the worker does not read", name)
		}
	}
	values, _ := env(c)
	values["WORKER_NAME"] = "stockflow-worker-0" // from the pod's name
	withSecretFiles(t, values, "redis://worker:pw@redis:6379/0")
	cfg := workerConfig(t, values)
	grace := time.Duration(*b.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace <= cfg.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v, not above SHUTDOWN_TIMEOUT %v: SIGKILL would cut the orders in flight", grace, cfg.ShutdownTimeout)
	}
	if cfg.MetricsAddr != ":9090" || len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9090 {
		t.Errorf("METRICS_ADDR %q, ports %+v: want :9090, the container port named metrics", cfg.MetricsAddr, c.Ports)
	}
	if img, tag := c.Image, changelogVersion(t); !strings.HasSuffix(img, ":"+tag) {
		t.Errorf("the image is %s, want the tag %s of CHANGELOG.md's release", img, tag)
	}
}

// secretFiles maps each file the worker's secret volume mounts to its Secret and key.
func secretFiles(t *testing.T, b *base, c corev1.Container) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range b.deployment.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, item := range v.Secret.Items {
				out[filepath.Join(m.MountPath, item.Path)] = [2]string{v.Secret.SecretName, item.Key}
			}
		}
	}
	return out
}

func TestSecretsAreFilesTheWorkerAndPrometheusShare(t *testing.T) {
	b := render(t)
	c := b.container(t)
	values, _ := env(c)
	files := secretFiles(t, b, c)
	for setting, key := range fileSecrets {
		if got := files[values[setting]]; got[1] != key {
			t.Errorf("%s is %q, want a file of the secret volume holding the key %s (files: %v)", setting, values[setting], key, files)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("%s comes from a Secret through the environment: mount it as a file", e.Name)
		}
	}
	token := files[values["METRICS_TOKEN_FILE"]]
	endpoints := b.serviceMonitor.Spec.Endpoints
	if len(endpoints) != 1 || endpoints[0].Authorization == nil || endpoints[0].Authorization.Credentials == nil {
		t.Fatalf("the ServiceMonitor's endpoints %+v: want one, with a bearer token", endpoints)
	}
	auth := endpoints[0].Authorization
	if auth.Type != "Bearer" || auth.Credentials.Name != token[0] || auth.Credentials.Key != token[1] {
		t.Errorf("the ServiceMonitor sends %s %s/%s, want Bearer with the worker's token %s/%s", auth.Type,
			auth.Credentials.Name, auth.Credentials.Key, token[0], token[1])
	}
}

func TestTheObjectsFindTheWorkerPods(t *testing.T) {
	b := render(t)
	pods := b.deployment.Spec.Template.Labels
	if !matches(b.deployment.Spec.Selector.MatchLabels, pods) {
		t.Fatalf("the Deployment's selector %v does not select its pods %v", b.deployment.Spec.Selector.MatchLabels, pods)
	}
	for name, selector := range map[string]map[string]string{
		"the Service":             b.service.Spec.Selector,
		"the PodDisruptionBudget": b.pdb.Spec.Selector.MatchLabels,
		"the NetworkPolicy":       b.networkPolicy.Spec.PodSelector.MatchLabels,
	} {
		if !matches(selector, pods) {
			t.Errorf("%s selects %v, not the worker's pods %v", name, selector, pods)
		}
	}
	if !matches(b.serviceMonitor.Spec.Selector.MatchLabels, b.service.Labels) {
		t.Errorf("the ServiceMonitor selects %v, not the Service's labels %v", b.serviceMonitor.Spec.Selector.MatchLabels, b.service.Labels)
	}
	port := b.service.Spec.Ports
	if len(port) != 1 || port[0].Name != "metrics" || port[0].Port != 9090 || port[0].TargetPort.StrVal != "metrics" ||
		b.serviceMonitor.Spec.Endpoints[0].Port != "metrics" || b.serviceMonitor.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("the Service's ports %+v and the ServiceMonitor's endpoint: want port metrics (9090), path /metrics", port)
	}
	if in := b.networkPolicy.Spec.Ingress; len(in) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.StrVal != "metrics" {
		t.Errorf("the NetworkPolicy lets in %+v, want the metrics port only", in)
	}
}

func TestTheWorkerRunsLockedDown(t *testing.T) {
	b := render(t)
	pod, c := b.deployment.Spec.Template.Spec, b.container(t)
	sc := c.SecurityContext
	if pod.SecurityContext == nil || !isTrue(pod.SecurityContext.RunAsNonRoot) || sc == nil || !isTrue(sc.ReadOnlyRootFilesystem) ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("the worker's security contexts %+v, %+v: want non-root, a read-only root, no privilege escalation, no capabilities", pod.SecurityContext, sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("the worker requests %v: want CPU and memory (BENCHMARKS.md)", c.Resources.Requests)
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// TestTheProbesHitTheWorkersEndpoints runs a worker in this process with the Deployment's environment
// (Redis and the listen address moved to loopback ports, the secret files to temporary ones) and asks the
// probes' paths: /healthz answers 200 at once and /readyz 503 while no Redis answers, where a path the
// worker does not serve would answer 404.
func TestTheProbesHitTheWorkersEndpoints(t *testing.T) {
	b := render(t)
	c := b.container(t)
	values, _ := env(c)
	values["WORKER_NAME"] = "stockflow-worker-0"
	values["METRICS_ADDR"] = freeAddr(t)
	withSecretFiles(t, values, "redis://worker:pw@"+freeAddr(t)+"/0")
	cfg := workerConfig(t, values)
	metrics := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "stockflow_test 1") })
	w, err := worker.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), worker.Options{Locker: worker.NoLock, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { stop(); <-done }()

	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
	want := map[string]int{"readiness": http.StatusServiceUnavailable, "liveness": http.StatusOK}
	for name, p := range probes {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "metrics" {
			t.Fatalf("the %s probe %+v: want an HTTP GET on the metrics port", name, p)
		}
		if code := waitForAnswer(t, "http://"+cfg.MetricsAddr+p.HTTPGet.Path); code != want[name] {
			t.Errorf("the %s probe's %s answers %d with no Redis, want %d", name, p.HTTPGet.Path, code, want[name])
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("readiness on %s, liveness on %s: want /readyz and /healthz (a liveness probe on /readyz would restart a worker whose Redis is down)",
			c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
}

// waitForAnswer GETs url until the server answers (it starts in the worker's goroutine) and returns the
// status code.
func waitForAnswer(t *testing.T, url string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
}

// freeAddr is a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The workers spread over zones and over nodes, each constraint selecting the worker's own pods.
func TestTheWorkersSpreadOverZonesAndNodes(t *testing.T) {
	b := render(t)
	pods := b.deployment.Spec.Template.Labels
	spread := map[string]bool{}
	for _, c := range b.deployment.Spec.Template.Spec.TopologySpreadConstraints {
		if c.LabelSelector == nil || !matches(c.LabelSelector.MatchLabels, pods) || c.MaxSkew != 1 {
			t.Errorf("the spread over %s selects %v with maxSkew %d: want the worker's pods %v, maxSkew 1", c.TopologyKey, c.LabelSelector, c.MaxSkew, pods)
		}
		if !slices.Contains(c.MatchLabelKeys, "pod-template-hash") {
			t.Errorf("the spread over %s counts the pods of every ReplicaSet: a rollout would spread around the old pods", c.TopologyKey)
		}
		spread[c.TopologyKey] = true
	}
	for _, key := range []string{corev1.LabelTopologyZone, corev1.LabelHostname} {
		if !spread[key] {
			t.Errorf("the workers do not spread over %s", key)
		}
	}
}
