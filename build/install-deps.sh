#!/usr/bin/env bash
# install-deps.sh — install the Debian packages the tests and benchmarks need,
# only when some are absent (idempotent; one `apt-get update`).
#   dnsutils       dig
#   knot-dnsutils  kdig
#   dnsperf        load for the benchmarks (build/bench-tools/dnsload)
#   iproute2       ip netns / veth for the multi-host tests
#   avahi-daemon avahi-utils libnss-mdns dbus   the mDNS peer
#   curl util-linux  the record API inside namespaces; unshare -m for Avahi
#   docker.io busybox-static  the Docker engine for the container updater
#                  and the image tests; busybox makes their container image
#   openssl        the real kube-apiserver's service-account key (kube-apiserver,
#                  etcd v3.6 and Consul are built from Go modules by
#                  build/peer-tools.sh: Debian's etcd 3.4 cannot serve
#                  client-go's streaming lists)
#   containerd runc containernetworking-plugins iptables conntrack
#                  the one-node Kubernetes cluster of the node tests
#                  (test/nodecluster_*): its container runtime, the CNI
#                  bridge/host-local/firewall/portmap plugins in /usr/lib/cni,
#                  kube-proxy's iptables mode and conntrack clean-up (the
#                  kubelet, kube-proxy and the control plane come from
#                  build/peer-tools.sh)
#   prometheus     a real Prometheus and promtool for the alert rules
#                  (deploy/monitoring: promtool test rules, and the alert
#                  drill of test/alerts_test.go); the image's policy-rc.d
#                  keeps its service from starting
set -euo pipefail
packages=(dnsutils knot-dnsutils dnsperf iproute2 avahi-daemon avahi-utils libnss-mdns dbus curl util-linux docker.io busybox-static openssl
  containerd runc containernetworking-plugins iptables conntrack prometheus)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${missing[*]}"
