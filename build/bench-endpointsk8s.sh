#!/usr/bin/env bash
# bench-endpointsk8s.sh — endpointsvc's Kubernetes source vs the stock
# kubernetes plugin, same binary, same real kube-apiserver + etcd on
# loopback, same objects: 5,000 headless Services with one EndpointSlice of
# 10 ready endpoints each (50,000 endpoints) on 500 Nodes.
#
# Prints, per plugin: time to sync (start until /ready answers and the last
# Service answers in full), RSS (total, anonymous, file-backed) and live Go
# heap after sync, dnsperf QPS on A queries (10 A records per answer);
# then the ratios (goals: RSS <= 0.5x, QPS >= 1.0x). meshdns pinned with
# taskset -c 0, dnsperf on core 1 (../shared/bench/dnsload).
# Env: BENCH_SECS (per dnsperf run, default 6), BENCH_ROUNDS (default 2),
#      BENCH_SERVICES / BENCH_ENDPOINTS / BENCH_NODES (defaults 5000/10/500).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared="$repo/../shared/bench"
bin="$repo/bin/meshdns"
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for t in dnsperf taskset dig openssl; do command -v $t >/dev/null || { echo "bench-endpointsk8s: $t missing (build/install-deps.sh)" >&2; exit 1; }; done
tools=$("$repo/build/peer-tools.sh" kube-apiserver etcd)
apiserver=$(sed -n 's/^kube-apiserver=//p' <<<"$tools")
etcd=$(sed -n 's/^etcd=//p' <<<"$tools")
cd "$repo"
go run ./build/benchk8s -meshdns "$bin" -apiserver "$apiserver" -etcd "$etcd" -dnsload "$shared/dnsload" \
  -secs "${BENCH_SECS:-6}" -rounds "${BENCH_ROUNDS:-2}" \
  -services "${BENCH_SERVICES:-5000}" -endpoints "${BENCH_ENDPOINTS:-10}" -nodes "${BENCH_NODES:-500}"
