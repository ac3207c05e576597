# Sourced by scripts/test.sh and scripts/bench.sh: installs redis-server on a fresh Debian machine when
# run as root, and otherwise says how. The tests and benchmarks start their own servers on free ports;
# a service the Debian package may start on 6379 is never used.
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "$(basename "$0"): redis-server missing, installing it with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  else
    echo "$(basename "$0"): redis-server is missing; install it: sudo apt-get install -y redis-server" >&2
    exit 1
  fi
fi
