#!/usr/bin/env bash
# Side-by-side benchmarks against the peers (issue 8; bench/README.md). Builds the harness and the bench
# worker of the bench/ module, then runs every comparison on redis-servers the harness starts on free
# loopback ports (never a Redis you run), contenders interleaved round by round. Prints the table of
# medians; writes <mode>.json and <mode>-lock-waits.png to bench/results/latest/ (untracked), or with
# --record to bench/results/, the committed results BENCHMARKS.md cites.
#
#   scripts/bench.sh --quick          measured 10 min 24 s (12 min 29 s with the harness compiled first) on 2
#                                     cores shared with other test runs (load average 15-20), 7 min 36 s before
#   scripts/bench.sh                  full mode: 556 s in the run BENCHMARKS.md records
#   scripts/bench.sh --record         full mode, and replace the committed results
#   scripts/bench.sh --only hotkey    any harness flag passes through (--rounds N, --only a,b)
#   scripts/bench.sh --quick --only cost --base 88c55e3
#                                     an A/B: the bench worker of that commit runs too, as one more
#                                     contender of the cost comparison ("base worker"), in the same rounds
#
# A run with --only names its result files after its comparisons.
#
# Exits 1 when a correctness check failed (a lock let two holders in, a safe stock strategy oversold,
# the naive one did not, the end-to-end consistency check failed), 2 when the run itself broke.
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$0")/../bench"

out=results/latest
args=()
base=""
while [ $# -gt 0 ]; do
  case $1 in
    --record) out=results ;;
    --base) base=${2:?--base needs a commit}; shift ;;
    *) args+=("$1") ;;
  esac
  shift
done

source "$scripts/ensure-redis.sh"

tmp=$(mktemp -d)
pidfile="$tmp/pids"
harness=""
cleanup() {
  if [ -n "$harness" ] && kill -0 "$harness" 2>/dev/null; then
    kill -TERM "$harness" 2>/dev/null || true
    wait "$harness" 2>/dev/null || true
  fi
  # The harness's children die with it (PR_SET_PDEATHSIG); this is the backstop. The harness wrote each
  # child's pid and a part of its command line (the server's address and marker, the worker binary's
  # path): a pid is killed only while its command line still holds that.
  if [ -f "$pidfile" ]; then
    while read -r pid match; do
      cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)
      case $cmd in
        *"$match"*) kill -9 "$pid" 2>/dev/null || true ;;
      esac
    done <"$pidfile"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The code measured: the commit, "+dirty" when tracked files outside bench/ differ from it.
commit=${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -z "${BENCH_COMMIT:-}" ] && ! git diff --quiet HEAD -- .. ':(exclude)../bench' 2>/dev/null; then
  commit="$commit+dirty"
fi

go build -o "$tmp/bench" ./cmd/bench
go build -o "$tmp/benchworker" ./cmd/benchworker
go build -o "$tmp/benchconsumer" ./cmd/benchconsumer
if [ -n "$base" ]; then
  # The base commit's bench worker, built in a worktree of its own (removed once built).
  git worktree add --detach --quiet "$tmp/base-src" "$base"
  (cd "$tmp/base-src/bench" && go build -o "$tmp/basebenchworker" ./cmd/benchworker) || status=$?
  git worktree remove --force "$tmp/base-src"
  [ -z "${status:-}" ] || exit 2
  args+=(--base-worker "$tmp/basebenchworker")
fi
"$tmp/bench" --worker-bin "$tmp/benchworker" --consumer-bin "$tmp/benchconsumer" --out "$out" --pid-file "$pidfile" --commit "$commit" ${args[@]+"${args[@]}"} &
harness=$!
status=0
wait "$harness" || status=$?
harness=""
exit "$status"
