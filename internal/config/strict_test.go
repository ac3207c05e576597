package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// strictSet is a set with a few of the worker's settings over the environment env, which Parse checks as
// it checks os.Environ.
func strictSet(env map[string]string) *Set {
	s := NewSet("worker", envOf(env))
	s.environ = func() []string {
		var kv []string
		for k, v := range env {
			kv = append(kv, k+"="+v)
		}
		return kv
	}
	var n int
	var url, token, name string
	s.Int(&n, "WORKER_CONCURRENCY", 128, "")
	s.String(&name, "WORKER_NAME", "", "")
	s.URL(&url, "REDIS_URL", "redis://127.0.0.1:6379/0", "")
	s.Secret(&token, "METRICS_TOKEN", "")
	s.NoArguments()
	return s
}

func TestUnknownVariablesThatLookLikeSettingsAreRefused(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // "" when Parse must accept the environment
	}{
		{"a typo of a setting names the setting", map[string]string{"WORKER_CONCURENCY": "4"},
			"unknown environment variable WORKER_CONCURENCY: did you mean WORKER_CONCURRENCY?"},
		{"a setting in lower case names the setting", map[string]string{"worker_concurrency": "4"},
			"unknown environment variable worker_concurrency: did you mean WORKER_CONCURRENCY?"},
		{"a variable with the first word of a setting lists that word's settings", map[string]string{"REDIS_PASSWORD": "x"},
			"unknown environment variable REDIS_PASSWORD: not a setting of worker (its REDIS_ settings: REDIS_URL; worker -h lists them all)"},
		{"the file of a setting that is not a secret is unknown", map[string]string{"WORKER_NAME_FILE": "/x"},
			"unknown environment variable WORKER_NAME_FILE: not a setting of worker (its WORKER_ settings: WORKER_CONCURRENCY, WORKER_NAME;"},
		{"the file of a secret is a setting", map[string]string{"METRICS_TOKEN_FILE": "/nonexistent"}, "cannot read the file"},
		{"a setting of another binary passes", map[string]string{"LOCK_WAIT": "2s", "REDLOCK_URLS_FILE": ""}, ""},
		{"Kubernetes' service links pass", map[string]string{"REDIS_PORT": "tcp://10.0.0.1:6379", "REDIS_SERVICE_HOST": "10.0.0.1",
			"REDIS_SERVICE_PORT": "6379", "REDIS_PORT_6379_TCP_ADDR": "10.0.0.1", "WORKER_SERVICE_PORT_METRICS": "9090"}, ""},
		{"variables of other programs pass", map[string]string{"HOME": "/root", "GOGC": "100", "OTEL_SERVICE_NAME": "w", "LOG": "x"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := strictSet(tc.env).Parse(nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Parse: %v, want an error saying %q", err, tc.want)
			case tc.want != "" && ExitCode(err) != ExitUsage:
				t.Fatalf("Parse: %v, exit code %d, want %d", err, ExitCode(err), ExitUsage)
			}
		})
	}
}

func TestArgumentsAndUnknownFlagsSuggestTheFlagMeant(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"version"}, `unexpected argument "version": worker takes no arguments, only flags and environment variables; did you mean --version?`},
		{[]string{"--worker-name", "w", "run"}, `unexpected argument "run": worker takes no arguments, only flags and environment variables`},
		{[]string{"--concurency", "4"}, "flag provided but not defined: -concurency; did you mean --worker-concurrency?"},
		{[]string{"--redis-rul", "x"}, "flag provided but not defined: -redis-rul; did you mean --redis-url?"},
	}
	for _, tc := range cases {
		err := strictSet(nil).Parse(tc.args)
		if err == nil || err.Error() != tc.want || ExitCode(err) != ExitUsage {
			t.Errorf("%q: %v (exit code %d), want %q and exit code 2", tc.args, err, ExitCode(err), tc.want)
		}
	}
}

func TestSourceSaysWhereAValueCameFrom(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"nothing given: the default", nil, nil, "default"},
		{"the environment", map[string]string{"REDIS_URL": "redis://h:1/0"}, nil, "REDIS_URL"},
		{"the flag over the environment", map[string]string{"REDIS_URL": "redis://h:1/0"}, []string{"--redis-url", "redis://f:1/0"}, "--redis-url"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := strictSet(tc.env)
			if err := s.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if got := s.Source("REDIS_URL"); got != tc.want {
				t.Errorf("Source(REDIS_URL) = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestExitLogsOneJSONLineWithTheExitCode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		code int
	}{
		{"a clean run", nil, ExitOK},
		{"-h", flag.ErrHelp, ExitOK},
		{"--version", ErrVersion, ExitOK},
		{"a refused setting", Usage(errors.New("invalid LOCK_WAIT 0s: must be positive")), ExitUsage},
		{"a failure", errors.New("Redis did not answer"), ExitFailure},
		{"an error with a code of its own", fmt.Errorf("stock: %w", codedError{3}), 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if got := Exit(Logger(&buf, slog.LevelInfo), "worker", tc.err); got != tc.code {
				t.Fatalf("Exit = %d, want %d", got, tc.code)
			}
			if tc.code == ExitOK {
				if buf.Len() > 0 {
					t.Fatalf("logged %q after a run that exits 0", buf.String())
				}
				return
			}
			var rec struct {
				Level, Err string
				Code       int `json:"exit_code"`
			}
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec.Level != "ERROR" || rec.Err != tc.err.Error() || rec.Code != tc.code {
				t.Fatalf("logged %q (%v), want one JSON error line with the error and exit code %d", buf.String(), err, tc.code)
			}
		})
	}
}

// codedError is an error with an exit code of its own, as stockctl's not found.
type codedError struct{ code int }

func (e codedError) Error() string { return "SKU-9 not found" }
func (e codedError) ExitCode() int { return e.code }

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "abc", 3}, {"WORKER_CONCURENCY", "WORKER_CONCURRENCY", 1}, {"LOCKWAIT", "LOCK_WAIT", 1}, {"kitten", "sitting", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
