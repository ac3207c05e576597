#!/usr/bin/env bash
# Builds the binaries the way the Dockerfile does (it runs this script): static (CGO_ENABLED=0), -trimpath,
# without symbol tables (-s -w), with the release and commit stamped in (internal/config.Version).
#   scripts/build.sh [OUT_DIR [BINARY...]]      # default: bin, and worker stockctl producer demo
# The version is the newest release CHANGELOG.md names, x.y.z, and between releases (its [Unreleased]
# section lists changes) x.y.z-dev+<commit>, the first 12 digits of the commit (".dirty" when tracked files
# differ from it). The commit is git's HEAD ("-dirty" likewise). VERSION and COMMIT in the environment take
# precedence (a Docker build context has no .git): VERSION=x.y.z for a release build; a VERSION ending in
# -dev (the Dockerfile's default) gets +<commit> added.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-bin}
shift || true
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=(worker stockctl producer demo)

# The first "## [x.y.z]" heading of CHANGELOG.md: the newest release ("Unreleased" is not one).
release=$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | head -n 1)
if [ -z "$release" ]; then
  echo "build.sh: CHANGELOG.md names no version (a heading \"## [x.y.z] - date\")" >&2
  exit 1
fi
# An entry ("- ...") under "## [Unreleased]", before the next "## [" heading: changes since the release.
unreleased=$(awk '/^## \[Unreleased\]/ { on = 1; next } /^## \[/ { on = 0 } on && /^- / { print; exit }' CHANGELOG.md)
version=${VERSION:-$release${unreleased:+-dev}}
commit=${COMMIT:-}
if [ -z "$commit" ]; then
  commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then
    commit+=-dirty
  fi
fi

if [[ $version == *-dev ]]; then
  short=${commit%-dirty}
  version+="+${short:0:12}"
  [[ $commit != *-dirty ]] || version+=.dirty
fi

pkg=github.com/stockflow/stockflow/internal/config
# -buildvcs=false: the commit comes from the stamp alone, the same inside Docker and in a checkout.
for name in "${binaries[@]}"; do
  CGO_ENABLED=0 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit" -o "$out/$name" "./cmd/$name"
done
echo "build.sh: $version, commit $commit: ${binaries[*]} in $out"
