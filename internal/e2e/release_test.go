package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The release: CHANGELOG.md names it, scripts/build.sh stamps it and the commit into the binaries, and the
// Dockerfile runs that script and labels its images with them.

// changelogVersion is the newest release CHANGELOG.md names: its first "## [x.y.z] - date" heading.
func changelogVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`).FindSubmatch(readFile(t, "../../CHANGELOG.md"))
	if m == nil {
		t.Fatal(`CHANGELOG.md names no release ("## [x.y.z] - yyyy-mm-dd")`)
	}
	return string(m[1])
}

// unreleasedChanges reports whether CHANGELOG.md's [Unreleased] section lists changes: then the sources
// are between releases, and their builds are development builds, x.y.z-dev+<commit>.
func unreleasedChanges(t *testing.T) bool {
	t.Helper()
	_, rest, ok := strings.Cut(string(readFile(t, "../../CHANGELOG.md")), "\n## [Unreleased]\n")
	if !ok {
		return false
	}
	section, _, _ := strings.Cut(rest, "\n## [")
	return regexp.MustCompile(`(?m)^- `).MatchString(section)
}

// dockerVersion is the VERSION the Dockerfile builds by default: the release, -dev between releases.
func dockerVersion(t *testing.T) string {
	if unreleasedChanges(t) {
		return changelogVersion(t) + "-dev"
	}
	return changelogVersion(t)
}

func TestVersionOfABuiltWorkerIsTheChangelogsAndTheCommit(t *testing.T) {
	if err := exec.Command("git", "rev-parse", "HEAD").Run(); err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("bash", "../../scripts/build.sh", dir, "worker").CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "worker"), "--version").Output()
	if err != nil {
		t.Fatalf("worker --version: %v", err)
	}
	if want := builtVersion(t, "worker"); !regexp.MustCompile(want).Match(out) {
		t.Errorf("worker --version printed %q, want %s", out, want)
	}
}

// builtVersion is a pattern of what --version of the binary name prints when scripts/build.sh built it from
// this checkout: CHANGELOG.md's release and git's HEAD ("unknown" outside a checkout), and between releases
// x.y.z-dev+<commit> and ", a development build".
func builtVersion(t *testing.T, name string) string {
	t.Helper()
	commit := "unknown"
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(head))
	}
	release := `^` + regexp.QuoteMeta(name) + ` github\.com/stockflow/stockflow ` + regexp.QuoteMeta(changelogVersion(t))
	if !unreleasedChanges(t) {
		return release + `, commit ` + commit + `(-dirty)?, go[^,]+\n$`
	}
	return release + `-dev\+` + commit[:min(12, len(commit))] + `(\.dirty)?, commit ` + commit + `(-dirty)?, go[^,]+, a development build\n$`
}

// dockerStage is one stage of the Dockerfile: its name (AS ...) and its instructions, continuation lines
// joined.
type dockerStage struct {
	from, name string
	lines      []string
}

// readDockerfile returns the global instructions (before the first FROM) and the stages of the Dockerfile.
func readDockerfile(t *testing.T) (global []string, stages []dockerStage) {
	t.Helper()
	text := strings.ReplaceAll(string(readFile(t, "../../Dockerfile")), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch fields := strings.Fields(line); {
		case line == "" || strings.HasPrefix(line, "#"):
		case fields[0] == "FROM":
			st := dockerStage{from: fields[1]}
			if len(fields) == 4 && strings.EqualFold(fields[2], "AS") {
				st.name = fields[3]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			global = append(global, line)
		default:
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	return global, stages
}

func (s dockerStage) has(pattern string) bool {
	re := regexp.MustCompile(pattern)
	return slices.ContainsFunc(s.lines, re.MatchString)
}

func TestDockerfileBuildsTheBinaries(t *testing.T) {
	global, stages := readDockerfile(t)
	if !slices.Contains(global, "ARG VERSION="+dockerVersion(t)) {
		t.Errorf("the Dockerfile's global args %q lack ARG VERSION=%s, CHANGELOG.md's newest release (-dev while [Unreleased] lists changes)", global, dockerVersion(t))
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(readFile(t, "../../go.mod")))[1]
	byName := map[string]dockerStage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	build, producer, production := byName["build"], byName["producer"], stages[len(stages)-1]
	if build.from != "golang:"+goVersion+"-bookworm" {
		t.Errorf("the build stage is FROM %q, want go.mod's Go %s", build.from, goVersion)
	}
	if !build.has(`VERSION="\$VERSION" COMMIT="\$COMMIT" scripts/build.sh /out worker stockctl producer$`) {
		t.Errorf("the build stage does not run scripts/build.sh with VERSION and COMMIT for the three binaries: %q", build.lines)
	}
	if production.name != "production" || !production.has(`^COPY --from=build /out/worker /out/stockctl /usr/local/bin/$`) ||
		production.has(`/out/producer`) || !production.has(`^ENTRYPOINT \["/usr/local/bin/worker"\]$`) || !production.has(`^EXPOSE 9090$`) {
		t.Errorf("the last stage (the default image) is not production with the worker and stockctl only: %+v", production)
	}
	if !producer.has(`^COPY --from=build /out/producer /usr/local/bin/$`) || !producer.has(`^ENTRYPOINT \["/usr/local/bin/producer"\]$`) {
		t.Errorf("no stage producer with the producer: %+v", producer)
	}
	for _, s := range []dockerStage{producer, production} {
		for _, label := range []string{`title="stockflow[a-z-]*"`, `version="\$VERSION"`, `revision="\$COMMIT"`,
			`source="https://github.com/stockflow/stockflow"`, `licenses="Apache-2.0"`} {
			if !s.has(`org\.opencontainers\.image\.` + label) {
				t.Errorf("stage %s lacks the label org.opencontainers.image.%s", s.name, label)
			}
		}
		if !s.has(`^ARG VERSION$`) || !s.has(`^ARG COMMIT$`) || !s.has(`^USER nonroot:nonroot$`) {
			t.Errorf("stage %s does not take VERSION and COMMIT or does not run as nonroot: %q", s.name, s.lines)
		}
	}
	for _, name := range []string{"worker", "stockctl", "producer", "demo"} {
		if _, err := os.Stat("../../cmd/" + name); err != nil {
			t.Errorf("scripts/build.sh builds ./cmd/%s: %v", name, err)
		}
	}
}

func TestComposeBuildsEachServiceFromItsDockerfileTarget(t *testing.T) {
	_, stages := readDockerfile(t)
	targets := map[string]bool{}
	for _, s := range stages {
		targets[s.name] = true
	}
	for name, svc := range readCompose(t).Services {
		build, _ := svc.Build.(map[string]any)
		want := map[string]string{"worker": "production", "producer": "producer"}[strings.SplitN(name, "-", 2)[0]]
		switch {
		case want == "" && svc.Build != nil:
			t.Errorf("%s builds an image, but runs neither the worker nor the producer", name)
		case want == "":
		case svc.Build != nil && build["target"] != want:
			t.Errorf("%s builds %v, want target %s", name, svc.Build, want)
		case !targets[want]:
			t.Errorf("%s wants the Dockerfile target %s, which does not exist", name, want)
		}
		if want == "producer" && svc.Image == "stockflow:latest" {
			t.Errorf("%s runs the production image, which has no producer", name)
		}
	}
}
