package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/demo"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/redistest"
	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/internal/worker"
)

func readme(t *testing.T) string {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the README text from the heading to the next heading of the same or a higher level.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q section", heading)
	}
	rest := text[i+len(heading)+2:]
	level := strings.Count(strings.Fields(heading)[0], "#")
	for _, l := range strings.Split(rest, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Trim(f[0], "#") == "" && len(f[0]) <= level {
			return rest[:strings.Index(rest, l)]
		}
	}
	return rest
}

var row = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|(?: `([^`]+)` \\|)? ([^|]*) \\|")

// tableRows maps the first column of a settings table (an env variable or a flag) to its flag and
// default columns.
func tableRows(text string) map[string][2]string {
	out := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(text, -1) {
		if strings.HasPrefix(m[1], "--") { // | flag | default | meaning |
			def := strings.TrimSpace(m[3])
			if m[2] != "" {
				def = "`" + m[2] + "`"
			}
			out[m[1]] = [2]string{"", def}
			continue
		}
		out[m[1]] = [2]string{m[2], strings.TrimSpace(m[3])} // | env | flag | default | meaning |
	}
	return out
}

func params(define func(*config.Set)) []config.Param {
	s := config.NewSet("t", func(string) (string, bool) { return "", false })
	define(s)
	return s.Params()
}

func TestConfigurationTablesMatchTheCode(t *testing.T) {
	text := readme(t)
	check := func(name, sec string, ps []config.Param) {
		rows := tableRows(sec)
		seen := map[string]bool{}
		for _, p := range ps {
			key := p.Env
			if key == "" {
				key = p.Flag
			}
			seen[key] = true
			r, ok := rows[key]
			if !ok {
				// Shared settings may be named in the text instead of the table.
				if p.Env != "" && strings.Contains(sec, "`"+p.Env+"`") {
					continue
				}
				t.Errorf("%s: %s is not documented in README", name, key)
				continue
			}
			flagCol, def := r[0], r[1]
			if p.Env != "" && flagCol != p.Flag {
				t.Errorf("%s: README gives %s the flag %s, the code %s", name, key, flagCol, p.Flag)
			}
			if p.Env == "WORKER_NAME" {
				continue // depends on the host
			}
			switch {
			case strings.HasPrefix(def, "`"):
				if strings.Trim(def, "`") != p.Default {
					t.Errorf("%s: README default of %s is %s, the code's %q", name, key, def, p.Default)
				}
			case p.Default != "" && p.Default != "0s":
				t.Errorf("%s: README default of %s is %q, the code's %q", name, key, def, p.Default)
			}
		}
		for key := range rows {
			if !seen[key] {
				t.Errorf("%s: README documents %s, which the code does not read", name, key)
			}
		}
	}
	check("worker", section(t, text, "### worker"), params(func(s *config.Set) { var c worker.Config; worker.Flags(s, &c) }))
	check("producer", section(t, text, "### producer"), params(func(s *config.Set) { var c producer.Config; producer.Flags(s, &c) }))
	check("demo", section(t, text, "## The two commands"), params(func(s *config.Set) { var c demo.Config; demo.Flags(s, &c) }))
	check("stockctl", section(t, text, "## Operations"), stockctl.Settings())
}

// TestReadmeCommandsRun runs every command of the README's sh blocks as written, against a Redis of the
// test's own (ports rewritten) and with smaller sizes for the long ones. A command it does not know fails
// the test, so the README cannot grow an untested command.
func TestReadmeCommandsRun(t *testing.T) {
	_, prod := binaries(t)
	demoBin := buildDemo(t)
	s := redistest.Start(t)
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme(t), -1) {
		for _, line := range strings.Split(block[1], "\n") {
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			line = strings.TrimSuffix(strings.TrimSpace(line), "&")
			if line = strings.TrimSpace(line); line != "" {
				cmds = append(cmds, line)
			}
		}
	}
	if len(cmds) < 6 {
		t.Fatalf("found only %d README commands: %q", len(cmds), cmds)
	}
	// The commands quoted inline in the Numbers section.
	for _, m := range regexp.MustCompile("`((?:go test|scripts/)[^`]*)`").FindAllStringSubmatch(section(t, readme(t), "## Numbers"), -1) {
		cmds = append(cmds, m[1])
	}
	smaller := strings.NewReplacer("--orders 20000", "--orders 2000")
	run := func(name string, args []string, env ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	for _, c := range cmds {
		f := strings.Fields(smaller.Replace(c))
		switch {
		case c == "scripts/test.sh":
			// This test is part of it.
		case strings.HasPrefix(c, "docker compose"):
			// No Docker engine here: TestComposeMatchesTheCode holds compose.yaml to the code.
		case f[0] == "redis-server":
			// The test's own server stands in for it.
		case strings.HasPrefix(c, "go run ./cmd/demo"):
			out := run(demoBin, append(f[3:], "--orders", "600", "--skus", "5", "--stock", "50"))
			if !strings.Contains(out, "consistency check: PASS") || !strings.Contains(out, "Redis: ") {
				t.Fatalf("demo output:\n%s", out)
			}
		case strings.HasPrefix(c, "go run ./cmd/worker"):
			checkFlags(t, f[3:], workerFlags())
			startWorkerArgs(t, s, fmt.Sprintf("readme-%d", len(cmds)), f[3:])
		case strings.HasPrefix(c, "go run ./cmd/stockctl"):
			run(buildStockctl(t), shellWords(t, strings.Join(f[3:], " ")), "REDIS_URL="+s.URL())
		case strings.HasPrefix(c, "go run ./cmd/producer"):
			out := run(prod, f[3:], "REDIS_URL="+s.URL())
			if !strings.Contains(out, "consistency check: PASS") {
				t.Fatalf("producer output:\n%s", out)
			}
		case strings.HasPrefix(c, "go test "):
			// One iteration of each benchmark: it runs, not how fast.
			args := strings.Fields(strings.NewReplacer("-count 5", "-count 1", "'^$'", "^$").Replace(c))[1:]
			cmd := exec.Command("go", append(args, "-benchtime", "1x")...)
			cmd.Dir = "../.."
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		case strings.HasPrefix(c, "scripts/tracing-overhead.sh"):
			cmd := exec.Command("bash", "../../"+c)
			cmd.Env = append(os.Environ(), "ROUNDS=1", "ORDERS=300")
			if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "medians:") {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		case strings.HasPrefix(c, "scripts/bench.sh"):
			// The smallest run of the harness: one round of the uncontended comparison. The full command is
			// what produced BENCHMARKS.md.
			cmd := exec.Command("bash", "../../scripts/bench.sh", "--quick", "--only", "uncontended", "--rounds", "1", "--out", t.TempDir())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		case f[0] == "redis-cli":
			host, port, _ := strings.Cut(s.Addr, ":")
			args := append([]string{"-h", host, "-p", port}, shellWords(t, strings.TrimPrefix(c, "redis-cli "))...)
			run("redis-cli", args)
		default:
			t.Errorf("README command %q is not run by this test", c)
		}
	}
}

func workerFlags() map[string]bool {
	out := map[string]bool{}
	for _, p := range params(func(s *config.Set) { var c worker.Config; worker.Flags(s, &c) }) {
		out[p.Flag] = true
	}
	return out
}

// shellWords splits a command line with single quotes, as sh would.
func shellWords(t *testing.T, line string) []string {
	var words []string
	var cur strings.Builder
	inQuote, any := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			inQuote, any = !inQuote, true
		case r == ' ' && !inQuote:
			if any {
				words = append(words, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if inQuote {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if any {
		words = append(words, cur.String())
	}
	return words
}

func TestDemo(t *testing.T) {
	demoBin := buildDemo(t)
	run := func(env []string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, demoBin, append(args, "--orders", "1500", "--skus", "5", "--stock", "100")...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("demo %v: %v\n%s", args, err, out)
		}
		if !strings.Contains(string(out), "consistency check: PASS") || !strings.Contains(string(out), "lock wait (ms)") {
			t.Fatalf("demo %v printed no passing check or lock wait summary:\n%s", args, out)
		}
		return string(out)
	}
	t.Run("with no Redis it embeds one", func(t *testing.T) {
		if out := run(nil, "--redis", "embedded"); !strings.Contains(out, "embedded in-process miniredis") {
			t.Fatalf("demo did not say it embeds Redis:\n%s", out)
		}
	})
	t.Run("with REDIS_URL it uses that server", func(t *testing.T) {
		s := redistest.Start(t)
		if out := run([]string{"REDIS_URL=" + s.URL()}); !strings.Contains(out, "from REDIS_URL") {
			t.Fatalf("demo did not say it uses REDIS_URL:\n%s", out)
		}
		if s.Client().Exists(context.Background(), "stock:{SKU-0}").Val() != 1 {
			t.Fatal("the demo's stock is not in the REDIS_URL server")
		}
	})
}
