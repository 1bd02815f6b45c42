#!/usr/bin/env bash
# bench-virtualconsul-catalog.sh — what the consul source costs a Consul
# agent per catalog change (build/benchconsul): a real Consul v1.16.3 dev
# agent with BENCH_SERVICES (500) connect-proxy services, BENCH_PROCS (20)
# meshdns processes following it through a counting proxy, BENCH_CHANGES
# (50) registrations and deregistrations of one service. Prints requests
# per meshdns per change, reads through the leader, and how long a change
# takes to be answered by every meshdns.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="${BENCH_MESHDNS:-$repo/bin/meshdns}"
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
consul=$("$repo/build/peer-tools.sh" consul | sed -n 's/^consul=//p')
cd "$repo"
go run ./build/benchconsul -consul "$consul" -meshdns "$bin" \
  -services "${BENCH_SERVICES:-500}" -procs "${BENCH_PROCS:-20}" -changes "${BENCH_CHANGES:-50}"
