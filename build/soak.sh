#!/usr/bin/env bash
# soak.sh — the long run of the differential test on generated clusters
# (test/clusterdns_gen_test.go, issue 20 property 3): MESHDNS_SOAK_SEEDS
# seeds (default 20, from MESHDNS_SOAK_FIRST, default 100) of a bigger
# cluster than `make test` uses (16 namespaces, 120 Services, 150 steps),
# each on its own real kube-apiserver, the shipped Corefile against the
# stock kubernetes plugin: live, after the steps, built whole after them,
# and restarted from the snapshot during an outage (~16,000 questions a
# phase). Bounded: about half a minute a seed on 2 cores, and go test's
# timeout at three minutes a seed. Every difference, allowed ones with
# their reason, lands in $MESHDNS_GEN_OUT (default bin/soak/seed-N.txt);
# the summary lines are printed.
#
# Then the virtualconsul part: MESHDNS_SOAK_VC_SEEDS seeds (default 10, from
# MESHDNS_SOAK_VC_FIRST, default 100) of the interleaving property on a real
# Consul v1.16.3 agent (test/virtualconsul_interleave_test.go), 12 bursts a
# seed instead of 5, meshdns stopped and the agent frozen at random points,
# every answer against Consul's DNS (~30 s a seed). Then the mdnsfallback
# hostile-LAN generator (below), then the distributions' server blocks
# (below), then every fuzz target for five minutes.
# MESHDNS_SOAK_ONLY=clusterdns, =virtualconsul, =mdns, =distros or =fuzz runs
# one part alone.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/meshdns ] || build/build.sh bin/meshdns
build/peer-tools.sh kube-apiserver etcd >/dev/null
seeds=${MESHDNS_SOAK_SEEDS:-20}
out=${MESHDNS_GEN_OUT:-$PWD/bin/soak}
rm -rf "$out" && mkdir -p "$out"
status=0
only=${MESHDNS_SOAK_ONLY:-}
if [ -z "$only" ] || [ "$only" = clusterdns ]; then
  MESHDNS_BIN=$PWD/bin/meshdns MESHDNS_SOAK_SEEDS=$seeds MESHDNS_GEN_OUT=$out \
    go test -count=1 -timeout "$((seeds * 3 + 5))m" -run 'TestClusterDNSGenerated$' -v ./test/ \
    >"$out/go-test.log" 2>&1 || status=$?
  grep -E 'answered alike|: [0-9]+ namespaces|^ *(--- |ok|FAIL)' "$out/go-test.log" || true
  echo "soak: $seeds seeds, differences in $out (full log: $out/go-test.log)"
fi
if [ -z "$only" ] || [ "$only" = virtualconsul ]; then
  build/peer-tools.sh consul >/dev/null
  vc=${MESHDNS_SOAK_VC_SEEDS:-10}
  # the suite's own seeds (1, 2) run too; -run picks the property alone
  MESHDNS_BIN=$PWD/bin/meshdns MESHDNS_VC_INTERLEAVE_SEEDS=$vc \
    MESHDNS_VC_INTERLEAVE_FIRST=${MESHDNS_SOAK_VC_FIRST:-100} MESHDNS_VC_INTERLEAVE_BURSTS=12 \
    go test -count=1 -timeout "$((vc * 2 + 10))m" -run 'TestVirtualConsulConsulInterleaved$' -v ./test/ \
    >"$out/virtualconsul.log" 2>&1 || status=$?
  grep -E '^ *(--- |ok|FAIL)|restarted with the agent back' "$out/virtualconsul.log" || true
  echo "soak: virtualconsul interleaving, $vc seeds (full log: $out/virtualconsul.log)"
fi
if [ -z "$only" ] || [ "$only" = mdns ]; then
  # mdns: the hostile-LAN generator of issue 29 (test/mdnsfallback_hostile_test.go)
  # for MESHDNS_SOAK_MDNS_SEEDS seeds (default 20) of MESHDNS_SOAK_MDNS_STEPS steps
  # (default 400): meshdns on two hosts, Avahi on a third, a raw-socket attacker on
  # the fourth. About ten seconds a seed; go test's timeout at a minute a seed.
  mseeds=${MESHDNS_SOAK_MDNS_SEEDS:-20}
  msteps=${MESHDNS_SOAK_MDNS_STEPS:-400}
  MESHDNS_BIN=$PWD/bin/meshdns MESHDNS_HOSTILE_SEEDS=$mseeds MESHDNS_HOSTILE_STEPS=$msteps MESHDNS_HOSTILE_FIRST=100 \
    go test -count=1 -timeout "$((mseeds + 5))m" -run 'TestMdnsfallbackHostileLAN$' -v ./test/ \
    >"$out/mdns-hostile.log" 2>&1 || status=$?
  grep -E 'lookups, |hostile_test.go|^ *(--- |ok|FAIL)' "$out/mdns-hostile.log" || true
  echo "soak mdns: $mseeds seeds of $msteps steps (full log: $out/mdns-hostile.log)"
fi
if [ -z "$only" ] || [ "$only" = distros ]; then
  # distros: the distributions' and operators' whole Corefiles against stock
  # CoreDNS v1.15.0, two real processes a block on one real kube-apiserver
  # (test/clusterdns_distro_test.go), MESHDNS_SOAK_DISTRO_SEEDS seeds
  # (default 5, from 100) of the full size (clustergen.Small with 40 Pods,
  # every question to every block, 60 changes) instead of make test's
  # three smaller ones. The six operator blocks alone took 47 s a seed on
  # 2 cores (all 14 not yet timed at this size); go test's timeout at four
  # minutes a seed.
  dseeds=${MESHDNS_SOAK_DISTRO_SEEDS:-5}
  build/peer-tools.sh coredns >/dev/null
  MESHDNS_BIN=$PWD/bin/meshdns MESHDNS_DISTRO_SEEDS=$dseeds MESHDNS_DISTRO_FIRST=100 MESHDNS_GEN_OUT=$out \
    go test -count=1 -timeout "$((dseeds * 4 + 5))m" -run 'TestDistroServerBlocksAgainstStock$' -v ./test/ \
    >"$out/distros.log" 2>&1 || status=$?
  grep -E 'answers compared|^ *(--- |ok|FAIL)' "$out/distros.log" | grep -v -- '--- PASS: TestDistroServerBlocksAgainstStock/seed[0-9]*/' || true
  echo "soak distros: $dseeds seeds (full log: $out/distros.log)"
fi
if [ -z "$only" ] || [ "$only" = fuzz ]; then
  # fuzz: every fuzz target for MESHDNS_SOAK_FUZZ_SECS each (default 300);
  # make test gives each 10 s
  build/fuzz.sh "${MESHDNS_SOAK_FUZZ_SECS:-300}" >"$out/fuzz.log" 2>&1 || status=$?
  grep -E '^fuzz: [0-9]+ targets|failed' "$out/fuzz.log" || true
  echo "soak fuzz: full log in $out/fuzz.log"
fi
exit $status
