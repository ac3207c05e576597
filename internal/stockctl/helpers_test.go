package stockctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// env is one redis-server and a client on it; run calls stockctl.Run against it.
type env struct {
	t   *testing.T
	srv *redistest.Server
	rdb *redis.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := redistest.Start(t)
	return &env{t: t, srv: srv, rdb: srv.Client()}
}

// result is what one stockctl run printed and returned. Its standard error is log records, one JSON
// object a line (runArgs fails the test otherwise); stderr is their text, "msg: err" a line.
type result struct {
	code           int
	stdout, stderr string
	log            []map[string]any
}

// run runs stockctl with --redis-url pointing at the test server.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return runArgs(e.t, append([]string{"--redis-url", e.srv.URL()}, args...)...)
}

func runArgs(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := stockctl.Run(context.Background(), args, &out, config.Logger(&errOut, slog.LevelInfo))
	r := result{code: code, stdout: out.String()}
	for line := range strings.Lines(errOut.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stockctl %q wrote a line that is not a JSON record (%v): %q", args, err, line)
		}
		r.log = append(r.log, rec)
		r.stderr += fmt.Sprint(rec["msg"])
		if e, ok := rec["err"]; ok {
			r.stderr += fmt.Sprint(": ", e)
		}
		r.stderr += "\n"
	}
	return r
}

// runJSON runs stockctl with --json and decodes its output into v.
func (e *env) runJSON(v any, args ...string) result {
	e.t.Helper()
	r := e.run(append(args, "--json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		e.t.Fatalf("stockctl %q: output is not JSON (%v):\n%s\nstderr: %s", args, err, r.stdout, r.stderr)
	}
	return r
}

// wantCode fails the test unless r ended with code, and but for 0 with a last log record that says so; the
// output is shown when it did not.
func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	if code != stockctl.ExitOK && (len(r.log) == 0 || r.log[len(r.log)-1]["exit_code"] != float64(code)) {
		t.Fatalf("exit code %d, but the last log record does not say so: %v", code, r.log)
	}
}

func wantContains(t *testing.T, what, text string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(text, p) {
			t.Errorf("%s does not contain %q:\n%s", what, p, text)
		}
	}
}

// must returns v of a setup call that cannot fail on a healthy test server; an error panics, which fails
// the test with its stack.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// snapshot is every key of the server with its type and content, to prove a command wrote nothing.
func (e *env) snapshot() map[string]string {
	e.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range must(e.rdb.Keys(ctx, "*").Result()) {
		typ := must(e.rdb.Type(ctx, k).Result())
		var v any
		switch typ {
		case "hash":
			v = must(e.rdb.HGetAll(ctx, k).Result())
		case "stream":
			v = must(e.rdb.XRange(ctx, k, "-", "+").Result())
		case "string":
			v = must(e.rdb.Get(ctx, k).Result())
		}
		b, _ := json.Marshal(v)
		out[k] = typ + " " + string(b)
	}
	return out
}
