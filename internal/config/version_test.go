package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

// A build between releases says so, in --version and on the start line; a release build does not.
func TestABuildBetweenReleasesSaysItIsADevelopmentBuild(t *testing.T) {
	bare := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/stockflow/stockflow", Version: "(devel)"}}
	for _, c := range []struct {
		name, version string
		release       bool
	}{
		{"a release", "0.1.0", true},
		{"a build between releases, as scripts/build.sh stamps it", "0.1.0-dev+0123456789ab", false},
		{"a build of a dirty checkout", "0.1.0-dev+0123456789ab.dirty", false},
		{"a release candidate", "0.2.0-rc.1", false},
		{"a Go pseudo-version", "v0.0.0-20261123140000-0123456789ab+dirty", false},
		{"no stamp and no recorded version", "", false},
	} {
		info := stamp(bare, c.version, "0123456789abcdef")
		described := describeBuild("worker", info)
		if dev := strings.HasSuffix(described, ", a development build"); dev == c.release {
			t.Errorf("%s: --version says %q", c.name, described)
		}
		var out bytes.Buffer
		slog.New(slog.NewJSONHandler(&out, nil)).Info("worker started", buildAttr(info))
		var line struct {
			Build struct {
				Version, Commit string
				Release         bool
			}
		}
		if err := json.Unmarshal(out.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if line.Build.Release != c.release || line.Build.Commit != "0123456789abcdef" || (c.version != "" && line.Build.Version != c.version) {
			t.Errorf("%s: the start line says %s", c.name, out.String())
		}
	}
}
