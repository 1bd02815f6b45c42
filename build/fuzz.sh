#!/usr/bin/env bash
# fuzz.sh [SECONDS] — run every fuzz target of the repository for SECONDS
# each (default $FUZZ_SECS or 20), one after the other. A failure stops the
# run and Go keeps the failing input under the package's
# testdata/fuzz/<target>/, where it becomes part of the seed corpus that
# every `go test` replays: commit it with the fix.
#
# Go's coordinator can end a duration-bounded run with a bare "context
# deadline exceeded" and no failing input when a worker misses the stop
# deadline on a loaded machine (go.dev/issue/75804). Such a run counts as
# passed only when Go wrote no failing input and a replay of the target's
# whole corpus (seeds plus everything found) passes; anything else fails.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECS:-20}}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
n=0
while IFS=: read -r file target; do
  pkg=./$(dirname "$file")
  echo "fuzz: $pkg $target (${secs}s)"
  if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "${secs}s" "$pkg" >"$log" 2>&1; then
    if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log" &&
      go test -count=1 -run "^${target}\$" "$pkg" >/dev/null 2>&1; then
      echo "fuzz: $target stopped on Go's deadline race (go.dev/issue/75804), no failing input, corpus replay passes"
    else
      cat "$log"
      echo "fuzz: $target failed; the input is under $pkg/testdata/fuzz/$target" >&2
      exit 1
    fi
  fi
  grep -E '^fuzz: elapsed' "$log" | tail -1 || true
  n=$((n + 1))
done < <(grep -rHoE --include='*_test.go' --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]+' . | sed -E 's|^\./||; s/:func /:/' | sort)
echo "fuzz: $n targets, ${secs}s each, no failure"
