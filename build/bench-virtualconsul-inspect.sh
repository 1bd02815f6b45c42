#!/usr/bin/env bash
# bench-virtualconsul-inspect.sh — what listing a large virtualconsul table
# through the inspect plugin costs (GET /virtualconsul): one meshdns serving
# INSPECT_NAMES (1,000,000) names from a table file (../shared/bench
# gen-table), INSPECT_RUNS (3) listings with curl. Prints per run the bytes,
# the seconds, the RSS before the listing and the peak RSS during it (VmHWM
# reset to the current RSS just before, through /proc/PID/clear_refs).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bench="$repo/build/bench-tools"
bin=${MESHDNS_BIN:-$repo/bin/meshdns}
names=${INSPECT_NAMES:-1000000}
runs=${INSPECT_RUNS:-3}
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for tool in dig curl; do
  command -v "$tool" >/dev/null || { echo "bench-virtualconsul-inspect: $tool missing: run build/install-deps.sh" >&2; exit 1; }
done
[ -x "$bench/gen-table" ] || { echo "bench-virtualconsul-inspect: $bench/gen-table missing" >&2; exit 1; }

work=$(mktemp -d /tmp/bench-virtualconsul-inspect.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  local p
  for p in $(shuf -i 20000-60000 -n 100); do
    if ! ss -Hlntu | awk '{print $5}' | grep -q ":$p\$"; then echo "$p"; return; fi
  done
  echo "bench-virtualconsul-inspect: no free port" >&2; exit 1
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

"$bench/gen-table" "$names" "$work" 1000 >/dev/null
port=$(free_port)
iport=$(free_port)
printf 'consul.:%s {\n    bind 127.0.0.1\n    inspect 127.0.0.1:%s\n    virtualconsul {\n        source file %s 1m\n    }\n}\n' \
  "$port" "$iport" "$work/table.json" >"$work/Corefile"
"$bin" -conf "$work/Corefile" >"$work/log" 2>&1 &
pid=$!
deadline=$((SECONDS + 180))
until [ "$(dig @127.0.0.1 -p "$port" +short +time=1 +tries=1 svc-0.virtual.default.ns.default.ap.dc1.dc.consul A 2>/dev/null)" = 240.0.0.1 ]; do
  [ $SECONDS -lt $deadline ] || { echo "bench-virtualconsul-inspect: no answer:"; cat "$work/log"; exit 1; } >&2
  sleep 0.1
done
sleep 3 # the load's garbage collected
echo "meshdns: $("$bin" -version | head -1); $names names; cpu: $(nproc) cores"
for run in $(seq "$runs"); do
  before=$(rss_kb "$pid")
  echo 5 >"/proc/$pid/clear_refs" # VmHWM := VmRSS
  t0=$(date +%s%N)
  bytes=$(curl -sf "http://127.0.0.1:$iport/virtualconsul" | wc -c)
  t1=$(date +%s%N)
  echo "run=$run names=$names bytes=$bytes seconds=$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", d / 1e9 }')" \
    "rss_before_mb=$((before / 1024)) peak_rss_during_mb=$(($(hwm_kb "$pid") / 1024)) rss_after_mb=$(($(rss_kb "$pid") / 1024))"
  sleep 2
done
