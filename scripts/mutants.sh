#!/usr/bin/env bash
# The mutation audit (issue 47), kept as a method: applies each hand-made one-line bug of a list to a
# scratch copy of the working tree, one at a time, runs the tests that should catch it, and says which
# bugs survived. Not part of CI (each mutant recompiles and reruns a package's tests).
#
#   scripts/mutants.sh                    every mutant of scripts/mutants.txt
#   scripts/mutants.sh replica            only those whose name contains "replica"
#
# scripts/mutants.txt: one mutant per line, fields separated by " | ":
#   name | file | the exact text to replace (its first occurrence) | the replacement | package | -run regex
# A package of another Go module is given as <module dir>:<package>, e.g. lockmw/rlock:.
# \n and \t in the texts stand for a line break and a tab. Lines starting with # and blank lines are skipped. A mutant whose text is not found fails the run: the
# code moved on and the list must follow it.
# Exits 1 when a mutant survived or could not be applied.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
list="$top/scripts/mutants.txt"
filter=${1:-}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$top" && tar --exclude=.git --exclude=bench/results -cf - .) | (cd "$scratch" && tar -xf -)
source "$top/scripts/ensure-redis.sh"

status=0
while IFS= read -r line; do
  case $line in ''|'#'*) continue ;; esac
  IFS='|' read -r name file from to pkg run <<<"$line"
  trim() { local v=${1#"${1%%[![:space:]]*}"}; printf '%s' "${v%"${v##*[![:space:]]}"}"; }
  name=$(trim "$name"); file=$(trim "$file"); pkg=$(trim "$pkg"); run=$(trim "$run")
  from=$(trim "$from"); to=$(trim "$to")
  [ -n "$filter" ] && [[ $name != *"$filter"* ]] && continue
  cp "$scratch/$file" "$scratch/$file.orig"
  if ! FROM=$from TO=$to perl -0pi -e 'BEGIN { ($f, $t) = map { s/\\n/\n/g; s/\\t/\t/g; $_ } ($ENV{FROM}, $ENV{TO}) } $n = s/\Q$f\E/$t/; END { exit($n ? 0 : 3) }' "$scratch/$file"; then
    echo "NOT APPLIED  $name: text not found in $file"
    status=1
  elif dir=.; [[ $pkg == *:* ]] && dir=${pkg%%:*} && pkg=${pkg#*:}
       (cd "$scratch/$dir" && go test -count=1 -run "$run" "$pkg" >"$scratch/out" 2>&1); then
    echo "SURVIVED     $name ($pkg -run '$run')"
    status=1
  elif grep -q -e '\[build failed\]' -e '\[setup failed\]' "$scratch/out"; then
    echo "DOES NOT BUILD $name: $(grep -m1 -E '\.go:[0-9]+:' "$scratch/out" | cut -c1-140)"
    status=1
  else
    echo "killed       $name: $(grep -m1 -E '_test.go:[0-9]+:' "$scratch/out" | sed 's/^ *//' | cut -c1-140)"
  fi
  mv "$scratch/$file.orig" "$scratch/$file"
done <"$list"
exit $status
