#!/usr/bin/env bash
# The project's test command (README.md, .ci/run): gofmt, go vet and the race-enabled tests of every Go
# module in the repo, against real redis-server processes that the tests start themselves.
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$0")/.."

source "$scripts/ensure-redis.sh"
# promtool runs the unit tests of the alert rules (internal/e2e TestPromtool...); when it cannot be installed
# that test skips, saying why (and fails under CI=true), so a missing promtool does not stop the run here.
"$scripts/ensure-promtool.sh" >/dev/null || true

marker=stockflow-redistest # testkit/redistest.ProcessMarker (and lockmw/rlock/internal/redistest.ProcessMarker)
# The servers of this run carry its id in their title (internal/redisproc), so a run that overlaps another
# one counts only its own leftovers, and never kills the other run's servers.
export STOCKFLOW_TEST_RUN=$$
leaked() { pgrep -f "$marker run=$STOCKFLOW_TEST_RUN\$" || true; }
if others=$(pgrep -f "$marker"); then
  echo "test.sh: redis-server processes of another or an earlier run are alive: $others" >&2
fi

status=0
# The Jaeger that internal/e2e runs deploy/jaeger/config.yaml in: built from its Go module the first time
# (about 5 minutes on 2 cores) here rather than inside a test's timeout and beside the timed tests of other
# packages; cached, this takes no time. Should it fail, TestJaegerWithTheDeployConfig fails saying why.
"$scripts/ensure-jaeger.sh" >/dev/null || status=1

# gofmt, go vet and the tests of the module in $1.
check_module() {
  local dir=$1 failed=0 unformatted
  echo "== $dir"
  unformatted=$(cd "$dir" && gofmt -l .)
  if [ -n "$unformatted" ]; then
    printf 'gofmt would change:\n%s\n' "$unformatted" >&2
    failed=1
  fi
  (cd "$dir" && go vet ./...) || failed=1
  (cd "$dir" && go test -race -count=1 -timeout 14m ./...) || failed=1
  return $failed
}

# The other modules (the lock library, the bench, the Kubernetes manifests) run one after the other beside
# the main module, whose end-to-end package is the longest part and leaves the CPU idle while its workers
# wait; their output follows the main module's.
others=$(mktemp)
trap 'rm -f "$others"' EXIT
(
  failed=0
  # Watermill's Pub/Sub stress test (10 runs of its universal tests at once) against redisstream, without
  # the race detector (its race-enabled single run is in the main module's tests): about 35 s.
  echo "== ./redisstream (Watermill's stress test)"
  go test -count=1 -timeout 10m -tags stress -run Stress ./redisstream/ || failed=1
  for mod in $(find . -name go.mod -not -path './.git/*' -not -path ./go.mod | sort); do
    check_module "$(dirname "$mod")" || failed=1
  done
  exit $failed
) >"$others" 2>&1 &
others_pid=$!
check_module . || status=1
wait "$others_pid" || status=1
cat "$others"

# Function size and complexity limits (issue #15): no function over 60 lines or 5 parameters, or with a
# cyclomatic complexity over 15, test files excepted. No limit on a mean (issue 28).
go run ./scripts/funcstats -check -top 0 || status=1

# Network namespaces of the partition tests (internal/netns) carry the run's id too.
if command -v ip >/dev/null; then
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^sf-run$STOCKFLOW_TEST_RUN-" || true); do
    echo "test.sh: the tests left network namespace $ns behind" >&2
    ip netns del "$ns" || true
    status=1
  done
fi

new=$(leaked | tr '\n' ' ')
if [ -n "${new// /}" ]; then
  echo "test.sh: the tests left redis-server processes running: $new" >&2
  kill -9 $new 2>/dev/null || true
  status=1
fi
exit $status
