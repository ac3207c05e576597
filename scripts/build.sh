#!/usr/bin/env bash
# Builds the binaries the way the Dockerfile does (it runs this script): static (CGO_ENABLED=0), -trimpath,
# without symbol tables (-s -w), with the release and commit stamped in (internal/config.Version).
#   scripts/build.sh [OUT_DIR [BINARY...]]      # default: bin, and worker stockctl producer demo
# The release is the newest version CHANGELOG.md names, the commit git's HEAD ("-dirty" when tracked files
# differ from it); VERSION and COMMIT in the environment take precedence (a Docker build context has no .git).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-bin}
shift || true
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=(worker stockctl producer demo)

# The first "## [x.y.z]" heading of CHANGELOG.md: the newest release ("Unreleased" is not one).
version=${VERSION:-$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | head -n 1)}
if [ -z "$version" ]; then
  echo "build.sh: CHANGELOG.md names no version (a heading \"## [x.y.z] - date\")" >&2
  exit 1
fi
commit=${COMMIT:-}
if [ -z "$commit" ]; then
  commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then
    commit+=-dirty
  fi
fi

pkg=github.com/stockflow/stockflow/internal/config
# -buildvcs=false: the commit comes from the stamp alone, the same inside Docker and in a checkout.
for name in "${binaries[@]}"; do
  CGO_ENABLED=0 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit" -o "$out/$name" "./cmd/$name"
done
echo "build.sh: $version, commit $commit: ${binaries[*]} in $out"
