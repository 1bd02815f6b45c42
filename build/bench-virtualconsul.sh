#!/usr/bin/env bash
# bench-virtualconsul.sh — virtualconsul against the stock hosts plugin, both
# in the same meshdns binary, on the same generated table, in the same run.
#
#  1. QPS and latency at 1,000 and 100,000 names: the server pinned to core 0
#     (taskset -c 0), dnsperf on core 1 (build/bench-tools/dnsload), runs
#     alternating virtualconsul / hosts; prints the ratio virtualconsul/hosts.
#  2. RSS with 1,000,000 names loaded, virtualconsul vs hosts.
#  3. Reload of a 100,000-name table while dnsperf runs: failed queries and
#     the time from the file change (rename) to the new answers.
#
# Env: VC_BENCH_SECS (seconds per dnsperf run, default 6), VC_BENCH_ROUNDS
# (alternating rounds per size, default 3), VC_BENCH_INTERVAL (the file
# source's check interval, default 1s), VC_BENCH_PARTS (any of "qps rss
# reload drill", default all four), MESHDNS_BIN (default bin/meshdns).
#  4. (drill) the outage drill with a real Consul server:
#     build/drill-virtualconsul.sh (its own env: DRILL_*).
# Generated tables live in a temporary directory removed on exit.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bench="$repo/build/bench-tools"
bin=${MESHDNS_BIN:-$repo/bin/meshdns}
secs=${VC_BENCH_SECS:-6}
rounds=${VC_BENCH_ROUNDS:-3}
interval=${VC_BENCH_INTERVAL:-1s}
parts=" ${VC_BENCH_PARTS:-qps rss reload drill} "
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for tool in dnsperf dig taskset; do
  command -v "$tool" >/dev/null || { echo "bench-virtualconsul: $tool missing: run build/install-deps.sh" >&2; exit 1; }
done
[ -x "$bench/dnsload" ] && [ -x "$bench/gen-table" ] || { echo "bench-virtualconsul: $bench/{dnsload,gen-table} missing" >&2; exit 1; }

work=$(mktemp -d /tmp/bench-virtualconsul.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  local p
  for p in $(shuf -i 20000-60000 -n 100); do
    if ! ss -Hlntu | awk '{print $5}' | grep -q ":$p\$"; then echo "$p"; return; fi
  done
  echo "bench-virtualconsul: no free port" >&2; exit 1
}

# start KIND DIR: serve DIR's table through KIND (virtualconsul | hosts) on a
# free port, pinned to core 0. Sets $port and $pid.
start() {
  local kind=$1 dir=$2 conf
  port=$(free_port)
  conf="$work/Corefile.$kind.$port"
  if [ "$kind" = virtualconsul ]; then
    printf 'consul.:%s {\n    bind 127.0.0.1\n    virtualconsul {\n        source file %s %s\n    }\n}\n' "$port" "$dir/table.json" "$interval" >"$conf"
  else
    printf 'consul.:%s {\n    bind 127.0.0.1\n    hosts %s consul.\n}\n' "$port" "$dir/hosts" >"$conf"
  fi
  taskset -c 0 "$bin" -conf "$conf" >"$conf.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_answer "$port" svc-0.virtual.default.ns.default.ap.dc1.dc.consul 240.0.0.1 120 ||
    { echo "bench-virtualconsul: $kind did not answer:"; cat "$conf.log"; exit 1; } >&2
}

stop() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# wait_answer PORT NAME WANT SECONDS: poll until NAME answers WANT.
wait_answer() {
  local deadline=$((SECONDS + $4))
  while [ $SECONDS -lt "$deadline" ]; do
    [ "$(dig @127.0.0.1 -p "$1" +short +time=1 +tries=1 "$2" A 2>/dev/null)" = "$3" ] && return 0
    sleep 0.05
  done
  return 1
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

echo "meshdns: $("$bin" -version | head -1); ${secs}s runs, $rounds rounds, cpu: $(nproc) cores"
summary=()

# 1. throughput at 1k and 100k names
[[ $parts == *" qps "* ]] && for n in 1000 100000; do
  dir="$work/t$n"
  "$bench/gen-table" "$n" "$dir" 100000 >/dev/null
  declare -A q=() l=()
  for r in $(seq 1 "$rounds"); do
    for kind in virtualconsul hosts; do
      start "$kind" "$dir"
      line=$("$bench/dnsload" 127.0.0.1 "$port" "$dir/queries.txt" "$secs" 2>/dev/null | tail -1)
      stop
      echo "  n=$n round=$r $kind: $line"
      q[$kind]="${q[$kind]:-} $(sed -E 's/.*qps=([0-9]+).*/\1/' <<<"$line")"
      l[$kind]="${l[$kind]:-} $(sed -E 's/.*avg_ms=([0-9.]+).*/\1/' <<<"$line")"
    done
  done
  # ratio of the means, and the median of the per-round ratios (a round is a
  # virtualconsul run and the hosts run right after it: robust to bursts of
  # other load on a shared machine).
  res=$(awk -v n="$n" -v vq="${q[virtualconsul]}" -v hq="${q[hosts]}" -v vl="${l[virtualconsul]}" -v hl="${l[hosts]}" '
    function mean(s,  a, k, i, t) { k = split(s, a, " "); for (i = 1; i <= k; i++) t += a[i]; return t / k }
    BEGIN {
      k = split(vq, v, " "); split(hq, h, " ")
      for (i = 1; i <= k; i++) r[i] = v[i] / h[i]
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (r[j] < r[i]) { x = r[i]; r[i] = r[j]; r[j] = x }
      med = (k % 2) ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2
      printf "names=%d virtualconsul_qps=%.0f hosts_qps=%.0f ratio=%.2f median_round_ratio=%.2f virtualconsul_avg_ms=%.3f hosts_avg_ms=%.3f",
        n, mean(vq), mean(hq), mean(vq) / mean(hq), med, mean(vl), mean(hl) }')
  echo "$res"
  summary+=("$res")
  unset q l
  rm -rf "$dir"
done

# 2. RSS at 1,000,000 names
dir="$work/t1m"
[[ $parts == *" rss "* ]] && "$bench/gen-table" 1000000 "$dir" 1000 >/dev/null &&
for kind in virtualconsul hosts; do
  t0=$(date +%s%N)
  start "$kind" "$dir"
  t1=$(date +%s%N)
  sleep 3
  res="names=1000000 $kind rss_mb=$(($(rss_kb "$pid") / 1024)) peak_rss_mb=$(($(hwm_kb "$pid") / 1024)) load_s=$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.1f", d / 1e9 }')"
  echo "$res"
  summary+=("$res")
  stop
done
rm -rf "$dir"

# 3. reload of a 100,000-name table under load
if [[ $parts == *" reload "* ]]; then
dir="$work/reload"
"$bench/gen-table" 100000 "$dir" 100000 >/dev/null
sed 's/"240\./"241./' "$dir/table.json" >"$dir/table2.json"
start virtualconsul "$dir"
( sleep 2
  t0=$(date +%s%N)
  mv "$dir/table2.json" "$dir/table.json"
  wait_answer "$port" svc-0.virtual.default.ns.default.ap.dc1.dc.consul 241.0.0.1 30
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000)) >"$dir/reload_ms" ) &
watcher=$!
line=$("$bench/dnsload" 127.0.0.1 "$port" "$dir/queries.txt" "$((secs + 2))" 2>"$dir/dnsperf.out" | tail -1)
wait "$watcher"
stop
codes=$(grep -A3 'Response codes:' "$dir/dnsperf.out" | head -1 | sed 's/^ *//')
res="reload names=100000 interval=$interval $line change_to_answer_ms=$(cat "$dir/reload_ms") ($codes)"
echo "$res"
summary+=("$res")
fi

echo "== virtualconsul summary"
printf '%s\n' "${summary[@]}"

# 4. the outage drill (Consul server killed under load, meshdns restarted
# while it is down, the control plane back with a change)
if [[ $parts == *" drill "* ]]; then
  echo "== virtualconsul outage drill"
  MESHDNS_BIN=$bin "$repo/build/drill-virtualconsul.sh"
fi
