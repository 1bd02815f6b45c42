#!/usr/bin/env bash
# bench-endpointsvc.sh — endpointsvc at 10,000 services x 10 tasks on 1,000 nodes.
#
# Prints: the state build time (Go benchmark: decode + table; and the sync the
# binary logs), the heap the table keeps, the server's heap and RSS after
# load, and dnsperf QPS for A queries against endpointsvc and against the
# stock hosts plugin serving the same names with the same 10 addresses each,
# in the same run (alternating, 3 rounds), as a ratio. Server pinned with
# taskset -c 0, dnsperf on core 1 (build/bench-tools/dnsload).
# Env: BENCH_SECS (per dnsperf run, default 6), BENCH_ROUNDS (default 3).
set -euo pipefail
[ -n "${BENCH_DEBUG:-}" ] && set -x
repo=$(cd "$(dirname "$0")/.." && pwd)
shared="$repo/build/bench-tools"
bin="$repo/bin/meshdns"
secs=${BENCH_SECS:-6} rounds=${BENCH_ROUNDS:-3}
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for t in dnsperf taskset dig; do command -v $t >/dev/null || { echo "bench-endpointsvc: $t missing (build/install-deps.sh)" >&2; exit 1; }; done
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

S=10000 T=10 N=1000
# state JSON, hosts file (same names, same addresses) — generated, never committed
awk -v S=$S -v T=$T -v N=$N -v out="$tmp" '
function ip(n) { return "10." int(n / 65536) % 256 "." int(n / 256) % 256 "." n % 256 }
BEGIN {
  J = out "/state.json"; H = out "/hosts"
  printf "{\"nodes\":[" > J
  for (n = 0; n < N; n++) printf "%s{\"id\":\"n-%d\",\"name\":\"node-%d\",\"address\":\"%s:7946\",\"status\":\"ready\"}", (n ? ",\n" : "\n"), n, n, ip(n) > J
  printf "],\n\"services\":[" > J
  for (i = 0; i < S; i++) printf "%s{\"id\":\"s-%d\",\"name\":\"svc-%d\",\"status\":\"active\",\"ports\":[{\"name\":\"http\",\"protocol\":\"tcp\",\"target_port\":80}]}", (i ? ",\n" : "\n"), i, i > J
  printf "],\n\"tasks\":[" > J
  for (i = 0; i < S; i++) for (j = 0; j < T; j++) {
    n = (i * T + j) % N
    printf "%s{\"id\":\"t-%d-%d\",\"service_id\":\"s-%d\",\"node_id\":\"n-%d\",\"desired_status\":\"running\",\"actual_status\":\"healthy\",\"ports\":[{\"name\":\"http\",\"protocol\":\"tcp\",\"container_port\":80,\"host_port\":%d}]}", ((i + j) ? ",\n" : "\n"), i, j, i, n, 30000 + j > J
    print ip(n) " svc-" i ".svc.orch" > H
  }
  print "]}" > J
}'
# queries: gen-table's deterministic uniform draw over the same 10,000 indexes
"$shared/gen-table" $S "$tmp/gen" 100000 0 1 >/dev/null
sed 's/\.virtual\.default\.ns\.default\.ap\.dc1\.dc\.consul /.svc.orch /' "$tmp/gen/queries.txt" > "$tmp/queries-a.txt"
echo "state: $S services x $T tasks on $N nodes, $(du -h "$tmp/state.json" | cut -f1) JSON; hosts: $(wc -l < "$tmp/hosts") lines"

# freeport: a loopback port nobody listens on (TCP probe; bash only)
freeport() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
# get PORT PATH: an HTTP GET on loopback with bash's /dev/tcp (no curl needed)
get() {
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  cat <&3
  exec 3<&-
}

# start NAME BLOCK: run meshdns pinned to core 0 with a svc.orch. block, wait for svc-9999
start() {
  port=$(freeport) mport=$(freeport) pport=$(freeport)
  cat > "$tmp/Corefile.$1" <<EOC
svc.orch.:$port {
    bind 127.0.0.1
    prometheus 127.0.0.1:$mport
    pprof 127.0.0.1:$pport
$2
}
EOC
  local t0; t0=$(date +%s.%N)
  (cd "$tmp" && exec taskset -c 0 "$bin" -conf "Corefile.$1" >"$tmp/log.$1" 2>&1) &
  pid=$!
  for _ in $(seq 1 600); do
    if dig @127.0.0.1 -p "$port" +time=1 +tries=1 +short svc-9999.svc.orch A 2>/dev/null | grep -q '^10\.'; then
      loadtime=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/log.$1" >&2; exit 1; }
    sleep 0.1
  done
  echo "bench-endpointsvc: $1 did not answer" >&2; cat "$tmp/log.$1" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
# heap: live heap after a forced GC (pprof's heap profile with gc=1 runs one)
heap() { get "$pport" "/debug/pprof/heap?gc=1" >/dev/null; metric go_memstats_heap_alloc_bytes; }
metric() { get "$mport" /metrics | awk -v m="$1" '$1 == m { printf "%.1f", $2 / 1048576 }'; }
rss() { awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"; }
qps() { "$shared/dnsload" 127.0.0.1 "$port" "$tmp/queries-a.txt" "$secs" 2>/dev/null | tail -1 | sed 's/.*qps=\([0-9]*\).*/\1/'; }

echo "== Go benchmark: decode + build the table (BenchmarkLoad)"
(cd "$repo" && go test -run '^$' -bench '^BenchmarkLoad$' -benchtime 3x ./plugin/endpointsvc/ 2>/dev/null | grep -E '^BenchmarkLoad')

esvc_block='    endpointsvc {
        source file state.json 1m
    }'
hosts_block='    hosts hosts svc.orch {
        ttl 30
        reload 0
        no_reverse
    }'
declare -a q_esvc q_hosts
for r in $(seq 1 "$rounds"); do
  start hosts "$hosts_block"
  [ "$r" = 1 ] && echo "hosts:       first answer after ${loadtime}s, heap after GC $(heap) MiB, RSS $(rss) MiB"
  q_hosts+=("$(qps)"); stop
  start esvc "$esvc_block"
  if [ "$r" = 1 ]; then
    echo "endpointsvc: first answer after ${loadtime}s, heap after GC $(heap) MiB, RSS $(rss) MiB; $(grep -o 'Synced.*' "$tmp/log.esvc" | head -1)"
  fi
  q_esvc+=("$(qps)"); stop
  echo "round $r: A QPS hosts ${q_hosts[-1]}, endpointsvc ${q_esvc[-1]}"
done
sum() { local s=0; for x in "$@"; do s=$((s + x)); done; echo "$s"; }
h=$(sum "${q_hosts[@]}") e=$(sum "${q_esvc[@]}")
echo "A QPS (10 A records per answer): hosts $((h / rounds)), endpointsvc $((e / rounds)), ratio $(awk -v e="$e" -v h="$h" 'BEGIN { printf "%.3f", e / h }')"
