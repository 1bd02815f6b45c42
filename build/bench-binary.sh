#!/usr/bin/env bash
# bench-binary.sh — the binary's own costs, against stock CoreDNS v1.15.0
# (every stock plugin, built from modules as meshdns is: static, -trimpath
# -s -w; build/peer-tools.sh coredns): binary size; start-up time until the
# first answer (a whoami block; dig every 10 ms from exec); idle memory 3 s
# after it (VmRSS, RssAnon, RssFile of /proc/PID/status, nothing released);
# whoami QPS (dnsload: the server on core 0, dnsperf on core 1).
#
# Env: BENCH_BEFORE (another meshdns binary to measure beside, e.g. an older
#      build), BENCH_RUNS (start-ups per binary, default 5), BENCH_SECS
#      (dnsperf seconds, default 10).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
for t in dig dnsperf taskset; do command -v $t >/dev/null || { echo "bench-binary: $t missing (build/install-deps.sh)" >&2; exit 1; }; done
[ -x bin/meshdns ] || build/build.sh bin/meshdns >&2
stock=$(build/peer-tools.sh coredns | sed -n 's/^coredns=//p')
runs=${BENCH_RUNS:-5}
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf '.:%s {\n    bind 127.0.0.1\n    whoami\n}\n' "$port" >"$dir/Corefile"
echo "whoami.example. A" >"$dir/queries"

# startup BIN: start BIN pinned to core 0, set $took to the ms until the
# first answer, leave it running in $pid.
startup() {
  local t0 t1
  t0=$(date +%s%N)
  taskset -c 0 "$1" -conf "$dir/Corefile" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 1000); do
    dig +short +time=1 +tries=1 @127.0.0.1 -p "$port" whoami.example A >/dev/null 2>&1 && break
    sleep 0.01
  done
  t1=$(date +%s%N)
  took=$(( (t1 - t0) / 1000000 ))
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
kib() { awk -v f="$1:" '$1 == f { print $2 }' "/proc/$pid/status"; }

binaries=("meshdns=bin/meshdns" "coredns=$stock")
[ -n "${BENCH_BEFORE:-}" ] && binaries+=("before=$BENCH_BEFORE")
printf '| binary | size | first answer (median of %d) | VmRSS | RssAnon | RssFile | whoami QPS |\n|---|---:|---:|---:|---:|---:|---:|\n' "$runs"
for b in "${binaries[@]}"; do
  name=${b%%=*} bin=${b#*=}
  size=$(stat -c %s "$bin")
  times=()
  for _ in $(seq 1 "$runs"); do
    startup "$bin"
    times+=("$took")
    sleep 3
    rss=$(kib VmRSS) anon=$(kib RssAnon) file=$(kib RssFile)
    stop
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (runs + 1) / 2 ))p")
  startup "$bin"
  qps=$(build/bench-tools/dnsload 127.0.0.1 "$port" "$dir/queries" "${BENCH_SECS:-10}" 2>/dev/null | sed -n 's/^qps=\([0-9]*\).*/\1/p')
  stop
  awk -v n="$name" -v s="$size" -v m="$median" -v r="$rss" -v a="$anon" -v f="$file" -v q="$qps" \
    'BEGIN { printf "| %s | %.1f MB | %d ms | %.1f MiB | %.1f MiB | %.1f MiB | %s |\n", n, s / 1e6, m, r / 1024, a / 1024, f / 1024, q }'
done
