package test

// Configuration files of the one-node cluster (recipe: ../shared/PEERS.md,
// "A one-node Kubernetes cluster"). Every path lives under the state
// directory; nothing is read from or written to the host's own containerd,
// kubelet or CNI directories.

import (
	"fmt"
	"path/filepath"
)

// nodePaths are the fixed places of the cluster's files under the state
// directory.
type nodePaths struct {
	state       string
	containerd  string // containerd's config
	ctrdSock    string
	ctrdRoot    string
	ctrdState   string
	cniConfDir  string
	kubeletConf string
	kubeletRoot string
	resolvConf  string // the node's resolv.conf: the "outside world" DNS only
	outsideConf string // the Corefile of the "outside world" DNS server
	hostLogs    string // hostPath directory the load clients write to
	images      string
}

func newNodePaths(state string) nodePaths {
	return nodePaths{state: state,
		containerd: filepath.Join(state, "containerd.toml"), ctrdSock: filepath.Join(state, "containerd.sock"),
		ctrdRoot: filepath.Join(state, "containerd", "root"), ctrdState: filepath.Join(state, "containerd", "state"),
		cniConfDir: filepath.Join(state, "cni", "net.d"), kubeletConf: filepath.Join(state, "kubelet.yaml"),
		kubeletRoot: filepath.Join(state, "kubelet"), resolvConf: filepath.Join(state, "node-resolv.conf"),
		outsideConf: filepath.Join(state, "outside", "Corefile"), hostLogs: filepath.Join(state, "hostlogs"),
		images: filepath.Join(state, "images")}
}

// containerdConfig gives containerd its own root, state, socket, runc root
// and network-namespace mounts. Required on this machine:
// restrict_oom_score_adj (root lacks CAP_SYS_RESOURCE; without it every
// sandbox fails) and cgroupfs (no systemd).
func (p nodePaths) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, p.ctrdRoot, p.ctrdState, p.ctrdSock, filepath.Join(p.state, "containerd", "opt"), pauseImage,
		filepath.Join(p.state, "runc"), p.cniConfDir)
}

// cniConfig is the pod network: bridge (gateway, hairpin, no masquerade:
// nothing may leave the machine) with host-local addresses kept in the
// state directory, firewall and portmap.
func (p nodePaths) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "firewall", "backend": "iptables"},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, cniNetwork, cniBridge, filepath.Join(p.state, "cni", "ipam"), podCIDR, podGateway)
}

// kubeletConfig is the KubeletConfiguration: cgroupfs under its own cgroup
// root (cgroup v1 here), the cluster DNS at clusterDNSIP, the node's
// resolv.conf of the harness, no iptables chains of its own, eviction
// thresholds a shared disk meets, no image garbage collection (the images
// cannot be pulled again), and an API that only the node address serves.
func (p nodePaths) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
failCgroupV1: false
clusterDNS: [%s]
clusterDomain: cluster.local
resolvConf: %s
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
`, nodeIP, nodeCgroup, clusterDNSIP, p.resolvConf, p.ctrdSock, filepath.Join(p.state, "pod-logs"))
}

// outsideCorefile is the "outside world" DNS server on the node address:
// the upstream of the cluster DNS (the node's resolv.conf). It knows one
// name and answers NXDOMAIN for everything else, so no query ever leaves
// the machine.
func outsideCorefile() string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    hosts {
        %s %s
    }
}
`, nodeIP, extAddress, extName)
}

const (
	extName    = "ext.example.test"
	extAddress = "198.51.100.80" // TEST-NET-2: an answer, never a destination
)
