package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// helpOf defines settings of every kind on a set and returns its -h output.
func helpOf(t *testing.T, env map[string]string) string {
	t.Helper()
	var (
		str, url, urls, secret, file string
		n                            int
		d                            time.Duration
		f                            float64
		on                           bool
	)
	s := NewSet("t", envOf(env))
	var out strings.Builder
	s.SetOutput(&out)
	s.URL(&url, "REDIS_URL", "redis://127.0.0.1:6379/0", "Redis")
	s.URLList(&urls, "REDLOCK_URLS", "", "masters")
	s.Secret(&secret, "METRICS_TOKEN", "bearer token")
	s.String(&file, "REDIS_TLS_CA_FILE", "", "CA certificates")
	s.String(&str, "distribution", "hot", "`distribution` of the orders: uniform, zipf or hot")
	s.Int(&n, "WORKER_CONCURRENCY", 16, "consumers")
	s.Duration(&d, "LOCK_LEASE", 30*time.Second, "lease")
	s.Float(&f, "rate", 0, "orders per second")
	s.Bool(&on, "wait", "wait for the outcomes")
	if err := s.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	return out.String()
}

func TestHelpNamesTheValueOfEverySetting(t *testing.T) {
	help := helpOf(t, nil)
	for _, want := range []string{
		"\n  --redis-url url\n", "\n  --redlock-urls urls\n", "\n  --metrics-token token\n",
		"\n  --redis-tls-ca-file file\n", "\n  --worker-concurrency n\n", "\n  --lock-lease duration\n",
		"\n  --rate number\n", "\n  --wait\n", "\n  --version\n",
		// a back-quoted word is the placeholder, and loses its quotes in the text
		"\n  --distribution distribution\n    \tdistribution of the orders: uniform, zipf or hot (default hot)\n",
		"consumers (env WORKER_CONCURRENCY) (default 16)\n", "lease (env LOCK_LEASE) (default 30s)\n",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("-h lacks %q:\n%s", want, help)
		}
	}
	for _, bad := range []string{" value\n", "`", "(default 0)", "(default false)"} {
		if strings.Contains(help, bad) {
			t.Errorf("-h shows %q:\n%s", bad, help)
		}
	}
}

func TestParamsCarryThePlaceholder(t *testing.T) {
	var url, str string
	var on bool
	s := NewSet("t", envOf(nil))
	s.URL(&url, "REDIS_URL", "", "Redis")
	s.String(&str, "run-id", "", "`prefix` of the order ids")
	s.Bool(&on, "wait", "wait")
	got := s.Params()
	if got[0].Placeholder != "url" || got[1].Placeholder != "prefix" || got[1].Usage != "prefix of the order ids" || got[2].Placeholder != "" {
		t.Fatalf("params %+v: want placeholders url, prefix (unquoted in the usage) and none for a boolean", got)
	}
}

// -h and --version answer even when the environment holds a bad value, which a run reports.
func TestHelpAndVersionDespiteABadEnvironment(t *testing.T) {
	help := helpOf(t, map[string]string{"LOCK_LEASE": "soon"})
	if !strings.Contains(help, "--lock-lease duration") {
		t.Fatalf("-h with a bad LOCK_LEASE:\n%s", help)
	}
	var d time.Duration
	s := NewSet("worker", envOf(map[string]string{"LOCK_LEASE": "soon"}))
	var out bytes.Buffer
	s.SetVersionOutput(&out)
	s.Duration(&d, "LOCK_LEASE", time.Second, "")
	err := s.Parse([]string{"--version"})
	if !errors.Is(err, ErrVersion) || !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--version: %v, want ErrVersion, which is a flag.ErrHelp", err)
	}
	if !strings.HasPrefix(out.String(), "worker ") || !strings.Contains(out.String(), ", commit ") {
		t.Fatalf("--version printed %q, want the name and the commit", out.String())
	}
	s = NewSet("worker", envOf(map[string]string{"LOCK_LEASE": "soon"}))
	s.Duration(&d, "LOCK_LEASE", time.Second, "")
	if err := s.Parse(nil); err == nil || !strings.Contains(err.Error(), "LOCK_LEASE") {
		t.Fatalf("a run with a bad LOCK_LEASE: %v", err)
	}
}

func TestVersionDescribesTheBuild(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/stockflow/stockflow", Version: "v0.0.0-20261123140000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.time", Value: "2026-11-23T14:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"a build in a git checkout", stamped, "worker github.com/stockflow/stockflow v0.0.0-20261123140000-0123456789ab+dirty, " +
			"commit 0123456789abcdef (2026-11-23T14:00:00Z, modified), go1.26.0"},
		{"a build without VCS information", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/stockflow/stockflow", Version: "(devel)"}},
			"worker github.com/stockflow/stockflow (devel), commit unknown, go1.26.0"},
		{"no build information at all", nil, "worker (unknown module) (devel), commit unknown, go"},
		{"a Docker build stamped at link time", stamp(&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/stockflow/stockflow", Version: "(devel)"}}, "0.1.0", "fedcba9876543210"),
			"worker github.com/stockflow/stockflow 0.1.0, commit fedcba9876543210, go1.26.0"},
		{"a stamp over recorded VCS information", stamp(stamped, "0.1.0", "fedcba9876543210"),
			"worker github.com/stockflow/stockflow 0.1.0, commit fedcba9876543210 (2026-11-23T14:00:00Z, modified), go1.26.0"},
		{"an empty stamp keeps what Go recorded", stamp(stamped, "", ""), "worker github.com/stockflow/stockflow v0.0.0-20261123140000-0123456789ab+dirty, " +
			"commit 0123456789abcdef (2026-11-23T14:00:00Z, modified), go1.26.0"},
	} {
		if got := describeBuild("worker", c.info); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestJSONLogsWriteDurationsAsStrings(t *testing.T) {
	var out bytes.Buffer
	Logger(&out, slog.LevelInfo).Info("retrying", "in", 3*time.Second, "n", 3, "group", map[string]any{"x": 1})
	Logger(&out, slog.LevelInfo).WithGroup("lock").Info("waited", "for", 1500*time.Microsecond)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var first, second map[string]any
	if err := errors.Join(json.Unmarshal([]byte(lines[0]), &first), json.Unmarshal([]byte(lines[1]), &second)); err != nil {
		t.Fatalf("not JSON lines: %v\n%s", err, out.String())
	}
	if first["in"] != "3s" || first["n"] != 3.0 {
		t.Errorf("first line %v: want in \"3s\" and n still a number", first)
	}
	if lock, _ := second["lock"].(map[string]any); lock["for"] != "1.5ms" {
		t.Errorf("second line %v: want lock.for \"1.5ms\"", second)
	}
}

// LOG_LEVEL keeps records below it out, and go-redis's own lines become records of the same JSON log.
func TestLogLevelAndGoRedisLinesAreRecords(t *testing.T) {
	var out bytes.Buffer
	l, err := ParseLogLevel("warn")
	if err != nil {
		t.Fatal(err)
	}
	logger := Logger(&out, l)
	logger.Info("left out")
	RedisLogger{L: logger}.Printf(context.Background(), "redis: %s: dial tcp: connection refused", "pool.go:770")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var rec map[string]any
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil {
		t.Fatalf("log %q: want one JSON record (the info one left out)", out.String())
	}
	if rec["level"] != "WARN" || rec["component"] != "go-redis" || !strings.Contains(rec["msg"].(string), "connection refused") {
		t.Fatalf("record %v: want go-redis's line as a warning", rec)
	}
	for _, bad := range []string{"verbose", "info+2", ""} {
		if _, err := ParseLogLevel(bad); err == nil {
			t.Errorf("LOG_LEVEL %q accepted", bad)
		}
	}
}

// A line logged with the context of a traced order names the order's trace and span.
func TestALineLoggedInATraceNamesIt(t *testing.T) {
	var out bytes.Buffer
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	Logger(&out, slog.LevelInfo).WarnContext(ctx, "order failed", "id", "1-0")
	Logger(&out, slog.LevelInfo).Warn("no order")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var first, second map[string]any
	if err := errors.Join(json.Unmarshal([]byte(lines[0]), &first), json.Unmarshal([]byte(lines[1]), &second)); err != nil {
		t.Fatal(err)
	}
	if first["trace_id"] != sc.TraceID().String() || first["span_id"] != sc.SpanID().String() {
		t.Fatalf("line %v: want the trace and span ids of its context", first)
	}
	if _, ok := second["trace_id"]; ok {
		t.Fatalf("line %v: a line without a trace names one", second)
	}
}
