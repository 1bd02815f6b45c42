package test

// The node-local meshdns of deploy/node-local on the one-node cluster
// (issue 23): applied beside deploy/kubernetes with only the images
// substituted, it serves 169.254.20.10 and the cluster DNS address
// 10.96.0.10 from the node's lo. A pod with the default dnsPolicy (the
// kubelet's clusterDNS 10.96.0.10) and a pod pointed at 169.254.20.10
// resolve the names of TestNodeClusterDNS through it: its request counter
// grows and conntrack holds no entry of the pod's queries; the node-local
// follows the stream through its upstream Service meshdns-upstream, whose
// ClusterIP the kubelet gave it, not through 10.96.0.10. With the
// DaemonSet deleted, the same pod resolves through the cluster DNS Service
// (fail-open), tracked and DNATed again, with the addresses and rules the
// init container installed still in place. The harness removes them from
// the host at teardown, and so does the test's own cleanup.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/nodelocal"
)

// nodeLocalNS holds TestNodeLocal's objects.
const nodeLocalNS = "nodelocal"

// removeNodeLocalHost undoes on the host what a node-local pod's init
// container did (the addresses on lo, the nftables tables) and the
// snapshot directory of its hostPath, if it holds only snapshot files
// (endpointsvc.json and its temporary siblings). It returns a summary.
func removeNodeLocalHost() string {
	var sum []string
	addrs := []netip.Addr{netip.MustParseAddr(nodeLocalIP), netip.MustParseAddr(clusterDNSIP)}
	lo, _ := hostRun("ip", "-4", "-o", "addr", "show", "dev", "lo")
	for _, a := range addrs {
		if strings.Contains(lo, " "+a.String()+"/") {
			sum = append(sum, a.String()+" on lo")
		}
	}
	if rules, err := (nodelocal.Host{}).Counters(); err == nil && len(rules) > 0 {
		sum = append(sum, fmt.Sprintf("%d node-local bypass rules", len(rules)))
	}
	if err := (nodelocal.Host{}).Teardown(addrs); err != nil {
		sum = append(sum, "node-local teardown: "+err.Error())
	}
	ents, err := os.ReadDir(nodeLocalDir)
	if err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "endpointsvc.json") && !strings.HasPrefix(e.Name(), ".endpointsvc.json.tmp-") {
				return strings.Join(append(sum, nodeLocalDir+" kept: it holds "+e.Name()), ", ")
			}
		}
		_ = os.RemoveAll(nodeLocalDir)
		sum = append(sum, nodeLocalDir)
	}
	if len(sum) == 0 {
		return ""
	}
	return "removed the node-local " + strings.Join(sum, ", ")
}

// deployNodeLocal applies deploy/node-local (images substituted) and waits
// until its pod is ready; the test's cleanup removes it again.
func (c *nodeCluster) deployNodeLocal(t *testing.T) {
	t.Helper()
	dir := filepath.Join(c.paths.state, "node-local-manifests")
	_ = os.RemoveAll(dir)
	subs, err := deployManifests("node-local", dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.Join(subs, "\n"), meshdnsImage); n != 2 {
		t.Fatalf("deploy/node-local: want the meshdns image for the init container and the server, substituted: %v", subs)
	}
	// a drill before may have left the node NotReady in the API and the
	// replicas with it (the node controller marks them after an API
	// outage): the upstream Service, which follows pod readiness, would
	// have no endpoint for the stream
	c.waitSettled(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	t.Cleanup(func() { c.removeNodeLocal(t, dir) })
	if out, err := c.kubectl(ctx, "apply", "-f", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := c.waitDaemonSet(ctx, 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s\n%s", err, c.upstreamState(ctx), c.nodeLocalLogs(20))
	}
}

// upstreamState describes the upstream Service's EndpointSlices (each
// endpoint's addresses and readiness) and the cluster DNS pods' Ready
// condition, for the error of a node-local that did not become ready.
func (c *nodeCluster) upstreamState(ctx context.Context) string {
	var b strings.Builder
	b.WriteString("upstream Service " + nodeLocalUpstream + ":")
	slices, err := c.Client.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + nodeLocalUpstream})
	if err != nil {
		return b.String() + " " + err.Error()
	}
	if len(slices.Items) == 0 {
		b.WriteString(" no EndpointSlice")
	}
	for _, sl := range slices.Items {
		fmt.Fprintf(&b, " slice %s:", sl.Name)
		for _, ep := range sl.Endpoints {
			ready := ep.Conditions.Ready != nil && *ep.Conditions.Ready
			fmt.Fprintf(&b, " %v ready=%v", ep.Addresses, ready)
		}
	}
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns"})
	if err != nil {
		return b.String() + "; pods: " + err.Error()
	}
	b.WriteString("; cluster DNS pods:")
	for _, p := range pods.Items {
		ready := "?"
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				ready = fmt.Sprintf("%s since %s (%s)", cond.Status, cond.LastTransitionTime.Format("15:04:05"), cond.Reason)
			}
		}
		fmt.Fprintf(&b, " %s %s Ready=%s", p.Name, p.Status.PodIP, ready)
	}
	return b.String()
}

// removeNodeLocal deletes what deployNodeLocal applied, waits until its
// pods are gone, and removes its addresses, rules and snapshot from the
// host.
func (c *nodeCluster) removeNodeLocal(t *testing.T, dir string) {
	c.deleteNodeLocal(t, dir)
	if sum := removeNodeLocalHost(); sum != "" {
		t.Log(sum)
	}
}

// deleteNodeLocal deletes what deployNodeLocal applied and waits until its
// pods are gone; what the init container set up on the host stays.
func (c *nodeCluster) deleteNodeLocal(t *testing.T, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := c.kubectl(ctx, "delete", "--ignore-not-found", "-f", dir); err != nil {
		t.Errorf("deleting deploy/node-local: %v\n%s", err, out)
	}
	if err := waitFor(90*time.Second, nil, "node-local pods gone", func() error {
		pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + nodeLocalName})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 || len(nodeLocalPIDs()) > 0 {
			return fmt.Errorf("%d pods, %d processes", n, len(nodeLocalPIDs()))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// waitDaemonSet waits until the node-local DaemonSet's rollout is complete
// on the node: its pod updated, ready and available, and no other left.
func (c *nodeCluster) waitDaemonSet(ctx context.Context, d time.Duration) error {
	return waitFor(d, nil, "available DaemonSet kube-system/"+nodeLocalName, func() error {
		ds, err := c.Client.AppsV1().DaemonSets("kube-system").Get(ctx, nodeLocalName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled != 1 || st.UpdatedNumberScheduled != 1 ||
			st.NumberReady != 1 || st.NumberAvailable != 1 || st.CurrentNumberScheduled != 1 {
			return fmt.Errorf("%d desired: %d updated, %d ready, %d available", st.DesiredNumberScheduled,
				st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable)
		}
		pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + nodeLocalName})
		if err != nil || len(pods.Items) != 1 {
			return fmt.Errorf("%d node-local pods (%v)", len(pods.Items), err)
		}
		return nil
	})
}

// nodeLocalLogs returns the last n lines of the node-local containers' logs
// (init container and server).
func (c *nodeCluster) nodeLocalLogs(n int) string {
	logs, _ := filepath.Glob(filepath.Join(c.paths.state, "pod-logs", "kube-system_"+nodeLocalName+"-*", "*", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		// the ready plugin's line every 2 s would fill the tail and
		// hide why the pod is not ready: count it instead
		var kept []string
		notReady := 0
		for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			if strings.Contains(line, "plugin/ready: Plugins not ready") {
				notReady++
				continue
			}
			kept = append(kept, line)
		}
		fmt.Fprintf(&b, "%s (%d \"Plugins not ready\" lines left out):\n%s\n", l, notReady, tail(strings.Join(kept, "\n"), n))
	}
	return b.String()
}

// nodeLocalPIDs returns the meshdns processes of the node's containers that
// run in the host's network namespace: the node-local's.
func nodeLocalPIDs() []int {
	if hostNetNS == "" {
		return nil
	}
	var out []int
	for _, pid := range meshdnsPIDs() {
		if ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net"); err == nil && ns == hostNetNS {
			out = append(out, pid)
		}
	}
	return out
}

// checkNodeLocalUpstreamOnNode checks that the kubelet gave every
// node-local process the upstream Service's ClusterIP (the Service link
// its Corefile reads) and that the replication stream is connected to
// that address, and not to the cluster DNS address on the node's lo.
func checkNodeLocalUpstreamOnNode(ctx context.Context, t *testing.T, c *nodeCluster) {
	t.Helper()
	svc, err := c.Client.CoreV1().Services("kube-system").Get(ctx, nodeLocalUpstream, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the upstream Service: %v", err)
	}
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == clusterDNSIP {
		t.Fatalf("the upstream Service's ClusterIP is %q: want an address of its own", ip)
	}
	pids := nodeLocalPIDs()
	if len(pids) == 0 {
		t.Fatal("no node-local process")
	}
	for _, pid := range pids {
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if !strings.Contains("\x00"+string(env), "\x00MESHDNS_UPSTREAM_SERVICE_HOST="+ip+"\x00") {
			t.Errorf("the node-local (pid %d) has no MESHDNS_UPSTREAM_SERVICE_HOST=%s", pid, ip)
		}
	}
	if err := waitFor(30*time.Second, nil, "the stream through the upstream Service", func() error {
		if !connectedTo(pids[0], ip, 9155) {
			return fmt.Errorf("no TCP connection to %s:9155", ip)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if connectedTo(pids[0], clusterDNSIP, 9155) {
		t.Errorf("a TCP connection to %s:9155 from the host: the stream goes to the cluster DNS address", clusterDNSIP)
	}
}

// nodeLocalOnLo reports whether the node-local address is on the host's
// lo. Without it the address is not the host's, and a packet to it would
// leave the machine by the default route: nothing may ask it then.
func nodeLocalOnLo() bool {
	lo, err := hostRun("ip", "-4", "-o", "addr", "show", "dev", "lo")
	return err == nil && strings.Contains(lo, " "+nodeLocalIP+"/")
}

// nodeLocalRequests returns the node-local's coredns_dns_requests_total for
// the server on addr (port 53), or an error when its metrics do not answer.
func nodeLocalRequests(addr string) (float64, error) {
	if !nodeLocalOnLo() {
		return 0, fmt.Errorf("%s is not on lo", nodeLocalIP)
	}
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + nodeLocalIP + ":9253/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return metricValue(string(b), "coredns_dns_requests_total", `server="dns://`+addr+`:53"`), nil
}

// podQueriesTracked returns the conntrack entries of UDP and TCP queries
// from podIP to the cluster DNS address.
func podQueriesTracked(podIP string) []string {
	var out []string
	for _, proto := range []string{"udp", "tcp"} {
		text, _ := hostRun("conntrack", "-L", "-p", proto, "-s", podIP, "-d", clusterDNSIP)
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, "dport=53") {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return out
}

// forgetPodQueries deletes the conntrack entries of podIP's queries to the
// cluster DNS address (an earlier test's, still within their timeout).
func forgetPodQueries(podIP string) {
	for _, proto := range []string{"udp", "tcp"} {
		_, _ = hostRun("conntrack", "-D", "-p", proto, "-s", podIP, "-d", clusterDNSIP)
	}
}

// linkLocalPod is a client pod whose only nameserver is the node-local
// address, with the search list the kubelet would write.
func linkLocalPod(name, ns string) *corev1.Pod {
	p := clientPod(name, nil)
	p.Spec.DNSPolicy = corev1.DNSNone
	ndots := "5"
	p.Spec.DNSConfig = &corev1.PodDNSConfig{
		Nameservers: []string{nodeLocalIP},
		Searches:    []string{ns + ".svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots}},
	}
	return p
}

// checkAnswers fails for every question answered otherwise than wanted.
func checkAnswers(t *testing.T, res []resolveResult, wants [][]string) {
	t.Helper()
	for i, r := range res {
		want := strings.Join(sortedCopy(wants[i]), " ")
		if got := strings.Join(r.Answers, " "); r.Error != "" || got != want {
			t.Errorf("%s %s %s: got %q (error %q), want %q", r.Resolver, r.Type, r.Name, r.Answers, r.Error, want)
		}
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func TestNodeLocal(t *testing.T) {
	c := sharedNodeCluster(t)
	pods := dnsTestObjects(t, c, nodeLocalNS)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		err := c.Client.CoreV1().Namespaces().Delete(context.Background(), nodeLocalNS, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", nodeLocalNS, err)
		}
	})
	svc, err := c.Client.CoreV1().Services(nodeLocalNS).Get(ctx, "web-svc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clientIP := pods["client"].Status.PodIP
	qs, wants := nodeDNSQuestions(nodeLocalNS, pods["web-0"].Status.PodIP, clientIP, svc.Spec.ClusterIP)

	start := time.Now()
	c.deployNodeLocal(t)
	t.Logf("deploy/node-local applied and ready in %v", time.Since(start).Round(time.Millisecond))
	if _, err := c.runPods(ctx, nodeLocalNS, linkLocalPod("linklocal", nodeLocalNS)); err != nil {
		t.Fatal(err)
	}

	t.Run("default dnsPolicy, through the node-local", func(t *testing.T) {
		forgetPodQueries(clientIP)
		before, err := nodeLocalRequests(clusterDNSIP)
		if err != nil {
			t.Fatalf("the node-local's metrics: %v", err)
		}
		checkAnswers(t, c.resolveIn(t, nodeLocalNS, "client", qs...), wants)
		after, _ := nodeLocalRequests(clusterDNSIP)
		t.Logf("the node-local on %s counted %.0f requests for %d questions", clusterDNSIP, after-before, len(qs))
		if after-before < float64(len(qs)) {
			t.Errorf("the node-local on %s counted %.0f requests for %d questions", clusterDNSIP, after-before, len(qs))
		}
		if tracked := podQueriesTracked(clientIP); len(tracked) != 0 {
			t.Errorf("the client's queries to %s went through conntrack:\n%s", clusterDNSIP, strings.Join(tracked, "\n"))
		}
	})

	t.Run("upstream: through meshdns-upstream, not 10.96.0.10", func(t *testing.T) {
		checkNodeLocalUpstreamOnNode(ctx, t, c)
	})

	t.Run("pointed at 169.254.20.10", func(t *testing.T) {
		before, _ := nodeLocalRequests(nodeLocalIP)
		checkAnswers(t, c.resolveIn(t, nodeLocalNS, "linklocal", qs...), wants)
		after, _ := nodeLocalRequests(nodeLocalIP)
		if after-before < float64(len(qs)) {
			t.Errorf("the node-local on %s counted %.0f requests for %d questions", nodeLocalIP, after-before, len(qs))
		}
	})

	t.Run("fail-open: DaemonSet deleted", func(t *testing.T) {
		// the addresses and rules stay, inert without a bound socket
		c.deleteNodeLocal(t, filepath.Join(c.paths.state, "node-local-manifests"))
		rules, err := (nodelocal.Host{}).Counters()
		if !nodeLocalOnLo() || err != nil || len(rules) != 8 {
			t.Fatalf("after the DaemonSet's deletion: %s on lo %v, %d bypass rules (%v); want both left", nodeLocalIP, nodeLocalOnLo(), len(rules), err)
		}
		checkAnswers(t, c.resolveIn(t, nodeLocalNS, "client", qs...), wants)
		if tracked := podQueriesTracked(clientIP); len(tracked) == 0 {
			t.Errorf("with the node-local gone, no conntrack entry of the client's queries to %s (they should go through kube-proxy's DNAT)", clusterDNSIP)
		}
	})
}
