#!/usr/bin/env bash
# Prints the path of promtool, installing it first when it is missing: the unit tests of the alert rules
# (deploy/prometheus/alerts_test.yml) run in it (internal/e2e/promtool_test.go). As root on Debian it
# installs the prometheus package, which holds promtool (apt-get install -y prometheus); elsewhere it says
# how and exits 1, and the Go test skips (fails under CI=true). scripts/test.sh runs it before the tests.
#
# The package also brings a Prometheus server: only promtool is needed, so a service the package started
# (on a machine whose policy-rc.d lets it) is stopped and disabled again.
set -euo pipefail

say() { echo "ensure-promtool.sh: $*" >&2; }
if path=$(command -v promtool); then
  echo "$path"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "promtool is missing; install it: sudo apt-get install -y prometheus (Debian), or a Prometheus release's promtool on PATH"
  exit 1
fi

say "promtool missing, installing Debian's prometheus package with apt-get"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq prometheus >/dev/null; }; then
  say "apt-get install prometheus failed"
  exit 1
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl disable --now prometheus >/dev/null 2>&1 || say "could not stop the prometheus service the package started"
fi
command -v promtool || { say "the prometheus package holds no promtool on PATH"; exit 1; }
