#!/usr/bin/env bash
# Prints the path of a Jaeger v2 binary built from the Go module github.com/jaegertracing/jaeger, building it
# once into a cache when missing: the Jaeger the tests run against deploy/jaeger/config.yaml
# (internal/e2e/jaeger_test.go), the same release compose.yaml pins (module v1.76.0 = Jaeger 2.13.0).
# It needs only Go and the module proxy. Cold (nothing in the Go caches), the build costs about 8 minutes of
# CPU time, some 5 minutes on 2 idle cores; cached, the script prints the path at once.
#
# `go run pkg@version` refuses the module's replace directives, hence the copy of its source and a build
# inside it, as the module's own Makefile does (scripts/makefiles/BuildBinaries.mk, build-jaeger): CGO off,
# -trimpath, the version stamped by -ldflags, no build tags. Without Node the UI stays the module's
# placeholder page; the query API (/api/traces, /api/services) is whole.
#
#   STOCKFLOW_JAEGER_CACHE  where the source copy and the binary live
#                           (default ${XDG_CACHE_HOME:-$HOME/.cache}/stockflow/jaeger-<module version>)
set -euo pipefail

module=github.com/jaegertracing/jaeger
version=v1.76.0  # its v1 tag; the v2 release built from it:
release=v2.13.0  # keep compose.yaml's jaegertracing/jaeger image at this release (without the v)

say() { echo "ensure-jaeger.sh: $*" >&2; }
if [ -z "${STOCKFLOW_JAEGER_CACHE:-}${XDG_CACHE_HOME:-}${HOME:-}" ]; then
  say "set HOME, XDG_CACHE_HOME or STOCKFLOW_JAEGER_CACHE: the Jaeger binary is cached there"
  exit 1
fi
cache=${STOCKFLOW_JAEGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stockflow/jaeger-$version}
bin=$cache/bin/jaeger

if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache"
# Two runs at once (two test binaries, two checkouts) build once: the second waits for the first.
exec 9>"$cache/.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

say "building Jaeger $release ($module@$version) into $cache; about 5 minutes the first time"
started=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Outside any module and workspace, so nothing of the caller's go.mod, go.work or GOFLAGS takes part.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
info=$(cd "$work" && go mod download -json "$module@$version") || {
  say "go mod download $module@$version failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY)): $info"
  exit 1
}
field() { printf '%s\n' "$info" | sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p"; }
dir=$(field Dir)
if [ -z "$dir" ] || [ ! -f "$dir/go.mod" ]; then
  say "go mod download gave no source directory: $info"
  exit 1
fi

src=$cache/src
rm -rf "$src"
cp -R "$dir" "$src"
chmod -R u+w "$src" # the module cache is read-only

stamp="-X $module/internal/version.latestVersion=$release"
released=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(field Info)" 2>/dev/null || true)
stamp="$stamp -X $module/internal/version.date=$released"
mkdir -p "$cache/bin"
partial=$cache/bin/jaeger.partial
(cd "$src" && go build -trimpath -ldflags "$stamp" -o "$partial" ./cmd/jaeger) || {
  say "go build ./cmd/jaeger in $src failed"
  exit 1
}
# The Makefile's check of a build: the binary says the release it was stamped with.
if ! "$partial" version 2>/dev/null | grep -q "\"gitVersion\":\"$release\""; then
  say "the built binary does not report $release: $("$partial" version 2>&1 | head -c 300)"
  exit 1
fi
mv "$partial" "$bin" # last, so a half-built binary never looks cached
say "built $bin in $(($(date +%s) - started))s"
echo "$bin"
