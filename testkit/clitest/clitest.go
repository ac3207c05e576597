// Package clitest builds a main package of this module and runs the binary as an operator would, for the
// tests of what each binary prints and how it exits (cmd/worker, cmd/producer, cmd/demo).
package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var builds sync.Map // by package directory: func() (string, error)

// Build builds the main package in dir (".": the test's own) once per test process and returns the
// binary's path. With -short it skips the test.
func Build(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	build, _ := builds.LoadOrStore(dir, sync.OnceValues(func() (string, error) {
		out, err := os.MkdirTemp("", "stockflow-clitest-")
		if err != nil {
			return "", err
		}
		path := filepath.Join(out, "bin")
		if b, err := exec.Command("go", "build", "-o", path, dir).CombinedOutput(); err != nil {
			return "", errors.New("go build " + dir + ": " + err.Error() + "\n" + string(b))
		}
		return path, nil
	}))
	path, err := build.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Result is how a run ended and what it wrote.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs the binary at path with args, the test's environment plus env, and waits at most a minute.
func Run(t *testing.T, path string, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	r := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	switch {
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", path, err)
	}
	return r
}

// Record is one line of a JSON log.
type Record map[string]any

// JSONLines returns the records of out, failing the test unless every line is one JSON object.
func JSONLines(t *testing.T, out string) []Record {
	t.Helper()
	var recs []Record
	for line := range strings.Lines(out) {
		var rec Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a line that is not a JSON object: %q (%v); everything written:\n%s", line, err, out)
		}
		recs = append(recs, rec)
	}
	if len(recs) == 0 {
		t.Fatal("nothing written, want at least the line that says why the binary exited")
	}
	return recs
}

// Exited checks how a run that failed ended: with exit code code, every line on standard error a JSON
// record, the last one's err saying says and its exit_code code. It returns the records.
func Exited(t *testing.T, r Result, code int, says string) []Record {
	t.Helper()
	if r.Code != code {
		t.Fatalf("exit code %d, want %d; stdout:\n%s\nstderr:\n%s", r.Code, code, r.Stdout, r.Stderr)
	}
	recs := JSONLines(t, r.Stderr)
	if last := Last(t, recs, "err", says); last["exit_code"] != float64(code) {
		t.Fatalf("last line %v: want exit_code %d", last, code)
	}
	return recs
}

// Last returns the last record, failing the test unless its field key says want.
func Last(t *testing.T, recs []Record, key, want string) Record {
	t.Helper()
	last := recs[len(recs)-1]
	if s, _ := last[key].(string); !strings.Contains(s, want) {
		t.Fatalf("the last line's %s is %q, want it to say %q; last line: %v", key, s, want, last)
	}
	return last
}
