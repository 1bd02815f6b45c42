#!/usr/bin/env bash
# drill-virtualconsul.sh — the virtualconsul outage drill, end to end, under
# steady dnsperf load (build/bench-tools/dnsload, rate-capped, bounded time):
#
#  1. A real Consul server (v1.16.3, one node, data directory on disk) holds
#     N services with transparent-proxy sidecars; meshdns (taskset -c 0)
#     follows it with `source consul` and a snapshot. Under load on the N
#     virtual names, the Consul server is killed (SIGKILL): every answer must
#     still be NOERROR (zero lost, zero failed).
#  2. meshdns is restarted while Consul is still down: time until ready and
#     answering from the snapshot, then load again: zero failed.
#  3. A service is defined while Consul is down (a service file in its config
#     directory); Consul comes back under load: the time until the new name
#     answers, and zero failed answers for the names that were in the table.
#
# Then the same three steps with an xDS control plane (build/tools/xds-server,
# a go-control-plane ADS server) instead of Consul: killed under load, meshdns
# restarted while it is down, back with a new version made meanwhile.
#
# Env: DRILL_SERVICES (default 50), DRILL_QPS (dnsperf rate cap, default
# 5000), DRILL_SECS (seconds per load run, default 8), MESHDNS_BIN.
# Exit 1 when any virtual answer failed. Everything lives in a temporary
# directory removed on exit; every process started here is stopped by PID.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bench="$repo/build/bench-tools"
bin=${MESHDNS_BIN:-$repo/bin/meshdns}
nsvc=${DRILL_SERVICES:-50}
qps=${DRILL_QPS:-5000}
secs=${DRILL_SECS:-8}
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for tool in dnsperf dig curl taskset ss; do
  command -v "$tool" >/dev/null || { echo "drill: $tool missing: run build/install-deps.sh" >&2; exit 1; }
done
[ -x "$bench/dnsload" ] || { echo "drill: $bench/dnsload missing" >&2; exit 1; }
consul=$("$repo/build/peer-tools.sh" consul | sed -n 's/^consul=//p')

work=$(mktemp -d /tmp/drill-virtualconsul.XXXXXX)
consul_pid='' mesh_pid=''
cleanup() {
  [ -n "$mesh_pid" ] && kill "$mesh_pid" 2>/dev/null || true
  [ -n "$consul_pid" ] && kill -9 "$consul_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

used=" "
free_port() {
  local p
  for p in $(shuf -i 20000-60000 -n 200); do
    case "$used" in *" $p "*) continue ;; esac
    if ! ss -Hlntu | awk '{print $5}' | grep -q ":$p\$"; then used="$used$p "; echo "$p"; return; fi
  done
  echo "drill: no free port" >&2; exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }

http=$(free_port) cdns=$(free_port) grpc=$(free_port) lan=$(free_port) wan=$(free_port) srv=$(free_port)
dnsport=$(free_port) ready=$(free_port) metrics=$(free_port)
mkdir -p "$work/consul/conf" "$work/consul/data"
cat >"$work/consul/conf/base.hcl" <<EOF
server = true
bootstrap_expect = 1
bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
connect { enabled = true }
ports { http = $http, dns = $cdns, grpc = $grpc, serf_lan = $lan, serf_wan = $wan, server = $srv, grpc_tls = -1, https = -1 }
performance { raft_multiplier = 1 }
log_level = "warn"
EOF

start_consul() {
  "$consul" agent -data-dir "$work/consul/data" -config-dir "$work/consul/conf" >>"$work/consul.log" 2>&1 &
  consul_pid=$!
  local deadline=$((SECONDS + 60)) l
  while [ $SECONDS -lt $deadline ]; do
    l=$(curl -s -m 1 "http://127.0.0.1:$http/v1/status/leader" || true)
    [ -n "$l" ] && [ "$l" != '""' ] && return 0
    sleep 0.1
  done
  echo "drill: consul has no leader:" >&2; tail -20 "$work/consul.log" >&2; exit 1
}
kill_consul() { kill -9 "$consul_pid"; wait "$consul_pid" 2>/dev/null || true; consul_pid=''; }

cat >"$work/Corefile" <<EOF
consul.:$dnsport {
    bind 127.0.0.1
    ready 127.0.0.1:$ready
    prometheus 127.0.0.1:$metrics
    virtualconsul {
        source consul 127.0.0.1:$http
        snapshot $work/snapshot.json
    }
    forward . 127.0.0.1:$cdns
}
EOF
corefile=$work/Corefile
start_mesh() {
  taskset -c 0 "$bin" -conf "$corefile" >>"$work/meshdns.log" 2>&1 &
  mesh_pid=$!
}
stop_mesh() { kill "$mesh_pid"; wait "$mesh_pid" 2>/dev/null || true; mesh_pid=''; }
wait_ready() {
  local deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(curl -s -m 1 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ready/ready" || true)" = 200 ] && return 0
    sleep 0.01
  done
  echo "drill: meshdns not ready:" >&2; tail -20 "$work/meshdns.log" >&2; exit 1
}
wait_answer() { # NAME SECONDS: until NAME has an A record
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt "$deadline" ]; do
    [ -n "$(dig @127.0.0.1 -p "$dnsport" +short +time=1 +tries=1 "$1" A 2>/dev/null)" ] && return 0
    sleep 0.02
  done
  return 1
}

# load NAME: dnsperf on the virtual names for $secs s at $qps; prints and
# records "sent completed lost noerror other".
failed_total=0
load() {
  local out="$work/load.$1"
  DNSLOAD_QPS=$qps DNSLOAD_Q=100 "$bench/dnsload" 127.0.0.1 "$dnsport" "$work/queries" "$secs" >"$out.line" 2>"$out.err" || true
  awk -v phase="$1" '
    /Queries sent:/      { sent = $3 }
    /Queries completed:/ { done = $3 }
    /Queries lost:/      { lost = $3 }
    /Response codes:/    { for (i = 3; i <= NF; i += 3) { c = $(i); n = $(i + 1) + 0; if (c == "NOERROR") ok = n; else other += n } }
    END { printf "%s: sent=%d completed=%d lost=%d noerror=%d failed=%d\n", phase, sent, done, lost, ok, lost + other }' "$out.err" | tee "$out.sum"
  local f
  f=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' "$out.sum")
  failed_total=$((failed_total + ${f:-1}))
}

start_consul
for i in $(seq 1 "$nsvc"); do
  curl -sf -m 5 -X PUT "http://127.0.0.1:$http/v1/agent/service/register" \
    -d "{\"Name\": \"svc$i\", \"Port\": $((9000 + i)), \"Connect\": {\"SidecarService\": {\"Proxy\": {\"Mode\": \"transparent\"}}}}" >/dev/null
  echo "svc$i.virtual.consul A" >>"$work/queries"
done
start_mesh
wait_ready
wait_answer "svc$nsvc.virtual.consul" 20 || { echo "drill: svc$nsvc never answered" >&2; exit 1; }
vip1=$(dig @127.0.0.1 -p "$dnsport" +short svc1.virtual.consul)
echo "drill: $nsvc services with sidecars in Consul v1.16.3; load ${qps} qps for ${secs}s per phase, meshdns on core 0, dnsperf on core 1"

# 1. The control plane dies under load.
( sleep $((secs / 3)); kill -9 "$consul_pid" ) &
killer=$!
load "consul-killed-under-load"
wait "$killer" || true
wait "$consul_pid" 2>/dev/null || true
consul_pid=''
[ "$(dig @127.0.0.1 -p "$dnsport" +short svc1.virtual.consul)" = "$vip1" ] || { echo "drill: svc1 lost its VIP" >&2; failed_total=$((failed_total + 1)); }

# 2. meshdns restarts while the control plane is down.
stop_mesh
t0=$(now)
start_mesh
wait_ready
ready_ms=$(since "$t0")
got=$(dig @127.0.0.1 -p "$dnsport" +short svc1.virtual.consul)
answer_ms=$(since "$t0")
echo "restart-while-down: ready after ${ready_ms}ms, svc1 answered $got (want $vip1) after ${answer_ms}ms, from the snapshot"
[ "$got" = "$vip1" ] || failed_total=$((failed_total + 1))
load "restarted-while-down"

# 3. A change made meanwhile; the control plane comes back under load.
cat >"$work/consul/conf/late.hcl" <<'EOF'
service {
  name = "late"
  port = 9999
  connect { sidecar_service { proxy { mode = "transparent" } } }
}
EOF
( t1=$(now); start_consul; echo "$consul_pid" >"$work/consul.pid"; echo "$(since "$t1")" >"$work/leader_ms"
  t2=$(now); if wait_answer late.virtual.consul 30; then echo "$(since "$t2")" >"$work/late_ms"; else echo never >"$work/late_ms"; fi ) &
back=$!
load "control-plane-back"
wait "$back" || true
consul_pid=$(cat "$work/consul.pid" 2>/dev/null || true)
echo "control-plane-back: leader after $(cat "$work/leader_ms")ms, late.virtual.consul ($(dig @127.0.0.1 -p "$dnsport" +short late.virtual.consul)) answered $(cat "$work/late_ms")ms after the leader"
[ "$(cat "$work/late_ms")" != never ] || failed_total=$((failed_total + 1))
grep -c "Source consul failing" "$work/meshdns.log" | sed 's/^/log lines "Source consul failing" (one per meshdns process): /'
grep -c "Source consul recovered" "$work/meshdns.log" | sed 's/^/log lines "Source consul recovered": /'
stop_mesh
kill -9 "$consul_pid" 2>/dev/null || true
consul_pid=''

# The same drill with an xDS control plane.
echo "drill: xDS control plane (go-control-plane ADS server), $nsvc names"
(cd "$repo" && go build -o "$work/xds-server" ./build/tools/xds-server)
xds=$(free_port)
xds_pid=''
trap '[ -n "$xds_pid" ] && kill -9 "$xds_pid" 2>/dev/null; cleanup' EXIT
mkdir -p "$work/xds"
xds_table() { # N [EXTRA]: the table of svc1..N (and EXTRA)
  { echo "["
    for i in $(seq 1 "$1"); do
      printf '{"name": "svc%d.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.2.%d"]}}},\n' "$i" "$i"
    done
    if [ -n "${2:-}" ]; then
      printf '{"name": "%s.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.3.1"]}}},\n' "$2"
    fi
    echo '{"name": "end.virtual.default.ns.default.ap.dc1.dc.consul", "endpoint": {"address_list": {"address": ["240.0.3.254"]}}}'
    echo "]"; } >"$work/xds/table.json"
}
start_xds() {
  "$work/xds-server" -addr "127.0.0.1:$xds" -node sidecar-1 -table "$work/xds/table.json" >>"$work/xds.log" 2>&1 &
  xds_pid=$!
}
xds_table "$nsvc"
start_xds
cat >"$work/Corefile.xds" <<EOF
consul.:$dnsport {
    bind 127.0.0.1
    ready 127.0.0.1:$ready
    prometheus 127.0.0.1:$metrics
    virtualconsul {
        source xds 127.0.0.1:$xds {
            node sidecar-1
        }
        snapshot $work/snapshot.xds.json
    }
    forward . 127.0.0.1:$cdns
}
EOF
corefile=$work/Corefile.xds
: >"$work/meshdns.log"
start_mesh
wait_ready
wait_answer "svc$nsvc.virtual.consul" 20 || { echo "drill: xds: svc$nsvc never answered" >&2; exit 1; }
vip1=$(dig @127.0.0.1 -p "$dnsport" +short svc1.virtual.consul)
( sleep $((secs / 3)); kill -9 "$xds_pid" ) &
killer=$!
load "xds-killed-under-load"
wait "$killer" || true
wait "$xds_pid" 2>/dev/null || true
xds_pid=''
stop_mesh
t0=$(now)
start_mesh
wait_ready
ready_ms=$(since "$t0")
got=$(dig @127.0.0.1 -p "$dnsport" +short svc1.virtual.consul)
answer_ms=$(since "$t0")
echo "xds-restart-while-down: ready after ${ready_ms}ms, svc1 answered $got (want $vip1) after ${answer_ms}ms, from the snapshot"
[ "$got" = "$vip1" ] || failed_total=$((failed_total + 1))
load "xds-restarted-while-down"
xds_table "$nsvc" late # the change made while the control plane is down
( sleep 1; t2=$(now); start_xds; echo "$xds_pid" >"$work/xds.pid"
  if wait_answer late.virtual.consul 30; then echo "$(since "$t2")" >"$work/late_ms"; else echo never >"$work/late_ms"; fi ) &
back=$!
load "xds-control-plane-back"
wait "$back" || true
xds_pid=$(cat "$work/xds.pid" 2>/dev/null || true)
echo "xds-control-plane-back: late.virtual.consul ($(dig @127.0.0.1 -p "$dnsport" +short late.virtual.consul)) answered $(cat "$work/late_ms")ms after the server started"
[ "$(cat "$work/late_ms")" != never ] || failed_total=$((failed_total + 1))
grep -c "Source xds failing" "$work/meshdns.log" | sed 's/^/log lines "Source xds failing" (one per meshdns process): /'
grep -c "Source xds recovered" "$work/meshdns.log" | sed 's/^/log lines "Source xds recovered": /'
echo "drill: failed virtual answers in total: $failed_total"
[ "$failed_total" -eq 0 ]
