package config

import (
	"cmp"
	"flag"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

// ErrVersion is what Parse returns after --version printed the version. It wraps flag.ErrHelp, so a main
// that exits 0 after -h does so after --version too.
var ErrVersion = fmt.Errorf("version shown: %w", flag.ErrHelp)

// version and commit are stamped at link time by scripts/build.sh (which the Dockerfile runs):
//
//	-ldflags "-X github.com/stockflow/stockflow/internal/config.version=0.1.0-dev+0123456789ab -X github.com/stockflow/stockflow/internal/config.commit=<sha>"
//
// The version is the release, x.y.z, only for a release build; between releases (CHANGELOG.md's
// [Unreleased] lists changes) it is x.y.z-dev+<commit>, x.y.z being the last release.
//
// They take precedence over the build information Go records, which a build from a copy of the sources
// without .git (a Docker build context) lacks: it would say "(devel)" and "commit unknown".
var (
	version string
	commit  string
)

// Version describes the running binary: the release and commit stamped at link time, else what Go
// recorded in it (runtime/debug):
//
//	worker github.com/stockflow/stockflow 0.1.0, commit 0123456789ab..., go1.26.0
//	worker github.com/stockflow/stockflow 0.1.0-dev+0123456789ab, commit 0123456789ab..., go1.26.0, a development build
//	worker github.com/stockflow/stockflow v0.0.0-20261123140000-0123456789ab+dirty, commit 0123456789ab... (2026-11-23T14:00:00Z, modified), go1.26.0, a development build
//
// A build that recorded no version says "(devel)", one without VCS information (built outside a git
// checkout, in a git worktree or submodule, whose .git is a file where cmd/go looks for a directory, with
// -buildvcs=false, or by go run) says "commit unknown". Every build whose version is not a
// release's (IsRelease) ends with ", a development build".
func Version(name string) string {
	info, _ := debug.ReadBuildInfo()
	return describeBuild(name, stamp(info, version, commit))
}

// releaseVersion is the form of a release's version: x.y.z, nothing before or after.
var releaseVersion = regexp.MustCompile(`^v?\d+\.\d+\.\d+$`)

// IsRelease reports whether v is a release's version (0.1.0), not a build between releases
// (0.1.0-dev+0123456789ab), a Go pseudo-version or "(devel)".
func IsRelease(v string) bool { return releaseVersion.MatchString(v) }

// BuildAttr is the running binary's version, commit and whether it is a release, for the start line:
//
//	"build":{"version":"0.1.0-dev+0123456789ab","commit":"0123456789ab...","release":false}
func BuildAttr() slog.Attr {
	info, _ := debug.ReadBuildInfo()
	return buildAttr(stamp(info, version, commit))
}

func buildAttr(info *debug.BuildInfo) slog.Attr {
	v, c := cmp.Or(info.Main.Version, "(devel)"), "unknown"
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			c = s.Value
		}
	}
	return slog.Group("build", "version", v, "commit", c, "release", IsRelease(v))
}

// stamp is info with the version and commit given at link time, where given, in place of the recorded ones.
func stamp(info *debug.BuildInfo, version, commit string) *debug.BuildInfo {
	var out debug.BuildInfo
	if info != nil {
		out = *info
	}
	out.Main.Version = cmp.Or(version, out.Main.Version)
	if commit != "" {
		out.Settings = append(slices.DeleteFunc(slices.Clone(out.Settings), func(s debug.BuildSetting) bool {
			return s.Key == "vcs.revision"
		}), debug.BuildSetting{Key: "vcs.revision", Value: commit})
	}
	return &out
}

// describeBuild is Version for the build information info (nil: none).
func describeBuild(name string, info *debug.BuildInfo) string {
	if info == nil {
		info = &debug.BuildInfo{}
	}
	var revision, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = map[string]string{"true": "modified", "false": "clean"}[s.Value]
		}
	}
	commit := cmp.Or(revision, "unknown")
	if details := strings.Join(slices.DeleteFunc([]string{at, modified}, isEmpty), ", "); details != "" {
		commit += " (" + details + ")"
	}
	described := fmt.Sprintf("%s %s %s, commit %s, %s", name, cmp.Or(info.Main.Path, "(unknown module)"),
		cmp.Or(info.Main.Version, "(devel)"), commit, cmp.Or(info.GoVersion, runtime.Version()))
	if !IsRelease(info.Main.Version) {
		described += ", a development build"
	}
	return described
}

func isEmpty(s string) bool { return s == "" }
