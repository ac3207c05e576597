#!/usr/bin/env bash
# Measures what tracing costs end to end: 2 workers x 16 consumers, 200 SKUs uniform, 30,000 orders, with
# tracing off, on (100 % sampling, OTLP/HTTP to a local sink that discards) and on with a span per Redis
# command, interleaved for ROUNDS rounds. Prints each run's orders/s and the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
ORDERS=${ORDERS:-30000}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/worker" ./cmd/worker
go build -o "$tmp/producer" ./cmd/producer
go build -o "$tmp/sink" ./scripts/otlpsink
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sinkport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --logfile "$tmp/redis.log"
"$tmp/sink" -addr "127.0.0.1:$sinkport" &
sleep 0.5
export REDIS_URL="redis://127.0.0.1:$port/0"

run() { # mode: off | on | redis
  local mode=$1 env=()
  case $mode in
    on) env=(OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sinkport") ;;
    redis) env=(OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sinkport" TRACE_REDIS_COMMANDS=true) ;;
  esac
  local pids=()
  for i in 1 2; do
    env "${env[@]}" WORKER_NAME="w$i" "$tmp/worker" >"$tmp/w$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 0.5
  "$tmp/producer" --orders "$ORDERS" --skus 200 --seed-stock 1000000 --force --wait --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["orders_per_second"]))' >>"$tmp/$mode"
  kill -TERM "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  echo "$mode $(tail -1 "$tmp/$mode") orders/s"
}
for _ in $(seq "$ROUNDS"); do run off; run on; run redis; done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
off=$(median "$tmp/off"); on=$(median "$tmp/on"); redis=$(median "$tmp/redis")
echo "medians: off $off, tracing on $on ($(python3 -c "print(f'{100*(1-$on/$off):.0f}')")% less), with Redis command spans $redis ($(python3 -c "print(f'{100*(1-$redis/$off):.0f}')")% less)"
