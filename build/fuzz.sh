#!/usr/bin/env bash
# fuzz.sh [SECONDS] — run every fuzz target of the repository for SECONDS
# each (default $FUZZ_SECS or 20), one after the other. A failure stops the
# run and Go keeps the failing input under the package's
# testdata/fuzz/<target>/, where it becomes part of the seed corpus that
# every `go test` replays: commit it with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECS:-20}}
n=0
while IFS=: read -r file target; do
  pkg=./$(dirname "$file")
  echo "fuzz: $pkg $target (${secs}s)"
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "${secs}s" "$pkg" >/tmp/fuzz.$$.log 2>&1 ||
    { cat /tmp/fuzz.$$.log; rm -f /tmp/fuzz.$$.log; echo "fuzz: $target failed; the input is under $pkg/testdata/fuzz/$target" >&2; exit 1; }
  grep -E '^fuzz: elapsed' /tmp/fuzz.$$.log | tail -1
  n=$((n + 1))
done < <(grep -rHoE --include='*_test.go' --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]+' . | sed -E 's|^\./||; s/:func /:/' | sort)
rm -f /tmp/fuzz.$$.log
echo "fuzz: $n targets, ${secs}s each, no failure"
