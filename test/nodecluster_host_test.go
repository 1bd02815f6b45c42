package test

// What the one-node cluster changes on the host, and how it is undone: the
// node's veth pair, the pod bridge, the harness's egress chain, the kernel
// parameters the kubelet, kube-proxy and the bridge plugin write, the
// cgroups under the kubelet's cgroup root, and the mounts under the state
// directory. Every name is fixed, so the cleanup that runs at the start of
// the next run finds what a killed run left.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	nodeStateDir  = "/var/tmp/meshdns-node" // fixed: the next run cleans up after a killed one
	nodeIP        = "10.250.0.1"            // the node, the API server, the "outside world" DNS server
	nodeName      = "meshdns-node"
	nodeVeth      = "mdnode0" // holds nodeIP/32; its peer mdnode1 only keeps it up
	nodeVethPeer  = "mdnode1"
	podCIDR       = "10.244.0.0/24"
	clusterCIDR   = "10.244.0.0/16"
	podNetPrefix  = "10.244."
	podGateway    = "10.244.0.1"
	cniBridge     = "mdcni0"
	cniNetwork    = "meshdns-node"
	serviceCIDR   = "10.96.0.0/16"
	apiServiceIP  = "10.96.0.1"
	clusterDNSIP  = "10.96.0.10"
	nodeCgroup    = "meshdns-node" // the kubelet's cgroupRoot in every hierarchy
	egressChain   = "MESHDNS-NODE-EGRESS"
	cniAdminChain = "CNI-ADMIN" // the firewall plugin's chain for administrators, consulted first
)

// nodeSysctls are the kernel parameters the cluster's components may write
// (kubelet: panic, overcommit, keys; bridge plugin: ip_forward; kube-proxy:
// route_localnet, conntrack). Their values are recorded before anything
// starts and put back at teardown.
var nodeSysctls = []string{
	"kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "vm.panic_on_oom",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
	"net.ipv4.conf.all.route_localnet", "net.bridge.bridge-nf-call-iptables",
	"net.netfilter.nf_conntrack_max",
}

func sysctlPath(name string) string { return "/proc/sys/" + strings.ReplaceAll(name, ".", "/") }

// recordSysctls writes the current values to <state>/sysctls (name=value
// lines) unless a killed run left that file, whose values are the
// originals.
func recordSysctls(state string) error {
	path := filepath.Join(state, "sysctls")
	var b strings.Builder
	for _, n := range nodeSysctls {
		v, err := os.ReadFile(sysctlPath(n))
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s=%s\n", n, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// restoreSysctls puts back what recordSysctls wrote and removes the file.
// It returns the parameters it changed, as "name: now -> recorded".
func restoreSysctls(state string) []string {
	path := filepath.Join(state, "sysctls")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var changed []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		n, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		cur, err := os.ReadFile(sysctlPath(n))
		if err != nil || strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(sysctlPath(n), []byte(v), 0o644); err == nil {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", n, strings.TrimSpace(string(cur)), v))
		}
	}
	_ = os.Remove(path)
	return changed
}

// hostRun runs a host command and returns its combined output with the error.
func hostRun(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// hostRunAll runs each command in turn and stops at the first error.
func hostRunAll(cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := hostRun(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// setupNodeNetwork creates the node's veth pair with nodeIP/32 and the
// egress chain that rejects pod packets bound outside the pod network: the
// CNI firewall plugin accepts every pod-sourced packet in CNI-FORWARD before
// kube-proxy's REJECT for a Service without endpoints, so without this rule
// a query to the DNS Service's ClusterIP during a rollout would head for the
// default route. The rule sits in CNI-ADMIN (which the firewall plugin jumps
// to first) and at the end of FORWARD.
func setupNodeNetwork() error {
	err := hostRunAll(
		[]string{"ip", "link", "add", nodeVeth, "type", "veth", "peer", "name", nodeVethPeer},
		[]string{"ip", "addr", "add", nodeIP + "/32", "dev", nodeVeth},
		[]string{"ip", "link", "set", nodeVeth, "up"},
		[]string{"ip", "link", "set", nodeVethPeer, "up"},
		[]string{"iptables", "-w", "-N", egressChain},
		[]string{"iptables", "-w", "-A", egressChain, "-s", clusterCIDR, "-d", clusterCIDR, "-j", "RETURN"},
		[]string{"iptables", "-w", "-A", egressChain, "-s", clusterCIDR, "-j", "REJECT", "--reject-with", "icmp-port-unreachable"},
		[]string{"iptables", "-w", "-A", "FORWARD", "-j", egressChain},
	)
	if err != nil {
		return err
	}
	if _, err := hostRun("iptables", "-w", "-n", "-L", cniAdminChain); err != nil {
		if _, err := hostRun("iptables", "-w", "-N", cniAdminChain); err != nil {
			return err
		}
	}
	_, err = hostRun("iptables", "-w", "-I", cniAdminChain, "1", "-j", egressChain)
	return err
}

// egressRejected returns how many pod packets the egress chain rejected.
func egressRejected() (int64, error) {
	out, err := hostRun("iptables", "-w", "-n", "-v", "-x", "-L", egressChain)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "REJECT" {
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no REJECT rule in %s:\n%s", egressChain, out)
}

// cleanupNodeIptables removes the egress chain, kube-proxy's chains
// (kube-proxy --cleanup when the binary is given, then any KUBE- chain
// left), and the CNI rules of our network; CNI chains that end up empty are
// removed too. Rules of other users of the CNI chains stay.
func cleanupNodeIptables(kubeProxy string) {
	if kubeProxy != "" {
		_, _ = hostRun(kubeProxy, "--cleanup", "--v=0")
	}
	for _, table := range []string{"filter", "nat", "mangle", "raw"} {
		rules, _ := hostRun("iptables", "-w", "-t", table, "-S")
		var chains []string
		for _, l := range strings.Split(rules, "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			switch {
			case f[0] == "-N" && (strings.HasPrefix(f[1], "KUBE-") || f[1] == egressChain):
				_, _ = hostRun("iptables", "-w", "-t", table, "-F", f[1])
				chains = append(chains, f[1])
			case f[0] == "-N" && strings.HasPrefix(f[1], "CNI-"):
				chains = append(chains, f[1])
			case f[0] == "-A" && strings.HasPrefix(f[1], "CNI-") && cniRuleIsOurs(l):
				_, _ = hostRun("iptables", append([]string{"-w", "-t", table, "-D"}, splitRule(l)[1:]...)...)
			}
		}
		removeEmptyChains(table, chains)
	}
}

// cniRuleIsOurs reports whether a rule of a CNI chain belongs to this
// cluster: it names our network, bridge, pod range or egress chain.
func cniRuleIsOurs(l string) bool {
	return strings.Contains(l, cniNetwork) || strings.Contains(l, cniBridge) ||
		strings.Contains(l, podNetPrefix) || strings.Contains(l, egressChain)
}

// removeEmptyChains deletes, in rounds, the chains of the list that have no
// rules, after deleting the jumps to them (a chain another user's rule
// still fills stays).
func removeEmptyChains(table string, chains []string) {
	for round := 0; round < 4; round++ {
		rules, _ := hostRun("iptables", "-w", "-t", table, "-S")
		nonEmpty := map[string]bool{}
		for _, l := range strings.Split(rules, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "-A" {
				nonEmpty[f[1]] = true
			}
		}
		for _, c := range chains {
			if nonEmpty[c] {
				continue
			}
			for _, l := range strings.Split(rules, "\n") {
				if f := strings.Fields(l); len(f) > 2 && f[0] == "-A" && strings.HasSuffix(l, "-j "+c) {
					_, _ = hostRun("iptables", append([]string{"-w", "-t", table, "-D"}, splitRule(l)[1:]...)...)
				}
			}
			_, _ = hostRun("iptables", "-w", "-t", table, "-X", c)
		}
	}
}

// splitRule splits an iptables -S line into arguments, keeping a
// double-quoted comment (with \" escapes) as one.
func splitRule(l string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(l); i++ {
		ch := l[i]
		switch {
		case ch == '\\' && inQuote && i+1 < len(l):
			i++
			cur.WriteByte(l[i])
		case ch == '"':
			inQuote, have = !inQuote, true
		case ch == ' ' && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// cgroupHierarchies returns the mounted cgroup v1 hierarchies (or the one
// v2 mount).
func cgroupHierarchies() []string {
	b, _ := os.ReadFile("/proc/self/mounts")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && (f[2] == "cgroup" || f[2] == "cgroup2") {
			out = append(out, f[1])
		}
	}
	return out
}

// makeNodeCgroups creates the kubelet's cgroup root in every hierarchy (the
// kubelet refuses a root that does not exist); cpuset gets its parent's
// CPUs and memory nodes.
func makeNodeCgroups() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, nodeCgroup)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// cgroupPIDs returns every process in the cluster's cgroups.
func cgroupPIDs() []int {
	seen := map[int]bool{}
	for _, h := range cgroupHierarchies() {
		_ = filepath.Walk(filepath.Join(h, nodeCgroup), func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	var out []int
	for p := range seen {
		out = append(out, p)
	}
	return out
}

// killCgroupProcs SIGKILLs every process in the cluster's cgroups (the
// containers: killing their shims would leave them running) until none is
// left, for at most 10 s.
func killCgroupProcs() int {
	n := 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pids := cgroupPIDs()
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
			n++
		}
		waitGone(pids, time.Second)
	}
	return n
}

// removeNodeCgroups removes the cluster's cgroups, deepest first.
func removeNodeCgroups() {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.Walk(filepath.Join(h, nodeCgroup), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

// unmountUnder lazily unmounts every mount point under dir, deepest first
// (rootfs overlays, sandbox shm, network namespaces, kubelet volumes).
func unmountUnder(dir string) int {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return 0
	}
	var mounts []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			mounts = append(mounts, f[1])
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	return len(mounts)
}

// removeNodeLinks deletes the pod bridge and the node's veth pair (the
// pods' veths went with their network namespaces).
func removeNodeLinks() {
	for _, l := range []string{cniBridge, nodeVeth} {
		if _, err := hostRun("ip", "link", "show", l); err == nil {
			_, _ = hostRun("ip", "link", "del", l)
		}
	}
}

// removeHostLeftovers deletes what the runtimes write outside the state
// directory for our containers: the shims' sockets (named in each task
// bundle's "address" file), libcni's cached results of our sandboxes
// ("<network>-<id>-<ifname>"), and the kubelet's /var/log/containers links
// into our pod logs.
func removeHostLeftovers(state string) {
	bundles, _ := filepath.Glob(filepath.Join(state, "containerd", "state", "io.containerd.runtime.v2.task", "*", "*"))
	for _, b := range bundles {
		if a, err := os.ReadFile(filepath.Join(b, "address")); err == nil {
			if p, ok := strings.CutPrefix(strings.TrimSpace(string(a)), "unix://"); ok && strings.HasPrefix(p, "/run/containerd/s/") {
				_ = os.Remove(p)
			}
		}
		results, _ := filepath.Glob("/var/lib/cni/results/*-" + filepath.Base(b) + "-*")
		for _, r := range results {
			_ = os.Remove(r)
		}
	}
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, state+"/") {
			_ = os.Remove(l)
		}
	}
}
