#!/usr/bin/env bash
# bench-fleet.sh — a simulated node-local fleet (issue 31 item 6;
# build/benchk8s -mix fleet, fleet.go): a real kube-apiserver + etcd on
# loopback with the cluster-DNS mix scaled to BENCH_SERVICES (default
# 1,000 Services of ~10 endpoints in 10 namespaces, 100 Nodes) under churn
# (BENCH_CHURN slice flips a second, default 10, and a probe Service's
# port set every second), 3 leaders (the cluster DNS stanza with
# replicate) behind an in-process balancer standing for the cluster DNS
# Service, 2 real node-local followers answering a bounded query loop, and
# BENCH_FOLLOWERS light followers in one process (default 100; the real
# follower code of plugin/endpointsvc/replica, each decoding every state;
# 10 % reading at 128 KiB/s, 5 % of version 1). Drills: a rolling restart
# of the leaders, one killed, an API outage. Prints per drill what each
# follower received beyond the churn's own changes (against a whole
# state) and how many received a whole state, change-to-follower
# propagation p50/p99, the leaders' heap with and without the streams,
# and the answers lost on the real followers. ~3 min at 100 followers,
# ~5 min at 1,000; run one at a time on a 2-core machine.
#
# Env: BENCH_FOLLOWERS (100), BENCH_SERVICES (1000), BENCH_CHURN (10),
#      BENCH_MESHDNS (bin/meshdns, built if missing), BENCH_ARGS (more
#      flags of build/benchk8s: -leaders, -slow-share, -v1-share, -steady).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="${BENCH_MESHDNS:-$repo/bin/meshdns}"
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
command -v openssl >/dev/null || { echo "bench-fleet: openssl missing (build/install-deps.sh)" >&2; exit 1; }
tools=$("$repo/build/peer-tools.sh" kube-apiserver etcd)
apiserver=$(sed -n 's/^kube-apiserver=//p' <<<"$tools")
etcd=$(sed -n 's/^etcd=//p' <<<"$tools")
services=${BENCH_SERVICES:-1000}
cd "$repo"
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
go run ./build/benchk8s -mix fleet -meshdns "$bin" -apiserver "$apiserver" -etcd "$etcd" \
  -services "$services" -endpoints 10 -nodes $((services / 10)) -namespaces $((services / 100 > 0 ? services / 100 : 1)) \
  -followers "${BENCH_FOLLOWERS:-100}" -fleet-churn "${BENCH_CHURN:-10}" ${BENCH_ARGS:-}
