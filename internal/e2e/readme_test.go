package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/demo"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/stockctl"
	"github.com/stockflow/stockflow/internal/worker"
	"github.com/stockflow/stockflow/testkit/redistest"
)

func readme(t *testing.T) string {
	return repoFile(t, "README.md")
}

// doc is the text of a page under docs/.
func doc(t *testing.T, page string) string {
	return repoFile(t, "docs/"+page)
}

func repoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docPages lists README.md and the pages under docs/, relative to the repository's root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs pages: %v", err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		out = append(out, strings.TrimPrefix(p, "../../"))
	}
	return out
}

// section returns the text from the heading to the next heading of the same or a higher level.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no %q section", heading)
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

// The README is the front door: at most 250 lines, and a map to at least five docs pages that exist, one
// of them docs/architecture.md, which follows an order through packages that exist, in the order it travels.
func TestReadmeIsAShortMapOfTheDocs(t *testing.T) {
	text := readme(t)
	if n := strings.Count(text, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250: move the detail to a docs/ page", n)
	}
	linked := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\((docs/[^)#]+\.md)(?:#[^)]*)?\)`).FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat("../../" + m[1]); err != nil {
			t.Errorf("README links %s: %v", m[1], err)
			continue
		}
		linked[m[1]] = true
	}
	if len(linked) < 5 || !linked["docs/architecture.md"] {
		t.Errorf("README links %d docs pages (%v), want at least 5, docs/architecture.md among them", len(linked), linked)
	}
	path := section(t, doc(t, "architecture.md"), "## The order's path")
	at := 0
	for _, step := range []string{"XADD", "stream.Subscriber", "Router", "trace", "retry", "delivery.Decoder", "lockmw",
		"Batcher", "cohort", "elided", "inventory", "XACK", "stockflow_lock_wait_seconds"} {
		i := strings.Index(path[at:], step)
		if i < 0 {
			t.Errorf("docs/architecture.md: the order's path does not name %q after %q", step, lastLine(path[:at]))
			continue
		}
		at += i + len(step)
	}
	checkPackagesExist(t, path)
}

func lastLine(s string) string {
	return s[strings.LastIndex(s, "\n")+1:]
}

// checkPackagesExist checks that the package column of the order's path table names directories of the
// repository (Go identifiers with a dot, such as message.Router, are types, not packages).
func checkPackagesExist(t *testing.T, path string) {
	t.Helper()
	seen := 0
	for _, line := range strings.Split(path, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.HasPrefix(line, "| ") {
			continue
		}
		for _, m := range regexp.MustCompile("`([a-z/]+)`").FindAllStringSubmatch(cols[3], -1) {
			seen++
			if st, err := os.Stat("../../" + m[1]); err != nil || !st.IsDir() {
				t.Errorf("docs/architecture.md: the order's path names package %s, which is not a directory: %v", m[1], err)
			}
		}
	}
	if seen < 5 {
		t.Errorf("docs/architecture.md: the order's path table names %d packages, want a package per step", seen)
	}
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

// docs/configuration.md documents every setting of every binary, with the code's flag and default, and
// nothing the code does not read; stockctl's table, the flags of its commands too (checkCommandFlags).
func TestConfigurationTablesMatchTheCode(t *testing.T) {
	text := doc(t, "configuration.md")
	// seen holds the rows the caller checked already.
	check := func(name, sec string, ps []config.Param, seen map[string]bool) {
		rows := tableRows(sec)
		intro, _, _ := strings.Cut(sec, "\n|")
		for _, p := range ps {
			key := p.Env
			if key == "" {
				key = p.Flag
			}
			seen[key] = true
			r, ok := rows[key]
			if !ok {
				// Shared settings may be named in the text above the table instead of in it.
				if p.Env != "" && strings.Contains(intro, "`"+p.Env+"`") {
					continue
				}
				t.Errorf("%s: %s is not documented in docs/configuration.md", name, key)
				continue
			}
			flagCol, def := r[0], r[1]
			if p.Env != "" && flagCol != p.Flag {
				t.Errorf("%s: docs/configuration.md gives %s the flag %s, the code %s", name, key, flagCol, p.Flag)
			}
			if p.Env == "WORKER_NAME" {
				continue // depends on the host
			}
			switch {
			case strings.HasPrefix(def, "`"):
				if strings.Trim(def, "`") != p.Default {
					t.Errorf("%s: docs/configuration.md default of %s is %s, the code's %q", name, key, def, p.Default)
				}
			case p.Default != "" && p.Default != "0s":
				t.Errorf("%s: docs/configuration.md default of %s is %q, the code's %q", name, key, def, p.Default)
			}
		}
		for key := range rows {
			if !seen[key] {
				t.Errorf("%s: docs/configuration.md documents %s, which the code does not read", name, key)
			}
		}
	}
	check("worker", section(t, text, "## worker"), params(func(s *config.Set) { var c worker.Config; worker.Flags(s, &c) }), map[string]bool{})
	check("producer", section(t, text, "## producer"), params(func(s *config.Set) { var c producer.Config; producer.Flags(s, &c) }), map[string]bool{})
	check("demo", section(t, text, "## demo"), params(func(s *config.Set) { var c demo.Config; demo.Flags(s, &c) }), map[string]bool{})
	sec := section(t, text, "## stockctl")
	check("stockctl", sec, stockctl.Settings(), checkCommandFlags(t, sec, stockctl.CommandFlags()))
}

// checkCommandFlags holds the rows of the flags of stockctl's commands to the code and returns the flags it
// checked. A row names, before its colon, the commands that take the flag, all of them and no other
// ("poison [list\|replay]" is poison, poison list and poison replay); its default is each command's, but
// those it names: "`50` (`hot`: `10`)".
func checkCommandFlags(t *testing.T, sec string, byCommand map[string][]config.Param) map[string]bool {
	t.Helper()
	takes := map[string]map[string]string{} // flag, command: default
	for cmd, ps := range byCommand {
		for _, p := range ps {
			if takes[p.Flag] == nil {
				takes[p.Flag] = map[string]string{}
			}
			takes[p.Flag][cmd] = strings.TrimSuffix(p.Default, "[]") // an empty list: (none)
		}
	}
	perCommand := regexp.MustCompile("\\(`([^`]+)`: `([^`]*)`\\)")
	checked := map[string]bool{}
	for flag, defaults := range takes {
		checked[flag] = true
		_, line, ok := strings.Cut(sec, "\n| `"+flag+"` | ")
		if !ok {
			t.Errorf("stockctl: %s (%v) is not documented in docs/configuration.md", flag, slices.Sorted(maps.Keys(defaults)))
			continue
		}
		line, _, _ = strings.Cut(line, "\n")
		def, meaning, _ := strings.Cut(line, " | ")
		names, _, _ := strings.Cut(meaning, ": ")
		named := map[string]bool{}
		for _, m := range regexp.MustCompile("`([a-z]+)(?: \\[([a-z\\\\|]+)\\])?( [a-z]+)?`").FindAllStringSubmatch(names, -1) {
			named[m[1]+m[3]] = true
			for _, sub := range strings.Split(strings.ReplaceAll(m[2], "\\|", "|"), "|") {
				if sub != "" {
					named[m[1]+" "+sub] = true
				}
			}
		}
		if got, want := slices.Sorted(maps.Keys(named)), slices.Sorted(maps.Keys(defaults)); !slices.Equal(got, want) {
			t.Errorf("stockctl: docs/configuration.md gives %s to %q, the code to %q", flag, got, want)
		}
		general, _, _ := strings.Cut(perCommand.ReplaceAllString(def, ""), " ")
		own := map[string]string{}
		for _, m := range perCommand.FindAllStringSubmatch(def, -1) {
			own[m[1]] = m[2]
		}
		for cmd, codeDefault := range defaults {
			doc, ok := own[cmd]
			if !ok {
				doc = strings.Trim(general, "`")
				if !strings.HasPrefix(general, "`") { // (none)
					doc = ""
				}
			}
			if doc != codeDefault {
				t.Errorf("stockctl: docs/configuration.md default of %s %s is %q, the code's %q", cmd, flag, doc, codeDefault)
			}
		}
	}
	return checked
}

// shCommands are the commands of the sh blocks of README.md and the docs pages, comments and a trailing &
// left out.
func shCommands(t *testing.T) []string {
	var cmds []string
	for _, page := range docPages(t) {
		for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(repoFile(t, page), -1) {
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
	}
	return cmds
}

// TestReadmeAndDocsCommandsRun runs every command of the sh blocks of the README and the docs pages as
// written, against a Redis of the test's own (ports rewritten) and with smaller sizes for the long ones. A
// command it does not know fails the test, so the documentation cannot grow an untested command.
func TestReadmeAndDocsCommandsRun(t *testing.T) {
	_, prod := binaries(t)
	demoBin := buildDemo(t)
	s := redistest.Start(t)
	cmds := shCommands(t)
	if len(cmds) < 12 {
		t.Fatalf("found only %d commands in the README and the docs pages: %q", len(cmds), cmds)
	}
	// The commands quoted inline on the benchmarks page.
	for _, m := range regexp.MustCompile("`((?:go test|scripts/)[^`]*)`").FindAllStringSubmatch(doc(t, "benchmarks.md"), -1) {
		cmds = append(cmds, m[1])
	}
	// The documented Redis URL is the test's Redis.
	smaller := strings.NewReplacer("--orders 20000", "--orders 2000", "redis://127.0.0.1:6379/0", s.URL())
	built := t.TempDir() // scripts/build.sh's bin/
	rdb := s.Client()
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
	benchRan := false
	for _, c := range cmds {
		f := strings.Fields(smaller.Replace(c))
		start := time.Now()
		switch {
		case c == "scripts/test.sh":
			// This test is part of it.
		case c == "scripts/build.sh":
			// The worker alone: the others are built the same way.
			run("bash", []string{"../../scripts/build.sh", built, "worker"})
		case c == "bin/worker --version":
			if out := run(filepath.Join(built, "worker"), []string{"--version"}); !regexp.MustCompile(builtVersion(t, "worker")).MatchString(out) {
				t.Fatalf("%s printed %q", c, out)
			}
		case strings.HasPrefix(c, "kubectl "):
			// No cluster here: deploy/kubernetes's tests render the base and hold it to the code.
		case strings.HasPrefix(c, "docker build"), strings.HasPrefix(c, "docker compose"):
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
			// The orders earlier pages published (formats.md) are decided before the next command: the
			// producer's check fails when they take from the stock it seeds.
			waitFor(t, time.Minute, "the worker decided the orders already in the stream", func() bool {
				g := rdb.XInfoGroups(context.Background(), "orders").Val()
				return len(g) == 1 && g[0].Lag == 0 && g[0].Pending == 0
			})
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
			// The smallest run of the harness, once: one round of the uncontended comparison. The full
			// commands are what produced BENCHMARKS.md.
			if benchRan {
				break
			}
			benchRan = true
			cmd := exec.Command("bash", "../../scripts/bench.sh", "--quick", "--only", "uncontended", "--rounds", "1", "--out", t.TempDir())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		case f[0] == "redis-cli":
			host, port, _ := strings.Cut(s.Addr, ":")
			args := append([]string{"-h", host, "-p", port}, shellWords(t, strings.TrimPrefix(c, "redis-cli "))...)
			run("redis-cli", args)
		default:
			t.Errorf("documented command %q is not run by this test", c)
		}
		t.Logf("%5.1f s  %s", time.Since(start).Seconds(), c)
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
	// Fewer orders in flight than the cluster demo's 16 partitions: the workers read and claim a few
	// partitions at a time and must still reach every one (a worker idled after reading empty ones while
	// another had a backlog, and left thousands of events undecided).
	t.Run("on a cluster with 8 orders in flight per worker", func(t *testing.T) {
		run(nil, "--cluster", "--concurrency", "8")
	})
}
