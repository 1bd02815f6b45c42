#!/usr/bin/env bash
# bench-mdnsfallback-ab.sh OLD_BIN NEW_BIN - two meshdns binaries, A/B, at
# server level (the figures behind "simple first" in docs/measurements/mdnsfallback.md):
#   1. local hits: both binaries serve the same N gen-table names from an
#      mdnsfallback snapshot on loopback, each pinned to core 0; dnsperf on
#      core 1 alternates OLD, NEW, OLD, NEW ... (RUNS each);
#   2. cache hits: one network namespace pair per binary, created here:
#      NEW on one end holds the N names (TTL 1 h) and announces them at
#      start; the binary on the other end (alone on port 5353 there)
#      learns them into its mDNS cache; after a warm-up pass (names whose
#      announcement was dropped are asked over mDNS), dnsperf alternates
#      between the two as above, every query a cache hit.
# Env: AB_N (names, default 10000), AB_SECS (seconds a run, default 5),
# AB_RUNS (runs per binary and phase, default 3).
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD=$(readlink -f "$1") NEW=$(readlink -f "$2")
cd "$(dirname "$0")/.."
bench="$PWD/build/bench-tools"
N=${AB_N:-10000} SECS=${AB_SECS:-5} RUNS=${AB_RUNS:-3}
tmp=$(mktemp -d) ns=mdab$$ pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  for t in o n; do ip netns del "${ns}${t}a" 2>/dev/null || true; ip netns del "${ns}${t}b" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
"$bench/gen-table" "$N" "$tmp" 100000 0 >/dev/null
awk 'BEGIN { print "{\"version\":1,\"records\":[" }
     { printf "%s{\"id\":\"bench\",\"ip\":\"%s\",\"domain\":\"%s.\"}", (NR > 1 ? ",\n" : ""), $1, $2 }
     END { print "\n]}" }' "$tmp/hosts" > "$tmp/records.json"
name=$(head -1 "$tmp/queries.txt" | cut -d' ' -f1)

# serve BIN DIR NETNS PORT STANZA: start BIN on 127.0.0.1:PORT pinned to core 0.
serve() {
  local bin=$1 dir=$2 netns=$3 port=$4 stanza=$5
  mkdir -p "$dir"; cp "$tmp/records.json" "$dir/" 2>/dev/null || true
  printf 'consul.:%s {\n    bind 127.0.0.1\n    mdnsfallback consul. {\n%b    }\n}\n' "$port" "$stanza" > "$dir/Corefile"
  if [ -n "$netns" ]; then
    (cd "$dir" && exec ip netns exec "$netns" taskset -c 0 "$bin" -conf Corefile >"$dir/log" 2>&1) &
  else
    (cd "$dir" && exec taskset -c 0 "$bin" -conf Corefile >"$dir/log" 2>&1) &
  fi
  pids+=($!)
}
# wait_answer NETNS PORT: until the first name answers.
wait_answer() {
  local pre=() i
  [ -n "$1" ] && pre=(ip netns exec "$1")
  for i in $(seq 200); do
    "${pre[@]}" dig @127.0.0.1 -p "$2" +short +time=1 +tries=1 "$name" 2>/dev/null | grep -q '^[0-9]' && return 0
    sleep 0.1
  done
  echo "bench-mdnsfallback-ab: nothing answers on port $2" >&2; exit 1
}
# ab NETNS PORT_OLD PORT_NEW LABEL: alternate dnsperf runs, print the means.
ab() {
  local pre=() so=0 sn=0 r o n
  [ -n "$1" ] && pre=(ip netns exec "$1")
  for r in $(seq "$RUNS"); do
    o=$("${pre[@]}" "$bench/dnsload" 127.0.0.1 "$2" "$tmp/queries.txt" "$SECS" 2>/dev/null | tail -1)
    n=$("${pre[@]}" "$bench/dnsload" 127.0.0.1 "$3" "$tmp/queries.txt" "$SECS" 2>/dev/null | tail -1)
    echo "$4 run $r  old: $o"; echo "$4 run $r  new: $n"
    so=$((so + $(sed 's/.*qps=\([0-9]*\).*/\1/' <<<"$o"))); sn=$((sn + $(sed 's/.*qps=\([0-9]*\).*/\1/' <<<"$n")))
  done
  awk -v o="$so" -v n="$sn" -v r="$RUNS" -v l="$4" 'BEGIN { printf "%s: mean qps old %d, new %d, new/old %.3f\n", l, o / r, n / r, n / o }'
}

echo "-- 1. local hits, $N names, ${SECS}s x $RUNS runs each"
serve "$OLD" "$tmp/lold" "" 20531 "        api off\n        snapshot records.json\n"
serve "$NEW" "$tmp/lnew" "" 20532 "        api off\n        snapshot records.json\n"
wait_answer "" 20531; wait_answer "" 20532
ab "" 20531 20532 "local"
kill "${pids[0]}" "${pids[1]}"; wait "${pids[0]}" "${pids[1]}" 2>/dev/null || true; pids=()

echo "-- 2. cache hits over mDNS, $N names"
# pair TAG BIN PORT: namespaces TAGa (the announcer, NEW) and TAGb (BIN
# alone on port 5353 there, so unicast replies reach it) joined by a veth.
pair() {
  local t=$1 s i o
  ip netns add "${t}a"; ip netns add "${t}b"
  ip link add "${t}0" netns "${t}a" type veth peer name "${t}1" netns "${t}b"
  for side in a:0:1 b:1:2; do
    IFS=: read -r s i o <<<"$side"
    ip -n "${t}$s" link set lo up
    ip -n "${t}$s" addr add "10.252.0.$o/24" dev "${t}$i"
    ip -n "${t}$s" link set "${t}$i" multicast on up
    ip -n "${t}$s" route add 224.0.0.0/4 dev "${t}$i"
  done
  serve "$2" "$tmp/${t}b" "${t}b" "$3" "        api off\n        interface ${t}1\n        query_rate 10000\n        timeout 1s\n        cache $((2 * N))\n"
  serve "$NEW" "$tmp/${t}a" "${t}a" "$3" "        api off\n        interface ${t}0\n        snapshot records.json\n        ttl 1h\n"
  wait_answer "${t}a" "$3"; wait_answer "${t}b" "$3"
  sleep 2 # the second announcement
  # warm-up: every name asked at least once (announcements dropped by a full socket buffer)
  DNSLOAD_QPS=5000 ip netns exec "${t}b" "$bench/dnsload" 127.0.0.1 "$3" "$tmp/queries.txt" 4 >/dev/null 2>&1 || true
}
pair "${ns}o" "$OLD" 20533
pair "${ns}n" "$NEW" 20534
# ab runs in one namespace; each binary has its own: alternate by hand.
so=0 sn=0
for r in $(seq "$RUNS"); do
  o=$(ip netns exec "${ns}ob" "$bench/dnsload" 127.0.0.1 20533 "$tmp/queries.txt" "$SECS" 2>/dev/null | tail -1)
  n=$(ip netns exec "${ns}nb" "$bench/dnsload" 127.0.0.1 20534 "$tmp/queries.txt" "$SECS" 2>/dev/null | tail -1)
  echo "cache run $r  old: $o"; echo "cache run $r  new: $n"
  so=$((so + $(sed 's/.*qps=\([0-9]*\).*/\1/' <<<"$o"))); sn=$((sn + $(sed 's/.*qps=\([0-9]*\).*/\1/' <<<"$n")))
done
awk -v o="$so" -v n="$sn" -v r="$RUNS" 'BEGIN { printf "cache: mean qps old %d, new %d, new/old %.3f\n", o / r, n / r, n / o }'
