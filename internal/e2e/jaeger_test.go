package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/childproc"
)

// A real Jaeger v2 for the tests: the binary of scripts/ensure-jaeger.sh (built from Jaeger's Go module
// once, then cached), run with the project's deploy/jaeger/config.yaml with only its listen addresses
// moved to free loopback ports, and read back through its HTTP query API.

const ensureJaegerScript = "../../scripts/ensure-jaeger.sh"

var jaegerBin struct {
	once sync.Once
	path string
	err  error
}

// jaegerBinary returns the Jaeger binary of scripts/ensure-jaeger.sh, which builds it the first time (about
// 5 minutes on 2 cores; scripts/test.sh has it built before the tests start). A build that fails, such as
// without a reachable Go module proxy, fails the test; only -short skips it.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Jaeger, which scripts/ensure-jaeger.sh may have to build first; skipped with -short")
	}
	jaegerBin.once.Do(func() {
		var stderr bytes.Buffer
		cmd := exec.Command("bash", ensureJaegerScript)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		jaegerBin.path = strings.TrimSpace(string(out))
		if err != nil {
			jaegerBin.err = fmt.Errorf("%s: %v\n%s", ensureJaegerScript, err, stderr.String())
		} else if stderr.Len() > 0 {
			fmt.Fprint(os.Stderr, stderr.String()) // that it built, and how long it took
		}
	})
	if jaegerBin.err != nil {
		t.Fatal(jaegerBin.err)
	}
	return jaegerBin.path
}

// testedJaegerRelease is the Jaeger release scripts/ensure-jaeger.sh builds, as the image tag names it
// ("2.13.0").
func testedJaegerRelease(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^release=v(\d+\.\d+\.\d+)\b`).FindSubmatch(readFile(t, ensureJaegerScript))
	if m == nil {
		t.Fatalf("%s sets no release=v<x.y.z>", ensureJaegerScript)
	}
	return string(m[1])
}

// jaeger is a running Jaeger.
type jaeger struct {
	otlpGRPC, otlpHTTP string // host:port of the OTLP receivers
	query              string // host:port of the query API (and of the UI, a placeholder in this build)
	metrics            string // host:port of the Prometheus exporter of the span metrics
}

// startJaeger runs Jaeger with deploy/jaeger/config.yaml until the test ends, and waits until its query API
// answers.
func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	path := jaegerBinary(t)
	j := &jaeger{otlpGRPC: freeAddr(t), otlpHTTP: freeAddr(t), query: freeAddr(t), metrics: freeAddr(t)}
	cmd := exec.Command(path, j.args(t)...)
	// Jaeger traces its own queries over OTLP/gRPC (jaeger_query's enable_tracing, on by default), to
	// localhost:4317 unless told otherwise: in compose, into itself. Here too, rather than into whatever
	// listens on 4317 on this machine.
	self := "http://" + j.otlpGRPC
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+self, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+self)
	child, err := childproc.Start(cmd, filepath.Join(t.TempDir(), "jaeger.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		child.Kill()
		if t.Failed() {
			t.Logf("log of jaeger (last 40 lines):\n%s", strings.Join(child.LogTail(40), "\n"))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := child.WaitReady(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		return j.get(ctx, "/api/services", nil, &struct{}{})
	}); err != nil {
		t.Fatalf("jaeger with %s is not ready: %v\n%s", jaegerConfig, err, strings.Join(child.LogTail(40), "\n"))
	}
	return j
}

// args run deploy/jaeger/config.yaml with only addresses changed (--set): the receivers, the exporter and
// the query servers listen on free loopback ports, and the collector's own metrics (port 8888 by default)
// are off.
func (j *jaeger) args(t *testing.T) []string {
	t.Helper()
	config, err := filepath.Abs(jaegerConfig)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", config}
	for key, value := range map[string]string{
		"receivers.otlp.protocols.grpc.endpoint": j.otlpGRPC,
		"receivers.otlp.protocols.http.endpoint": j.otlpHTTP,
		"exporters.prometheus.endpoint":          j.metrics,
		"extensions.jaeger_query.http.endpoint":  j.query,
		"extensions.jaeger_query.grpc.endpoint":  freeAddr(t),
		"service.telemetry.metrics.level":        "none",
	} {
		args = append(args, "--set", key+"="+value)
	}
	return args
}

// exportEnv is the environment that makes a stockflow binary export its spans to j, as service, quickly
// (a batch every 100 ms instead of every 5 s).
func (j *jaeger) exportEnv(service string) []string {
	return []string{"OTEL_SERVICE_NAME=" + service, "OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + j.otlpHTTP, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=100"}
}

// get decodes the JSON that the query API answers path with (and query's parameters) into v.
func (j *jaeger) get(ctx context.Context, path string, query url.Values, v any) error {
	u := url.URL{Scheme: "http", Host: j.query, Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u.String(), resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// traces returns the traces of the last hour that have a span of service named operation, whole (every
// service's spans), as /api/traces answers.
func (j *jaeger) traces(t *testing.T, service, operation string) []jaegerTrace {
	t.Helper()
	now := time.Now()
	q := url.Values{"service": {service}, "operation": {operation}, "limit": {"10000"},
		"start": {strconv.FormatInt(now.Add(-time.Hour).UnixMicro(), 10)},
		"end":   {strconv.FormatInt(now.Add(time.Minute).UnixMicro(), 10)}}
	var body struct {
		Data []jaegerTrace `json:"data"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.get(ctx, "/api/traces", q, &body); err != nil {
		t.Fatal(err)
	}
	return body.Data
}

// jaegerTrace is a trace as Jaeger's HTTP API gives it (the JSON of the Jaeger UI).
type jaegerTrace struct {
	TraceID   string       `json:"traceID"`
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"` // CHILD_OF, FOLLOWS_FROM (an OpenTelemetry link)
		SpanID  string `json:"spanID"`
	} `json:"references"`
	ProcessID string      `json:"processID"`
	Tags      []jaegerTag `json:"tags"` // the span's attributes, and span.kind
	Logs      []jaegerLog `json:"logs"` // the span's events
}

// jaegerLog is a span event.
type jaegerLog struct {
	Fields []jaegerTag `json:"fields"` // the event's attributes, and its name as "event"
}

type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// tagValue is the value of the tag key as text, and whether there is one.
func tagValue(tags []jaegerTag, key string) (string, bool) {
	for _, tag := range tags {
		if tag.Key == key {
			return fmt.Sprint(tag.Value), true
		}
	}
	return "", false
}

func hasTag(tags []jaegerTag, key string) bool {
	_, ok := tagValue(tags, key)
	return ok
}

// subtree returns the span root and every span under it (CHILD_OF, transitively) among spans.
func subtree(spans []jaegerSpan, root jaegerSpan) []jaegerSpan {
	children := map[string][]jaegerSpan{}
	for _, s := range spans {
		for _, ref := range s.References {
			if ref.RefType == "CHILD_OF" {
				children[ref.SpanID] = append(children[ref.SpanID], s)
			}
		}
	}
	out := []jaegerSpan{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].SpanID]...)
	}
	return out
}
