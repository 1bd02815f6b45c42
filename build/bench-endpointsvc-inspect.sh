#!/usr/bin/env bash
# bench-endpointsvc-inspect.sh — what listing a large endpointsvc table
# through the inspect plugin costs (GET /endpointsvc), against the
# process's RSS before the listing.
#
# BENCH_MIX=spec (default): build/benchk8s's spec cluster (5,000 Services in
# 50 namespaces, 50,000 ready endpoints, 500 Nodes) on a real kube-apiserver
# + etcd that `benchk8s -hold` keeps on loopback; one meshdns with the
# cluster-DNS stanza (schema kubernetes, source kubernetes) and inspect.
# BENCH_MIX=orch: a state file of INSPECT_SERVICES (20,000) orch services
# with 10 tasks each on 1,000 nodes (source file, schema orch).
#
# INSPECT_RUNS (3) listings with curl; per run the bytes, the seconds, the
# RSS before the listing, the peak RSS during it (VmHWM reset to the
# current RSS just before, through /proc/PID/clear_refs) and the RSS
# after; then one listing filtered by ?namespace=.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${MESHDNS_BIN:-$repo/bin/meshdns}
mix=${BENCH_MIX:-spec}
runs=${INSPECT_RUNS:-3}
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-endpointsvc-inspect: $tool missing: run build/install-deps.sh" >&2; exit 1; }
done

work=$(mktemp -d /tmp/bench-endpointsvc-inspect.XXXXXX)
pid= holder=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

port=$(free_port)
iport=$(free_port)
rport=$(free_port)
case "$mix" in
spec)
  tools=$("$repo/build/peer-tools.sh" kube-apiserver etcd)
  apiserver=$(sed -n 's/^kube-apiserver=//p' <<<"$tools")
  etcd=$(sed -n 's/^etcd=//p' <<<"$tools")
  (cd "$repo" && go build -o "$work/benchk8s" ./build/benchk8s)
  # benchk8s stops its kube-apiserver and etcd by PID on SIGTERM
  "$work/benchk8s" -mix spec -apiserver "$apiserver" -etcd "$etcd" -meshdns "$bin" -hold 1h >"$work/hold.log" 2>&1 &
  holder=$!
  deadline=$((SECONDS + 600))
  until grep -q '^kubeconfig ' "$work/hold.log"; do
    kill -0 "$holder" 2>/dev/null && [ $SECONDS -lt $deadline ] || { echo "bench-endpointsvc-inspect: benchk8s:"; cat "$work/hold.log"; exit 1; } >&2
    sleep 1
  done
  grep '^objects' "$work/hold.log" || true
  kubeconfig=$(sed -n 's/^kubeconfig \([^ ]*\) .*/\1/p' "$work/hold.log")
  printf '.:%s {\n    bind 127.0.0.1\n    ready 127.0.0.1:%s\n    inspect 127.0.0.1:%s\n    endpointsvc cluster.local in-addr.arpa ip6.arpa {\n        source kubernetes %s\n        schema kubernetes\n        pods insecure\n        ttl 30\n    }\n}\n' \
    "$port" "$rport" "$iport" "$kubeconfig" >"$work/Corefile"
  filter=ns-0
  ;;
orch)
  python3 - "${INSPECT_SERVICES:-20000}" >"$work/state.json" <<'EOF'
import json, sys
n = int(sys.argv[1])
nodes = [{"id": "n%d" % i, "name": "node-%d" % i, "address": "10.%d.%d.%d" % (i >> 16 & 255, i >> 8 & 255, i & 255), "status": "ready"} for i in range(1000)]
services, tasks = [], []
for s in range(n):
    services.append({"id": "s%d" % s, "name": "svc-%d" % s, "namespace": "ns-%d" % (s % 50), "status": "active",
                     "ports": [{"name": "http", "protocol": "tcp", "target_port": 80}]})
    for t in range(10):
        tasks.append({"id": "t%d-%d" % (s, t), "service_id": "s%d" % s, "node_id": "n%d" % ((s * 7 + t * 13) % 1000), "version": 1,
                      "desired_status": "running", "actual_status": "running",
                      "ports": [{"name": "http", "protocol": "tcp", "container_port": 80, "host_port": 30000 + t}]})
json.dump({"services": services, "tasks": tasks, "nodes": nodes}, sys.stdout)
EOF
  printf 'svc.orch.:%s {\n    bind 127.0.0.1\n    ready 127.0.0.1:%s\n    inspect 127.0.0.1:%s\n    endpointsvc {\n        source file %s 1m\n    }\n}\n' \
    "$port" "$rport" "$iport" "$work/state.json" >"$work/Corefile"
  filter=ns-0
  ;;
*)
  echo "bench-endpointsvc-inspect: BENCH_MIX=$mix: want spec or orch" >&2; exit 1
  ;;
esac

"$bin" -conf "$work/Corefile" >"$work/log" 2>&1 &
pid=$!
deadline=$((SECONDS + 300))
until curl -sf "http://127.0.0.1:$rport/ready" >/dev/null; do
  kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ] || { echo "bench-endpointsvc-inspect: not ready:"; cat "$work/log"; exit 1; } >&2
  sleep 0.2
done
sleep 3 # the sync's garbage collected
head=$(curl -sf "http://127.0.0.1:$iport/endpointsvc?namespace=none" | head -c 400 | tr -d '\n')
echo "meshdns: $("$bin" -version | head -1); mix $mix; cpu: $(nproc) cores; ${head%%\"services\"*}"
for run in $(seq "$runs") filtered; do
  url="http://127.0.0.1:$iport/endpointsvc"
  [ "$run" = filtered ] && url="$url?namespace=$filter"
  before=$(rss_kb "$pid")
  echo 5 >"/proc/$pid/clear_refs" # VmHWM := VmRSS
  t0=$(date +%s%N)
  bytes=$(curl -sf "$url" | wc -c)
  t1=$(date +%s%N)
  echo "run=$run bytes=$bytes seconds=$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", d / 1e9 }')" \
    "rss_before_mb=$((before / 1024)) peak_rss_during_mb=$(($(hwm_kb "$pid") / 1024)) rss_after_mb=$(($(rss_kb "$pid") / 1024))"
  sleep 2
done
