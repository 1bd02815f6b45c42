package test

// The one-node Kubernetes cluster of the node tests (issue 25; recipe in
// ../shared/PEERS.md): etcd, kube-apiserver (Node,RBAC), controller-manager,
// scheduler, containerd, CNI bridge, kubelet and kube-proxy (iptables) on the
// node address 10.250.0.1 of a veth pair the harness creates, with
// deploy/kubernetes applied as the cluster DNS at 10.96.0.10. One cluster
// serves every node test of a `go test` run: the first test that asks starts
// it (sharedNodeCluster), TestMain tears it down (stopNodeCluster), and a
// run that was killed is cleaned up by the next one's start.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// nodeCluster is the running cluster.
type nodeCluster struct {
	paths   nodePaths
	pki     *nodePKI
	bins    map[string]string
	etcdURL string
	Client  kubernetes.Interface
	Config  *rest.Config

	mu      sync.Mutex
	procs   map[string]*nodeProc // by component name, the latest start
	apiArgs []string
	timings []string // "step: duration" of the start, for the report
}

// nodeClusterTools are the peers built from Go modules (build/peer-tools.sh).
var nodeClusterTools = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}

var nodeFixture struct {
	once    sync.Once
	c       *nodeCluster
	err     error
	lock    *os.File
	startIn time.Duration
}

// nodeTurn lets one node test at a time use the cluster: the drills
// stop its API server, restart its DNS and measure its lookups, so two at
// once would spoil each other. The node tests still run beside the
// package's other parallel tests (their peers listen on ports of their
// own): most of a drill is waiting.
var nodeTurn struct {
	turn   sync.Mutex // held by the node test that runs
	mu     sync.Mutex
	holder string // that test's name
}

// sharedNodeCluster returns the run's cluster, starting it on first use,
// and makes t a parallel test that holds the node turn until it ends (its
// first call in a test only: t.Parallel may be called once). A failed
// start fails every node test with the same error.
func sharedNodeCluster(t *testing.T) *nodeCluster {
	t.Helper()
	nodeTurn.mu.Lock()
	h := nodeTurn.holder
	nodeTurn.mu.Unlock()
	if h == "" || (t.Name() != h && !strings.HasPrefix(t.Name(), h+"/")) {
		t.Parallel()
		nodeTurn.turn.Lock()
		nodeTurn.mu.Lock()
		nodeTurn.holder = t.Name()
		nodeTurn.mu.Unlock()
		t.Cleanup(func() {
			nodeTurn.mu.Lock()
			nodeTurn.holder = ""
			nodeTurn.mu.Unlock()
			nodeTurn.turn.Unlock()
		})
	}
	nodeFixture.once.Do(func() {
		start := time.Now()
		nodeFixture.c, nodeFixture.err = startNodeCluster()
		nodeFixture.startIn = time.Since(start)
		if nodeFixture.c != nil {
			t.Logf("one-node cluster up in %v: %s", nodeFixture.startIn.Round(time.Millisecond), strings.Join(nodeFixture.c.timings, ", "))
		}
	})
	if nodeFixture.err != nil {
		t.Fatalf("one-node cluster: %v", nodeFixture.err)
	}
	return nodeFixture.c
}

// stopNodeCluster tears the cluster down if a test started it (TestMain).
func stopNodeCluster() {
	if nodeFixture.c != nil {
		report := nodeFixture.c.teardown()
		fmt.Fprintf(os.Stderr, "one-node cluster: started in %v, torn down: %s\n", nodeFixture.startIn.Round(time.Millisecond), report)
		nodeFixture.c = nil
	}
	if nodeFixture.lock != nil {
		_ = syscall.Flock(int(nodeFixture.lock.Fd()), syscall.LOCK_UN)
		nodeFixture.lock.Close()
		nodeFixture.lock = nil
	}
}

// lockNodeState takes the machine-wide lock of the state directory: one
// cluster per machine at a time (its names and addresses are fixed).
func lockNodeState() error {
	f, err := os.OpenFile(nodeStateDir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Minute)
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		if time.Now().After(deadline) {
			f.Close()
			return fmt.Errorf("another run holds %s.lock for 15 min", nodeStateDir)
		}
		time.Sleep(time.Second)
	}
	nodeFixture.lock = f
	return nil
}

// nodeTools returns the paths of the cluster's peers, building what is
// missing once per machine.
func nodeTools() (map[string]string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(repoRoot, "build", "peer-tools.sh")}, nodeClusterTools...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build/peer-tools.sh %s: %w\n%s", strings.Join(nodeClusterTools, " "), err, errb.String())
	}
	bins := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			bins[k] = v
		}
	}
	for _, tool := range []struct{ bin, pkg string }{{"containerd", "containerd"}, {"ctr", "containerd"}, {"runc", "runc"},
		{"iptables", "iptables"}, {"conntrack", "conntrack"}, {"ip", "iproute2"}, {"busybox", "busybox-static"}} {
		p, err := exec.LookPath(tool.bin)
		if err != nil {
			return nil, fmt.Errorf("%s is not installed: run build/install-deps.sh (apt-get install -y %s)", tool.bin, tool.pkg)
		}
		bins[tool.bin] = p
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return nil, fmt.Errorf("the CNI plugins are not installed: run build/install-deps.sh (apt-get install -y containernetworking-plugins)")
	}
	return bins, nil
}

// cleanupNodeHost undoes everything a cluster under state may have left,
// whether it stopped or was killed: processes (pid files, containers by
// cgroup, shims by socket), mounts, iptables rules and chains, the
// node-local's addresses, nftables tables and snapshot, links,
// cgroups, files outside the state directory and kernel parameters. It
// returns a summary for the log.
func cleanupNodeHost(state, kubeProxy string) string {
	var sum []string
	if k := killPidFiles(state, state); len(k) > 0 {
		sum = append(sum, "killed "+strings.Join(k, " "))
	}
	if n := killCgroupProcs(); n > 0 {
		sum = append(sum, fmt.Sprintf("killed %d container processes", n))
	}
	shims := shimPIDs(filepath.Join(state, "containerd.sock"))
	for _, p := range shims {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	waitGone(shims, 5*time.Second)
	if len(shims) > 0 {
		sum = append(sum, fmt.Sprintf("killed %d shims", len(shims)))
	}
	if n := unmountUnder(state); n > 0 {
		sum = append(sum, fmt.Sprintf("unmounted %d", n))
	}
	cleanupNodeIptables(kubeProxy)
	if removed, left := removeNewChains(state); len(removed)+len(left) > 0 {
		sum = append(sum, "removed chains "+strings.Join(removed, " "))
		if len(left) > 0 {
			sum = append(sum, "chains left: "+strings.Join(left, " "))
		}
	}
	if s := removeNodeLocalHost(); s != "" {
		sum = append(sum, s)
	}
	removeNodeLinks()
	removeNodeCgroups()
	removeHostLeftovers(state)
	if ch := restoreSysctls(state); len(ch) > 0 {
		sum = append(sum, "restored "+strings.Join(ch, ", "))
	}
	return strings.Join(sum, "; ")
}

// mountsUnder reports whether anything is still mounted under dir.
func mountsUnder(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	return bytes.Contains(b, []byte(" "+dir+"/"))
}

// resetNodeState cleans up after an earlier run and empties the state
// directory (never while something is still mounted in it).
func resetNodeState(kubeProxy string) (string, error) {
	sum := cleanupNodeHost(nodeStateDir, kubeProxy)
	if mountsUnder(nodeStateDir) {
		return sum, fmt.Errorf("mounts remain under %s after cleanup", nodeStateDir)
	}
	if err := os.RemoveAll(nodeStateDir); err != nil {
		return sum, err
	}
	return sum, os.MkdirAll(nodeStateDir, 0o755)
}

// teardown stops the cluster and undoes its changes; the logs stay in
// <state>/logs until the next run. It returns a summary.
func (c *nodeCluster) teardown() string {
	rejected, _ := egressRejected()
	sum := cleanupNodeHost(c.paths.state, c.bins["kube-proxy"])
	if !mountsUnder(c.paths.state) {
		ents, _ := os.ReadDir(c.paths.state)
		for _, e := range ents {
			if e.Name() != "logs" {
				_ = os.RemoveAll(filepath.Join(c.paths.state, e.Name()))
			}
		}
	}
	return fmt.Sprintf("%s; the egress rule rejected %d pod packets bound outside the pod network (logs in %s/logs)", sum, rejected, c.paths.state)
}

// step runs f and records its duration under name.
func (c *nodeCluster) step(name string, f func() error) error {
	start := time.Now()
	err := f()
	c.timings = append(c.timings, fmt.Sprintf("%s %v", name, time.Since(start).Round(time.Millisecond)))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// startProc starts a component and remembers it for teardown.
func (c *nodeCluster) startProc(name string, argv ...string) (*nodeProc, error) {
	p, err := startNodeProc(c.paths.state, name, nil, argv...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p, nil
}

// proc returns a running component by name.
func (c *nodeCluster) proc(name string) *nodeProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

// waitFor polls cond every 100 ms until it returns nil, the process p (when
// given) exits, or d passes.
func waitFor(d time.Duration, p *nodeProc, what string, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited while waiting for %s:\n%s", p.name, what, p.logTail(30))
		}
		if time.Now().After(deadline) {
			tailLog := ""
			if p != nil {
				tailLog = "\n" + p.logTail(30)
			}
			return fmt.Errorf("no %s after %v: %v%s", what, d, err, tailLog)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kubectl runs kubectl with the admin kubeconfig and returns its output.
func (c *nodeCluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bins["kubectl"], append([]string{"--kubeconfig", c.pki.kubeconfig["admin"]}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// adminClient builds a client-go client for the admin kubeconfig.
func (c *nodeCluster) adminClient() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.pki.kubeconfig["admin"])
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Timeout = 10 * time.Second
	cfg.WarningHandler = rest.NoWarnings{}
	c.Config = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	return err
}
