#!/usr/bin/env bash
# bench-mdnsfallback.sh — the mdnsfallback figures for docs/performance.md:
#   1. BenchmarkServeDNS (local hit, cache hit) with -benchmem;
#   2. dnsperf QPS for local hits against the stock hosts plugin with the same
#      names in the same run: one meshdns process (pinned to core 0) serves the
#      gen-table names from mdnsfallback (records loaded from a snapshot) on one
#      port and from hosts on another; runs alternate hosts / mdnsfallback;
#   3. the mDNS round trip through Avahi (median, p99) over a bounded number of
#      distinct names, in two network namespaces (TestMdnsfallbackLatency).
# Env: MDNSFALLBACK_BENCH_N (names, default 10000), MDNSFALLBACK_BENCH_SECS
# (seconds per dnsperf run, default 5), MDNSFALLBACK_BENCH_RUNS (runs per
# plugin, default 4), MDNSFALLBACK_LATENCY_N (mDNS queries, default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
bench="$repo/build/bench-tools"
N=${MDNSFALLBACK_BENCH_N:-10000}
SECS=${MDNSFALLBACK_BENCH_SECS:-5}
RUNS=${MDNSFALLBACK_BENCH_RUNS:-4}
LAT_N=${MDNSFALLBACK_LATENCY_N:-200}
[ -x bin/meshdns ] || build/build.sh bin/meshdns

tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

echo "-- BenchmarkServeDNS"
go test -run '^$' -bench BenchmarkServeDNS -benchmem -count 1 ./plugin/mdnsfallback/ | grep '^Benchmark'

# free_port: a loopback port nobody listens on (TCP or UDP).
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    ss -Hlntu "sport = :$p" | grep -q . || { echo "$p"; return; }
  done
  echo "bench-mdnsfallback: no free port" >&2; exit 1
}

"$bench/gen-table" "$N" "$tmp" 100000 0 >/dev/null
awk 'BEGIN { print "{\"version\":1,\"records\":[" }
     { printf "%s{\"id\":\"bench\",\"ip\":\"%s\",\"domain\":\"%s.\"}", (NR > 1 ? ",\n" : ""), $1, $2 }
     END { print "\n]}" }' "$tmp/hosts" > "$tmp/records.json"
p_mdns=$(free_port); p_hosts=$(free_port); p_api=$(free_port)
cat > "$tmp/Corefile" <<CF
consul.:$p_mdns {
    bind 127.0.0.1
    mdnsfallback consul. {
        api 127.0.0.1:$p_api
        snapshot records.json
    }
}
consul.:$p_hosts {
    bind 127.0.0.1
    hosts hosts consul.
}
CF
(cd "$tmp" && exec taskset -c 0 "$repo/bin/meshdns" -conf Corefile >"$tmp/log" 2>&1) &
pid=$!
name=$(head -1 "$tmp/queries.txt" | cut -d' ' -f1)
for _ in $(seq 100); do
  a=$(dig @127.0.0.1 -p "$p_mdns" +short +time=1 +tries=1 "$name" 2>/dev/null || true)
  b=$(dig @127.0.0.1 -p "$p_hosts" +short +time=1 +tries=1 "$name" 2>/dev/null || true)
  [ -n "$a" ] && [ "$a" = "$b" ] && break
  sleep 0.1
done
[ -n "$a" ] && [ "$a" = "$b" ] || { cat "$tmp/log"; echo "bench-mdnsfallback: server not answering" >&2; exit 1; }

echo "-- dnsperf, $N names, ${SECS}s per run, $RUNS runs each (server on core 0, dnsperf on core 1)"
sum_h=0 sum_m=0
for r in $(seq "$RUNS"); do
  h=$("$bench/dnsload" 127.0.0.1 "$p_hosts" "$tmp/queries.txt" "$SECS" 2>/dev/null | tail -1)
  m=$("$bench/dnsload" 127.0.0.1 "$p_mdns" "$tmp/queries.txt" "$SECS" 2>/dev/null | tail -1)
  echo "run $r  hosts:        $h"
  echo "run $r  mdnsfallback: $m"
  sum_h=$((sum_h + $(echo "$h" | sed 's/.*qps=\([0-9]*\).*/\1/')))
  sum_m=$((sum_m + $(echo "$m" | sed 's/.*qps=\([0-9]*\).*/\1/')))
done
rss=$(awk '/VmRSS/ { print $2 }' "/proc/$pid/status")
awk -v m="$sum_m" -v h="$sum_h" -v r="$RUNS" -v rss="$rss" 'BEGIN {
  printf "mdnsfallback/hosts QPS ratio: %.3f (mean qps mdnsfallback %d, hosts %d); server RSS %d KiB\n", m / h, m / r, h / r, rss }'

echo "-- mDNS round trip through Avahi ($LAT_N distinct names)"
MESHDNS_BIN="$repo/bin/meshdns" MDNSFALLBACK_LATENCY_N="$LAT_N" MDNSFALLBACK_LATENCY_OUT="$tmp/latency" \
  go test -count=1 -run '^TestMdnsfallbackLatency$' ./test/ >"$tmp/latency.log" 2>&1 || { cat "$tmp/latency.log"; exit 1; }
cat "$tmp/latency"

# 4. The amplification bound: dnsperf asks AMP_QPS (10,000) random names a
#    second in the zone (each name once) for AMP_SECS, in a network namespace
#    pair this script creates (meshdns with mDNS on one end of a veth); the
#    multicast packets that reach the other end, counted by its interface,
#    are what a flood of unknown names costs the LAN.
AMP_QPS=${MDNSFALLBACK_AMP_QPS:-10000}
AMP_SECS=${MDNSFALLBACK_AMP_SECS:-10}
echo "-- amplification: $AMP_QPS random names/s for ${AMP_SECS}s over mDNS (default query_rate)"
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=
ns=mdamp$$
cleanup_ns() { ip netns del "${ns}a" 2>/dev/null || true; ip netns del "${ns}b" 2>/dev/null || true; }
trap 'cleanup; cleanup_ns' EXIT
ip netns add "${ns}a"; ip netns add "${ns}b"
ip link add "${ns}0" netns "${ns}a" type veth peer name "${ns}1" netns "${ns}b"
for side in a:0:1 b:1:2; do
  IFS=: read -r s i o <<<"$side"
  ip -n "${ns}$s" link set lo up
  ip -n "${ns}$s" addr add "10.251.0.$o/24" dev "${ns}$i"
  ip -n "${ns}$s" link set "${ns}$i" multicast on up
  ip -n "${ns}$s" route add 224.0.0.0/4 dev "${ns}$i"
done
cat > "$tmp/Corefile.amp" <<CF
weave.local.:1053 {
    bind 127.0.0.1
    prometheus 127.0.0.1:9153
    mdnsfallback {
        interface ${ns}0
    }
}
CF
(cd "$tmp" && exec ip netns exec "${ns}a" taskset -c 0 "$repo/bin/meshdns" -conf Corefile.amp >"$tmp/amp.log" 2>&1) &
pid=$!
for _ in $(seq 100); do
  ip netns exec "${ns}a" dig @127.0.0.1 -p 1053 +time=1 +tries=1 probe.weave.local >/dev/null 2>&1 && break
  sleep 0.1
done
awk -v n=$((AMP_QPS * AMP_SECS + AMP_QPS)) 'BEGIN { srand(1); for (i = 0; i < n; i++) printf "r%d-%d.weave.local A\n", i, int(rand() * 1e9) }' > "$tmp/random.txt"
rx() { ip -n "${ns}b" -s link show "${ns}1" | awk '/RX:/ { getline; print $2 }'; }
before=$(rx)
line=$(DNSLOAD_QPS=$AMP_QPS ip netns exec "${ns}a" "$bench/dnsload" 127.0.0.1 1053 "$tmp/random.txt" "$AMP_SECS" 2>"$tmp/amp.dnsperf" | tail -1)
after=$(rx)
metrics=$(ip netns exec "${ns}a" curl -s http://127.0.0.1:9153/metrics)
sent=$(awk '/^coredns_mdnsfallback_mdns_queries_sent_total / { print $2 }' <<<"$metrics")
limited=$(awk '/^coredns_mdnsfallback_mdns_queries_limited_total/ { s += $2 } END { print s + 0 }' <<<"$metrics")
echo "dnsperf: $line"
grep -E 'Response codes' "$tmp/amp.dnsperf" || true
awk -v b="$before" -v a="$after" -v s="$AMP_SECS" -v q="$sent" -v l="$limited" 'BEGIN {
  printf "multicast packets received by the peer: %d in %ds = %.1f/s (meshdns counted %d queries sent, %d held back)\n", a - b, s, (a - b) / s, q, l }'
