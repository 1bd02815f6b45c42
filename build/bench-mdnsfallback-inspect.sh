#!/usr/bin/env bash
# bench-mdnsfallback-inspect.sh — what listing a full mdnsfallback record
# database through the inspect plugin costs (GET /mdnsfallback): one
# meshdns whose snapshot holds INSPECT_RECORDS (100,000: max_records'
# default) records on 50,000 names, INSPECT_RUNS (3) listings with curl.
# Prints per run the bytes, the seconds, the RSS before the listing and the
# peak RSS during it (VmHWM reset to the current RSS just before, through
# /proc/PID/clear_refs), and the RSS after. The listing copies the records
# (not their strings) under the database's lock: BenchmarkList in
# plugin/mdnsfallback has that copy's bytes against the database's heap.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${MESHDNS_BIN:-$repo/bin/meshdns}
n=${INSPECT_RECORDS:-100000}
runs=${INSPECT_RUNS:-3}
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-mdnsfallback-inspect: $tool missing: run build/install-deps.sh" >&2; exit 1; }
done
work=$(mktemp -d /tmp/bench-mdnsfallback-inspect.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

python3 - "$n" >"$work/snapshot.json" <<'EOF'
import json, sys
n = int(sys.argv[1])
recs = [{"id": "%064x" % i, "ip": "10.%d.%d.%d" % (32 + (i >> 16), i >> 8 & 255, i & 255), "domain": "svc-%d.weave.local." % (i // 2),
         "routing_prefix": 12} for i in range(n)]
json.dump({"version": 1, "records": recs}, sys.stdout)
EOF
port=$(free_port) iport=$(free_port) rport=$(free_port) aport=$(free_port)
printf 'weave.local.:%s {\n    bind 127.0.0.1\n    ready 127.0.0.1:%s\n    inspect 127.0.0.1:%s\n    mdnsfallback {\n        api 127.0.0.1:%s\n        max_records %s\n        snapshot %s\n    }\n}\n' \
  "$port" "$rport" "$iport" "$aport" "$n" "$work/snapshot.json" >"$work/Corefile"
"$bin" -conf "$work/Corefile" >"$work/log" 2>&1 &
pid=$!
deadline=$((SECONDS + 120))
until curl -sf "http://127.0.0.1:$rport/ready" >/dev/null; do
  kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ] || { echo "bench-mdnsfallback-inspect: not ready:"; cat "$work/log"; exit 1; } >&2
  sleep 0.2
done
sleep 3 # the load's garbage collected
echo "meshdns: $("$bin" -version | head -1); $n records; cpu: $(nproc) cores"
for run in $(seq "$runs"); do
  before=$(rss_kb "$pid")
  echo 5 >"/proc/$pid/clear_refs" # VmHWM := VmRSS
  t0=$(date +%s%N)
  bytes=$(curl -sf "http://127.0.0.1:$iport/mdnsfallback" | wc -c)
  t1=$(date +%s%N)
  echo "run=$run bytes=$bytes seconds=$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", d / 1e9 }')" \
    "rss_before_mb=$((before / 1024)) peak_rss_during_mb=$(($(hwm_kb "$pid") / 1024)) rss_after_mb=$(($(rss_kb "$pid") / 1024))"
  sleep 2
done
