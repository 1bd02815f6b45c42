#!/usr/bin/env bash
# peer-tools.sh TOOL... — make sure the real peers that are built from Go
# modules exist in the reused cache directory, building them only once per
# machine, and print "TOOL=PATH" for each.
#   consul          Consul v1.16.3 (MPL-2.0; later lines are BSL — never use them)
#   kube-apiserver  kube-apiserver v1.34.4
#   kube-controller-manager kube-scheduler kube-proxy kubelet kubectl
#                   the rest of a one-node cluster, v1.34.4, from the same
#                   tools module (static: CGO_ENABLED=0)
#   etcd            etcd v3.6.4 (kube-apiserver's; Debian's 3.4 makes it refuse
#                   client-go's streaming lists: no RequestWatchProgress)
#   coredns         stock CoreDNS v1.15.0 with every stock plugin, built as
#                   meshdns is (static, -trimpath -s -w): the baseline of the
#                   binary figures (build/bench-binary.sh)
#   helm            Helm v3.22.0 (cmd/helm; static): lints and renders
#                   charts/meshdns and installs it on the one-node cluster
#                   (test/helm_*_test.go)
# Cache: $MESHDNS_TOOLS_CACHE (default ~/.cache/meshdns-tools). A cold build
# of everything takes ~25 min on 2 cores; a cached one costs nothing.
#
# Every peer is linked without a symbol table or DWARF (-s -w): nothing
# debugs them here, and the debug info is the larger part of linking nine
# binaries of 50-150 MB on a cold machine's two cores (panics still print
# their stacks: those come from the pclntab, which stays).
#
# The absent tools are built in groups, each group by one `go build` of its
# own tools module: the Kubernetes binaries together (one package graph, the
# links side by side), Consul, etcd, CoreDNS and Helm each alone. The groups
# run at the same time (each module's downloads, loading and links leave
# cores idle that another group's compiles fill). A group holds a lock in
# the cache while it builds, so a second caller (another checkout's test
# run) waits for it and then finds the tools cached.
set -euo pipefail
cd "$(dirname "$0")/tools"
tools=$PWD
cache=${MESHDNS_TOOLS_CACHE:-$HOME/.cache/meshdns-tools}
mkdir -p "$cache"
kubever=v1.34.4

# path TOOL — where TOOL lives in the cache; group TOOL — its build group
path() {
  case $1 in
    consul) echo "$cache/consul-v1.16.3/consul" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kube-proxy|kubelet|kubectl) echo "$cache/kube-$kubever/$1" ;;
    etcd) echo "$cache/etcd-v3.6.4/etcd" ;;
    coredns) echo "$cache/coredns-v1.15.0/coredns" ;;
    helm) echo "$cache/helm-v3.22.0/helm" ;;
    *) echo "peer-tools: unknown tool $1" >&2; return 2 ;;
  esac
}
group() { case $1 in kube-*|kubelet|kubectl) echo kube ;; *) echo "$1" ;; esac; }

# build GROUP TOOL... — build the group's absent tools under its lock
build() {
  local g=$1 lock t
  shift
  exec {lock}>"$cache/.lock-$g"
  flock "$lock"
  local want=()
  for t in "$@"; do [ -x "$(path "$t")" ] || want+=("$t"); done
  if [ ${#want[@]} -gt 0 ]; then
    echo "peer-tools: building ${want[*]} into $cache (once per machine)" >&2
    case $g in
      consul)
        out=$(path consul); mkdir -p "$(dirname "$out")"
        (cd "$tools/consul" && GONOSUMDB=github.com/hashicorp/hcp-sdk-go,github.com/hashicorp/consul/envoyextensions \
          go build -ldflags "-s -w" -o "$out.tmp" github.com/hashicorp/consul && mv "$out.tmp" "$out") ;;
      kube)
        local dir tmp pkgs=()
        dir=$(dirname "$(path kubelet)"); tmp=$dir/.build; mkdir -p "$tmp"
        for t in "${want[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$t"); done
        (cd "$tools/kube" && CGO_ENABLED=0 go build -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$kubever -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34" \
          -o "$tmp/" "${pkgs[@]}")
        for t in "${want[@]}"; do mv "$tmp/$t" "$dir/$t"; done ;;
      etcd)
        out=$(path etcd); mkdir -p "$(dirname "$out")"
        (cd "$tools/etcd" && go build -ldflags "-s -w" -o "$out.tmp" go.etcd.io/etcd/server/v3 && mv "$out.tmp" "$out") ;;
      coredns)
        out=$(path coredns); mkdir -p "$(dirname "$out")"
        (cd "$tools/coredns" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp" github.com/coredns/coredns && mv "$out.tmp" "$out") ;;
      helm)
        out=$(path helm); mkdir -p "$(dirname "$out")"
        # the version and the Kubernetes version it assumes (its client-go's,
        # v0.37 = 1.37) as Helm's own Makefile stamps them
        (cd "$tools/helm" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" \
          -o "$out.tmp" helm.sh/helm/v3/cmd/helm && mv "$out.tmp" "$out") ;;
    esac
  fi
  flock -u "$lock"
}

declare -A groups=()
for t in "$@"; do
  path "$t" >/dev/null || exit 2
  [ -x "$(path "$t")" ] || groups[$(group "$t")]+=" $t"
done
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for g in "${!groups[@]}"; do
  # shellcheck disable=SC2086 # the group's tools, split on spaces
  build "$g" ${groups[$g]} >"$logs/$g" 2>&1 &
  pids+=("$!:$g")
done
failed=0
for pg in "${pids[@]}"; do
  if ! wait "${pg%%:*}"; then
    echo "peer-tools: building ${pg#*:} failed:" >&2
    failed=1
  fi
  cat "$logs/${pg#*:}" >&2
done
[ "$failed" -eq 0 ] || exit 1
for t in "$@"; do echo "$t=$(path "$t")"; done
