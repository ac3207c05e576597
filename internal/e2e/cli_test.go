package e2e

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/demo"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// Every binary: -h exits 0 and names the value of each setting it takes ("--lock-lease duration", not
// the flag package's "value"); --version exits 0 and says what the build recorded.
func TestConfigurationHelpNamesEveryValueAndVersionTellsTheBuild(t *testing.T) {
	workerBin, producerBin := binaries(t)
	for _, b := range []struct {
		name, path string
		params     []config.Param
	}{
		{"worker", workerBin, params(func(s *config.Set) { var c worker.Config; worker.Flags(s, &c) })},
		{"producer", producerBin, params(func(s *config.Set) { var c producer.Config; producer.Flags(s, &c) })},
		{"demo", buildDemo(t), params(func(s *config.Set) { var c demo.Config; demo.Flags(s, &c) })},
		{"stockctl", buildStockctl(t), stockctl.Settings()},
	} {
		t.Run(b.name, func(t *testing.T) {
			code, help := runBinary(t, b.path, nil, "-h")
			if code != 0 {
				t.Fatalf("%s -h exited %d:\n%s", b.name, code, help)
			}
			checkHelp(t, help, b.params)
			code, version := runBinary(t, b.path, nil, "--version")
			if want := wantVersion(t, b.name, b.path); code != 0 || !regexp.MustCompile(want).MatchString(version) {
				t.Fatalf("%s --version exited %d and printed %q; want %s", b.name, code, version, want)
			}
		})
	}
}

// checkHelp: every setting shows as --flag placeholder, but a boolean one (no placeholder); and --version.
func checkHelp(t *testing.T, help string, params []config.Param) {
	t.Helper()
	for _, p := range append(params, config.Param{Flag: "--version", Default: "false"}) {
		isBool := p.Default == "false" || p.Default == "true"
		switch {
		case isBool && p.Placeholder != "":
			t.Errorf("%s is a boolean flag with a placeholder %q", p.Flag, p.Placeholder)
		case !isBool && (p.Placeholder == "" || p.Placeholder == "value" || p.Placeholder == "string"):
			t.Errorf("%s has no meaningful placeholder: %q", p.Flag, p.Placeholder)
		}
		line := strings.TrimSpace(p.Flag + " " + p.Placeholder)
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(line) + `( \(|$)`).MatchString(help) {
			t.Errorf("-h has no line %q:\n%s", line, help)
		}
	}
	if strings.Contains(help, " value\n") {
		t.Errorf("-h names a value \"value\":\n%s", help)
	}
}

// wantVersion is a pattern of what --version of the binary at path must print: the module and the commit
// that go version -m finds in its build information ("unknown" when it has none).
func wantVersion(t *testing.T, name, path string) string {
	t.Helper()
	commit := cmp.Or(vcsRevision(t, path), "unknown")
	return `^` + name + ` github\.com/stockflow/stockflow \S+, commit ` + regexp.QuoteMeta(commit) + `[ ,]`
}

// vcsRevision is the commit recorded in the build information of the binary at path, "" when none is.
func vcsRevision(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", path).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", path, err)
	}
	if m := regexp.MustCompile(`(?m)^\s+build\s+vcs\.revision=(\S+)$`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// A binary built from a git checkout with VCS stamping tells its commit: the one checked out.
func TestConfigurationVersionTellsTheCommit(t *testing.T) {
	binaries(t)
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no git checkout to compare with: %v", err)
	}
	path := filepath.Join(t.TempDir(), "stockctl")
	out, err := exec.Command("go", "build", "-buildvcs=true", "-o", path, "../../cmd/stockctl").CombinedOutput()
	switch {
	case err != nil && strings.Contains(string(out), "VCS status"): // git refuses this checkout (another owner)
		t.Skipf("go build cannot stamp VCS information here:\n%s", out)
	case err != nil:
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	// cmd/go finds the checkout by its .git directory: in a git worktree or submodule .git is a file, and
	// -buildvcs=true records nothing, without an error.
	top, _ := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	dotGit := filepath.Join(strings.TrimSpace(string(top)), ".git")
	if fi, err := os.Stat(dotGit); err == nil && !fi.IsDir() && vcsRevision(t, path) == "" {
		t.Skipf("%s is a file (a git worktree or submodule): go build records no VCS information there", dotGit)
	}
	code, version := runBinary(t, path, nil, "--version")
	if want := "commit " + strings.TrimSpace(string(head)) + " ("; code != 0 || !strings.Contains(version, want) ||
		strings.Contains(version, "(devel)") {
		t.Fatalf("--version exited %d and printed %q; want the module's version and %q", code, version, want)
	}
}

// The worker's JSON log writes durations as Go writes them: "timeout":"5s", not 5000000000.
func TestConfigurationLogsWriteDurationsAsStrings(t *testing.T) {
	s := redistest.Start(t)
	addr := freeAddr(t)
	w := startWorker(t, s, "durations", "METRICS_ADDR="+addr) // SHUTDOWN_TIMEOUT=5s (testEnv)
	waitFor(t, 10*time.Second, "the worker is ready", func() bool { c, _ := readyz(addr); return c == 200 })
	w.signal(syscall.SIGTERM)
	if err, exited := w.exited(15 * time.Second); !exited || err != nil {
		t.Fatalf("worker after SIGTERM: exited %v, %v", exited, err)
	}
	log := w.logText()
	if !strings.Contains(log, `"msg":"shutting down: finishing orders in flight","timeout":"5s"`) ||
		regexp.MustCompile(`"(timeout|in)":\d`).MatchString(log) {
		t.Fatalf("the log does not show SHUTDOWN_TIMEOUT as \"5s\", or shows a duration in nanoseconds:\n%s", log)
	}
}
