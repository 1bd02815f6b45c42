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
# takes ~5-10 min on 2 cores; a cached one costs nothing.
set -euo pipefail
cd "$(dirname "$0")/tools"
cache=${MESHDNS_TOOLS_CACHE:-$HOME/.cache/meshdns-tools}
mkdir -p "$cache"
for tool in "$@"; do
  # one build of a tool at a time on this machine: a second caller (another
  # checkout's test run) waits for the first build and then finds it cached
  exec {lock}>"$cache/.lock-$tool"
  flock "$lock"
  case $tool in
    consul)
      out=$cache/consul-v1.16.3/consul
      if [ ! -x "$out" ]; then
        echo "peer-tools: building consul v1.16.3 into $out (once per machine)" >&2
        (cd consul && GONOSUMDB=github.com/hashicorp/hcp-sdk-go,github.com/hashicorp/consul/envoyextensions \
          go build -o "$out.tmp" github.com/hashicorp/consul && mv "$out.tmp" "$out")
      fi ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kube-proxy|kubelet|kubectl)
      out=$cache/kube-v1.34.4/$tool
      if [ ! -x "$out" ]; then
        echo "peer-tools: building $tool v1.34.4 into $out (once per machine)" >&2
        (cd kube && CGO_ENABLED=0 go build -ldflags "-X k8s.io/component-base/version.gitVersion=v1.34.4 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34" \
          -o "$out.tmp" "k8s.io/kubernetes/cmd/$tool" && mv "$out.tmp" "$out")
      fi ;;
    etcd)
      out=$cache/etcd-v3.6.4/etcd
      if [ ! -x "$out" ]; then
        echo "peer-tools: building etcd v3.6.4 into $out (once per machine)" >&2
        (cd etcd && go build -o "$out.tmp" go.etcd.io/etcd/server/v3 && mv "$out.tmp" "$out")
      fi ;;
    coredns)
      out=$cache/coredns-v1.15.0/coredns
      if [ ! -x "$out" ]; then
        echo "peer-tools: building coredns v1.15.0 into $out (once per machine)" >&2
        (cd coredns && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp" github.com/coredns/coredns && mv "$out.tmp" "$out")
      fi ;;
    helm)
      out=$cache/helm-v3.22.0/helm
      if [ ! -x "$out" ]; then
        echo "peer-tools: building helm v3.22.0 into $out (once per machine)" >&2
        # the version and the Kubernetes version it assumes (its client-go's,
        # v0.37 = 1.37) as Helm's own Makefile stamps them
        (cd helm && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" \
          -o "$out.tmp" helm.sh/helm/v3/cmd/helm && mv "$out.tmp" "$out")
      fi ;;
    *) echo "peer-tools: unknown tool $tool" >&2; exit 2 ;;
  esac
  flock -u "$lock"
  exec {lock}>&-
  echo "$tool=$out"
done
