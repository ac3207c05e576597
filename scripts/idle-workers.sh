#!/usr/bin/env bash
# What idle workers cost Redis (issue 47): starts a redis-server on a free loopback port and N worker
# processes over P partitions (cmd/worker, defaults otherwise: KEYSPACE_EVENTS=auto), lets them settle, then
# measures over S seconds, with nothing published: Redis's CPU (INFO cpu, user + sys) as a share of one
# core, and the commands it ran a second. Everything it starts is stopped when it ends.
#
#   scripts/idle-workers.sh              64 workers, 16 partitions, 30 s
#   scripts/idle-workers.sh 4 16 30      N P S
set -euo pipefail
n=${1:-64} parts=${2:-16} secs=${3:-30}
top=$(cd "$(dirname "$0")/.." && pwd)
source "$top/scripts/ensure-redis.sh"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
(cd "$top" && go build -o "$tmp/worker" ./cmd/worker)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
pids+=($!)
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done
for i in $(seq "$n"); do
  REDIS_URL="redis://127.0.0.1:$port/0" ORDERS_PARTITIONS=$parts WORKER_NAME="idle-$i" CONSUMER_GROUP_START=0 \
    LOG_LEVEL=warn "$tmp/worker" >"$tmp/worker-$i.log" 2>&1 &
  pids+=($!)
done
sleep 20 # start-up, group creation, the live consumers learnt
cpu() { cli info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
cmds() { cli info stats | awk -F: '/^total_commands_processed:/ {print $2+0}'; }
cli config resetstat >/dev/null
c0=$(cpu) k0=$(cmds)
sleep "$secs"
c1=$(cpu) k1=$(cmds)
stats=$(cli info commandstats)
clients=$(cli info clients | awk -F: '/^connected_clients:/ {print $2+0}')
hz=$(cli config get hz | tail -1)
alive=0
for pid in "${pids[@]:1}"; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
python3 - "$c0" "$c1" "$k0" "$k1" "$secs" "$n" "$parts" "$alive" <<'PY'
import sys
c0, c1, k0, k1, secs, n, parts, alive = map(float, sys.argv[1:])
print(f"{int(n)} idle workers ({int(alive)} alive) x {int(parts)} partitions, {int(secs)} s: "
      f"Redis CPU {100 * (c1 - c0) / secs:.2f} % of a core, {(k1 - k0 - 2) / secs:.0f} commands/s")
PY
echo "$clients connections to Redis (hz $hz)"
echo "busiest commands (calls a second, scripts' own commands included):"
printf '%s\n' "$stats" | awk -F'[:=,]' -v s="$secs" '/^cmdstat_/ {printf "  %-28s %8.1f\n", substr($1, 9), $3 / s}' |
  sort -k2 -nr | head -8
