package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
