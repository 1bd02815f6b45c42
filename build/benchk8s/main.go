// Command benchk8s compares meshdns's endpointsvc (source kubernetes) with
// the stock kubernetes plugin on the same real kube-apiserver and the same
// objects. It is run by build/bench-endpointsk8s.sh, which passes the
// binaries. The mixes (-mix) are these three, and churn, changes, replica,
// fleet and glibc, described in their own files (churn.go, changes.go,
// replica.go, fleet.go, pods.go):
//
//   - headless: endpointsvc with addresses endpoint (schema orch) against
//     the stock plugin on headless Services only, so both answer the same
//     ten endpoint addresses per name: RSS after sync, time to sync (start
//     until /ready answers 200), and dnsperf QPS on A queries.
//   - spec: endpointsvc with schema kubernetes against the stock plugin, both
//     with the cluster DNS stanza of deploy/kubernetes, on a cluster-DNS mix
//     of ClusterIP, headless (StatefulSet-like, endpoint hostnames) and
//     ExternalName Services spread over namespaces (spec.go): time to sync,
//     anonymous RSS after sync and after the load, its peaks during the
//     sync and during a relist forced by restarting the kube-apiserver, and
//     dnsperf QPS on a mix of A, SRV and PTR queries.
//   - axfr: the spec mix and stanzas with `transfer cluster.local { to * }`
//     beside each plugin: -axfrs AXFRs of cluster.local per plugin and
//     round over TCP; records transferred (and whether both transfer the
//     same), time per AXFR, anonymous RSS before and its peak during the
//     transfers, CPU ticks per AXFR (axfr.go).
//
// Everything runs on loopback; every process it starts is stopped by PID.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshdns/meshdns/internal/procstatus"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	meshdns   = flag.String("meshdns", "bin/meshdns", "the meshdns binary")
	apiserver = flag.String("apiserver", "", "the kube-apiserver binary (build/peer-tools.sh kube-apiserver)")
	etcdBin   = flag.String("etcd", "etcd", "the etcd binary")
	dnsload   = flag.String("dnsload", "build/bench-tools/dnsload", "the dnsload wrapper of dnsperf")
	services  = flag.Int("services", 5000, "Services")
	perSvc    = flag.Int("endpoints", 10, "endpoints per Service")
	nodes     = flag.Int("nodes", 500, "Nodes")
	secs      = flag.Int("secs", 6, "seconds per dnsperf run")
	rounds    = flag.Int("rounds", 2, "rounds (each runs both plugins)")
	hold      = flag.Duration("hold", 0, "only set up the API server and its objects, print the kubeconfig's path, and keep them this long (for experiments by hand)")
	profile   = flag.String("profile", "", "directory to save a heap profile (after GC) of each plugin into (-mix axfr: a CPU profile and allocation profiles of each plugin's transfers)")
	logs      = flag.String("logs", "", "directory to write each meshdns log into (GODEBUG=gctrace=1 in the environment traces its GC)")
	memstats  = flag.Bool("memstats", false, "print the Go runtime's memory statistics and the largest mappings after sync")
	mix       = flag.String("mix", "headless", "the objects and queries: headless (endpointsvc's orch schema, headless Services), spec (schema kubernetes, a cluster-DNS mix), churn (the spec mix under endpoint churn, both plugins at once), changes (the CPU of real and no-op changes, both models with and without a snapshot against stock: changes.go), replica (the replication stream on the spec mix: replica.go), fleet (a simulated node-local fleet: fleet.go), axfr (AXFR of the cluster zone on the spec mix: axfr.go) or glibc (queries per outside lookup of a glibc client, with and without autopath: pods.go)")
)

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
}

var (
	procsMu sync.Mutex
	procs   []*proc
)

func start(dir, name string, args ...string) *proc { return startEnv(nil, dir, name, args...) }

// startEnv starts name with env added to the environment.
func startEnv(env []string, dir, name string, args ...string) *proc {
	p := &proc{cmd: exec.Command(name, args...), done: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		fail("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p
}

func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func stopAll() {
	procsMu.Lock()
	defer procsMu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop()
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchk8s: "+format+"\n", args...)
	stopAll()
	os.Exit(1)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func main() {
	flag.Parse()
	// Interrupted or killed: stop the processes this run started (etcd,
	// kube-apiserver, meshdns) before exiting.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() { fail("%v", <-sigs) }()
	if *apiserver == "" {
		fail("-apiserver is required")
	}
	for _, p := range []*string{meshdns, dnsload, apiserver} {
		if abs, err := filepath.Abs(*p); err == nil {
			*p = abs
		}
	}
	dir, err := os.MkdirTemp("", "benchk8s-")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)
	defer stopAll()

	switch *mix {
	case "headless":
		api := startAPI(dir, false)
		runHeadless(dir, api.kubeconfig, api.client)
	case "spec":
		runSpec(dir, startAPI(dir, true))
	case "churn":
		runChurn(dir, startAPI(dir, false))
	case "replica":
		runReplica(dir, startAPI(dir, false))
	case "glibc":
		runGlibc(dir, startAPI(dir, false))
	case "fleet":
		runFleet(dir, startAPI(dir, false))
	case "changes":
		runChanges(dir, startAPI(dir, false))
	case "axfr":
		runAXFR(dir, startAPI(dir, false))
	default:
		fail("bad -mix %q: want headless, spec, churn, changes, replica, fleet, axfr or glibc", *mix)
	}
}

// runHeadless is -mix headless.
func runHeadless(dir, kubeconfig string, client kubernetes.Interface) {
	t0 := time.Now()
	populate(client)
	fmt.Printf("objects: %d headless Services, %d EndpointSlices x %d endpoints, %d Nodes; created in %v\n",
		*services, *services, *perSvc, *nodes, time.Since(t0).Round(time.Millisecond))
	if *hold > 0 {
		fmt.Printf("kubeconfig %s (held for %v)\n", kubeconfig, *hold)
		time.Sleep(*hold)
		return
	}

	// queries: every Service once, in a fixed shuffled order
	var q strings.Builder
	for i := 0; i < *services; i++ {
		fmt.Fprintf(&q, "svc-%d.bench.svc.cluster.local A\n", (i*7919)%*services)
	}
	queries := filepath.Join(dir, "queries.txt")
	if err := os.WriteFile(queries, []byte(q.String()), 0o644); err != nil {
		fail("%v", err)
	}

	variants := []struct{ name, block string }{
		{"idle", "    whoami\n"},
		{"kubernetes", "    kubernetes cluster.local {\n        kubeconfig " + kubeconfig + "\n    }\n"},
		{"endpointsvc", "    endpointsvc svc.cluster.local {\n        source kubernetes " + kubeconfig + "\n        addresses endpoint\n    }\n"},
	}
	type result struct {
		shipped, loaded mem
		sync            time.Duration
		qps             []int
	}
	res := map[string]*result{}
	for r := 1; r <= *rounds; r++ {
		for _, v := range variants {
			x := res[v.name]
			if x == nil {
				x = &result{}
				res[v.name] = x
			}
			port, ready, prom, pp := freePort(), freePort(), freePort(), freePort()
			corefile := fmt.Sprintf("cluster.local:%d {\n    bind 127.0.0.1\n    ready 127.0.0.1:%d\n    prometheus 127.0.0.1:%d\n    pprof 127.0.0.1:%d\n%s}\n", port, ready, prom, pp, v.block)
			cf := filepath.Join(dir, "Corefile."+v.name)
			if err := os.WriteFile(cf, []byte(corefile), 0o644); err != nil {
				fail("%v", err)
			}
			mode := "meshdns"
			start0 := time.Now()
			p := start(dir, "taskset", "-c", "0", *meshdns, "-conf", cf)
			waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/ready", ready), p, 120*time.Second)
			if v.name != "idle" { // and until the DNS port answers the last Service in full
				name := fmt.Sprintf("svc-%d.bench.svc.cluster.local.", *services-1)
				for n := 0; n != *perSvc; n = answerCount(port, name) {
					if time.Since(start0) > 120*time.Second {
						fail("%s: %s has %d A records, want %d\n%s", v.name, name, n, *perSvc, p.log.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			syncTime := time.Since(start0)
			time.Sleep(3 * time.Second) // settle: what a replica holds after sync
			m := measure(p.cmd.Process.Pid)
			if v.name != "idle" {
				x.qps = append(x.qps, qps(port, queries))
				fmt.Printf("round %d: %-12s A QPS %d\n", r, v.name, x.qps[len(x.qps)-1])
				if r == 1 {
					x.loaded = measure(p.cmd.Process.Pid)
				}
			}
			if r > 1 {
				p.stop()
				continue
			}
			// The live heap last: pprof's heap profile (the forced GC
			// behind the figure) maps the symbol tables in again, which
			// would count in the resident figures above.
			gc(pp)
			m.heap = heapMiB(prom)
			if *logs != "" {
				_ = os.WriteFile(filepath.Join(*logs, fmt.Sprintf("%s-%s.log", v.name, strings.ReplaceAll(mode, " ", "-"))), p.log.Bytes(), 0o644)
			}
			what := fmt.Sprintf("synced in %v", syncTime.Round(time.Millisecond))
			if v.name == "idle" {
				what = "no plugin holding data"
			}
			fmt.Printf("%-12s %-20s %s; after sync: RSS %.1f MiB (anonymous %.1f, file-backed %.1f), peak RSS %.1f MiB, live Go heap %.1f MiB\n",
				v.name, mode+":", what, m.rss, m.anon, m.file, m.peak, m.heap)
			if v.name != "idle" {
				fmt.Printf("%-12s %-20s after the QPS load: RSS %.1f MiB (anonymous %.1f, file-backed %.1f)\n", v.name, mode+":", x.loaded.rss, x.loaded.anon, x.loaded.file)
			}
			if *memstats {
				printMemstats(v.name, pp, p.cmd.Process.Pid)
			}
			if *profile != "" {
				saveProfile(pp, filepath.Join(*profile, v.name+".heap"))
			}
			x.shipped, x.sync = m, syncTime
			p.stop()
		}
	}
	k, e := res["kubernetes"], res["endpointsvc"]
	avg := func(q []int) float64 {
		s := 0
		for _, x := range q {
			s += x
		}
		return float64(s) / float64(len(q))
	}
	ratio := func(what string, a, b float64, goal string) {
		fmt.Printf("%s: kubernetes %.1f MiB, endpointsvc %.1f MiB, ratio %.2f%s\n", what, a, b, b/a, goal)
	}
	ratio("RSS after sync", k.shipped.rss, e.shipped.rss, " (goal <= 0.5)")
	ratio("RSS after the QPS load", k.loaded.rss, e.loaded.rss, "")
	ratio("anonymous RSS after sync (without file-backed pages)", k.shipped.anon, e.shipped.anon, "")
	ratio("peak RSS", k.shipped.peak, e.shipped.peak, "")
	ratio("live Go heap after sync", k.shipped.heap, e.shipped.heap, "")
	fmt.Printf("time to sync: kubernetes %v, endpointsvc %v\n", k.sync.Round(time.Millisecond), e.sync.Round(time.Millisecond))
	fmt.Printf("A QPS (%d A records per answer): kubernetes %.0f, endpointsvc %.0f, ratio %.3f (goal >= 1.0)\n", *perSvc, avg(k.qps), avg(e.qps), avg(e.qps)/avg(k.qps))
}

// mem is a process's resident memory (total, anonymous, file-backed,
// peak) and live Go heap, in MiB.
type mem struct{ rss, anon, file, peak, heap float64 }

// measure reads the resident memory of pid.
func measure(pid int) (m mem) {
	m.rss, m.anon, m.file, m.peak = rssMiB(pid), statusMiB(pid, "RssAnon"), statusMiB(pid, "RssFile"), statusMiB(pid, "VmHWM")
	return m
}

// apiServer is the kube-apiserver this run started, with what it takes to
// restart it.
type apiServer struct {
	dir, kubeconfig, readyz, token string
	etcd                           string // etcd's client URL
	args                           []string
	proc                           *proc
	client                         kubernetes.Interface
	audit                          string // the audit log (list and watch requests), if any
}

// startAPI runs etcd and kube-apiserver on loopback and returns the API
// server with a kubeconfig path and a client. With audit, the API server
// logs every list and watch of the objects the plugins read (to see their
// relists).
func startAPI(dir string, audit bool) *apiServer {
	etcdPort, peerPort, apiPort := freePort(), freePort(), freePort()
	etcdURL, peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort), fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	start(dir, *etcdBin, "--name", "bench", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--log-level", "error", "--quota-backend-bytes", "4294967296")
	key, pub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	for _, args := range [][]string{{"genrsa", "-out", key, "2048"}, {"rsa", "-in", key, "-pubout", "-out", pub}} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			fail("openssl: %v\n%s", err, out)
		}
	}
	const token = "bench-token"
	tokens := filepath.Join(dir, "tokens.csv")
	_ = os.WriteFile(tokens, []byte(token+",admin,admin,system:masters\n"), 0o600)
	a := &apiServer{dir: dir, token: token, etcd: etcdURL, readyz: fmt.Sprintf("https://127.0.0.1:%d/readyz", apiPort)}
	a.args = []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(apiPort),
		"--etcd-servers=" + etcdURL, "--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pub, "--service-account-signing-key-file=" + key,
		"--token-auth-file=" + tokens, "--authorization-mode=AlwaysAllow",
		"--endpoint-reconciler-type=none", "--cert-dir=" + filepath.Join(dir, "certs"),
		"--enable-priority-and-fairness=false", "--profiling=false", "--v=0"}
	if audit {
		policy := filepath.Join(dir, "audit-policy.yaml")
		_ = os.WriteFile(policy, []byte(auditPolicy), 0o644)
		a.audit = filepath.Join(dir, "audit.log")
		a.args = append(a.args, "--audit-policy-file="+policy, "--audit-log-path="+a.audit, "--audit-log-format=json", "--audit-log-maxsize=0")
	}
	a.start()
	a.kubeconfig = filepath.Join(dir, "kubeconfig")
	_ = os.WriteFile(a.kubeconfig, []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: b\n  cluster:\n    server: https://127.0.0.1:%d\n    insecure-skip-tls-verify: true\nusers:\n- name: a\n  user:\n    token: %s\ncontexts:\n- name: b\n  context: {cluster: b, user: a}\ncurrent-context: b\n", apiPort, token)), 0o600)
	cfg, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		fail("%v", err)
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	cfg.WarningHandler = rest.NoWarnings{}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.UserAgent = benchUserAgent
	if a.client, err = kubernetes.NewForConfig(cfg); err != nil {
		fail("%v", err)
	}
	return a
}

// benchUserAgent is this program's user agent towards the API server.
const benchUserAgent = "benchk8s"

// start starts the API server and waits until /readyz answers 200.
func (a *apiServer) start() {
	a.proc = start(a.dir, *apiserver, a.args...)
	a.waitReady()
}

func (a *apiServer) waitReady() {
	waitHTTP(a.readyz, a.proc, 60*time.Second, "Authorization", "Bearer "+a.token)
}

func waitHTTP(url string, p *proc, timeout time.Duration, header ...string) {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			fail("%s exited:\n%s", p.cmd.Path, tail(p.log.String()))
		default:
		}
		req, _ := http.NewRequest("GET", url, nil)
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	fail("%s not ready after %v:\n%s", url, timeout, tail(p.log.String()))
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}

// populate creates the nodes, the headless Services and one EndpointSlice
// of perSvc ready endpoints per Service, spread over the nodes.
func populate(c kubernetes.Interface) {
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		fail("%v", err)
	}
	err := pool(16, func(work chan<- func() error) {
		ip := func(n int) string { return fmt.Sprintf("10.%d.%d.%d", 100+n/65536, n/256%256, n%256) }
		for n := 0; n < *nodes; n++ {
			work <- func() error { return createNode(ctx, c, n, nil) }
		}
		tr, port, pname, proto := true, int32(8080), "http", corev1.ProtocolTCP
		for i := 0; i < *services; i++ {
			work <- func() error {
				name := fmt.Sprintf("svc-%d", i)
				_, err := c.CoreV1().Services("bench").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
					Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Protocol: proto, Port: 80}}}}, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				sl := &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: name + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "benchk8s"}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Ports:       []discoveryv1.EndpointPort{{Name: &pname, Protocol: &proto, Port: &port}},
				}
				for j := 0; j < *perSvc; j++ {
					node := fmt.Sprintf("node-%d", (i**perSvc+j)%*nodes)
					podName := fmt.Sprintf("%s-pod-%d", name, j)
					sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
						Addresses:  []string{ip(i**perSvc + j)},
						Conditions: discoveryv1.EndpointConditions{Ready: &tr, Serving: &tr},
						NodeName:   &node,
						TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "bench", Name: podName, UID: "00000000-0000-0000-0000-000000000000"},
					})
				}
				_, err = c.DiscoveryV1().EndpointSlices("bench").Create(ctx, sl, metav1.CreateOptions{})
				return err
			}
		}
	})
	if err != nil {
		fail("creating objects: %v", err)
	}
}

// createNode creates Node node-n with labels, Ready, its InternalIP
// 192.168.x.y.
func createNode(ctx context.Context, c kubernetes.Interface, n int, labels map[string]string) error {
	node, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", n), Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.%d.%d", n/256, n%256)}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "bench", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err = c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

func answerCount(port int, name string) int {
	out, err := exec.Command("dig", "@127.0.0.1", "-p", strconv.Itoa(port), "+time=2", "+tries=1", "+short", name, "A").Output()
	if err != nil {
		return -1
	}
	return len(strings.Fields(string(out)))
}

func rssMiB(pid int) float64 { return statusMiB(pid, "VmRSS") }

// statusMiB reads a kB field of /proc/PID/status in MiB (taskset execs
// meshdns, so the PID is meshdns's).
func statusMiB(pid int, field string) float64 {
	kib, err := procstatus.KiB(pid, field)
	if err != nil {
		return 0
	}
	return float64(kib) / 1024
}

func heapMiB(prom int) float64 {
	return metric(prom, "go_memstats_heap_alloc_bytes") / (1 << 20)
}

func gc(port int) {
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", port)); err == nil {
		resp.Body.Close()
	}
}

func saveProfile(port int, path string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", port))
	if err != nil {
		fail("%v", err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		fail("%v", err)
	}
}

func qps(port int, queries string) int {
	out, err := exec.Command(*dnsload, "127.0.0.1", strconv.Itoa(port), queries, strconv.Itoa(*secs)).Output()
	if err != nil {
		fail("dnsload: %v\n%s", err, out)
	}
	ls := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, f := range strings.Fields(ls[len(ls)-1]) {
		if v, ok := strings.CutPrefix(f, "qps="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// printMemstats prints the runtime's memory statistics (from pprof's heap
// page) and the resident size of each mapping larger than 1 MiB.
func printMemstats(name string, port, pid int) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?debug=1", port))
	if err != nil {
		fail("%v", err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	var keep []string
	for _, l := range strings.Split(buf.String(), "\n") {
		for _, k := range []string{"# HeapAlloc", "# HeapSys", "# HeapIdle", "# HeapInuse", "# HeapReleased", "# Stack", "# MSpan", "# GCSys", "# OtherSys", "# NextGC", "# Sys ", "# BuckHashSys", "# MCache"} {
			if strings.HasPrefix(l, k) {
				keep = append(keep, strings.TrimPrefix(l, "# "))
			}
		}
	}
	fmt.Printf("%-12s memstats: %s\n", name, strings.Join(keep, ", "))
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	var mapping string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4 {
			mapping = f[0] + " " + f[1]
			if len(f) >= 6 {
				mapping += " " + filepath.Base(f[5])
			}
			continue
		}
		if len(f) == 3 && f[0] == "Rss:" {
			if kb, _ := strconv.Atoi(f[1]); kb >= 1024 {
				fmt.Printf("%-12s   mapping %s: %.1f MiB resident\n", name, mapping, float64(kb)/1024)
			}
		}
	}
}
