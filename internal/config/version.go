package config

import (
	"cmp"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

// ErrVersion is what Parse returns after --version printed the version. It wraps flag.ErrHelp, so a main
// that exits 0 after -h does so after --version too.
var ErrVersion = fmt.Errorf("version shown: %w", flag.ErrHelp)

// Version describes the running binary from the build information Go records in it (runtime/debug):
//
//	worker github.com/stockflow/stockflow v0.0.0-20261123140000-0123456789ab+dirty, commit 0123456789ab... (2026-11-23T14:00:00Z, modified), go1.26.0
//
// A build that recorded no version says "(devel)", one without VCS information (built outside a git
// checkout, with -buildvcs=false, or by go run) says "commit unknown".
func Version(name string) string {
	info, _ := debug.ReadBuildInfo()
	return describeBuild(name, info)
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
	return fmt.Sprintf("%s %s %s, commit %s, %s", name, cmp.Or(info.Main.Path, "(unknown module)"),
		cmp.Or(info.Main.Version, "(devel)"), commit, cmp.Or(info.GoVersion, runtime.Version()))
}

func isEmpty(s string) bool { return s == "" }
