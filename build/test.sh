#!/usr/bin/env bash
# test.sh [FUZZ_SECONDS] — `make test` after the Debian packages: the
# peers, the binary, gofmt, every package's tests under -race (go vet's
# analyzers inside the same build, -vet=all) and every fuzz target for
# FUZZ_SECONDS each (default 10), overlapped where they can be.
#
#   - The peers built from Go modules (build/peer-tools.sh: Consul, etcd,
#     Kubernetes, Helm, stock CoreDNS; ~29 min on a fresh 2-core machine,
#     nothing once cached) build in the background from the start. Only
#     the end-to-end package (test/) uses them, and it asks peer-tools.sh
#     for each one, which waits on the build group's lock and then finds
#     the tool: the binary, the race build, the unit tests and the
#     end-to-end tests that need no peer run meanwhile, instead of after.
#   - The fuzz run is niced to 19, beside the tests: the end-to-end package
#     spends most of its ~22 minutes waiting on real peers, outage drills
#     and alert durations, and the fuzzers take what is idle. Against a busy
#     test, peer or meshdns process a nice-19 process gets ~1.5 % of a core
#     (and a waking one preempts it), so the tests see the machine nearly
#     as if they ran alone. Not SCHED_IDLE (weight 3 against nice 19's 15):
#     Go's fuzz worker calls an input that runs 10 s of wall time a
#     deadlock and records it as a crasher, and an idle-class worker
#     starved through a CPU-heavy stretch (the one-node cluster's start)
#     could reach that without a fault. A target still runs its full
#     FUZZ_SECONDS; on a busy machine it executes fewer inputs in them
#     (`make soak` fuzzes each for five minutes).
#
# Everything must pass. The background logs are printed after the tests'.
# A failing fuzz target leaves its input under the package's
# testdata/fuzz/ (build/fuzz.sh). go test's timeout leaves room for a
# fresh machine's end-to-end package waiting on the peers' build.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
bin=${MESHDNS_BIN:-$PWD/bin/meshdns}
logs=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$logs"
}
trap cleanup EXIT

# shellcheck disable=SC2086 # the Makefile's list of peers
build/peer-tools.sh ${PEERS:?the peers to build, as the Makefile passes them} >"$logs/peers" 2>&1 &
peerpid=$!
pids+=("$peerpid")

build/build.sh "$bin"
build/lint.sh fmt

nice -n 19 build/fuzz.sh "$secs" >"$logs/fuzz" 2>&1 &
fuzzpid=$!
pids+=("$fuzzpid")

rc=0
MESHDNS_BIN=$bin go test -race -vet=all -timeout 80m -count=1 ./... || rc=$?

prc=0
wait "$peerpid" || prc=$?
echo "--- peers (build/peer-tools.sh, in the background):"
cat "$logs/peers"
frc=0
wait "$fuzzpid" || frc=$?
pids=()
echo "--- fuzz (${secs}s per target, nice 19, beside the tests):"
cat "$logs/fuzz"
[ "$rc" -eq 0 ] || { echo "test: go test failed" >&2; exit "$rc"; }
[ "$prc" -eq 0 ] || { echo "test: building the peers failed" >&2; exit "$prc"; }
[ "$frc" -eq 0 ] || { echo "test: fuzzing failed" >&2; exit "$frc"; }
echo "test: passed"
