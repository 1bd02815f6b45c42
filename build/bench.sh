#!/usr/bin/env bash
# bench.sh — run every plugin's benchmark script (build/bench-*.sh) in turn.
# Each compares meshdns (a plugin, or the binary) with its stock CoreDNS
# counterpart in the same run, the server pinned to core 0 and dnsperf to
# core 1 (build/bench-tools/dnsload), and prints its figures.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/meshdns ] || build/build.sh bin/meshdns
shopt -s nullglob
scripts=(build/bench-*.sh)
if [ ${#scripts[@]} -eq 0 ]; then echo "bench: no plugin benchmarks yet"; exit 0; fi
for s in "${scripts[@]}"; do
  # an A/B script compares two binaries given as its arguments: run by hand
  case $s in *-ab.sh) continue ;; esac
  echo "== $s"
  "$s"
done
# the cluster-DNS churn phase (work per change, both plugins at once)
echo "== build/bench-endpointsk8s.sh BENCH_MIX=churn"
BENCH_MIX=churn build/bench-endpointsk8s.sh
# AXFR of the cluster zone against the stock plugin's (issue 32)
echo "== build/bench-endpointsk8s.sh BENCH_MIX=axfr"
BENCH_MIX=axfr build/bench-endpointsk8s.sh
# work per change (issue 32's bill): both models, with and without the
# snapshot, against the stock plugin, all at once
echo "== build/bench-endpointsk8s.sh BENCH_MIX=changes"
BENCH_MIX=changes BENCH_SERVICES=1500 BENCH_NODES=100 BENCH_ROUNDS=3 build/bench-endpointsk8s.sh
