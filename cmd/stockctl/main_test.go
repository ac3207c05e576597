package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockflow/stockflow/testkit/clitest"
	"github.com/stockflow/stockflow/testkit/redistest"
)

// asMain makes the test binary run main, so that a shell can call it as stockctl.
const asMain = "STOCKCTL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// bash, with the script of "stockctl completion bash" loaded, completes command names, subcommands and
// the values of -o: what an operator gets on TAB.
func TestBashCompletesCommandsSubcommandsAndOutputFormats(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(exe, filepath.Join(dir, "stockctl")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), asMain+"=1", "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	script := filepath.Join(dir, "stockctl.bash")
	gen := exec.Command(filepath.Join(dir, "stockctl"), "completion", "bash")
	gen.Env = env
	out, err := gen.Output()
	if err != nil || !strings.Contains(string(out), "__start_stockctl") {
		t.Fatalf("stockctl completion bash: %v\n%s", err, out)
	}
	if err := os.WriteFile(script, out, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ line, want string }{
		{"stockctl st", "stock"},
		{"stockctl poison ", "list replay"},
		{"stockctl consumers p", "prune"},
		{"stockctl stock -o ", "json text wide yaml"},
		{"stockctl poison replay --dry", "--dry-run"},
	} {
		// The completion function reads the line as bash hands it over on TAB. The script needs the
		// bash-completion package's _get_comp_words_by_ref: the package's when installed, else its gist.
		prog := `source /usr/share/bash-completion/bash_completion 2>/dev/null ||
_get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
source "$1"; COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<<"$COMP_LINE"
[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); __start_stockctl stockctl; printf '%s\n' "${COMPREPLY[@]}" | sort | xargs`
		cmd := exec.Command(bash, "-c", prog, "bash", script, c.line)
		cmd.Env = env
		var stderr strings.Builder // compopt, outside a real TAB, says it is not completing: noise
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(got)) != c.want {
			t.Errorf("%q<TAB>: %q (%v), want %q\n%s", c.line, got, err, c.want, stderr.String())
		}
	}
}

// run runs this test binary as stockctl with args, in the test's environment but for REDIS_URL and
// REDIS_URL_FILE, plus env.
func run(t *testing.T, env []string, args ...string) clitest.Result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") && !strings.HasPrefix(kv, "REDIS_URL_FILE=") {
			base = append(base, kv)
		}
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(base, asMain+"=1"), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run stockctl %q: %v", args, err)
	}
	return clitest.Result{Code: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
}

// stockctl's exit codes, and every line it writes to standard error being JSON (no terminal here), the last
// one saying why it exited with "exit_code": 2 for what cobra refuses (an unknown command or flag) as for
// stockctl's own usage errors, 1 for a Redis that does not answer (go-redis's own lines are records too,
// and the password is not shown), 3 not found, 4 nothing done.
func TestStockctlExitCodesAndJSONLines(t *testing.T) {
	url := redistest.Start(t).URL()
	closed := "redis://u:hunter2@" + redistest.ClosedAddr(t) + "/0"
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		says string // in the last line's err
	}{
		{"an unknown command exits 2 with a suggestion", nil, []string{"stok", "SKU-1"}, 2, "unknown command \"stok\" for \"stockctl\"\n\nDid you mean this?\n\tstock"},
		{"an unknown flag exits 2", nil, []string{"stock", "SKU-1", "--nope"}, 2, "unknown flag: --nope"},
		{"a bad flag value exits 2", nil, []string{"stock", "SKU-1", "--timeout", "soon"}, 2, `invalid argument "soon" for "--timeout"`},
		{"a bad setting exits 2", []string{"REDIS_URL=http://x"}, []string{"stock", "SKU-1"}, 2, "invalid REDIS_URL"},
		{"a bad argument exits 2", []string{"REDIS_URL=" + url}, []string{"stock", "add", "SKU-1", "x"}, 2, `invalid N "x"`},
		{"a Redis that does not answer exits 1", []string{"REDIS_URL=" + closed}, []string{"stock", "SKU-1"}, 1, "connection refused"},
		{"an unknown SKU exits 3", []string{"REDIS_URL=" + url}, []string{"stock", "NOPE"}, 3, "unknown SKU"},
		{"a replay that replays nothing exits 4", []string{"REDIS_URL=" + url}, []string{"poison", "replay", "--all"}, 4, "nothing replayed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.env, tc.args...)
			recs := clitest.Exited(t, r, tc.code, tc.says)
			if last := recs[len(recs)-1]; last["level"] != "ERROR" || strings.Contains(r.Stderr, "hunter2") {
				t.Fatalf("last line %v: want level ERROR, and no password anywhere:\n%s", last, r.Stderr)
			}
			if tc.code == 2 && r.Stdout != "" {
				t.Errorf("a usage error printed %q on stdout", r.Stdout)
			}
			if tc.code == 1 && !hasRecord(recs, "component", "go-redis") {
				t.Errorf("go-redis's own line is not a record of the log:\n%s", r.Stderr)
			}
		})
	}
	if r := run(t, []string{"REDIS_URL=" + url}, "stock", "set", "SKU-1", "5"); r.Code != 0 || r.Stderr != "" {
		t.Errorf("stock set: exit code %d, stderr %q; want 0 and nothing on stderr", r.Code, r.Stderr)
	}
}

// With REDIS_URL unset stockctl says it uses the default Redis (on a shared machine, perhaps someone
// else's), as the worker's start line does; given the variable or the flag, it says nothing. The command
// run refuses its argument before any call, so no default Redis is asked.
func TestStockctlSaysWhenItUsesTheDefaultRedis(t *testing.T) {
	args := []string{"stock", "add", "SKU-1", "x"}
	recs := clitest.JSONLines(t, run(t, nil, args...).Stderr)
	if !hasRecord(recs, "redis_url_from", "default") || !hasRecord(recs, "redis", "redis://127.0.0.1:6379/0") {
		t.Errorf("REDIS_URL unset: no record saying the default Redis is used: %v", recs)
	}
	url := "redis://127.0.0.1:1/0"
	for _, given := range []struct {
		env  []string
		args []string
	}{{[]string{"REDIS_URL=" + url}, args}, {nil, append(args, "--redis-url", url)}} {
		if recs := clitest.JSONLines(t, run(t, given.env, given.args...).Stderr); len(recs) != 1 {
			t.Errorf("%v %q: %d records, want the last line only: %v", given.env, given.args, len(recs), recs)
		}
	}
}

// hasRecord says whether one of recs has the field key with the value want.
func hasRecord(recs []clitest.Record, key, want string) bool {
	for _, rec := range recs {
		if rec[key] == want {
			return true
		}
	}
	return false
}
