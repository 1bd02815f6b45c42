#!/usr/bin/env bash
# bench-endpointsk8s.sh — endpointsvc's Kubernetes source vs the stock
# kubernetes plugin, same binary, same real kube-apiserver + etcd on
# loopback, same objects. meshdns pinned with taskset -c 0, dnsperf on
# core 1 (build/bench-tools/dnsload); each plugin alone in its own meshdns.
#
# BENCH_MIX=spec (default): the cluster DNS stanza of deploy/kubernetes
# (endpointsvc ... { source kubernetes; schema kubernetes; pods insecure;
# fallthrough in-addr.arpa ip6.arpa; ttl 30 }) against the stock kubernetes
# plugin with the same options, on 5,000 Services in 50 namespaces (85%
# ClusterIP with named ports, 10% headless with endpoint hostnames, 5%
# ExternalName), 50,000 ready endpoints, 500 Nodes. Prints, per plugin and
# round (the plugins alternate): time to sync (start until /ready 200),
# anonymous RSS (RssAnon) after sync and after the load, its peak during the
# sync (sampled every 20 ms until /ready + 2 s) and during a relist forced
# by restarting the kube-apiserver (until the plugin listed everything
# again, seen in the API server's audit log, and at least 10 s after
# /readyz), dnsperf QPS on 60% A / 20% SRV / 20% PTR; then a table with the
# ratios endpointsvc/kubernetes (goals: memory <= 0.5, QPS >= 1.5).
#
# BENCH_MIX=churn: both plugins at once (each its own meshdns on core 0)
# on the spec mix while it churns for 60 s: 100 EndpointSlice updates/s (an
# endpoint turns ready/unready, is added or removed) and a status write on
# every Node once a minute, with dnsperf at a fixed 5,000 qps on each. Prints
# each process's CPU seconds (/proc/PID/stat), the update-to-answer latency
# of added endpoints (their PTR asked every 5 ms; p50, p99), lost queries
# and response codes, anonymous RSS at the end, endpointsvc's patches and
# snapshot bytes written, and whether both answer alike afterwards.
#
# BENCH_MIX=changes (issue 32's measurement; run with BENCH_SERVICES=1500
# BENCH_NODES=100): the headless objects, the stock plugin and endpointsvc
# with schema kubernetes and with addresses endpoint, each with and without
# a snapshot, all at once (each its own meshdns on core 0); per round 400
# endpoint readiness flips, then 600 annotation patches and 100 Node
# heartbeats that change no answer, at 40 writes/s, after one round of the
# same writes that is not counted ("-warmup N": while a process's heap
# settles after its start, the runtime returns memory that the next
# rounds fault back in, at a different moment in each process). Prints each process's
# CPU ticks per phase (from its CPU clock, to 1/10 tick) and the ratio to
# the stock plugin's - which runs twice, first and last, the ratios taken
# to the mean of the two (their own ratios show a run's noise) - the
# snapshots' whole writes, log appends and bytes, and whether the answers
# agree.
# BENCH_ARGS="-meshdns-before OLD" runs OLD's endpointsvc variants too,
# each beside the new one ("-before-first" puts OLD's first: a variant's
# place moves its figure, so compare over a run each way);
# "-profile DIR" saves a CPU profile of each process per phase (round 1);
# "-idle-secs N" adds a phase of N s without writes before each round's
# changes (what each process costs when nothing happens).
#
# BENCH_MIX=replica: the replication stream on the spec mix (no stock
# plugin): a leader (the cluster DNS stanza with replicate) on core 0, the
# bytes of the whole state, a node-local follower's memory (RssAnon, live
# heap) and snapshot, then 40 Service edits and 40 endpoint flips of a
# 10-endpoint Service, one at a time, with 1 stream and again with 201
# (200 read by the bench itself, opened at once: the whole state to all):
# the leader's CPU (/proc/PID/stat) and bytes per change, per stream,
# extrapolated to 1,000 followers, and API write to the last stream's
# synced line (p50, p99). -streams and -changes (BENCH_ARGS) change the
# counts.
#
# BENCH_MIX=axfr (issue 32's AXFR figure): the spec mix and stanzas, each
# plugin with `transfer cluster.local { to * }` beside it, both processes at
# once (core 0); per round each plugin in turn (alternating) serves -axfrs
# (5) AXFRs of cluster.local over TCP, one at a time. Prints the records
# transferred and whether both transfer the same (a multiset, SOA serials
# left out; the differences if any), time per AXFR (median, max), anonymous
# RSS before and its peak during the transfers (sampled every 20 ms), CPU
# ticks per AXFR, and the ratios endpointsvc/kubernetes. BENCH_ARGS=
# "-profile DIR" saves a CPU profile and allocation profiles of each plugin's
# transfers.
#
# BENCH_PODS=N (spec): N Pods too (50000 for issue 24's figures), shaped
# like a Deployment's, every twentieth hostNetwork; both plugins then run
# with pods verified, and watch every Pod.
#
# BENCH_MIX=glibc: the queries the server receives per lookup of an outside
# name from a glibc client (getent ahosts in a mount namespace whose
# /etc/resolv.conf is a Pod's: ndots:5, the kubelet's three search names;
# the client's address is a Pod's), against meshdns on 127.88.0.1:53 with
# endpointsvc and with the stock plugin, each with and without autopath.
# Needs unshare, mount and getent; a small cluster (50 Services).
#
# BENCH_MIX=headless: endpointsvc's orch schema (addresses endpoint) on
# 5,000 headless Services with one EndpointSlice of 10 ready endpoints each:
# time to sync, RSS after sync and live Go heap, A QPS (goals: RSS <= 0.5x,
# QPS >= 1.0x).
#
# Env: BENCH_MIX (spec), BENCH_SECS (per dnsperf run, default 10 for spec,
#      6 for headless), BENCH_ROUNDS (default 2), BENCH_SERVICES /
#      BENCH_ENDPOINTS (per Service, on average for spec) / BENCH_NODES
#      (defaults 5000/10/500), BENCH_NAMESPACES (spec, default 50),
#      BENCH_MESHDNS (the binary, default bin/meshdns, built if missing),
#      BENCH_ARGS (more flags of build/benchk8s, e.g. "-profile DIR").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared="$repo/build/bench-tools"
bin="${BENCH_MESHDNS:-$repo/bin/meshdns}"
[ -x "$bin" ] || "$repo/build/build.sh" "$bin"
for t in dnsperf taskset dig openssl; do command -v $t >/dev/null || { echo "bench-endpointsk8s: $t missing (build/install-deps.sh)" >&2; exit 1; }; done
tools=$("$repo/build/peer-tools.sh" kube-apiserver etcd)
apiserver=$(sed -n 's/^kube-apiserver=//p' <<<"$tools")
etcd=$(sed -n 's/^etcd=//p' <<<"$tools")
mix=${BENCH_MIX:-spec}
secs=${BENCH_SECS:-$([ "$mix" = spec ] && echo 10 || echo 6)}
cd "$repo"
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
go run ./build/benchk8s -mix "$mix" -meshdns "$bin" -apiserver "$apiserver" -etcd "$etcd" -dnsload "$shared/dnsload" \
  -secs "$secs" -rounds "${BENCH_ROUNDS:-2}" -namespaces "${BENCH_NAMESPACES:-50}" \
  -services "${BENCH_SERVICES:-5000}" -endpoints "${BENCH_ENDPOINTS:-10}" -nodes "${BENCH_NODES:-500}" -pods "${BENCH_PODS:-0}" ${BENCH_ARGS:-}
