#!/usr/bin/env bash
# bench-virtualconsul-fleet.sh — what a fleet of consul sources costs one
# real Consul v1.16.3 server (build/benchconsul -fleet, fleet.go): for each
# of BENCH_FLEET (default "100 1000") sources in one meshdns process behind
# a counting proxy, with the issue-30 catalog (20 sidecar services, 2
# terminating gateways with 2 linked services each): requests per source
# per unrelated change, reads of unchanged services after a 15 s freeze and
# after a restart of the server (an election), the spread of the first
# retry after every request failed, and Consul's CPU against a fleet of as
# many Consul-DNS clients. BENCH_MESHDNS picks another binary (the figures
# before a change). ~4 min at 100 sources, ~10 at 1,000 on 2 cores. The counting proxy runs as one child process per 500 sources (the 20,000 open-file hard limit).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="${BENCH_MESHDNS:-$repo/bin/meshdns}"
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
consul=$("$repo/build/peer-tools.sh" consul | sed -n 's/^consul=//p')
cd "$repo"
for n in ${BENCH_FLEET:-100 1000}; do
  timeout 2400 go run ./build/benchconsul -consul "$consul" -meshdns "$bin" -fleet "$n" -changes "${BENCH_CHANGES:-3}"
done
